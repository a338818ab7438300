//! Multipart uploads and their parts in the metadata database.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{
    bucket_exists, check_write, from_json, to_json, CompletedUpload, Meta, MetaError, ObjectRow,
    PartRow, UploadRow, WriteError,
};
use crate::objects::checksum::{Algorithm, ChecksumKind, Checksums};
use crate::objects::conditions::WriteCondition;

/// How long a completed upload is remembered for a repeated CompleteMultipartUpload: longer
/// than any client retries one request.
const COMPLETED_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

impl Meta {
    pub fn create_upload(&self, upload: &UploadRow) -> Result<(), WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        if !bucket_exists(&tx, &upload.bucket)? {
            return Err(WriteError::NoSuchBucket);
        }
        tx.execute(
            "INSERT INTO uploads (upload_id, bucket, key, created_ms, attrs, algorithm, kind)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                upload.upload_id,
                upload.bucket,
                upload.key,
                upload.created_ms,
                to_json(&upload.attrs)?,
                upload.algorithm.map(Algorithm::name),
                upload.kind.map(ChecksumKind::name),
            ],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// The upload, if it exists and belongs to this bucket and key.
    pub fn upload(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<UploadRow>, MetaError> {
        let db = self.db();
        let row = db
            .prepare_cached(&format!(
                "SELECT {UPLOAD_COLUMNS} FROM uploads
                 WHERE upload_id = ?1 AND bucket = ?2 AND key = ?3"
            ))?
            .query_row(params![upload_id, bucket, key], upload_from_row)
            .optional()?;
        row.map(decode_upload).transpose()
    }

    /// The uploads of `bucket` whose keys are at least `from` and below `below` (no bound if
    /// None), by key, then by id (the order they began).
    pub fn uploads(
        &self,
        bucket: &str,
        from: &str,
        below: Option<&str>,
    ) -> Result<Vec<UploadRow>, MetaError> {
        let db = self.db();
        let mut stmt = db.prepare_cached(&format!(
            "SELECT {UPLOAD_COLUMNS} FROM uploads
             WHERE bucket = ?1 AND key >= ?2 AND (?3 IS NULL OR key < ?3)
             ORDER BY key, upload_id"
        ))?;
        let rows = stmt.query_map(params![bucket, from, below], upload_from_row)?;
        rows.map(|r| decode_upload(r?)).collect()
    }

    /// Records a part; returns the file of the part it replaced.
    pub fn put_part(&self, upload_id: &str, part: &PartRow) -> Result<Option<String>, WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM uploads WHERE upload_id = ?1)",
            [upload_id],
            |r| r.get(0),
        )?;
        if !exists {
            return Err(WriteError::NoSuchUpload);
        }
        let replaced: Option<String> = tx
            .query_row(
                "SELECT file_id FROM parts WHERE upload_id = ?1 AND number = ?2",
                params![upload_id, part.number],
                |r| r.get(0),
            )
            .optional()?;
        tx.execute(
            "INSERT OR REPLACE INTO parts (upload_id, number, file_id, size, etag, modified_ms, checksums)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                upload_id,
                part.number,
                part.file_id,
                part.size,
                part.etag,
                part.modified_ms,
                to_json(&part.checksums)?,
            ],
        )?;
        tx.commit()?;
        Ok(replaced)
    }

    /// Up to `limit` parts numbered above `after`, in order.
    pub fn parts(
        &self,
        upload_id: &str,
        after: u32,
        limit: usize,
    ) -> Result<Vec<PartRow>, MetaError> {
        let db = self.db();
        let mut stmt = db.prepare_cached(
            "SELECT number, file_id, size, etag, modified_ms, checksums FROM parts
             WHERE upload_id = ?1 AND number > ?2 ORDER BY number LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![upload_id, after, limit as i64], |r| {
            Ok((
                PartRow {
                    number: r.get(0)?,
                    file_id: r.get(1)?,
                    size: r.get(2)?,
                    etag: r.get(3)?,
                    modified_ms: r.get(4)?,
                    checksums: Checksums::default(),
                },
                r.get::<_, String>(5)?,
            ))
        })?;
        rows.map(|r| {
            let (mut part, checksums) = r?;
            part.checksums = from_json(&checksums)?;
            Ok(part)
        })
        .collect()
    }

    /// Turns an upload into an object in one transaction, and remembers it as `completed`
    /// (forgetting those completed long ago). Returns the replaced object's file and the files
    /// of every part of the upload, which the caller deletes.
    pub fn complete_upload(
        &self,
        upload_id: &str,
        bucket: &str,
        object: &ObjectRow,
        completed: &CompletedUpload,
        condition: &WriteCondition,
    ) -> Result<(super::versions::Committed, Vec<String>), WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM uploads WHERE upload_id = ?1)",
            [upload_id],
            |r| r.get(0),
        )?;
        if !exists {
            return Err(WriteError::NoSuchUpload);
        }
        check_write(&tx, bucket, &object.key, condition)?;
        let committed = super::versions::put_current(&tx, bucket, object)?;
        let files = take_upload(&tx, upload_id)?;
        remember_completed(&tx, upload_id, bucket, object, completed)?;
        tx.commit()?;
        Ok((committed, files))
    }

    /// The upload `upload_id` of `bucket`/`key`, if it was completed recently.
    pub fn completed_upload(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<CompletedUpload>, MetaError> {
        let db = self.db();
        let row: Option<(String, String, String)> = db
            .prepare_cached(
                "SELECT parts, etag, checksums FROM completed_uploads
                 WHERE upload_id = ?1 AND bucket = ?2 AND key = ?3",
            )?
            .query_row(params![upload_id, bucket, key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        let Some((parts, etag, checksums)) = row else {
            return Ok(None);
        };
        Ok(Some(CompletedUpload {
            parts: from_json(&parts)?,
            etag,
            checksums: from_json(&checksums)?,
        }))
    }

    /// Deletes an upload and its parts; returns the part files, or None if there is no such upload.
    pub fn abort_upload(&self, upload_id: &str) -> Result<Option<Vec<String>>, MetaError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM uploads WHERE upload_id = ?1)",
            [upload_id],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(None);
        }
        let files = take_upload(&tx, upload_id)?;
        tx.commit()?;
        Ok(Some(files))
    }
}

const UPLOAD_COLUMNS: &str = "upload_id, bucket, key, created_ms, attrs, algorithm, kind";

/// An upload's row with its attributes still encoded.
type RawUpload = (UploadRow, String, Option<String>, Option<String>);

fn upload_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawUpload> {
    Ok((
        UploadRow {
            upload_id: r.get(0)?,
            bucket: r.get(1)?,
            key: r.get(2)?,
            created_ms: r.get(3)?,
            attrs: Default::default(),
            algorithm: None,
            kind: None,
        },
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn decode_upload(raw: RawUpload) -> Result<UploadRow, MetaError> {
    let (mut upload, attrs, algorithm, kind) = raw;
    upload.attrs = from_json(&attrs)?;
    upload.algorithm = algorithm.as_deref().and_then(Algorithm::parse);
    upload.kind = kind.as_deref().and_then(ChecksumKind::parse);
    Ok(upload)
}

fn remember_completed(
    tx: &Transaction<'_>,
    upload_id: &str,
    bucket: &str,
    object: &ObjectRow,
    completed: &CompletedUpload,
) -> Result<(), MetaError> {
    tx.prepare_cached("DELETE FROM completed_uploads WHERE completed_ms < ?1")?
        .execute([object.modified_ms - COMPLETED_KEPT_MS])?;
    tx.prepare_cached(
        "INSERT OR REPLACE INTO completed_uploads
         (upload_id, bucket, key, completed_ms, parts, etag, checksums)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        upload_id,
        bucket,
        object.key,
        object.modified_ms,
        to_json(&completed.parts)?,
        completed.etag,
        to_json(&completed.checksums)?,
    ])?;
    Ok(())
}

fn take_upload(tx: &Transaction<'_>, upload_id: &str) -> Result<Vec<String>, MetaError> {
    let files = {
        let mut stmt = tx.prepare_cached("SELECT file_id FROM parts WHERE upload_id = ?1")?;
        let files = stmt.query_map([upload_id], |r| r.get(0))?;
        files.collect::<Result<Vec<String>, _>>()?
    };
    tx.execute("DELETE FROM parts WHERE upload_id = ?1", [upload_id])?;
    tx.execute("DELETE FROM uploads WHERE upload_id = ?1", [upload_id])?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::super::tests::object;
    use super::super::ObjectAttrs;
    use super::*;

    #[test]
    fn uploads_complete_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("objects.db")).unwrap();
        meta.create_bucket("b", 1, None).unwrap();
        let upload = UploadRow {
            upload_id: "u".into(),
            bucket: "b".into(),
            key: "k".into(),
            created_ms: 1,
            attrs: ObjectAttrs::default(),
            algorithm: Some(Algorithm::Crc32),
            kind: Some(ChecksumKind::Composite),
        };
        meta.create_upload(&upload).unwrap();
        let part = |n: u32, file: &str| PartRow {
            number: n,
            file_id: file.into(),
            size: 1,
            etag: "e".into(),
            modified_ms: 1,
            checksums: Checksums::default(),
        };
        assert_eq!(meta.put_part("u", &part(1, "p1")).unwrap(), None);
        assert_eq!(
            meta.put_part("u", &part(1, "p1b")).unwrap(),
            Some("p1".into())
        );
        meta.put_part("u", &part(2, "p2")).unwrap();
        assert!(matches!(
            meta.put_part("nope", &part(1, "x")),
            Err(WriteError::NoSuchUpload)
        ));
        assert_eq!(meta.parts("u", 1, 10).unwrap()[0].number, 2);
        let stored = meta.upload("u", "b", "k").unwrap().unwrap();
        assert_eq!(stored.algorithm, Some(Algorithm::Crc32));
        assert!(meta.upload("u", "b", "other").unwrap().is_none());
        assert_eq!(meta.uploads("b", "", None).unwrap()[0].upload_id, "u");
        assert!(meta.uploads("b", "k", Some("k")).unwrap().is_empty());
        let completed = CompletedUpload {
            parts: vec![(1, "e".into()), (2, "e".into())],
            etag: "etag-whole".into(),
            checksums: Checksums::default(),
        };
        let whole = object("k", "whole");
        let (replaced, mut files) = meta
            .complete_upload("u", "b", &whole, &completed, &WriteCondition::Always)
            .unwrap();
        files.sort();
        assert_eq!(
            (replaced.freed, files),
            (vec![], vec!["p1b".to_string(), "p2".to_string()])
        );
        assert_eq!(
            meta.completed_upload("u", "b", "k").unwrap(),
            Some(completed.clone())
        );
        assert_eq!(meta.completed_upload("u", "b", "other").unwrap(), None);
        assert!(meta.abort_upload("u").unwrap().is_none());
        assert!(matches!(
            meta.complete_upload(
                "u",
                "b",
                &object("k", "x"),
                &completed,
                &WriteCondition::Always
            ),
            Err(WriteError::NoSuchUpload)
        ));
    }
}
