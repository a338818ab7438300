//! Object versions, as S3 keeps them. `objects` holds each key's current object (the one a
//! plain GET reads) with its version id; `object_versions` holds the key's older versions and
//! its delete markers, numbered by `seq` in the order they were made. A key's versions, newest
//! first, are its current object (always the newest when there is one) and then its
//! `object_versions` rows by `seq` downwards; when it has no current object, its newest row is a
//! delete marker (or it has none).
//!
//! A write's version depends on the bucket's status: never versioned, the write replaces the
//! key's one object (`null`); `Enabled`, it gets a new id and the current object becomes an
//! older version; `Suspended`, it is the `null` version, replacing the key's `null` version
//! wherever it was.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{decode_object, insert_object, object_from_row, MetaError, ObjectRow, WriteError};

/// A bucket's versioning status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    Unversioned,
    Enabled,
    Suspended,
}

impl Versioning {
    fn of(status: Option<&str>) -> Self {
        match status {
            Some("Enabled") => Self::Enabled,
            Some(_) => Self::Suspended,
            None => Self::Unversioned,
        }
    }
}

/// The `null` version's id.
pub const NULL_VERSION: &str = "null";

/// What a write did: the files no version refers to any more (the caller deletes them) and
/// the version it made.
#[derive(Debug, Default, PartialEq)]
pub struct Committed {
    pub freed: Vec<String>,
    pub version_id: String,
}

/// What a delete did: the files it freed, the version it made or removed, and whether that is
/// a delete marker.
#[derive(Debug, Default, PartialEq)]
pub struct Deleted {
    pub freed: Vec<String>,
    pub version_id: Option<String>,
    pub marker: bool,
}

/// One version of a key, as ListObjectVersions lists it.
#[derive(Debug, Clone)]
pub struct Version {
    pub version_id: String,
    pub modified_ms: i64,
    pub latest: bool,
    /// None for a delete marker.
    pub object: Option<ObjectRow>,
}

/// A key and its versions, newest first.
#[derive(Debug, Clone)]
pub struct KeyVersions {
    pub key: String,
    pub versions: Vec<Version>,
}

/// A version id of kiln's making: 32 characters, letters and digits, random but for a prefix
/// that rises with time (ids of one key are also ordered by `seq`, not by their text).
pub fn new_version_id() -> String {
    use rand::Rng;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let random: String = rand::thread_rng()
        .sample_iter(&rand::distributions::Alphanumeric)
        .take(21)
        .map(char::from)
        .collect();
    format!("{now:011x}{random}")
}

/// Whether `id` could name a version: `null` or an id of kiln's making.
pub fn is_version_id(id: &str) -> bool {
    id == NULL_VERSION || (id.len() == 32 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
}

pub(super) fn bucket_versioning(
    tx: &rusqlite::Connection,
    bucket: &str,
) -> Result<Versioning, WriteError> {
    let status: Option<Option<String>> = tx
        .prepare_cached("SELECT versioning FROM buckets WHERE name = ?1")?
        .query_row([bucket], |r| r.get(0))
        .optional()?;
    match status {
        None => Err(WriteError::NoSuchBucket),
        Some(status) => Ok(Versioning::of(status.as_deref())),
    }
}

/// The current object's file and version id.
fn current(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
) -> rusqlite::Result<Option<(String, String)>> {
    tx.prepare_cached("SELECT file_id, version_id FROM objects WHERE bucket = ?1 AND key = ?2")?
        .query_row(params![bucket, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

fn next_seq(tx: &Transaction<'_>, bucket: &str, key: &str) -> rusqlite::Result<i64> {
    tx.prepare_cached(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM object_versions WHERE bucket = ?1 AND key = ?2",
    )?
    .query_row(params![bucket, key], |r| r.get(0))
}

/// The current object becomes the newest of the older versions.
fn demote_current(tx: &Transaction<'_>, bucket: &str, key: &str) -> rusqlite::Result<()> {
    let seq = next_seq(tx, bucket, key)?;
    tx.prepare_cached(
        "INSERT INTO object_versions (bucket, key, seq, version_id, marker, file_id, size, etag,
             modified_ms, attrs, checksums, parts, part_list, media)
         SELECT bucket, key, ?3, version_id, 0, file_id, size, etag, modified_ms, attrs,
             checksums, parts, part_list, media
         FROM objects WHERE bucket = ?1 AND key = ?2",
    )?
    .execute(params![bucket, key, seq])?;
    tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
        .execute(params![bucket, key])?;
    Ok(())
}

/// Removes the key's older version `id`; its file, if it had one, is freed.
fn remove_older(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    id: &str,
    freed: &mut Vec<String>,
) -> rusqlite::Result<Option<bool>> {
    let found: Option<(Option<String>, bool)> = tx
        .prepare_cached(
            "SELECT file_id, marker FROM object_versions
             WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
        )?
        .query_row(params![bucket, key, id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((file, marker)) = found else {
        return Ok(None);
    };
    tx.prepare_cached(
        "DELETE FROM object_versions WHERE bucket = ?1 AND key = ?2 AND version_id = ?3",
    )?
    .execute(params![bucket, key, id])?;
    freed.extend(file);
    Ok(Some(marker))
}

fn insert_marker(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    id: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    let seq = next_seq(tx, bucket, key)?;
    tx.prepare_cached(
        "INSERT INTO object_versions (bucket, key, seq, version_id, marker, file_id, size, etag,
             modified_ms, attrs, checksums)
         VALUES (?1, ?2, ?3, ?4, 1, NULL, 0, '', ?5, '{}', '{}')",
    )?
    .execute(params![bucket, key, seq, id, now_ms])?;
    Ok(())
}

/// After a version was removed: when the key has no current object and its newest version is
/// an object (not a delete marker), that object becomes current again.
fn settle(tx: &Transaction<'_>, bucket: &str, key: &str) -> rusqlite::Result<()> {
    if current(tx, bucket, key)?.is_some() {
        return Ok(());
    }
    let newest: Option<(i64, bool)> = tx
        .prepare_cached(
            "SELECT seq, marker FROM object_versions WHERE bucket = ?1 AND key = ?2
             ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![bucket, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((seq, false)) = newest else {
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT INTO objects (bucket, key, file_id, size, etag, modified_ms, attrs, checksums,
             parts, part_list, media, version_id)
         SELECT bucket, key, file_id, size, etag, modified_ms, attrs, checksums, parts,
             part_list, media, version_id
         FROM object_versions WHERE bucket = ?1 AND key = ?2 AND seq = ?3",
    )?
    .execute(params![bucket, key, seq])?;
    tx.prepare_cached("DELETE FROM object_versions WHERE bucket = ?1 AND key = ?2 AND seq = ?3")?
        .execute(params![bucket, key, seq])?;
    Ok(())
}

/// Makes `object` the key's current version, as the bucket's status says (see the module).
pub(super) fn put_current(
    tx: &Transaction<'_>,
    bucket: &str,
    object: &ObjectRow,
) -> Result<Committed, WriteError> {
    let status = bucket_versioning(tx, bucket)?;
    let key = object.key.as_str();
    let mut freed = Vec::new();
    let version_id = match status {
        Versioning::Enabled => {
            demote_current(tx, bucket, key)?;
            new_version_id()
        }
        Versioning::Unversioned | Versioning::Suspended => {
            match current(tx, bucket, key)? {
                Some((file, id)) if id == NULL_VERSION => freed.push(file),
                Some(_) => demote_current(tx, bucket, key)?,
                None => {}
            }
            remove_older(tx, bucket, key, NULL_VERSION, &mut freed)?;
            NULL_VERSION.to_string()
        }
    };
    insert_object(tx, bucket, object, &version_id)?;
    Ok(Committed { freed, version_id })
}

/// A DELETE without a version id: the object goes (never versioned), or a delete marker
/// becomes the key's newest version (`Enabled`: a new one; `Suspended`: the `null` one).
pub(super) fn delete_latest(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    now_ms: i64,
) -> Result<Deleted, WriteError> {
    let status = bucket_versioning(tx, bucket)?;
    let mut freed = Vec::new();
    let id = match status {
        Versioning::Unversioned => {
            if let Some((file, _)) = current(tx, bucket, key)? {
                freed.push(file);
                tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
                    .execute(params![bucket, key])?;
            }
            return Ok(Deleted {
                freed,
                ..Default::default()
            });
        }
        Versioning::Enabled => {
            demote_current(tx, bucket, key)?;
            new_version_id()
        }
        Versioning::Suspended => {
            match current(tx, bucket, key)? {
                Some((file, id)) if id == NULL_VERSION => {
                    freed.push(file);
                    tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
                        .execute(params![bucket, key])?;
                }
                Some(_) => demote_current(tx, bucket, key)?,
                None => {}
            }
            remove_older(tx, bucket, key, NULL_VERSION, &mut freed)?;
            NULL_VERSION.to_string()
        }
    };
    insert_marker(tx, bucket, key, &id, now_ms)?;
    Ok(Deleted {
        freed,
        version_id: Some(id),
        marker: true,
    })
}

/// A DELETE of one version: it is gone for good (an object's file is freed); when it was the
/// current object, the next newest version takes its place. Deleting a version that does not
/// exist succeeds, as on S3.
pub(super) fn delete_version(
    tx: &Transaction<'_>,
    bucket: &str,
    key: &str,
    id: &str,
) -> Result<Deleted, WriteError> {
    bucket_versioning(tx, bucket)?;
    let mut freed = Vec::new();
    let mut marker = false;
    match current(tx, bucket, key)? {
        Some((file, current_id)) if current_id == id => {
            freed.push(file);
            tx.prepare_cached("DELETE FROM objects WHERE bucket = ?1 AND key = ?2")?
                .execute(params![bucket, key])?;
        }
        _ => marker = remove_older(tx, bucket, key, id, &mut freed)?.unwrap_or(false),
    }
    settle(tx, bucket, key)?;
    Ok(Deleted {
        freed,
        version_id: Some(id.to_string()),
        marker,
    })
}

/// The key's delete marker, when that is its newest version: its id and time.
pub(super) fn latest_marker(
    tx: &rusqlite::Connection,
    bucket: &str,
    key: &str,
) -> rusqlite::Result<Option<(String, i64)>> {
    let newest: Option<(String, i64, bool)> = tx
        .prepare_cached(
            "SELECT version_id, modified_ms, marker FROM object_versions
             WHERE bucket = ?1 AND key = ?2 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row(params![bucket, key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    Ok(newest
        .filter(|(_, _, marker)| *marker)
        .map(|(id, ms, _)| (id, ms)))
}

const VERSION_COLUMNS: &str = "key, file_id, size, etag, modified_ms, attrs, checksums, parts, \
    part_list, version_id, marker";

/// An older version or delete marker of `key`, by id.
pub(super) fn older_version(
    db: &rusqlite::Connection,
    bucket: &str,
    key: &str,
    id: &str,
) -> Result<Option<Version>, MetaError> {
    let found = db
        .prepare_cached(&format!(
            "SELECT {VERSION_COLUMNS} FROM object_versions
             WHERE bucket = ?1 AND key = ?2 AND version_id = ?3"
        ))?
        .query_row(params![bucket, key, id], version_from_row)
        .optional()?;
    found.map(|v| v.decoded(false)).transpose()
}

/// A version row, its object (if it is one) still encoded.
struct RawVersion {
    version_id: String,
    modified_ms: i64,
    object: Option<super::RawObject>,
}

impl RawVersion {
    fn decoded(self, latest: bool) -> Result<Version, MetaError> {
        Ok(Version {
            version_id: self.version_id,
            modified_ms: self.modified_ms,
            latest,
            object: self.object.map(decode_object).transpose()?,
        })
    }
}

fn version_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawVersion> {
    let marker: bool = row.get(10)?;
    Ok(RawVersion {
        version_id: row.get(9)?,
        modified_ms: row.get(4)?,
        object: if marker {
            None
        } else {
            Some(object_from_row(row)?)
        },
    })
}

/// Up to `limit` keys of `bucket` at or past `from` (`inclusive`) and below `below`, each with
/// its versions, newest first.
pub(super) fn key_versions(
    db: &rusqlite::Connection,
    bucket: &str,
    from: &str,
    inclusive: bool,
    below: Option<&str>,
    limit: usize,
) -> Result<Vec<KeyVersions>, MetaError> {
    let op = if inclusive { ">=" } else { ">" };
    let keys: Vec<String> = {
        let mut stmt = db.prepare_cached(&format!(
            "SELECT key FROM objects WHERE bucket = ?1 AND key {op} ?2 AND (?3 IS NULL OR key < ?3)
             UNION
             SELECT key FROM object_versions
                 WHERE bucket = ?1 AND key {op} ?2 AND (?3 IS NULL OR key < ?3)
             ORDER BY key LIMIT ?4"
        ))?;
        let rows = stmt.query_map(params![bucket, from, below, limit as i64], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let mut versions = Vec::new();
        let current = db
            .prepare_cached(&format!(
                "SELECT {VERSION_COLUMNS} FROM
                 (SELECT *, 0 AS marker FROM objects WHERE bucket = ?1 AND key = ?2)"
            ))?
            .query_row(params![bucket, key], version_from_row)
            .optional()?;
        if let Some(current) = current {
            versions.push(current.decoded(true)?);
        }
        let mut stmt = db.prepare_cached(&format!(
            "SELECT {VERSION_COLUMNS} FROM object_versions WHERE bucket = ?1 AND key = ?2
             ORDER BY seq DESC"
        ))?;
        let older = stmt.query_map(params![bucket, key], version_from_row)?;
        for raw in older {
            let latest = versions.is_empty();
            versions.push(raw?.decoded(latest)?);
        }
        out.push(KeyVersions { key, versions });
    }
    Ok(out)
}
