//! Object metadata in SQLite: buckets, objects, multipart uploads and their parts.
//!
//! WAL with `synchronous=FULL`, like the function registry: a commit that returned is on disk.
//! A row names its content by a file id; committing the row is what makes an upload visible, so
//! a crash before the commit leaves at most an unreferenced file, which the next start deletes.
//! Keys are compared with SQLite's BINARY collation (memcmp of UTF-8), which is S3's order.

mod buckets;
mod schema;
mod uploads;
pub mod versions;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};
use serde::{Deserialize, Serialize};

use crate::objects::checksum::{Algorithm, ChecksumKind, Checksums};
use crate::objects::conditions::WriteCondition;
use crate::objects::listing::Cursor;
use crate::sync::LockExt;

/// Why the object metadata database failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// the object metadata database failed
    #[error("object metadata database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// a stored row could not be decoded
    #[error("object metadata database holds an unreadable row: {0}")]
    Corrupt(String),
}

/// One write of a batch ([`Meta::commit_writes`]).
#[derive(Debug, Clone)]
pub enum MetaWrite {
    /// An object's row (its file published).
    Put(Box<ObjectRow>),
    /// A key's row removed.
    Delete(String),
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// the bucket does not exist
    #[error("no such bucket")]
    NoSuchBucket,
    /// the object does not exist
    #[error("no such key")]
    NoSuchKey,
    /// the multipart upload does not exist
    #[error("no such upload")]
    NoSuchUpload,
    /// the object version does not exist
    #[error("no such version")]
    NoSuchVersion,
    /// the write's precondition does not hold
    #[error("precondition failed")]
    PreconditionFailed,
    #[error(transparent)]
    Meta(#[from] MetaError),
}

impl From<rusqlite::Error> for WriteError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Meta(e.into())
    }
}

pub use crate::objects::shared::ObjectAttrs;

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRow {
    pub key: String,
    pub file_id: String,
    pub size: u64,
    /// Unquoted.
    pub etag: String,
    pub modified_ms: i64,
    pub attrs: ObjectAttrs,
    pub checksums: Checksums,
    /// A multipart object's number of parts.
    pub parts: Option<u32>,
    /// A multipart object's parts, in order (None for objects completed before kiln recorded
    /// them, and for single-part objects).
    pub part_list: Option<Vec<StoredPart>>,
    /// Its version (`null` unless written while the bucket's versioning was `Enabled`); set
    /// when it is committed.
    pub version_id: String,
}

impl ObjectRow {
    /// What GetObject, HeadObject and listings answer of it.
    pub(crate) fn stored(&self) -> crate::objects::shared::StoredObject<'_> {
        crate::objects::shared::StoredObject {
            etag: &self.etag,
            modified_ms: self.modified_ms,
            size: self.size,
            attrs: &self.attrs,
            checksums: &self.checksums,
        }
    }
}

/// One part of a multipart object, as the upload was completed with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredPart {
    /// Its number in the upload (GetObjectAttributes names it); reads by part number count
    /// parts by their place in the object instead.
    pub number: u32,
    pub size: u64,
    #[serde(default)]
    pub checksums: Checksums,
}

#[derive(Debug, Clone)]
pub struct UploadRow {
    pub upload_id: String,
    pub bucket: String,
    pub key: String,
    pub created_ms: i64,
    pub attrs: ObjectAttrs,
    pub algorithm: Option<Algorithm>,
    pub kind: Option<ChecksumKind>,
}

/// What a completed upload is remembered by, for a repeated CompleteMultipartUpload.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedUpload {
    /// The parts it was completed with: numbers and unquoted ETags.
    pub parts: Vec<(u32, String)>,
    /// The object's ETag, unquoted.
    pub etag: String,
    pub checksums: Checksums,
}

#[derive(Debug, Clone)]
pub struct PartRow {
    pub number: u32,
    pub file_id: String,
    pub size: u64,
    pub etag: String,
    pub modified_ms: i64,
    pub checksums: Checksums,
}

pub enum Lookup {
    NoSuchBucket,
    NoSuchKey,
    /// The version asked for does not exist.
    NoSuchVersion,
    /// The key's newest version (or the version asked for) is a delete marker.
    DeleteMarker {
        version_id: String,
    },
    Found(Box<ObjectRow>),
}

pub enum BucketDeletion {
    Deleted { files: Vec<String> },
    NoSuchBucket,
    NotEmpty,
}

const OBJECT_COLUMNS: &str =
    "key, file_id, size, etag, modified_ms, attrs, checksums, parts, part_list, version_id";

/// An object's row with its JSON columns (attributes, checksums, parts) still encoded.
type RawObject = (ObjectRow, String, String, Option<String>);

pub struct Meta {
    db: Mutex<Connection>,
    /// A second connection for lookups on invocations' paths (an input object's features),
    /// which WAL lets read while a write on `db` waits for its sync.
    reader: Mutex<Connection>,
    /// A connection for derived data written in the background (media metadata), whose
    /// commits are not synced (the next synced commit carries them to disk; one lost to a power
    /// failure only loses an object's media features), so they cost objects' writes no sync.
    background: Mutex<Connection>,
}

fn to_json<T: Serialize>(value: &T) -> Result<String, MetaError> {
    serde_json::to_string(value).map_err(|e| MetaError::Corrupt(e.to_string()))
}

fn from_json<T: for<'de> Deserialize<'de>>(text: &str) -> Result<T, MetaError> {
    serde_json::from_str(text).map_err(|e| MetaError::Corrupt(format!("{e}: {text}")))
}

fn object_from_row(row: &Row<'_>) -> rusqlite::Result<RawObject> {
    Ok((
        ObjectRow {
            key: row.get(0)?,
            file_id: row.get(1)?,
            size: row.get(2)?,
            etag: row.get(3)?,
            modified_ms: row.get(4)?,
            attrs: ObjectAttrs::default(),
            checksums: Checksums::default(),
            parts: row.get(7)?,
            part_list: None,
            version_id: row.get(9)?,
        },
        row.get(5)?,
        row.get(6)?,
        row.get(8)?,
    ))
}

fn decode_object(raw: RawObject) -> Result<ObjectRow, MetaError> {
    let (mut object, attrs, checksums, part_list) = raw;
    object.attrs = from_json(&attrs)?;
    object.checksums = from_json(&checksums)?;
    object.part_list = part_list.as_deref().map(from_json).transpose()?;
    Ok(object)
}

impl Meta {
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let mut db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        // Two connections write this file (`db` and `background`). A deferred transaction that
        // read before another connection committed cannot become a writer: SQLite answers
        // SQLITE_BUSY at once, without waiting. Immediate transactions take the write lock
        // first, and wait for it.
        db.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        schema::migrate(&db)?;
        let reader = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        reader.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut background = Connection::open(path)?;
        background.set_transaction_behavior(rusqlite::TransactionBehavior::Immediate);
        background.pragma_update(None, "synchronous", "NORMAL")?;
        background.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Self {
            db: Mutex::new(db),
            reader: Mutex::new(reader),
            background: Mutex::new(background),
        })
    }

    /// An object's size and media metadata (`FORMAT WxH`, once extracted), if it exists.
    pub fn features(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(u64, Option<String>)>, MetaError> {
        let reader = self.reader.locked();
        let found = reader
            .prepare_cached("SELECT size, media FROM objects WHERE bucket = ?1 AND key = ?2")?
            .query_row(params![bucket, key], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        Ok(found)
    }

    /// Records the media metadata of an object's contents `file_id`; false if the object has
    /// other contents by now.
    pub fn set_media(
        &self,
        bucket: &str,
        key: &str,
        file_id: &str,
        media: &str,
    ) -> Result<bool, MetaError> {
        let background = self.background.locked();
        let changed = background
            .prepare_cached(
                "UPDATE objects SET media = ?4 WHERE bucket = ?1 AND key = ?2 AND file_id = ?3",
            )?
            .execute(params![bucket, key, file_id, media])?;
        Ok(changed == 1)
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        // Every change is a transaction, so a panic while holding the lock leaves SQLite consistent.
        self.db.locked()
    }

    pub fn object(&self, bucket: &str, key: &str) -> Result<Lookup, MetaError> {
        let db = self.db();
        let found = db
            .prepare_cached(&format!(
                "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1 AND key = ?2"
            ))?
            .query_row(params![bucket, key], object_from_row)
            .optional()?;
        match found {
            Some(raw) => Ok(Lookup::Found(Box::new(decode_object(raw)?))),
            None if bucket_exists(&db, bucket)? => {
                Ok(match versions::latest_marker(&db, bucket, key)? {
                    Some((version_id, _)) => Lookup::DeleteMarker { version_id },
                    None => Lookup::NoSuchKey,
                })
            }
            None => Ok(Lookup::NoSuchBucket),
        }
    }

    /// One version of an object: the current one or an older one, by id.
    pub fn object_version(&self, bucket: &str, key: &str, id: &str) -> Result<Lookup, MetaError> {
        if let Lookup::Found(row) = self.object(bucket, key)? {
            if row.version_id == id {
                return Ok(Lookup::Found(row));
            }
        }
        let db = self.db();
        if !bucket_exists(&db, bucket)? {
            return Ok(Lookup::NoSuchBucket);
        }
        Ok(match versions::older_version(&db, bucket, key, id)? {
            Some(versions::Version {
                object: Some(row), ..
            }) => Lookup::Found(Box::new(row)),
            Some(marker) => Lookup::DeleteMarker {
                version_id: marker.version_id,
            },
            None => Lookup::NoSuchVersion,
        })
    }

    /// A bucket's versioning status, None if there is no such bucket.
    pub fn versioning(&self, bucket: &str) -> Result<Option<versions::Versioning>, MetaError> {
        // The reader: a status read need not wait behind a write's sync.
        match versions::bucket_versioning(&self.reader.locked(), bucket) {
            Ok(status) => Ok(Some(status)),
            Err(WriteError::NoSuchBucket) => Ok(None),
            Err(WriteError::Meta(e)) => Err(e),
            Err(other) => Err(MetaError::Corrupt(other.to_string())),
        }
    }

    /// Up to `limit` keys with their versions, newest first (see [`versions::key_versions`]).
    pub fn list_versions(
        &self,
        bucket: &str,
        cursor: &Cursor,
        below: Option<&str>,
        limit: usize,
    ) -> Result<Vec<versions::KeyVersions>, MetaError> {
        let (from, inclusive) = match cursor {
            Cursor::From(k) => (k, true),
            Cursor::After(k) => (k, false),
        };
        versions::key_versions(&self.db(), bucket, from, inclusive, below, limit)
    }

    /// Commits an object if `condition` holds, as a new version or in place of the old one
    /// (as the bucket's versioning says); returns its version and the files no longer needed.
    pub fn put_object(
        &self,
        bucket: &str,
        object: &ObjectRow,
        condition: &WriteCondition,
    ) -> Result<versions::Committed, WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        check_write(&tx, bucket, &object.key, condition)?;
        let committed = versions::put_current(&tx, bucket, object)?;
        tx.commit()?;
        Ok(committed)
    }

    /// Commits several writes in one transaction, all or none; returns the files of the
    /// objects they replaced or deleted.
    pub fn commit_writes(&self, writes: &[(String, MetaWrite)]) -> Result<Vec<String>, WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let mut replaced = Vec::new();
        for (bucket, write) in writes {
            match write {
                MetaWrite::Put(object) => {
                    replaced.extend(versions::put_current(&tx, bucket, object)?.freed);
                }
                MetaWrite::Delete(key) => {
                    let now = crate::objects::shared::now_ms();
                    replaced.extend(versions::delete_latest(&tx, bucket, key, now)?.freed);
                }
            }
        }
        tx.commit()?;
        Ok(replaced)
    }

    /// Deletes an object (if `condition` holds): one version, or the latest (see
    /// [`versions`]); returns what it did and the files to delete. Deleting a missing key
    /// succeeds.
    pub fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        condition: &WriteCondition,
    ) -> Result<versions::Deleted, WriteError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        check_write(&tx, bucket, key, condition)?;
        let deleted = match version {
            Some(id) => versions::delete_version(&tx, bucket, key, id)?,
            None => versions::delete_latest(&tx, bucket, key, crate::objects::shared::now_ms())?,
        };
        tx.commit()?;
        Ok(deleted)
    }

    /// Up to `limit` objects of `bucket` from `cursor` on, below `below`, in key order.
    pub fn list_objects(
        &self,
        bucket: &str,
        cursor: &Cursor,
        below: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ObjectRow>, MetaError> {
        let (op, from) = match cursor {
            Cursor::From(k) => (">=", k),
            Cursor::After(k) => (">", k),
        };
        let db = self.db();
        let mut stmt = db.prepare_cached(&format!(
            "SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ?1 AND key {op} ?2
             AND (?3 IS NULL OR key < ?3) ORDER BY key LIMIT ?4"
        ))?;
        let rows = stmt.query_map(params![bucket, from, below, limit as i64], object_from_row)?;
        rows.map(|r| decode_object(r?)).collect()
    }

    /// Whether any object or part refers to this file.
    pub fn file_is_referenced(&self, file_id: &str) -> Result<bool, MetaError> {
        Ok(self.db().query_row(
            "SELECT EXISTS (SELECT 1 FROM objects WHERE file_id = ?1)
                 OR EXISTS (SELECT 1 FROM object_versions WHERE file_id = ?1)
                 OR EXISTS (SELECT 1 FROM parts WHERE file_id = ?1)",
            [file_id],
            |r| r.get(0),
        )?)
    }
}

fn bucket_exists(db: &Connection, name: &str) -> rusqlite::Result<bool> {
    db.prepare_cached("SELECT EXISTS (SELECT 1 FROM buckets WHERE name = ?1)")?
        .query_row([name], |r| r.get(0))
}

/// Checks a write's bucket and precondition; returns the current object's file.
fn check_write(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    condition: &WriteCondition,
) -> Result<Option<String>, WriteError> {
    if !bucket_exists(tx, bucket)? {
        return Err(WriteError::NoSuchBucket);
    }
    let current: Option<(String, String)> = tx
        .prepare_cached("SELECT file_id, etag FROM objects WHERE bucket = ?1 AND key = ?2")?
        .query_row(params![bucket, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if !condition.allows(current.as_ref().map(|(_, etag)| etag.as_str())) {
        return Err(match (condition, &current) {
            (WriteCondition::IfMatch(_), None) => WriteError::NoSuchKey,
            _ => WriteError::PreconditionFailed,
        });
    }
    Ok(current.map(|(file, _)| file))
}

fn insert_object(
    tx: &Transaction<'_>,
    bucket: &str,
    o: &ObjectRow,
    version_id: &str,
) -> Result<(), WriteError> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO objects
         (bucket, key, file_id, size, etag, modified_ms, attrs, checksums, parts, part_list,
          version_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        bucket,
        o.key,
        o.file_id,
        o.size,
        o.etag,
        o.modified_ms,
        to_json(&o.attrs)?,
        to_json(&o.checksums)?,
        o.parts,
        o.part_list.as_ref().map(to_json).transpose()?,
        version_id,
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    pub(super) fn object(key: &str, file: &str) -> ObjectRow {
        ObjectRow {
            key: key.into(),
            file_id: file.into(),
            size: 3,
            etag: format!("etag-{file}"),
            modified_ms: 1,
            attrs: ObjectAttrs {
                content_type: Some("text/plain".into()),
                metadata: BTreeMap::from([("k".into(), "v".into())]),
                ..Default::default()
            },
            checksums: Checksums {
                crc32: Some("AAAAAA==".into()),
                ..Default::default()
            },
            parts: None,
            part_list: None,
            version_id: "null".into(),
        }
    }

    #[test]
    fn media_metadata_belongs_to_the_contents_it_was_read_from() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.db");
        {
            // A database from before the media column (SCHEMA has not changed since).
            let old = Connection::open(&path).unwrap();
            old.execute_batch(schema::FIRST).unwrap();
        }
        let meta = Meta::open(&path).unwrap();
        meta.create_bucket("b", 1, None).unwrap();
        meta.put_object("b", &object("k", "f1"), &WriteCondition::Always)
            .unwrap();
        assert_eq!(meta.features("b", "k").unwrap(), Some((3, None)));
        assert!(meta.set_media("b", "k", "f1", "png 3x2").unwrap());
        assert_eq!(
            meta.features("b", "k").unwrap(),
            Some((3, Some("png 3x2".into())))
        );
        // New contents: the old contents' metadata neither stays nor can be set late.
        meta.put_object("b", &object("k", "f2"), &WriteCondition::Always)
            .unwrap();
        assert_eq!(meta.features("b", "k").unwrap(), Some((3, None)));
        assert!(!meta.set_media("b", "k", "f1", "png 3x2").unwrap());
        assert_eq!(meta.features("b", "missing").unwrap(), None);
        drop(meta);
        Meta::open(&path).expect("the column is added once");
    }

    #[test]
    fn writes_wait_for_the_media_writer_rather_than_fail() {
        // Media metadata is written on a second connection while objects are put. A write
        // transaction that began by reading must not fail with SQLITE_BUSY when the other
        // connection commits in between (PutObject then answered 500 InternalError).
        let dir = tempfile::tempdir().unwrap();
        let meta = std::sync::Arc::new(Meta::open(&dir.path().join("objects.db")).unwrap());
        meta.create_bucket("b", 1, None).unwrap();
        for i in 0..8 {
            meta.put_object(
                "b",
                &object(&format!("k{i}"), "f0"),
                &WriteCondition::Always,
            )
            .unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let media = {
            let (meta, stop) = (meta.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut writes = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for i in 0..8 {
                        // Whatever contents the key has now: the update matches or not.
                        let _ = meta
                            .set_media("b", &format!("k{i}"), "f0", "png 1x1")
                            .unwrap();
                        writes += 1;
                    }
                }
                writes
            })
        };
        for round in 0..400 {
            let key = format!("k{}", round % 8);
            let file = if round % 2 == 0 { "f1" } else { "f0" };
            meta.put_object("b", &object(&key, file), &WriteCondition::Always)
                .unwrap_or_else(|e| panic!("put {round} failed: {e}"));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(media.join().unwrap() > 0);
    }

    fn ids(meta: &Meta, key: &str) -> Vec<(String, bool, bool)> {
        let listed = meta
            .list_versions("b", &Cursor::From(key.into()), None, 1)
            .unwrap();
        listed
            .into_iter()
            .filter(|k| k.key == key)
            .flat_map(|k| k.versions)
            .map(|v| (v.version_id, v.object.is_none(), v.latest))
            .collect()
    }

    #[test]
    fn versions_and_delete_markers_follow_the_buckets_status() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("objects.db")).unwrap();
        meta.create_bucket("b", 1, None).unwrap();
        let put = |file: &str| {
            meta.put_object("b", &object("k", file), &WriteCondition::Always)
                .unwrap()
        };
        // Before versioning: the `null` version, replaced in place.
        assert_eq!(put("f0").version_id, "null");
        assert!(meta.set_bucket_versioning("b", "Enabled").unwrap());
        let v1 = put("f1");
        let v2 = put("f2");
        assert!(v1.freed.is_empty() && v2.freed.is_empty());
        assert_eq!(v2.version_id.len(), 32);
        let listed = |meta: &Meta| ids(meta, "k");
        assert_eq!(
            listed(&meta),
            [
                (v2.version_id.clone(), false, true),
                (v1.version_id.clone(), false, false),
                ("null".into(), false, false),
            ]
        );
        // A plain delete adds a marker; the object reads as a marker, its versions stay.
        let deleted = meta
            .delete_object("b", "k", None, &WriteCondition::Always)
            .unwrap();
        assert!(deleted.marker && deleted.freed.is_empty());
        let marker = deleted.version_id.unwrap();
        assert!(matches!(
            meta.object("b", "k").unwrap(),
            Lookup::DeleteMarker { .. }
        ));
        assert!(meta.file_is_referenced("f1").unwrap());
        // Removing the marker brings the newest object back.
        meta.delete_object("b", "k", Some(&marker), &WriteCondition::Always)
            .unwrap();
        match meta.object("b", "k").unwrap() {
            Lookup::Found(row) => assert_eq!(row.file_id, "f2"),
            _ => panic!("the newest version is current again"),
        }
        // Removing the current version for good frees its file and promotes the next.
        let gone = meta
            .delete_object("b", "k", Some(&v2.version_id), &WriteCondition::Always)
            .unwrap();
        assert_eq!(gone.freed, ["f2"]);
        match meta.object_version("b", "k", &v1.version_id).unwrap() {
            Lookup::Found(row) => assert_eq!(row.file_id, "f1"),
            _ => panic!("an older version reads by its id"),
        }
        assert!(matches!(
            meta.object_version("b", "k", "0000000000000000000000000000000x")
                .unwrap(),
            Lookup::NoSuchVersion
        ));
        // Suspended: writes replace the `null` version wherever it is.
        meta.set_bucket_versioning("b", "Suspended").unwrap();
        let suspended = put("f3");
        assert_eq!(
            (suspended.version_id.as_str(), suspended.freed),
            ("null", vec!["f0".to_string()])
        );
        assert_eq!(
            listed(&meta),
            [
                ("null".into(), false, true),
                (v1.version_id.clone(), false, false)
            ]
        );
        // A bucket with versions is not empty; nor is it once they are only markers.
        assert!(matches!(
            meta.delete_bucket("b").unwrap(),
            BucketDeletion::NotEmpty
        ));
        drop(meta);
        let meta = Meta::open(&dir.path().join("objects.db")).unwrap();
        assert_eq!(listed(&meta).len(), 2, "versions are kept across a reopen");
    }

    #[test]
    fn a_batch_of_writes_commits_all_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("objects.db")).unwrap();
        meta.create_bucket("b", 1, None).unwrap();
        meta.put_object("b", &object("old", "f0"), &WriteCondition::Always)
            .unwrap();
        // The last write names a bucket that does not exist: none of them is committed.
        let failing = [
            (
                "b".to_string(),
                MetaWrite::Put(Box::new(object("new", "f1"))),
            ),
            ("b".to_string(), MetaWrite::Delete("old".into())),
            (
                "nowhere".to_string(),
                MetaWrite::Put(Box::new(object("x", "f2"))),
            ),
        ];
        assert!(matches!(
            meta.commit_writes(&failing),
            Err(WriteError::NoSuchBucket)
        ));
        assert!(matches!(
            meta.object("b", "new").unwrap(),
            Lookup::NoSuchKey
        ));
        assert!(matches!(meta.object("b", "old").unwrap(), Lookup::Found(_)));
        // Without it, all of them are; the replaced and deleted objects' files are returned.
        let replaced = meta
            .commit_writes(&[
                (
                    "b".to_string(),
                    MetaWrite::Put(Box::new(object("new", "f1"))),
                ),
                ("b".to_string(), MetaWrite::Delete("old".into())),
                (
                    "b".to_string(),
                    MetaWrite::Put(Box::new(object("new", "f3"))),
                ),
            ])
            .unwrap();
        assert_eq!(replaced, ["f0", "f1"]);
        assert!(matches!(
            meta.object("b", "old").unwrap(),
            Lookup::NoSuchKey
        ));
        match meta.object("b", "new").unwrap() {
            Lookup::Found(row) => assert_eq!(row.file_id, "f3"),
            _ => panic!("the batch's last write of `new` is there"),
        }
    }

    #[test]
    fn objects_replace_and_report_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.db");
        {
            let meta = Meta::open(&path).unwrap();
            assert!(matches!(
                meta.put_object("b", &object("k", "f1"), &WriteCondition::Always),
                Err(WriteError::NoSuchBucket)
            ));
            assert!(meta.create_bucket("b", 1, None).unwrap());
            assert!(!meta.create_bucket("b", 2, None).unwrap());
            assert!(meta.set_bucket_acl("b", Some("public-read")).unwrap());
            assert_eq!(
                meta.bucket_acl("b").unwrap(),
                Some(Some("public-read".into()))
            );
            assert_eq!(meta.bucket_acl("none").unwrap(), None);
            assert_eq!(
                meta.put_object("b", &object("k", "f1"), &WriteCondition::IfAbsent)
                    .unwrap()
                    .freed,
                Vec::<String>::new()
            );
            assert!(matches!(
                meta.put_object("b", &object("k", "f2"), &WriteCondition::IfAbsent),
                Err(WriteError::PreconditionFailed)
            ));
            let stale = WriteCondition::IfMatch(Some("etag-f0".into()));
            assert!(matches!(
                meta.put_object("b", &object("k", "f2"), &stale),
                Err(WriteError::PreconditionFailed)
            ));
            let current = WriteCondition::IfMatch(Some("etag-f1".into()));
            assert_eq!(
                meta.put_object("b", &object("k", "f2"), &current)
                    .unwrap()
                    .freed,
                vec!["f1".to_string()]
            );
            assert!(meta.file_is_referenced("f2").unwrap());
            assert!(!meta.file_is_referenced("f1").unwrap());
        }
        let meta = Meta::open(&path).unwrap();
        match meta.object("b", "k").unwrap() {
            Lookup::Found(o) => assert_eq!(*o, object("k", "f2")),
            _ => panic!("object lost across reopen"),
        }
        assert!(matches!(
            meta.delete_bucket("b").unwrap(),
            BucketDeletion::NotEmpty
        ));
        assert_eq!(
            meta.delete_object("b", "k", None, &WriteCondition::Always)
                .unwrap()
                .freed,
            vec!["f2".to_string()]
        );
        assert!(matches!(meta.object("b", "k").unwrap(), Lookup::NoSuchKey));
        assert!(matches!(
            meta.delete_bucket("b").unwrap(),
            BucketDeletion::Deleted { .. }
        ));
        assert!(matches!(
            meta.object("b", "k").unwrap(),
            Lookup::NoSuchBucket
        ));
    }
}
