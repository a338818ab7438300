//! GetObjectAttributes on the embedded store: an object's ETag, checksum, parts, storage class
//! and size, each when `x-amz-object-attributes` names it.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::meta::{ObjectRow, StoredPart};
use super::{blocking, lookup, read_version, LocalStore};
use crate::objects::shared::{
    checksum_type, class_name, object_attribute_names, set_checksums, timestamp,
};

/// The most parts GetObjectAttributes lists at once.
const MAX_PARTS_LISTED: i32 = 1000;

/// The attributes a request names, checked against S3's list.
struct Wanted {
    etag: bool,
    checksum: bool,
    parts: bool,
    storage_class: bool,
    size: bool,
}

impl Wanted {
    fn of(names: &[ObjectAttributes]) -> S3Result<Self> {
        let mut wanted = Self {
            etag: false,
            checksum: false,
            parts: false,
            storage_class: false,
            size: false,
        };
        for name in object_attribute_names(names) {
            let flag = match name.as_str() {
                ObjectAttributes::ETAG => &mut wanted.etag,
                ObjectAttributes::CHECKSUM => &mut wanted.checksum,
                ObjectAttributes::OBJECT_PARTS => &mut wanted.parts,
                ObjectAttributes::STORAGE_CLASS => &mut wanted.storage_class,
                ObjectAttributes::OBJECT_SIZE => &mut wanted.size,
                _ => {
                    return Err(s3_error!(
                        InvalidArgument,
                        "Invalid attribute name specified."
                    ))
                }
            };
            *flag = true;
        }
        Ok(wanted)
    }
}

/// A page of a multipart object's parts: those numbered above `marker`, at most `max`.
fn parts_page(row: &ObjectRow, marker: Option<i32>, max: Option<i32>) -> GetObjectAttributesParts {
    let max = max.unwrap_or(MAX_PARTS_LISTED).clamp(0, MAX_PARTS_LISTED) as usize;
    let after = marker.unwrap_or(0).max(0) as u32;
    let mut parts: Vec<&StoredPart> = row
        .part_list
        .iter()
        .flatten()
        .filter(|p| p.number > after)
        .collect();
    let truncated = parts.len() > max;
    parts.truncate(max);
    GetObjectAttributesParts {
        total_parts_count: row.parts.map(|n| n as i32),
        part_number_marker: marker,
        next_part_number_marker: truncated
            .then(|| parts.last().map(|p| p.number as i32))
            .flatten(),
        max_parts: Some(max as i32),
        is_truncated: Some(truncated),
        parts: row.part_list.as_ref().map(|_| {
            parts
                .into_iter()
                .map(|p| {
                    let mut part = ObjectPart {
                        part_number: Some(p.number as i32),
                        size: Some(p.size as i64),
                        ..Default::default()
                    };
                    set_checksums!(part, &p.checksums);
                    part
                })
                .collect()
        }),
    }
}

impl LocalStore {
    pub(super) async fn get_object_attributes_op(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let input = req.input;
        let wanted = Wanted::of(&input.object_attributes)?;
        let meta = self.meta.clone();
        let (bucket, key, version) = (input.bucket, input.key, input.version_id);
        let (row, version) = blocking(move || {
            let row = lookup(&meta, &bucket, &key, version.as_deref())?;
            let shown = read_version(&meta, &bucket, &row)?;
            Ok((row, shown))
        })
        .await?;
        let has_checksum = row.checksums.algorithms().next().is_some();
        let checksum = (wanted.checksum && has_checksum).then(|| {
            let mut checksum = Checksum {
                checksum_type: checksum_type(&row.checksums),
                ..Default::default()
            };
            set_checksums!(checksum, &row.checksums);
            checksum
        });
        let object_parts = (wanted.parts && row.parts.is_some())
            .then(|| parts_page(&row, input.part_number_marker, input.max_parts));
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: wanted.etag.then(|| ETag::Strong(row.etag.clone())),
            checksum,
            object_parts,
            storage_class: wanted
                .storage_class
                .then(|| StorageClass::from(class_name(&row.attrs).to_string())),
            object_size: wanted.size.then_some(row.size as i64),
            last_modified: Some(timestamp(row.modified_ms)),
            version_id: version,
            ..Default::default()
        }))
    }
}
