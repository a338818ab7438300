//! ListObjectVersions on the embedded store: every key's versions and delete markers, newest
//! first, under a prefix, rolled up by a delimiter, paged by `max-keys` and resumed after
//! `key-marker` and `version-id-marker`.
//!
//! The keys are walked by `listing::list` (which jumps past each common prefix), each with all
//! its versions; the page is then cut at `max-keys` versions, common prefixes counting one each.
//! A page cut inside a key's versions ends with that key and the last version listed as its
//! markers, and the next page begins with the key's versions after that one.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::acls::{check_anonymous, hide_from_anonymous, is_anonymous};
use super::buckets::{common_prefix_list, object_entry};
use super::meta::versions::{is_version_id, KeyVersions, Version};
use super::{blocking, LocalStore};
use crate::objects::listing::{self, successor, url_encode, Cursor, ListRequest};
use crate::objects::shared::{
    check_version_marker, encodes_url, internal, listed_version, max_keys, owner,
    read_list_versions, timestamp,
};

/// One entry of a page, in the listing's order.
enum Entry {
    Version { key: String, version: Box<Version> },
    Prefix(String),
}

/// One page of versions and the markers of the next page, if the listing was cut.
struct VersionPage {
    entries: Vec<Entry>,
    /// The last key (or common prefix) listed, and the last version's id when that was a
    /// version, when more follow.
    next: Option<(String, Option<String>)>,
}

/// Cuts a page from what the walk found: the marker key's remaining versions first, then the
/// walk's keys and common prefixes in order, up to `max_keys` entries.
fn cut_page(
    first: Vec<Version>,
    first_key: Option<&str>,
    keys: Vec<KeyVersions>,
    prefixes: Vec<String>,
    walk_truncated: bool,
    max_keys: usize,
) -> VersionPage {
    let mut items: Vec<Entry> = first
        .into_iter()
        .map(|version| Entry::Version {
            key: first_key.unwrap_or_default().to_string(),
            version: Box::new(version),
        })
        .collect();
    // Keys and common prefixes are disjoint and each sorted: merge them in key order.
    let mut walked: Vec<(String, Option<Vec<Version>>)> = keys
        .into_iter()
        .map(|k| (k.key, Some(k.versions)))
        .chain(prefixes.into_iter().map(|p| (p, None)))
        .collect();
    walked.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, versions) in walked {
        match versions {
            None => items.push(Entry::Prefix(key)),
            Some(versions) => items.extend(versions.into_iter().map(|version| Entry::Version {
                key: key.clone(),
                version: Box::new(version),
            })),
        }
    }
    let truncated = items.len() > max_keys || walk_truncated;
    items.truncate(max_keys);
    let next = truncated
        .then(|| match items.last()? {
            Entry::Prefix(p) => Some((p.clone(), None)),
            Entry::Version { key, version } => {
                Some((key.clone(), Some(version.version_id.clone())))
            }
        })
        .flatten();
    VersionPage {
        entries: items,
        next,
    }
}

/// The versions of `key` older than `marker`, the version a previous page ended with.
fn after_version(versions: Vec<Version>, marker: &str) -> Vec<Version> {
    versions
        .into_iter()
        .skip_while(|v| v.version_id != marker)
        .skip(1)
        .collect()
}

impl LocalStore {
    pub(super) async fn list_object_versions_op(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let anonymous = is_anonymous(&req);
        let mut input = req.input;
        read_list_versions(&mut input);
        check_version_marker(&input)?;
        let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
        let version_marker = input.version_id_marker.clone().filter(|m| !m.is_empty());
        if version_marker.as_deref().is_some_and(|m| !is_version_id(m)) {
            return Err(s3_error!(InvalidArgument, "Invalid version id specified"));
        }
        let prefix = input.prefix.clone().unwrap_or_default();
        let max_keys = max_keys(input.max_keys)?;
        let url = encodes_url(input.encoding_type.as_ref())?;
        let delimiter = input.delimiter.clone();
        let meta = self.meta.clone();
        let bucket = input.bucket.clone();
        let page = blocking(move || {
            let acl = meta
                .bucket_acl(&bucket)
                .map_err(|e| internal("metadata", e))?;
            let Some(acl) = acl else {
                return Err(hide_from_anonymous(anonymous, s3_error!(NoSuchBucket)));
            };
            check_anonymous(anonymous, acl.as_deref())?;
            let limit = max_keys as usize;
            // The marker key's versions after the marker version, unless the key is outside
            // the prefix or was listed as part of a common prefix.
            let mut first = Vec::new();
            if let (Some(key), Some(marker)) = (&key_marker, &version_marker) {
                let rolled = |rest: &str| {
                    delimiter
                        .as_deref()
                        .filter(|d| !d.is_empty())
                        .is_some_and(|d| rest.contains(d))
                };
                if key
                    .strip_prefix(prefix.as_str())
                    .is_some_and(|rest| !rolled(rest))
                {
                    let found = meta
                        .list_versions(
                            &bucket,
                            &Cursor::From(key.clone()),
                            successor(key).as_deref(),
                            1,
                        )
                        .map_err(|e| internal("metadata", e))?;
                    if let Some(k) = found.into_iter().find(|k| &k.key == key) {
                        first = after_version(k.versions, marker);
                    }
                }
            }
            let start = match (&key_marker, &version_marker) {
                (Some(key), _) if key.as_str() >= prefix.as_str() => Cursor::After(key.clone()),
                _ => Cursor::From(prefix.clone()),
            };
            let walk = listing::list(
                &ListRequest {
                    prefix: prefix.clone(),
                    delimiter: delimiter.clone(),
                    start,
                    // At least one key, to learn whether more follow the marker key's versions.
                    max_keys: limit.saturating_sub(first.len()).max(1),
                },
                |cursor, below, n| meta.list_versions(&bucket, cursor, below, n),
                |k| k.key.as_str(),
            )
            .map_err(|e| internal("metadata", e))?;
            Ok(cut_page(
                first,
                key_marker.as_deref(),
                walk.objects,
                walk.common_prefixes,
                walk.next.is_some(),
                limit,
            ))
        })
        .await?;
        let encode = |s: String| if url { url_encode(&s) } else { s };
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        let mut prefixes = Vec::new();
        for entry in page.entries {
            match entry {
                Entry::Prefix(p) => prefixes.push(p),
                Entry::Version { key, version } => match version.object {
                    Some(row) => {
                        let mut listed = listed_version(object_entry(row, encode));
                        listed.version_id = Some(version.version_id);
                        listed.is_latest = Some(version.latest);
                        versions.push(listed);
                    }
                    None => markers.push(DeleteMarkerEntry {
                        is_latest: Some(version.latest),
                        key: Some(encode(key)),
                        last_modified: Some(timestamp(version.modified_ms)),
                        owner: Some(owner()),
                        version_id: Some(version.version_id),
                    }),
                },
            }
        }
        let (next_key, next_version) = match page.next {
            Some((key, version)) => (Some(encode(key)), version),
            None => (None, None),
        };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: input.prefix.map(encode),
            delimiter: input.delimiter.map(encode),
            key_marker: Some(input.key_marker.map(encode).unwrap_or_default()),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            is_truncated: Some(next_key.is_some()),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            max_keys: Some(max_keys),
            encoding_type: input.encoding_type,
            versions: Some(versions),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: Some(common_prefix_list(prefixes, encode)),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(id: &str) -> Version {
        Version {
            version_id: id.into(),
            modified_ms: 0,
            latest: false,
            object: None,
        }
    }

    fn names(page: &VersionPage) -> Vec<String> {
        page.entries
            .iter()
            .map(|e| match e {
                Entry::Prefix(p) => p.clone(),
                Entry::Version { key, version } => format!("{key}:{}", version.version_id),
            })
            .collect()
    }

    fn key(name: &str, ids: &[&str]) -> KeyVersions {
        KeyVersions {
            key: name.into(),
            versions: ids.iter().map(|id| v(id)).collect(),
        }
    }

    #[test]
    fn a_page_is_cut_inside_a_key_and_names_the_last_version() {
        let page = cut_page(
            vec![],
            None,
            vec![key("a", &["3", "2", "1"]), key("c", &["9"])],
            vec!["b/".into()],
            false,
            4,
        );
        assert_eq!(names(&page), ["a:3", "a:2", "a:1", "b/"]);
        assert_eq!(page.next, Some(("b/".into(), None)));
        let page = cut_page(
            vec![],
            None,
            vec![key("a", &["3", "2", "1"])],
            vec![],
            false,
            2,
        );
        assert_eq!(names(&page), ["a:3", "a:2"]);
        assert_eq!(page.next, Some(("a".into(), Some("2".into()))));
        // The next page: the marker key's versions after the marker, then the rest.
        let rest = after_version(key("a", &["3", "2", "1"]).versions, "2");
        let page = cut_page(rest, Some("a"), vec![key("c", &["9"])], vec![], false, 2);
        assert_eq!(names(&page), ["a:1", "c:9"]);
        assert_eq!(page.next, None);
        // Everything fits, but the walk stopped short of more keys.
        let page = cut_page(vec![], None, vec![key("a", &["1"])], vec![], true, 1);
        assert_eq!(page.next, Some(("a".into(), Some("1".into()))));
    }
}
