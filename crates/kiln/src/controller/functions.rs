//! The function registry's calls: CreateFunction, UpdateFunctionCode and
//! UpdateFunctionConfiguration (with RevisionId checks), DeleteFunction, concurrency; and the
//! validation of a function's configuration.

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

use chrono::Utc;

use super::code;
use super::registry::{UrlWrite, Written};
use super::replica::Record;
use super::{ConfigPatch, Controller, ControllerError, Entry};
use crate::function::{self, Function, FunctionConfig};
use crate::runtime::RESERVED_ENV;
use crate::sync::{LockExt, RwLockExt};

/// The `Runtime` values of Lambda's API model (its enum, retired runtimes included): a value
/// outside it is a ValidationException, one inside it that kiln does not run an
/// InvalidParameterValueException.
const LAMBDA_RUNTIMES: &[&str] = &[
    "nodejs",
    "nodejs4.3",
    "nodejs6.10",
    "nodejs8.10",
    "nodejs10.x",
    "nodejs12.x",
    "nodejs14.x",
    "nodejs16.x",
    "nodejs18.x",
    "nodejs20.x",
    "nodejs22.x",
    "nodejs24.x",
    "nodejs26.x",
    "java8",
    "java8.al2",
    "java8.al2023",
    "java11",
    "java11.al2023",
    "java17",
    "java17.al2023",
    "java21",
    "java25",
    "python2.7",
    "python3.6",
    "python3.7",
    "python3.8",
    "python3.9",
    "python3.10",
    "python3.11",
    "python3.12",
    "python3.13",
    "python3.14",
    "python3.15",
    "dotnetcore1.0",
    "dotnetcore2.0",
    "dotnetcore2.1",
    "dotnetcore3.1",
    "dotnet6",
    "dotnet8",
    "dotnet10",
    "nodejs4.3-edge",
    "go1.x",
    "ruby2.5",
    "ruby2.7",
    "ruby3.2",
    "ruby3.3",
    "ruby3.4",
    "ruby4.0",
    "provided",
    "provided.al2",
    "provided.al2023",
];

impl Controller {
    pub(super) fn validate(&self, config: &FunctionConfig) -> Result<(), ControllerError> {
        let invalid = |m: String| Err(ControllerError::InvalidParameter(m));
        // Below the bounds of Lambda's API model (or off its patterns) is its ValidationException,
        // every violation of the request at once; within the model but beyond what Lambda runs,
        // its InvalidParameterValueException.
        let mut model = Violations::default();
        if !role_is_valid(&config.role) {
            model.add(
                &config.role,
                "role",
                &format!("Member must satisfy regular expression pattern: {ROLE_PATTERN}"),
            );
        }
        if !self.runtimes.contains(&config.runtime)
            && !LAMBDA_RUNTIMES.contains(&config.runtime.as_str())
        {
            model.add(
                &config.runtime,
                "runtime",
                &format!(
                    "Member must satisfy enum value set: [{}]",
                    LAMBDA_RUNTIMES.join(", ")
                ),
            );
        }
        if config.handler.is_empty() || config.handler.chars().any(char::is_whitespace) {
            model.add(
                &config.handler,
                "handler",
                "Member must satisfy regular expression pattern: [^\\s]+",
            );
        }
        if config.handler.chars().count() > 128 {
            model.add(
                &config.handler,
                "handler",
                "Member must have length less than or equal to 128",
            );
        }
        if config.description.chars().count() > 256 {
            model.add(
                &config.description,
                "description",
                "Member must have length less than or equal to 256",
            );
        }
        if config.memory_mb < function::MIN_MEMORY_MB {
            model.add(
                &config.memory_mb,
                "memorySize",
                "Member must have value greater than or equal to 128",
            );
        }
        if config.timeout_s < 1 {
            model.add(
                &config.timeout_s,
                "timeout",
                "Member must have value greater than or equal to 1",
            );
        }
        if config.ephemeral_storage_mb < 512 {
            model.add(
                &config.ephemeral_storage_mb,
                "ephemeralStorage.size",
                "Member must have value greater than or equal to 512",
            );
        }
        model.into_result()?;
        if !self.runtimes.contains(&config.runtime) {
            // A runtime Lambda knows and this node does not run.
            return invalid(format!(
                "Value {} at 'runtime' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
                config.runtime,
                self.runtimes.join(", ")
            ));
        }
        if config.prebake.warmup_invocations > function::MAX_WARMUPS {
            return invalid(format!(
                "Value {} at 'kilnPrebake.warmupInvocations' failed to satisfy constraint: Member must have value less than or equal to {}",
                config.prebake.warmup_invocations,
                function::MAX_WARMUPS
            ));
        }
        if config.prebake.standbys > function::MAX_STANDBYS {
            return invalid(format!(
                "Value {} at 'kilnPrebake.standbys' failed to satisfy constraint: Member must have value less than or equal to {}",
                config.prebake.standbys,
                function::MAX_STANDBYS
            ));
        }
        if config.prebake.standbys > 0 && config.prebake.mode == function::PrebakeMode::Off {
            return invalid(
                "KilnPrebake.Standbys needs a snapshot to make them from: Mode must be deploy or lazy"
                    .into(),
            );
        }
        if let Some(sessions) = &config.sessions {
            sessions.validate().or_else(invalid)?;
        }
        if let Some(web) = &config.web {
            web.mode(&config.runtime, config.network)
                .map_err(ControllerError::Validation)?;
        }
        if let Some(breakout) = &config.breakout {
            breakout
                .validate(&config.runtime, config.memory_mb, config.web.is_some())
                .map_err(ControllerError::Validation)?;
        }
        config
            .settings
            .validate()
            .map_err(ControllerError::Validation)?;
        if let Some(event) = &config.prebake.warmup_event {
            if event.to_string().len() > function::MAX_WARMUP_EVENT_BYTES {
                return invalid(format!(
                    "Value at 'kilnPrebake.warmupEvent' failed to satisfy constraint: Member must have length less than or equal to {}",
                    function::MAX_WARMUP_EVENT_BYTES
                ));
            }
        }
        if !(function::MIN_MEMORY_MB..=function::MAX_MEMORY_MB).contains(&config.memory_mb) {
            return invalid(format!(
                "Value {} at 'memorySize' failed to satisfy constraint: Member must have value between {} and {}",
                config.memory_mb,
                function::MIN_MEMORY_MB,
                function::MAX_MEMORY_MB
            ));
        }
        if !(1..=function::MAX_TIMEOUT_S).contains(&config.timeout_s) {
            return invalid(format!(
                "Value {} at 'timeout' failed to satisfy constraint: Member must have value between 1 and {}",
                config.timeout_s,
                function::MAX_TIMEOUT_S
            ));
        }
        if !(512..=10_240).contains(&config.ephemeral_storage_mb) {
            return invalid("EphemeralStorage size must be between 512 and 10240 MB".into());
        }
        for key in config.env.keys() {
            let valid_key = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_key {
                return invalid(format!("Environment variable name '{key}' is invalid: it must match [a-zA-Z]([a-zA-Z0-9_])+"));
            }
            if RESERVED_ENV.contains(&key.as_str()) {
                return invalid(format!(
                    "Lambda was unable to configure your environment variables because the environment variables you have provided contains reserved keys that are currently not supported for modification. Reserved keys used in this request: {key}"
                ));
            }
        }
        // Lambda measures the variables as the JSON of their map.
        let measured = serde_json::to_string(&config.env).unwrap_or_default();
        if measured.len() > function::MAX_ENV_BYTES {
            return invalid(format!("Lambda was unable to configure your environment variables because the environment variables you have provided exceeded the 4KB limit. String measured: {measured}"));
        }
        Ok(())
    }

    /// CreateFunction without tags.
    pub async fn create(
        &self,
        name: &str,
        config: FunctionConfig,
        zip: Vec<u8>,
    ) -> Result<Function, ControllerError> {
        self.create_tagged(name, config, zip, BTreeMap::new()).await
    }

    /// CreateFunction; `kiln:` tags set kiln's extension settings over the configuration's.
    pub async fn create_tagged(
        &self,
        name: &str,
        mut config: FunctionConfig,
        zip: Vec<u8>,
        tags: BTreeMap<String, String>,
    ) -> Result<Function, ControllerError> {
        // A full or partial ARN names the function as well as its name does.
        let r = self.strict_function_ref(name)?;
        if r.qualifier.is_some() {
            return Err(ControllerError::InvalidParameter(format!(
                "Function name '{name}' has a qualifier: a function is created unqualified"
            )));
        }
        let name = r.name.as_str();
        self.tags_for_create(&mut config, &tags)?;
        self.validate(&config)?;
        if self.table().contains_key(name) {
            return Err(ControllerError::Conflict(format!(
                "Function already exist: {name}"
            )));
        }
        if self.sequences().contains_key(name) {
            return Err(ControllerError::Conflict(format!(
                "A sequence is named {name}: a function cannot be"
            )));
        }
        let (code, _mutation) = self.store_code(zip).await?;
        if self.table().contains_key(name) {
            return Err(ControllerError::Conflict(format!(
                "Function already exist: {name}"
            )));
        }
        let function = Function {
            name: name.to_string(),
            config,
            code_sha256: code.sha256_hex,
            code_size: code.size,
            revision: 1,
            last_modified: Utc::now(),
            reserved_concurrency: None,
            url_auth: None,
            tags,
            published: Default::default(),
        };
        let Some(version) = self.registry.insert(&function)? else {
            return Err(ControllerError::Conflict(format!(
                "Function already exist: {name}"
            )));
        };
        self.versions.set(Record::Function, name, version);
        Ok(self.publish(function))
    }

    /// Stores a package (in cluster mode, in the shared store too, before any node is told of
    /// it) and returns with the mutation lock held, so that no concurrent DeleteFunction can
    /// collect the package before the caller has committed a reference to it.
    async fn store_code(
        &self,
        zip: Vec<u8>,
    ) -> Result<(code::StoredCode, MutexGuard<'_, ()>), ControllerError> {
        let zip = Arc::new(zip);
        loop {
            let store = self.code.clone();
            let bytes = zip.clone();
            let code = tokio::task::spawn_blocking(move || store.put_zip(&bytes))
                .await
                .map_err(|e| ControllerError::Internal(e.to_string()))??;
            if let Some(shared) = &self.shared_code {
                shared
                    .put(&code.sha256_hex, bytes::Bytes::from(zip.to_vec()))
                    .await
                    .map_err(|e| ControllerError::Unavailable(e.to_string()))?;
            }
            let guard = self.lock_mutations();
            if self.code.contains(&code.sha256_hex) {
                return Ok((code, guard));
            }
            // A DeleteFunction collected these very bytes meanwhile: store them again.
        }
    }

    pub(super) fn lock_mutations(&self) -> MutexGuard<'_, ()> {
        self.mutation.locked()
    }

    /// Applies a change to a stored function and commits it; the next invocation sees it.
    pub(super) fn modify(
        &self,
        name: &str,
        change: impl FnMut(&mut Function) -> Result<(), ControllerError>,
    ) -> Result<Function, ControllerError> {
        let guard = self.lock_mutations();
        self.modify_locked(&guard, name, change)
    }

    /// [`Self::modify`] for a caller that holds the mutation lock. A change that another node
    /// overtook (cluster mode) is made again from the function as it now is: `change` may run
    /// more than once, and checks its preconditions each time.
    pub(super) fn modify_locked(
        &self,
        _mutation: &MutexGuard<'_, ()>,
        name: &str,
        mut change: impl FnMut(&mut Function) -> Result<(), ControllerError>,
    ) -> Result<Function, ControllerError> {
        for _ in 0..STALE_RETRIES {
            let mut function = self.entry(name)?.function.clone();
            let base = self.versions.get(Record::Function, &function.name);
            change(&mut function)?;
            match self.registry.update(&function, UrlWrite::Keep, base)? {
                Written::Done(version) => {
                    self.versions.set(Record::Function, &function.name, version);
                    return Ok(self.publish(function));
                }
                Written::Missing => return Err(self.not_found(&function.name)),
                Written::Stale(now) => now.into_iter().for_each(|c| self.apply_locked(c)),
            }
        }
        Err(overtaken(name))
    }

    /// UpdateFunctionCode with DryRun: checks the function, the RevisionId and the package, and
    /// changes nothing.
    pub fn check_code(
        &self,
        name: &str,
        zip: &[u8],
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        let function = self.get(name)?;
        check_revision(&function, expected_revision)?;
        code::check_zip(zip)?;
        Ok(function)
    }

    /// UpdateFunctionCode.
    pub async fn update_code(
        &self,
        name: &str,
        zip: Vec<u8>,
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        check_revision(&self.get(name)?, expected_revision)?;
        let (code, mutation) = self.store_code(zip).await?;
        self.modify_locked(&mutation, name, |f| {
            check_revision(f, expected_revision)?;
            f.code_sha256 = code.sha256_hex.clone();
            f.code_size = code.size;
            f.revision += 1;
            f.last_modified = Utc::now();
            Ok(())
        })
    }

    /// UpdateFunctionConfiguration.
    pub fn update_config(
        &self,
        name: &str,
        patch: ConfigPatch,
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        self.modify(name, |f| {
            check_revision(f, expected_revision)?;
            let mut config = f.config.clone();
            if let Some(v) = patch.runtime.clone() {
                config.runtime = v;
            }
            if let Some(v) = patch.handler.clone() {
                config.handler = v;
            }
            if let Some(v) = patch.memory_mb {
                config.memory_mb = v;
            }
            if let Some(v) = patch.timeout_s {
                config.timeout_s = v;
            }
            if let Some(v) = patch.env.clone() {
                config.env = v;
                config.settings.environment_set = true;
            }
            config.settings.apply(patch.settings.clone());
            if let Some(v) = patch.description.clone() {
                config.description = v;
            }
            if let Some(v) = patch.role.clone() {
                config.role = v;
            }
            if let Some(v) = patch.ephemeral_storage_mb {
                config.ephemeral_storage_mb = v;
            }
            if let Some(v) = patch.prebake.clone() {
                config.prebake = v;
            }
            if let Some(v) = patch.sessions.clone() {
                config.sessions = v;
            }
            if let Some(v) = patch.memory_sizing {
                config.memory_sizing = v;
            }
            if let Some(v) = patch.web.clone() {
                config.web = v;
            }
            if let Some(v) = patch.breakout.clone() {
                config.breakout = v;
            }
            if let Some(v) = patch.network {
                config.network = v;
            }
            self.validate(&config)?;
            f.config = config;
            f.revision += 1;
            f.last_modified = Utc::now();
            Ok(())
        })
    }

    /// DeleteFunction, with its versions and aliases. Its queued async invocations go with it,
    /// as on Lambda. With a qualifier (in the name or the `Qualifier` parameter) only that
    /// version goes ([`Self::delete_version`]).
    pub fn delete(&self, name: &str) -> Result<(), ControllerError> {
        let r = self.function_ref(name)?;
        if let Some(qualifier) = r.qualifier.as_deref() {
            return self.delete_version(name, qualifier);
        }
        let _mutation = self.lock_mutations();
        let entry = self.entry(name)?;
        let name = entry.function.name.clone();
        let Some(version) = self.registry.delete(&name)? else {
            return Err(self.not_found(&name));
        };
        self.versions.set(Record::Function, &name, version);
        self.versions.set(Record::Url, &name, version);
        self.functions.write_locked().remove(&name);
        self.url_settings.write_locked().remove(&name);
        self.forget_function(&entry);
        Ok(())
    }

    /// Lets go of what a deleted function held on this node: its instances, logs, model and
    /// package (unless another function uses it). The caller holds the mutation lock and has
    /// taken the function out of the tables.
    pub(super) fn forget_function(&self, entry: &Entry) {
        let name = entry.function.name.clone();
        self.agent.retire(&name, None);
        for version in entry.versions.values() {
            self.agent.retire(&version.spec.function, None);
            self.predictor.forget(&version.spec.function);
        }
        self.logs.remove(&name);
        self.predictor.forget(&name);
        for digest in super::versions::packages(&entry.function) {
            self.drop_unused_code(&digest);
        }
    }

    /// GetFunctionConcurrency.
    pub fn reserved_concurrency(&self, name: &str) -> Result<Option<u32>, ControllerError> {
        self.strict_function_ref(name)?;
        Ok(self.get(name)?.reserved_concurrency)
    }

    /// PutFunctionConcurrency (`Some`) and DeleteFunctionConcurrency (`None`).
    pub fn set_concurrency(
        &self,
        name: &str,
        reserved: Option<u32>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        if let Some(n) = reserved {
            if n > self.config.node_max_instances {
                return Err(ControllerError::InvalidParameter(format!(
                    "Specified ReservedConcurrentExecutions for function decreases account's UnreservedConcurrentExecution below its minimum value of [0]. ({n} exceeds this node's limit of {})",
                    self.config.node_max_instances
                )));
            }
        }
        self.modify(name, |f| {
            f.reserved_concurrency = reserved;
            // The agent keys instances by revision: warm instances of the old spec must not
            // keep serving past a lowered (or zero) reservation.
            f.revision += 1;
            Ok(())
        })
    }
}

/// How many times a change overtaken by another node's is made again before the caller is
/// told to try later.
pub(super) const STALE_RETRIES: usize = 5;

/// A change overtaken [`STALE_RETRIES`] times in a row.
pub(super) fn overtaken(name: &str) -> ControllerError {
    ControllerError::Conflict(format!(
        "The operation cannot be performed at this time. Function {name} is being changed on \
         other nodes of the cluster: try again"
    ))
}

/// Lambda's RevisionId: a UUID-shaped digest of everything UpdateFunctionCode and
/// UpdateFunctionConfiguration change, so it changes with each of them and nothing else.
pub fn revision_id(f: &Function) -> String {
    use sha2::{Digest, Sha256};
    let config = serde_json::to_string(&f.config).unwrap_or_default();
    let digest = Sha256::digest(format!(
        "{}\n{}\n{}\n{}",
        f.name,
        f.code_sha256,
        f.last_modified.to_rfc3339(),
        config
    ));
    let h = hex::encode(&digest[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Lambda's pattern for an execution role: an IAM role's ARN. kiln assumes no role, but a
/// value that could not be one is refused as Lambda refuses it.
const ROLE_PATTERN: &str = r"arn:(aws[a-zA-Z-]*)?:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+";

/// Violations of Lambda's API model in one request, answered together as its
/// ValidationException answers them: `2 validation errors detected: Value 'x' at 'a' failed to
/// satisfy constraint: …; Value …`.
#[derive(Debug, Default)]
struct Violations(Vec<String>);

impl Violations {
    fn add(&mut self, value: &dyn std::fmt::Display, field: &str, constraint: &str) {
        self.0.push(format!(
            "Value '{value}' at '{field}' failed to satisfy constraint: {constraint}"
        ));
    }

    fn into_result(self) -> Result<(), ControllerError> {
        let message = match self.0.as_slice() {
            [] => return Ok(()),
            [one] => format!("1 validation error detected: {one}"),
            many => format!(
                "{} validation errors detected: {}",
                many.len(),
                many.join("; ")
            ),
        };
        Err(ControllerError::Validation(message))
    }
}

fn role_is_valid(role: &str) -> bool {
    (|| {
        let rest = role.strip_prefix("arn:")?;
        let (partition, rest) = rest.split_once(':')?;
        let partition_ok = partition.is_empty()
            || partition
                .strip_prefix("aws")
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-'));
        let rest = rest.strip_prefix("iam::")?;
        let (account, rest) = rest.split_at_checked(12)?;
        // `role/?` then one or more of a class that holds `/` itself: one or more of the class.
        let path = rest.strip_prefix(":role")?;
        let path_ok = !path.is_empty()
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_+=,.@-/".contains(&b));
        Some(partition_ok && account.bytes().all(|b| b.is_ascii_digit()) && path_ok)
    })()
    .unwrap_or(false)
}

/// Optimistic locking: an update that names a RevisionId applies only to that revision.
pub(super) fn check_revision(f: &Function, expected: Option<&str>) -> Result<(), ControllerError> {
    match expected {
        Some(expected) if expected != revision_id(f) => Err(ControllerError::PreconditionFailed(
            "The Revision Id provided does not match the latest Revision Id. Call the GetFunction/GetAlias API to retrieve the latest Revision Id".into(),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod role_tests {
    use super::{role_is_valid, ControllerError, Violations};

    #[test]
    fn every_violation_of_the_model_is_reported_at_once() {
        assert!(Violations::default().into_result().is_ok());
        let mut one = Violations::default();
        one.add(
            &64,
            "memorySize",
            "Member must have value greater than or equal to 128",
        );
        let Err(ControllerError::Validation(m)) = one.into_result() else {
            panic!("a violation is a ValidationException")
        };
        assert_eq!(m, "1 validation error detected: Value '64' at 'memorySize' failed to satisfy constraint: Member must have value greater than or equal to 128");
        let mut two = Violations::default();
        two.add(&"r", "role", "A");
        two.add(&0, "timeout", "B");
        let Err(ControllerError::Validation(m)) = two.into_result() else {
            panic!("violations are a ValidationException")
        };
        assert_eq!(m, "2 validation errors detected: Value 'r' at 'role' failed to satisfy constraint: A; Value '0' at 'timeout' failed to satisfy constraint: B");
    }

    #[test]
    fn roles_are_iam_role_arns() {
        for good in [
            "arn:aws:iam::000000000000:role/test",
            "arn:aws-cn:iam::123456789012:role/path/to/r+=,.@-_",
            "arn::iam::123456789012:roleX",
        ] {
            assert!(role_is_valid(good), "{good}");
        }
        for bad in [
            "",
            "my-role",
            "arn:aws:iam::0000:role/test",
            "arn:aws:iam::000000000000:user/test",
            "arn:aws:iam::000000000000:role",
            "arn:aws:iam::000000000000:role/has space",
            "arn:gcp:iam::000000000000:role/test",
        ] {
            assert!(!role_is_valid(bad), "{bad}");
        }
    }
}
