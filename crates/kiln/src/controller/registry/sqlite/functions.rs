//! The functions table of a node's database: a function's row (its configuration, code,
//! revision, reserved concurrency, tags, versions and aliases, and the code it ran before an
//! update not extracted yet) and its URL settings.

use chrono::{DateTime, Utc};
use rusqlite::ToSql;

use super::super::{RegistryError, UrlSettings};
use super::Database;
use crate::function::{Function, FunctionConfig, UrlAuth};

impl Database {
    /// Replaces a function's row together with its URL settings (`None` clears them), in one
    /// statement; false if the function does not exist.
    pub fn update_url(
        &self,
        f: &Function,
        settings: Option<&UrlSettings>,
    ) -> Result<bool, RegistryError> {
        let row = Row::of(f)?;
        let cors = match settings.and_then(|s| s.cors.as_ref()) {
            Some(cors) => Some(
                serde_json::to_string(cors).map_err(|e| RegistryError::Corrupt(e.to_string()))?,
            ),
            None => None,
        };
        let created = settings.map(|s| s.created.to_rfc3339());
        let modified = settings.map(|s| s.modified.to_rfc3339());
        let url: [&dyn ToSql; 3] = [&created, &modified, &cors];
        let changed = self.db().execute(
            "UPDATE functions SET config = ?2, code_sha256 = ?3, code_size = ?4, revision = ?5,
             last_modified = ?6, reserved_concurrency = ?7, url_auth = ?8, tags = ?9,
             published = ?10, previous_code = ?11, url_created = ?12, url_modified = ?13,
             url_cors = ?14
             WHERE name = ?1",
            &[&row.params()[..], &url[..]].concat()[..],
        )?;
        Ok(changed == 1)
    }

    /// The URL settings of every function that has them.
    pub fn url_settings(&self) -> Result<Vec<(String, UrlSettings)>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT name, url_created, url_modified, url_cors FROM functions
             WHERE url_created IS NOT NULL AND url_modified IS NOT NULL",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })?;
        let parse = |name: &str, text: &str| {
            DateTime::parse_from_rfc3339(text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))
        };
        let mut out = Vec::new();
        for row in rows {
            let (name, created, modified, cors) = row?;
            let cors = match cors {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                ),
                None => None,
            };
            let settings = UrlSettings {
                created: parse(&name, &created)?,
                modified: parse(&name, &modified)?,
                cors,
            };
            out.push((name, settings));
        }
        Ok(out)
    }

    /// Inserts a new function; false if the name is taken.
    pub fn insert(&self, f: &Function) -> Result<bool, RegistryError> {
        let row = Row::of(f)?;
        let changed = self.db().execute(
            "INSERT OR IGNORE INTO functions
             (name, config, code_sha256, code_size, revision, last_modified, reserved_concurrency, url_auth, tags,
              published, previous_code)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            &row.params()[..],
        )?;
        Ok(changed == 1)
    }

    /// Replaces a function's row; false if it does not exist.
    pub fn update(&self, f: &Function) -> Result<bool, RegistryError> {
        let row = Row::of(f)?;
        let changed = self.db().execute(
            "UPDATE functions SET config = ?2, code_sha256 = ?3, code_size = ?4, revision = ?5,
             last_modified = ?6, reserved_concurrency = ?7, url_auth = ?8, tags = ?9, published = ?10,
             previous_code = ?11
             WHERE name = ?1",
            &row.params()[..],
        )?;
        Ok(changed == 1)
    }

    pub fn delete(&self, name: &str) -> Result<bool, RegistryError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        let changed = tx.execute("DELETE FROM functions WHERE name = ?1", [name])?;
        tx.execute("DELETE FROM async_queue WHERE function = ?1", [name])?;
        tx.execute("DELETE FROM test_events WHERE function = ?1", [name])?;
        tx.commit()?;
        Ok(changed == 1)
    }

    pub fn all(&self) -> Result<Vec<Function>, RegistryError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT name, config, code_sha256, code_size, revision, last_modified, reserved_concurrency, url_auth,
                    tags, published, previous_code
             FROM functions ORDER BY name",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, u64>(3)?,
                row.get::<_, u64>(4)?,
                row.get::<_, String>(5)?,
                row.get::<_, Option<u32>>(6)?,
                row.get::<_, Option<String>>(7)?,
                row.get::<_, Option<String>>(8)?,
                row.get::<_, Option<String>>(9)?,
                row.get::<_, Option<String>>(10)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (
                name,
                config,
                code_sha256,
                code_size,
                revision,
                modified,
                reserved,
                url,
                tags,
                published,
                previous_code,
            ) = row?;
            // Rows from before versions were kept have none.
            let published = match published {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                None => Default::default(),
            };
            let previous_code = match previous_code {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                ),
                None => None,
            };
            // Rows from before tags were kept have none.
            let tags = match tags {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?,
                None => Default::default(),
            };
            let config: FunctionConfig = serde_json::from_str(&config)
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?;
            let last_modified = DateTime::parse_from_rfc3339(&modified)
                .map_err(|e| RegistryError::Corrupt(format!("{name}: {e}")))?
                .with_timezone(&Utc);
            let url_auth = match url.as_deref() {
                Some("NONE") => Some(UrlAuth::None),
                Some("AWS_IAM") => Some(UrlAuth::AwsIam),
                _ => None,
            };
            out.push(Function {
                name,
                config,
                code_sha256,
                code_size,
                revision,
                last_modified,
                reserved_concurrency: reserved,
                url_auth,
                tags,
                published,
                previous_code,
            });
        }
        Ok(out)
    }
}

/// A function's row as the statements above bind it (its URL settings aside): `?1` its name,
/// then `?2` to `?11` its columns in the table's order.
struct Row<'f> {
    name: &'f str,
    config: String,
    code_sha256: &'f str,
    code_size: u64,
    revision: u64,
    last_modified: String,
    reserved_concurrency: Option<u32>,
    url_auth: Option<&'static str>,
    tags: String,
    published: Option<String>,
    previous_code: Option<String>,
}

impl<'f> Row<'f> {
    fn of(f: &'f Function) -> Result<Self, RegistryError> {
        Ok(Self {
            name: &f.name,
            config: serde_json::to_string(&f.config)
                .map_err(|e| RegistryError::Corrupt(e.to_string()))?,
            code_sha256: &f.code_sha256,
            code_size: f.code_size,
            revision: f.revision,
            last_modified: f.last_modified.to_rfc3339(),
            reserved_concurrency: f.reserved_concurrency,
            url_auth: url_auth_text(f.url_auth),
            tags: tags_text(f)?,
            published: published_text(f)?,
            previous_code: f
                .previous_code
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| RegistryError::Corrupt(e.to_string()))?,
        })
    }

    /// `?1` to `?11`.
    fn params(&self) -> [&dyn ToSql; 11] {
        [
            &self.name,
            &self.config,
            &self.code_sha256,
            &self.code_size,
            &self.revision,
            &self.last_modified,
            &self.reserved_concurrency,
            &self.url_auth,
            &self.tags,
            &self.published,
            &self.previous_code,
        ]
    }
}

fn tags_text(f: &Function) -> Result<String, RegistryError> {
    serde_json::to_string(&f.tags).map_err(|e| RegistryError::Corrupt(e.to_string()))
}

/// A function's versions and aliases as JSON; `NULL` for a function that has published none.
fn published_text(f: &Function) -> Result<Option<String>, RegistryError> {
    if f.published.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(&f.published)
        .map(Some)
        .map_err(|e| RegistryError::Corrupt(e.to_string()))
}

fn url_auth_text(auth: Option<UrlAuth>) -> Option<&'static str> {
    auth.map(|a| match a {
        UrlAuth::None => "NONE",
        UrlAuth::AwsIam => "AWS_IAM",
    })
}

#[cfg(test)]
mod tests {
    use super::super::super::Cors;
    use super::super::tests::sample;
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn versions_and_aliases_round_trip_with_their_function() {
        use crate::function::event_invoke::EventInvokeConfig;
        use crate::function::versions::{Alias, AliasUrl, Version};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let mut f = sample("v");
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&f).unwrap());
            f.published.last = 2;
            f.published.versions.push(Version {
                number: 2,
                config: f.config.clone(),
                description: Some("two".into()),
                code_sha256: "cd".into(),
                code_size: 3,
                last_modified: Utc::now(),
                revision: 4,
                revision_id: "r".into(),
            });
            f.published.aliases.insert(
                "live".into(),
                Alias {
                    name: "live".into(),
                    function_version: "2".into(),
                    description: "d".into(),
                    weights: BTreeMap::from([("1".into(), 0.5)]),
                    revision_id: "a".into(),
                    url: Some(AliasUrl {
                        auth: UrlAuth::AwsIam,
                        settings: UrlSettings {
                            created: Utc::now(),
                            modified: Utc::now(),
                            cors: None,
                        },
                    }),
                },
            );
            // A version's and an alias's event invoke configs are kept with them.
            let config = EventInvokeConfig {
                maximum_retry_attempts: Some(0),
                maximum_event_age_s: None,
                on_success: None,
                on_failure: None,
                last_modified: Utc::now(),
            };
            f.published.event_invoke.insert("2".into(), config.clone());
            f.published.event_invoke.insert("live".into(), config);
            assert!(reg.update(&f).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        assert_eq!(reg.all().unwrap()[0].published, f.published);
        // A URL change keeps them; a function without any stores none.
        assert!(reg.update_url(&f, None).unwrap());
        assert_eq!(reg.all().unwrap()[0].published, f.published);
        f.published = Default::default();
        assert!(reg.update(&f).unwrap());
        assert!(reg.all().unwrap()[0].published.is_empty());
    }

    #[test]
    fn the_code_before_an_update_round_trips_with_its_function() {
        use crate::function::versions::PreviousCode;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let mut f = sample("p");
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&f).unwrap());
            f.previous_code = Some(Box::new(PreviousCode::of(&f)));
            f.code_sha256 = "cd".into();
            f.revision = 2;
            assert!(reg.update(&f).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        let read = &reg.all().unwrap()[0];
        assert_eq!(read.previous_code, f.previous_code);
        assert_eq!(read.previous_code.as_ref().unwrap().code_sha256, "ab");
        // A URL change keeps it; once the new package is extracted it goes.
        assert!(reg.update_url(&f, None).unwrap());
        assert_eq!(reg.all().unwrap()[0].previous_code, f.previous_code);
        f.previous_code = None;
        assert!(reg.update(&f).unwrap());
        assert!(reg.all().unwrap()[0].previous_code.is_none());
    }

    #[test]
    fn functions_round_trip_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&sample("a")).unwrap());
            assert!(!reg.insert(&sample("a")).unwrap());
            let mut b = sample("b");
            assert!(!reg.update(&b).unwrap());
            assert!(reg.insert(&b).unwrap());
            b.revision = 2;
            assert!(reg.update(&b).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        let all = reg.all().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].revision, 2);
        assert_eq!(all[0].config, sample("a").config);
        assert_eq!(all[0].tags, sample("a").tags);
        assert!(reg.delete("a").unwrap());
        assert!(!reg.delete("a").unwrap());
    }

    #[test]
    fn url_settings_round_trip_and_go_with_the_function() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        let settings = UrlSettings {
            created: DateTime::parse_from_rfc3339("2024-01-02T03:04:05.678Z")
                .unwrap()
                .with_timezone(&Utc),
            modified: Utc::now(),
            cors: Some(Cors {
                allow_origins: Some(vec!["https://example.com".into()]),
                max_age: Some(60),
                ..Cors::default()
            }),
        };
        {
            let reg = Database::open(&path).unwrap();
            assert!(reg.insert(&sample("a")).unwrap());
            assert!(!reg.update_url(&sample("b"), Some(&settings)).unwrap());
            assert!(reg.update_url(&sample("a"), Some(&settings)).unwrap());
            // A plain update keeps the settings.
            assert!(reg.update(&sample("a")).unwrap());
        }
        let reg = Database::open(&path).unwrap();
        assert_eq!(
            reg.url_settings().unwrap(),
            vec![("a".to_string(), settings.clone())]
        );
        assert!(reg.update_url(&sample("a"), None).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
        assert!(reg.update_url(&sample("a"), Some(&settings)).unwrap());
        assert!(reg.delete("a").unwrap());
        assert!(reg.insert(&sample("a")).unwrap());
        assert!(reg.url_settings().unwrap().is_empty());
    }
}
