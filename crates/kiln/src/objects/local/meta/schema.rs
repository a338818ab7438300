//! The metadata database's schema and its migrations. `PRAGMA user_version` counts the
//! migrations a database has had; each runs once, in order, in one transaction with the
//! version's bump, so a database from any earlier release opens with its rows readable.

use rusqlite::Connection;

/// The tables of the first release (every later change is a migration below).
pub(super) const FIRST: &str = "
CREATE TABLE IF NOT EXISTS buckets (
    name TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS objects (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    file_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    modified_ms INTEGER NOT NULL,
    attrs TEXT NOT NULL,
    checksums TEXT NOT NULL,
    parts INTEGER,
    PRIMARY KEY (bucket, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_by_file ON objects (file_id);
CREATE TABLE IF NOT EXISTS uploads (
    upload_id TEXT PRIMARY KEY,
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    attrs TEXT NOT NULL,
    algorithm TEXT,
    kind TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS uploads_by_bucket ON uploads (bucket, key);
CREATE TABLE IF NOT EXISTS parts (
    upload_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    file_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    modified_ms INTEGER NOT NULL,
    checksums TEXT NOT NULL,
    PRIMARY KEY (upload_id, number)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS parts_by_file ON parts (file_id);
";

/// Changes since the first release, in order; a database at `user_version` n has had the
/// first n.
const MIGRATIONS: &[fn(&Connection) -> rusqlite::Result<()>] = &[
    add_media,
    add_completed_uploads,
    add_part_list,
    add_bucket_acl,
    add_bucket_versioning,
    add_bucket_cors,
    add_versions,
    add_bucket_notifications,
];

/// An image's format and size (`png 640x480`). Databases from before `user_version` existed
/// may have the column already.
fn add_media(db: &Connection) -> rusqlite::Result<()> {
    let has_media = db
        .prepare("SELECT 1 FROM pragma_table_info('objects') WHERE name = 'media'")?
        .exists([])?;
    if !has_media {
        db.execute_batch("ALTER TABLE objects ADD COLUMN media TEXT")?;
    }
    Ok(())
}

/// Uploads completed recently, so that a repeated CompleteMultipartUpload (a client whose
/// first answer was lost) gets the object's ETag again.
fn add_completed_uploads(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(
        "CREATE TABLE completed_uploads (
            upload_id TEXT PRIMARY KEY,
            bucket TEXT NOT NULL,
            key TEXT NOT NULL,
            completed_ms INTEGER NOT NULL,
            parts TEXT NOT NULL,
            etag TEXT NOT NULL,
            checksums TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX completed_uploads_by_time ON completed_uploads (completed_ms);",
    )
}

/// A multipart object's parts (number, size, checksums), for GetObjectAttributes and reads by
/// part number; NULL for other objects and those completed before.
fn add_part_list(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch("ALTER TABLE objects ADD COLUMN part_list TEXT")
}

/// A bucket's canned ACL (`public-read`, `authenticated-read`); NULL for the owner alone.
fn add_bucket_acl(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch("ALTER TABLE buckets ADD COLUMN acl TEXT")
}

/// `Suspended` once a PutBucketVersioning said so; NULL for a bucket never versioned. kiln
/// keeps one version of an object (`null`) either way.
fn add_bucket_versioning(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch("ALTER TABLE buckets ADD COLUMN versioning TEXT")
}

/// A bucket's CORS rules (JSON, `objects::cors::CorsRule`s); NULL for none.
fn add_bucket_cors(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch("ALTER TABLE buckets ADD COLUMN cors TEXT")
}

/// Object versions: each current object's id (`null` for every object written before), and a
/// table of older versions and delete markers (`local/meta/versions.rs`).
fn add_versions(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(
        "ALTER TABLE objects ADD COLUMN version_id TEXT NOT NULL DEFAULT 'null';
        CREATE TABLE object_versions (
            bucket TEXT NOT NULL,
            key TEXT NOT NULL,
            seq INTEGER NOT NULL,
            version_id TEXT NOT NULL,
            marker INTEGER NOT NULL,
            file_id TEXT,
            size INTEGER NOT NULL,
            etag TEXT NOT NULL,
            modified_ms INTEGER NOT NULL,
            attrs TEXT NOT NULL,
            checksums TEXT NOT NULL,
            parts INTEGER,
            part_list TEXT,
            media TEXT,
            PRIMARY KEY (bucket, key, seq)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX object_versions_by_id ON object_versions (bucket, key, version_id);
        CREATE INDEX object_versions_by_file ON object_versions (file_id);",
    )
}

/// Creates the first release's tables if need be, then runs the migrations this database has
/// not had.
pub(super) fn migrate(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(FIRST)?;
    let done: i64 = db.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (n, migration) in MIGRATIONS.iter().enumerate().skip(done.max(0) as usize) {
        let tx = db.unchecked_transaction()?;
        migration(&tx)?;
        tx.pragma_update(None, "user_version", n + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// A bucket's event notification configuration (JSON, `objects::notify::FunctionRule`s); NULL
/// for none.
fn add_bucket_notifications(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch("ALTER TABLE buckets ADD COLUMN notifications TEXT")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(db: &Connection) -> i64 {
        db.pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_database_from_before_the_migrations_keeps_its_rows() {
        let db = Connection::open_in_memory().unwrap();
        // The first release's tables, with the media column a later release added without
        // counting it, and an object in them.
        db.execute_batch(FIRST).unwrap();
        db.execute_batch("ALTER TABLE objects ADD COLUMN media TEXT")
            .unwrap();
        db.execute(
            "INSERT INTO objects VALUES ('b', 'k', 'f', 1, 'e', 1, '{}', '{}', NULL, 'png 1x1')",
            [],
        )
        .unwrap();
        migrate(&db).unwrap();
        assert_eq!(version(&db), MIGRATIONS.len() as i64);
        let (media, part_list): (String, Option<String>) = db
            .query_row("SELECT media, part_list FROM objects", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((media.as_str(), part_list), ("png 1x1", None));
        // Objects written before versions existed are each key's `null` version.
        let version_id: String = db
            .query_row("SELECT version_id FROM objects", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version_id, "null");
        migrate(&db).expect("a migrated database migrates to itself");
        assert_eq!(version(&db), MIGRATIONS.len() as i64);
    }
}
