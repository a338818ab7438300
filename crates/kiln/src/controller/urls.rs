//! Function URL configs: Create/Update/Get/DeleteFunctionUrlConfig.

use chrono::Utc;

use super::{Controller, ControllerError, UrlChange, UrlSettings};
use crate::function::{Function, UrlAuth};
use crate::sync::RwLockExt;

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
        self.change_url(name, change)
    }

    /// Create/Update/DeleteFunctionUrlConfig.
    pub fn change_url(
        &self,
        name: &str,
        change: UrlChange,
    ) -> Result<(Function, Option<UrlSettings>), ControllerError> {
        let _mutation = self.lock_mutations();
        let mut function = self.url_function(name)?;
        let current = function.url_auth.map(|_| self.url_settings_of(&function));
        let now = Utc::now();
        let (auth, settings) = match (change, current) {
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
        if !self.registry.update_url(&function, settings.as_ref())? {
            return Err(self.not_found(&function.name));
        }
        {
            let mut all = self.url_settings.write_locked();
            match &settings {
                Some(s) => all.insert(function.name.clone(), s.clone()),
                None => all.remove(&function.name),
            };
        }
        Ok((self.publish(function), settings))
    }

    /// GetFunctionUrlConfig: the function and its URL settings.
    pub fn url_config(&self, name: &str) -> Result<(Function, UrlSettings), ControllerError> {
        let function = self.url_function(name)?;
        if function.url_auth.is_none() {
            return Err(self.url_not_found(&function.name));
        }
        let settings = self.url_settings_of(&function);
        Ok((function, settings))
    }

    /// The function a URL config call names. A URL belongs to the unqualified function or to an
    /// alias: Lambda's pattern for the qualifier refuses `$LATEST` and version numbers, and kiln
    /// has no aliases yet, so any other qualifier names a resource that does not exist.
    fn url_function(&self, name: &str) -> Result<Function, ControllerError> {
        let r = self.function_ref(name)?;
        let Some(qualifier) = r.qualifier.as_deref() else {
            return Ok(self.entry(name)?.function.clone());
        };
        if qualifier == "$LATEST" || qualifier.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ControllerError::Validation(format!(
                "1 validation error detected: Value '{qualifier}' at 'qualifier' failed to satisfy constraint: Member must satisfy regular expression pattern: ((?!^\\d+$)^[0-9a-zA-Z-_]+$)"
            )));
        }
        if !self.table().contains_key(&r.name) {
            return Err(self.not_found(&r.name));
        }
        Err(ControllerError::NotFound(format!(
            "Function not found: {}:{qualifier} (kiln has no aliases yet)",
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
