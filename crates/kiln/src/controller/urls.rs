//! Function URL configs: Create/Update/Get/DeleteFunctionUrlConfig.

use chrono::Utc;

use super::registry::{UrlWrite, Written};
use super::replica::Record;
use super::revision::{overtaken, STALE_RETRIES};
use super::{Controller, ControllerError, Cors, UrlSettings};
use crate::function::{self, Function, UrlAuth};
use crate::sync::RwLockExt;

/// A change to a function URL config.
#[derive(Debug, Clone)]
pub enum UrlChange {
    Create {
        auth: UrlAuth,
        cors: Option<Cors>,
    },
    /// `None` keeps what is configured.
    Update {
        auth: Option<UrlAuth>,
        cors: Option<Cors>,
    },
    Delete,
}

impl Controller {
    /// Create/UpdateFunctionUrlConfig (`Some`) and DeleteFunctionUrlConfig (`None`), with no
    /// CORS settings given.
    pub fn set_url_auth(
        &self,
        name: &str,
        auth: Option<UrlAuth>,
        create: bool,
    ) -> Result<(Function, Option<UrlSettings>), ControllerError> {
        let change = match (auth, create) {
            (None, _) => UrlChange::Delete,
            (Some(auth), true) => UrlChange::Create { auth, cors: None },
            (Some(auth), false) => UrlChange::Update {
                auth: Some(auth),
                cors: None,
            },
        };
        self.change_url(name, None, change)
    }

    /// Create/Update/DeleteFunctionUrlConfig, with the call's `Qualifier` parameter.
    pub fn change_url(
        &self,
        name: &str,
        qualifier: Option<&str>,
        change: UrlChange,
    ) -> Result<(Function, Option<UrlSettings>), ControllerError> {
        let _mutation = self.lock_mutations();
        for _ in 0..STALE_RETRIES {
            let mut function = self.url_function(name, qualifier)?;
            let base = self.versions.get(Record::Function, &function.name);
            let current = function.url_auth.map(|_| self.url_settings_of(&function));
            let now = Utc::now();
            let (auth, settings) = match (change.clone(), current) {
                (UrlChange::Create { .. }, Some(_)) => {
                    return Err(ControllerError::Conflict(format!(
                        "Failed to create function url config for [functionArn = {}]. Error message:  FunctionUrlConfig exists for this Lambda function",
                        self.arn(&function.name)
                    )))
                }
                (UrlChange::Update { .. } | UrlChange::Delete, None) => {
                    return Err(self.url_not_found(&function.name))
                }
                (UrlChange::Create { auth, cors }, None) => (
                    Some(auth),
                    Some(UrlSettings {
                        created: now,
                        modified: now,
                        cors,
                    }),
                ),
                (UrlChange::Update { auth, cors }, Some(current)) => (
                    Some(auth.or(function.url_auth).unwrap_or(UrlAuth::None)),
                    Some(UrlSettings {
                        created: current.created,
                        modified: now,
                        cors: cors.or(current.cors),
                    }),
                ),
                (UrlChange::Delete, Some(_)) => (None, None),
            };
            function.url_auth = auth;
            let written =
                self.registry
                    .update(&function, UrlWrite::Set(settings.as_ref()), base)?;
            let version = match written {
                Written::Done(version) => version,
                Written::Missing => return Err(self.not_found(&function.name)),
                Written::Stale(now) => {
                    now.into_iter().for_each(|c| self.apply_locked(c));
                    continue;
                }
            };
            self.versions.set(Record::Function, &function.name, version);
            self.versions.set(Record::Url, &function.name, version);
            {
                let mut all = self.url_settings.write_locked();
                match &settings {
                    Some(s) => all.insert(function.name.clone(), s.clone()),
                    None => all.remove(&function.name),
                };
            }
            return Ok((self.publish(function), settings));
        }
        Err(overtaken(name))
    }

    /// GetFunctionUrlConfig: the function and its URL settings.
    pub fn url_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, UrlSettings), ControllerError> {
        let function = self.url_function(name, qualifier)?;
        if function.url_auth.is_none() {
            return Err(self.url_not_found(&function.name));
        }
        let settings = self.url_settings_of(&function);
        Ok((function, settings))
    }

    /// The function a URL config call names, by its FunctionName and Qualifier parameters. A
    /// URL belongs to the unqualified function or to an alias: Lambda's patterns refuse
    /// `$LATEST` and version numbers in either, and kiln serves URLs of unqualified functions
    /// only: an alias's URL is refused (404 for an alias that does not exist, 400 for one
    /// that does).
    fn url_function(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<Function, ControllerError> {
        let numeric_or_latest = |q: &str| q == "$LATEST" || q.bytes().all(|b| b.is_ascii_digit());
        let malformed_name = || {
            ControllerError::Validation(
                function::NameError::Pattern.message(name, function::URL_FUNCTION_NAME_PATTERN),
            )
        };
        let r = self
            .function_ref_against(name, function::URL_FUNCTION_NAME_PATTERN)
            .map_err(|e| match e {
                ControllerError::Validation(_) => malformed_name(),
                other => other,
            })?;
        if r.name.contains('.') || r.qualifier.as_deref().is_some_and(numeric_or_latest) {
            return Err(malformed_name());
        }
        if let Some(q) = qualifier {
            let valid = !q.is_empty()
                && q.len() <= 128
                && !numeric_or_latest(q)
                && q.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(ControllerError::Validation(format!(
                    "1 validation error detected: Value '{q}' at 'qualifier' failed to satisfy constraint: Member must satisfy regular expression pattern: ((?!^\\d+$)^[0-9a-zA-Z-_]+$)"
                )));
            }
        }
        let Some(alias) = qualifier.or(r.qualifier.as_deref()) else {
            return Ok(self.entry(name)?.function.clone());
        };
        let function = self.entry(&r.name)?.function.clone();
        if function.published.aliases.contains_key(alias) {
            return Err(ControllerError::InvalidParameter(format!(
                "kiln serves function URLs of unqualified functions only, not of alias {alias}"
            )));
        }
        Err(ControllerError::NotFound(format!(
            "Function not found: {}:{alias}",
            self.arn(&r.name)
        )))
    }

    fn url_settings_of(&self, function: &Function) -> UrlSettings {
        self.url_settings
            .read_locked()
            .get(&function.name)
            .cloned()
            // Databases from before URL settings were kept have none: the function's time
            // stands in.
            .unwrap_or(UrlSettings {
                created: function.last_modified,
                modified: function.last_modified,
                cors: None,
            })
    }

    fn url_not_found(&self, name: &str) -> ControllerError {
        ControllerError::NotFound(format!(
            "The resource you requested does not exist. (Service: Lambda, function URL config of {})",
            self.arn(name)
        ))
    }
}
