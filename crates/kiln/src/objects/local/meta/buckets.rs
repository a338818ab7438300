//! Buckets and ACLs in the metadata database: bucket rows, their versioning status, the canned
//! ACLs of buckets and objects, and a bucket's deletion with the uploads left in it.

use rusqlite::{params, OptionalExtension};

use super::{
    bucket_exists, from_json, to_json, BucketDeletion, Meta, MetaError, ObjectAttrs, WriteError,
};

impl Meta {
    /// Creates a bucket with a canned ACL (None: the owner alone); false if it exists.
    pub fn create_bucket(
        &self,
        name: &str,
        now_ms: i64,
        acl: Option<&str>,
    ) -> Result<bool, MetaError> {
        let changed = self.db().execute(
            "INSERT OR IGNORE INTO buckets (name, created_ms, acl) VALUES (?1, ?2, ?3)",
            params![name, now_ms, acl],
        )?;
        Ok(changed == 1)
    }

    /// A bucket's canned ACL: None if there is no such bucket, Some(None) for the owner alone.
    pub fn bucket_acl(&self, name: &str) -> Result<Option<Option<String>>, MetaError> {
        Ok(self
            .db()
            .prepare_cached("SELECT acl FROM buckets WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?)
    }

    /// Sets a bucket's canned ACL; false if there is no such bucket.
    pub fn set_bucket_acl(&self, name: &str, acl: Option<&str>) -> Result<bool, MetaError> {
        let changed = self.db().execute(
            "UPDATE buckets SET acl = ?2 WHERE name = ?1",
            params![name, acl],
        )?;
        Ok(changed == 1)
    }

    /// A bucket's versioning status: None if there is no such bucket, Some(None) if it was
    /// never versioned.
    pub fn bucket_versioning(&self, name: &str) -> Result<Option<Option<String>>, MetaError> {
        Ok(self
            .db()
            .prepare_cached("SELECT versioning FROM buckets WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?)
    }

    /// Records a bucket's versioning status; false if there is no such bucket.
    pub fn set_bucket_versioning(&self, name: &str, status: &str) -> Result<bool, MetaError> {
        let changed = self.db().execute(
            "UPDATE buckets SET versioning = ?2 WHERE name = ?1",
            params![name, status],
        )?;
        Ok(changed == 1)
    }

    /// A bucket's CORS rules (JSON): None if there is no such bucket, Some(None) if it has
    /// none.
    pub fn bucket_cors(&self, name: &str) -> Result<Option<Option<String>>, MetaError> {
        Ok(self
            .db()
            .prepare_cached("SELECT cors FROM buckets WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?)
    }

    /// Sets (or, with None, deletes) a bucket's CORS rules; false if there is no such bucket.
    pub fn set_bucket_cors(&self, name: &str, rules: Option<&str>) -> Result<bool, MetaError> {
        let changed = self.db().execute(
            "UPDATE buckets SET cors = ?2 WHERE name = ?1",
            params![name, rules],
        )?;
        Ok(changed == 1)
    }

    /// Every bucket's notification configuration (JSON), of the buckets that have one.
    pub fn bucket_notifications(&self) -> Result<Vec<(String, String)>, MetaError> {
        let db = self.db();
        let mut stmt = db.prepare_cached(
            "SELECT name, notifications FROM buckets WHERE notifications IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets (or, with None, deletes) a bucket's notification configuration; false if there is
    /// no such bucket.
    pub fn set_bucket_notifications(
        &self,
        name: &str,
        config: Option<&str>,
    ) -> Result<bool, MetaError> {
        let changed = self.db().execute(
            "UPDATE buckets SET notifications = ?2 WHERE name = ?1",
            params![name, config],
        )?;
        Ok(changed == 1)
    }

    /// Sets an object's canned ACL, kept with its attributes: the current object's, or that of
    /// the version named.
    pub fn set_object_acl(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        acl: Option<&str>,
    ) -> Result<(), WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let mut found: Option<(&str, String)> = tx
            .query_row(
                "SELECT attrs FROM objects WHERE bucket = ?1 AND key = ?2
                 AND (?3 IS NULL OR version_id = ?3)",
                params![bucket, key, version],
                |r| r.get(0),
            )
            .optional()?
            .map(|attrs| ("objects", attrs));
        if found.is_none() && version.is_some() {
            found = tx
                .query_row(
                    "SELECT attrs FROM object_versions
                     WHERE bucket = ?1 AND key = ?2 AND version_id = ?3 AND marker = 0",
                    params![bucket, key, version],
                    |r| r.get(0),
                )
                .optional()?
                .map(|attrs| ("object_versions", attrs));
        }
        let Some((table, attrs)) = found else {
            return Err(if !bucket_exists(&tx, bucket)? {
                WriteError::NoSuchBucket
            } else if version.is_some() {
                WriteError::NoSuchVersion
            } else {
                WriteError::NoSuchKey
            });
        };
        let mut attrs: ObjectAttrs = from_json(&attrs)?;
        attrs.acl = acl.map(str::to_string);
        tx.execute(
            &format!(
                "UPDATE {table} SET attrs = ?4 WHERE bucket = ?1 AND key = ?2
                 AND (?3 IS NULL OR version_id = ?3)"
            ),
            params![bucket, key, version, to_json(&attrs)?],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn bucket_exists(&self, name: &str) -> Result<bool, MetaError> {
        Ok(bucket_exists(&self.db(), name)?)
    }

    pub fn buckets(&self) -> Result<Vec<(String, i64)>, MetaError> {
        let db = self.db();
        let mut stmt = db.prepare_cached("SELECT name, created_ms FROM buckets ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes an empty bucket and aborts its multipart uploads; returns their part files.
    pub fn delete_bucket(&self, name: &str) -> Result<BucketDeletion, MetaError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        if !bucket_exists(&tx, name)? {
            return Ok(BucketDeletion::NoSuchBucket);
        }
        let has_objects: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM objects WHERE bucket = ?1)
                 OR EXISTS (SELECT 1 FROM object_versions WHERE bucket = ?1)",
            [name],
            |r| r.get(0),
        )?;
        if has_objects {
            return Ok(BucketDeletion::NotEmpty);
        }
        let files = {
            let mut stmt = tx.prepare(
                "SELECT p.file_id FROM parts p JOIN uploads u ON p.upload_id = u.upload_id
                 WHERE u.bucket = ?1",
            )?;
            let files = stmt.query_map([name], |r| r.get(0))?;
            files.collect::<Result<Vec<String>, _>>()?
        };
        tx.execute(
            "DELETE FROM parts WHERE upload_id IN (SELECT upload_id FROM uploads WHERE bucket = ?1)",
            [name],
        )?;
        tx.execute("DELETE FROM uploads WHERE bucket = ?1", [name])?;
        tx.execute("DELETE FROM completed_uploads WHERE bucket = ?1", [name])?;
        tx.execute("DELETE FROM buckets WHERE name = ?1", [name])?;
        tx.commit()?;
        Ok(BucketDeletion::Deleted { files })
    }
}
