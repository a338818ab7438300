//! The layers tables of a node's database: each published layer version, and each layer's
//! last version number (kept after its versions are deleted, so that none is given twice).

use rusqlite::{params, OptionalExtension};

use super::super::RegistryError;
use super::Database;
use crate::function::layers::LayerVersion;

impl Database {
    /// Stores a new version of `name`, numbered one past the last it ever had, as `make`
    /// builds it from that number.
    pub fn publish_layer_version(
        &self,
        name: &str,
        make: impl FnOnce(u64) -> LayerVersion,
    ) -> Result<LayerVersion, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let last: Option<i64> = tx
            .query_row(
                "SELECT last_version FROM layer_names WHERE name = ?1",
                [name],
                |row| row.get(0),
            )
            .optional()?;
        let number = u64::try_from(last.unwrap_or(0)).unwrap_or(0) + 1;
        let layer = make(number);
        let record =
            serde_json::to_string(&layer).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        let stored = i64::try_from(number).map_err(|e| RegistryError::Corrupt(e.to_string()))?;
        tx.execute(
            "INSERT OR REPLACE INTO layer_names (name, last_version) VALUES (?1, ?2)",
            params![name, stored],
        )?;
        tx.execute(
            "INSERT INTO layer_versions (name, version, record) VALUES (?1, ?2, ?3)",
            params![name, stored, record],
        )?;
        tx.commit()?;
        Ok(layer)
    }

    /// Every stored layer version, by name and then version.
    pub fn layer_versions(&self) -> Result<Vec<LayerVersion>, RegistryError> {
        self.query_layer_versions(
            "SELECT name, version, record FROM layer_versions ORDER BY name, version",
            [],
        )
    }

    /// The stored versions of layer `name`, by version.
    pub fn layer_versions_of(&self, name: &str) -> Result<Vec<LayerVersion>, RegistryError> {
        self.query_layer_versions(
            "SELECT name, version, record FROM layer_versions WHERE name = ?1 ORDER BY version",
            [name],
        )
    }

    fn query_layer_versions(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<LayerVersion>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(sql)?;
        let rows = stmt.query_map(params, |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (name, version, record) = row?;
            out.push(serde_json::from_str(&record).map_err(|e| {
                RegistryError::Corrupt(format!("layer {name} version {version}: {e}"))
            })?);
        }
        Ok(out)
    }

    /// Deletes one layer version; returns whether it existed.
    pub fn delete_layer_version(&self, name: &str, version: u64) -> Result<bool, RegistryError> {
        let version = i64::try_from(version).unwrap_or(i64::MAX);
        Ok(self.db().execute(
            "DELETE FROM layer_versions WHERE name = ?1 AND version = ?2",
            params![name, version],
        )? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn layer(name: &str, version: u64) -> LayerVersion {
        LayerVersion {
            name: name.into(),
            version,
            description: "d".into(),
            license_info: Some("MIT".into()),
            compatible_runtimes: vec!["python3.11".into()],
            compatible_architectures: Vec::new(),
            code_sha256: "ab".into(),
            code_size: 1,
            unzipped_size: 2,
            created: Utc::now(),
        }
    }

    #[test]
    fn version_numbers_are_never_given_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let db = Database::open(&path).unwrap();
        assert_eq!(
            db.publish_layer_version("a", |n| layer("a", n))
                .unwrap()
                .version,
            1
        );
        assert_eq!(
            db.publish_layer_version("a", |n| layer("a", n))
                .unwrap()
                .version,
            2
        );
        assert_eq!(
            db.publish_layer_version("b", |n| layer("b", n))
                .unwrap()
                .version,
            1
        );
        assert!(db.delete_layer_version("a", 2).unwrap());
        assert!(!db.delete_layer_version("a", 2).unwrap());
        drop(db);
        let db = Database::open(&path).unwrap();
        assert_eq!(
            db.publish_layer_version("a", |n| layer("a", n))
                .unwrap()
                .version,
            3
        );
        let kept: Vec<(String, u64)> = db
            .layer_versions()
            .unwrap()
            .into_iter()
            .map(|l| (l.name, l.version))
            .collect();
        assert_eq!(kept, [("a".into(), 1), ("a".into(), 3), ("b".into(), 1)]);
        let of_a: Vec<u64> = db
            .layer_versions_of("a")
            .unwrap()
            .into_iter()
            .map(|l| l.version)
            .collect();
        assert_eq!(of_a, [1, 3]);
    }
}
