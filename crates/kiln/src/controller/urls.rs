//! Function URL configs: Create/Update/Get/DeleteFunctionUrlConfig and
//! ListFunctionUrlConfigs, of unqualified functions and of aliases.

use chrono::Utc;

use super::registry::{UrlWrite, Written};
use super::replica::Record;
use super::revision::{overtaken, STALE_RETRIES};
use super::{Controller, ControllerError, Cors, UrlSettings};
use crate::function::versions::AliasUrl;
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

/// A function URL config: of the unqualified function (`alias` `None`) or of one of its
/// aliases, each with its own URL.
#[derive(Debug, Clone)]
pub struct UrlConfig {
    pub function: Function,
    pub alias: Option<String>,
    pub auth: UrlAuth,
    pub settings: UrlSettings,
}

/// Why a URL change does not apply to what is configured.
enum Refused {
    Exists,
    Missing,
}

/// An alias's URL config after `change`, given its current one.
fn changed_alias_url(
    change: &UrlChange,
    current: Option<&AliasUrl>,
    now: chrono::DateTime<Utc>,
) -> Result<Option<AliasUrl>, Refused> {
    match (change.clone(), current) {
        (UrlChange::Create { .. }, Some(_)) => Err(Refused::Exists),
        (UrlChange::Update { .. } | UrlChange::Delete, None) => Err(Refused::Missing),
        (UrlChange::Create { auth, cors }, None) => Ok(Some(AliasUrl {
            auth,
            settings: UrlSettings {
                created: now,
                modified: now,
                cors,
            },
        })),
        (UrlChange::Update { auth, cors }, Some(current)) => Ok(Some(AliasUrl {
            auth: auth.unwrap_or(current.auth),
            settings: UrlSettings {
                created: current.settings.created,
                modified: now,
                cors: cors.or(current.settings.cors.clone()),
            },
        })),
        (UrlChange::Delete, Some(_)) => Ok(None),
    }
}

impl Controller {
    /// Create/UpdateFunctionUrlConfig (`Some`) and DeleteFunctionUrlConfig (`None`), with no
    /// CORS settings given.
    pub fn set_url_auth(
        &self,
        name: &str,
        auth: Option<UrlAuth>,
        create: bool,
    ) -> Result<Option<UrlConfig>, ControllerError> {
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
    ) -> Result<Option<UrlConfig>, ControllerError> {
        if let (function, Some(alias)) = self.url_function(name, qualifier)? {
            return self.change_alias_url(&function.name, &alias, change);
        }
        let _mutation = self.lock_mutations();
        for _ in 0..STALE_RETRIES {
            let (mut function, _) = self.url_function(name, qualifier)?;
            let base = self.versions.get(Record::Function, &function.name);
            let current = function.url_auth.map(|_| self.url_settings_of(&function));
            let now = Utc::now();
            let (auth, settings) = match (change.clone(), current) {
                (UrlChange::Create { .. }, Some(_)) => {
                    return Err(url_exists(&self.arn(&function.name)))
                }
                (UrlChange::Update { .. } | UrlChange::Delete, None) => {
                    return Err(self.url_not_found(&function.name, None))
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
            let function = self.publish(function);
            return Ok(settings.map(|settings| UrlConfig {
                auth: function.url_auth.unwrap_or(UrlAuth::None),
                function,
                alias: None,
                settings,
            }));
        }
        Err(overtaken(name))
    }

    /// Create/Update/DeleteFunctionUrlConfig of an alias: its config is part of the alias,
    /// so it is committed with the function's record and goes when the alias does.
    fn change_alias_url(
        &self,
        name: &str,
        alias: &str,
        change: UrlChange,
    ) -> Result<Option<UrlConfig>, ControllerError> {
        let now = Utc::now();
        let mutation = self.lock_mutations();
        let function = self.modify_if(&mutation, name, |f| {
            let arn = self.alias_arn(&f.name, alias);
            let Some(entry) = f.published.aliases.get_mut(alias) else {
                return Err(ControllerError::NotFound(format!(
                    "Function not found: {arn}"
                )));
            };
            entry.url = match changed_alias_url(&change, entry.url.as_ref(), now) {
                Ok(url) => url,
                Err(Refused::Exists) => return Err(url_exists(&arn)),
                Err(Refused::Missing) => return Err(self.url_not_found(&f.name, Some(alias))),
            };
            Ok(true)
        })?;
        drop(mutation);
        Ok(alias_url_config(function, alias))
    }

    /// ListFunctionUrlConfigs: the unqualified function's URL config, if it has one, and
    /// those of its aliases.
    pub fn url_configs(&self, name: &str) -> Result<Vec<UrlConfig>, ControllerError> {
        let function = self.get(name)?;
        let mut configs = Vec::new();
        if function.url_auth.is_some() {
            configs.push(self.url_config(&function.name, None)?);
        }
        let aliases = function
            .published
            .aliases
            .keys()
            .cloned()
            .collect::<Vec<_>>();
        configs.extend(
            aliases
                .iter()
                .filter_map(|alias| alias_url_config(function.clone(), alias)),
        );
        Ok(configs)
    }

    /// GetFunctionUrlConfig: the function and its URL settings.
    pub fn url_config(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<UrlConfig, ControllerError> {
        let (function, alias) = self.url_function(name, qualifier)?;
        if let Some(alias) = alias {
            let name = function.name.clone();
            return alias_url_config(function, &alias)
                .ok_or_else(|| self.url_not_found(&name, Some(&alias)));
        }
        let Some(auth) = function.url_auth else {
            return Err(self.url_not_found(&function.name, None));
        };
        let settings = self.url_settings_of(&function);
        Ok(UrlConfig {
            function,
            alias: None,
            auth,
            settings,
        })
    }

    /// The function a URL config call names, by its FunctionName and Qualifier parameters,
    /// and the alias if one is named. A URL belongs to the unqualified function or to an
    /// alias: Lambda's patterns refuse `$LATEST` and version numbers in either, and an alias
    /// that does not exist is not found.
    fn url_function(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, Option<String>), ControllerError> {
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
        check_same_qualifier(r.qualifier.as_deref(), qualifier)?;
        let Some(alias) = qualifier.or(r.qualifier.as_deref()) else {
            return Ok((self.entry(name)?.function.clone(), None));
        };
        let function = self.entry(&r.name)?.function.clone();
        if function.published.aliases.contains_key(alias) {
            return Ok((function, Some(alias.to_string())));
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

    fn url_not_found(&self, name: &str, alias: Option<&str>) -> ControllerError {
        let arn = match alias {
            Some(alias) => self.alias_arn(name, alias),
            None => self.arn(name),
        };
        ControllerError::NotFound(format!(
            "The resource you requested does not exist. (Service: Lambda, function URL config of {arn})"
        ))
    }
}

/// `alias`'s URL config, if it has one.
fn alias_url_config(function: Function, alias: &str) -> Option<UrlConfig> {
    let url = function.published.aliases.get(alias)?.url.clone()?;
    Some(UrlConfig {
        function,
        alias: Some(alias.to_string()),
        auth: url.auth,
        settings: url.settings,
    })
}

/// A qualifier in the function's name and one in `Qualifier` must agree, as Lambda requires.
pub(super) fn check_same_qualifier(
    in_name: Option<&str>,
    given: Option<&str>,
) -> Result<(), ControllerError> {
    match (in_name, given) {
        (Some(a), Some(b)) if a != b => Err(ControllerError::InvalidParameter(
            "The derived qualifier from the function name does not match the specified qualifier."
                .into(),
        )),
        _ => Ok(()),
    }
}

fn url_exists(arn: &str) -> ControllerError {
    ControllerError::Conflict(format!(
        "Failed to create function url config for [functionArn = {arn}]. Error message:  FunctionUrlConfig exists for this Lambda function"
    ))
}
