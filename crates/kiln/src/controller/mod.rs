//! The controller: the function registry, scheduling onto the node agent, and the async queue.
//!
//! The HTTP layer turns each request into a call on [`Controller`]; the controller never sees
//! HTTP. Every metadata change is committed to SQLite before it is acknowledged and then
//! mirrored in an in-memory table, which is all the invoke path reads.

pub mod code;
mod queue;
pub mod registry;
pub mod sequences;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use tokio::sync::Notify;

use crate::agent::{AgentError, InvokeOutcome, InvokeRequest, NodeAgent, RouteHints};
use crate::function::{
    self, Function, FunctionConfig, InstanceSpec, MemorySizing, NetworkMode, SharedSpec, UrlAuth,
};
use crate::logs::LogStore;
use crate::metrics::Metrics;
use crate::predict;
use crate::runtime::RESERVED_ENV;
use code::{CodeError, CodeStore};
pub use registry::{Cors, UrlSettings};
use registry::{Registry, RegistryError};

/// Lambda's payload limits.
pub const MAX_SYNC_PAYLOAD: usize = 6 * 1024 * 1024;
pub const MAX_ASYNC_PAYLOAD: usize = 256 * 1024;
/// Lambda attempts an asynchronous invocation three times in all.
pub const ASYNC_ATTEMPTS: u32 = 3;

/// Why a control-plane or invoke call failed. Each variant maps to one Lambda error.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// the function (or resource) does not exist
    #[error("{0}")]
    NotFound(String),
    /// the resource exists already or is in use
    #[error("{0}")]
    Conflict(String),
    /// a parameter is invalid
    #[error("{0}")]
    InvalidParameter(String),
    /// the request body is not what the call expects
    #[error("{0}")]
    InvalidRequestContent(String),
    /// the request is larger than allowed
    #[error("{0}")]
    TooLarge(String),
    /// the caller's RevisionId is not the function's current one
    #[error("{0}")]
    PreconditionFailed(String),
    /// concurrency is exhausted
    #[error("Rate Exceeded.")]
    Throttled { reserved: bool },
    /// kiln itself failed
    #[error("{0}")]
    Internal(String),
    /// kiln is shutting down
    #[error("kiln is shutting down")]
    ShuttingDown,
}

impl From<RegistryError> for ControllerError {
    fn from(e: RegistryError) -> Self {
        ControllerError::Internal(e.to_string())
    }
}

impl From<CodeError> for ControllerError {
    fn from(e: CodeError) -> Self {
        match e {
            CodeError::Io(io) => ControllerError::Internal(format!("code store: {io}")),
            CodeError::ZipTooLarge => ControllerError::TooLarge(e.to_string()),
            other => ControllerError::InvalidParameter(other.to_string()),
        }
    }
}

impl From<AgentError> for ControllerError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::ThrottledReserved => ControllerError::Throttled { reserved: true },
            AgentError::ThrottledNode => ControllerError::Throttled { reserved: false },
            AgentError::ShuttingDown => ControllerError::ShuttingDown,
            AgentError::Sandbox(message) | AgentError::Session(message) => {
                ControllerError::Internal(message)
            }
        }
    }
}

/// An input object's model features: `object.size`, and for images `object.width`,
/// `object.height`, `object.format`.
fn object_features(
    known: &crate::objects::ObjectFeatures,
) -> Vec<(String, predict::features::Value)> {
    use predict::features::Value;
    let mut out = vec![("size".to_string(), Value::Number(known.size as f64))];
    if let Some(media) = &known.media {
        out.push(("width".into(), Value::Number(media.width as f64)));
        out.push(("height".into(), Value::Number(media.height as f64)));
        out.push(("format".into(), Value::Nominal(media.format.clone())));
    }
    out
}

/// An invocation's payload, checked: within `limit` bytes (for invocation type `kind`), and
/// JSON; an empty one is `{}`.
fn checked_payload(payload: Bytes, limit: usize, kind: &str) -> Result<Bytes, ControllerError> {
    if payload.len() > limit {
        return Err(ControllerError::TooLarge(format!(
            "{} byte payload is too large for the {kind} invocation type (limit {limit} bytes)",
            payload.len()
        )));
    }
    let payload = if payload.iter().all(u8::is_ascii_whitespace) {
        Bytes::from_static(b"{}")
    } else {
        payload
    };
    if serde_json::from_slice::<serde::de::IgnoredAny>(&payload).is_err() {
        return Err(ControllerError::InvalidRequestContent(
            "Could not parse request body into json: Could not parse payload into json: Unexpected character".into(),
        ));
    }
    Ok(payload)
}

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub data_dir: PathBuf,
    pub region: String,
    pub account_id: String,
    /// Upper bound on a function's instances on this node when it has no reserved concurrency.
    pub node_max_instances: u32,
    /// Delay before the first retry of a failed async invocation; the second waits twice as long.
    pub async_retry_delay: Duration,
    /// Async invocations delivered at once.
    pub async_concurrency: usize,
    /// Per-invocation memory prediction.
    pub prediction: predict::PredictorConfig,
    /// The object cache, when the store has one: its metrics are exposed with kiln's own, and
    /// each invocation's object-store time teaches the function's cache-benefit model.
    pub object_cache: Option<Arc<crate::objects::cache::ObjectCache>>,
    /// Where input objects' features come from.
    pub object_features: crate::objects::FeatureLookup,
}

/// Fields of UpdateFunctionConfiguration; `None` leaves a field unchanged.
#[derive(Debug, Default, Clone)]
pub struct ConfigPatch {
    pub runtime: Option<String>,
    pub handler: Option<String>,
    pub memory_mb: Option<u32>,
    pub timeout_s: Option<u32>,
    pub env: Option<BTreeMap<String, String>>,
    pub description: Option<String>,
    pub role: Option<String>,
    pub ephemeral_storage_mb: Option<u32>,
    pub network: Option<NetworkMode>,
    pub prebake: Option<crate::function::Prebake>,
    /// `Some(None)` turns sessions off.
    pub sessions: Option<Option<crate::session::SessionConfig>>,
    pub memory_sizing: Option<crate::function::MemorySizing>,
}

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

/// How an invocation should be run (Lambda's InvocationType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationType {
    RequestResponse,
    Event,
    DryRun,
}

/// The result of Invoke.
pub enum Invoked {
    Done {
        outcome: InvokeOutcome,
        request_id: String,
    },
    Queued {
        request_id: String,
    },
    DryRun,
}

struct Entry {
    function: Function,
    spec: SharedSpec,
}

pub struct Controller {
    config: ControllerConfig,
    registry: Registry,
    code: CodeStore,
    functions: RwLock<HashMap<String, Arc<Entry>>>,
    /// Each function URL config's times and CORS settings.
    url_settings: RwLock<HashMap<String, UrlSettings>>,
    /// Serializes create, modify and delete: each reads the table, commits to SQLite and then
    /// publishes, and two of them interleaving would lose an update or resurrect a deleted
    /// function in memory.
    mutation: Mutex<()>,
    sequences: RwLock<HashMap<String, Arc<sequences::Sequence>>>,
    agent: Arc<dyn NodeAgent>,
    runtimes: Vec<String>,
    pub logs: LogStore,
    pub metrics: Metrics,
    queue_wakeup: Arc<Notify>,
    predictor: predict::Predictor,
}

impl Controller {
    pub fn open(
        config: ControllerConfig,
        agent: Arc<dyn NodeAgent>,
    ) -> Result<Arc<Self>, ControllerError> {
        let internal = |e: std::io::Error| ControllerError::Internal(e.to_string());
        std::fs::create_dir_all(&config.data_dir).map_err(internal)?;
        let registry = Registry::open(&config.data_dir.join("kiln.db"))?;
        let code = CodeStore::open(&config.data_dir.join("store")).map_err(internal)?;
        let logs = LogStore::open(&config.data_dir.join("logs")).map_err(internal)?;
        let runtimes = agent.status().runtimes;
        let predictor =
            predict::Predictor::new(config.prediction.clone(), &config.data_dir.join("models"));
        let metrics = Metrics::with_object_cache(config.object_cache.as_ref().map(|c| c.metrics()));
        let controller = Arc::new(Self {
            config,
            registry,
            code,
            functions: RwLock::default(),
            url_settings: RwLock::default(),
            mutation: Mutex::new(()),
            sequences: RwLock::default(),
            agent,
            runtimes,
            logs,
            metrics,
            queue_wakeup: Arc::new(Notify::new()),
            predictor,
        });
        let mut table = HashMap::new();
        let mut live_code = Vec::new();
        {
            let mut sequences = controller.sequences_mut();
            for sequence in controller.registry.sequences()? {
                sequences.insert(sequence.name.clone(), Arc::new(sequence));
            }
        }
        for function in controller.registry.all()? {
            live_code.push(function.code_sha256.clone());
            let spec = controller.spec_for(&function);
            controller.agent.prepare(spec.clone());
            table.insert(function.name.clone(), Arc::new(Entry { function, spec }));
        }
        *controller
            .functions
            .write()
            .unwrap_or_else(|p| p.into_inner()) = table;
        *controller
            .url_settings
            .write()
            .unwrap_or_else(|p| p.into_inner()) =
            controller.registry.url_settings()?.into_iter().collect();
        controller.code.collect_garbage(&live_code);
        queue::start(controller.clone());
        Ok(controller)
    }

    pub fn agent(&self) -> &Arc<dyn NodeAgent> {
        &self.agent
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn arn(&self, name: &str) -> String {
        format!(
            "arn:aws:lambda:{}:{}:function:{name}",
            self.config.region, self.config.account_id
        )
    }

    pub fn code_store(&self) -> &CodeStore {
        &self.code
    }

    fn spec_for(&self, f: &Function) -> SharedSpec {
        Arc::new(InstanceSpec {
            function: f.name.clone(),
            arn: self.arn(&f.name),
            revision: f.revision,
            runtime: f.config.runtime.clone(),
            handler: f.config.handler.clone(),
            memory_mb: f.config.memory_mb,
            timeout_s: f.config.timeout_s,
            env: f.config.env.clone(),
            network: f.config.network,
            tmp_mb: f.config.ephemeral_storage_mb,
            code_dir: self.code.code_dir(&f.code_sha256),
            code_sha256: f.code_sha256.clone(),
            region: self.config.region.clone(),
            max_instances: f
                .reserved_concurrency
                .unwrap_or(self.config.node_max_instances),
            reserved_concurrency: f.reserved_concurrency,
            prebake: f.config.prebake.clone(),
            sessions: f.config.sessions.clone(),
            memory_sizing: f.config.memory_sizing,
        })
    }

    fn sequences(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<sequences::Sequence>>> {
        self.sequences.read().unwrap_or_else(|p| p.into_inner())
    }

    fn sequences_mut(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<sequences::Sequence>>> {
        self.sequences.write().unwrap_or_else(|p| p.into_inner())
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Entry>>> {
        self.functions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, function: Function) -> Function {
        let spec = self.spec_for(&function);
        let name = function.name.clone();
        let previous = self
            .functions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                name.clone(),
                Arc::new(Entry {
                    function: function.clone(),
                    spec,
                }),
            );
        // New code uses memory its own way: its model starts afresh. (A new MemorySize is a
        // new model already.)
        if previous.is_some_and(|p| {
            p.function.code_sha256 != function.code_sha256
                || p.function.config.runtime != function.config.runtime
                || p.function.config.handler != function.config.handler
        }) {
            self.predictor.forget(&name);
        }
        self.agent.retire(&name, Some(function.revision));
        self.agent.prepare(self.spec_for(&function));
        function
    }

    /// Parses a FunctionName parameter and checks that it names this node's region and
    /// account: an ARN of another region or account names a function kiln does not have.
    fn function_ref(&self, raw: &str) -> Result<function::FunctionRef, ControllerError> {
        let r = function::parse_function_ref(raw).ok_or_else(|| {
            ControllerError::InvalidParameter(format!(
                "1 validation error detected: Value '{raw}' at 'functionName' failed to satisfy constraint: Member must satisfy regular expression pattern: (arn:(aws[a-zA-Z-]*)?:lambda:)?([a-z]{{2}}(-gov)?-[a-z]+-\\d{{1}}:)?(\\d{{12}}:)?(function:)?([a-zA-Z0-9-_]+)(:(\\$LATEST|[a-zA-Z0-9-_]+))?"
            ))
        })?;
        let region = r.region.as_deref().unwrap_or(&self.config.region);
        let account = r.account.as_deref().unwrap_or(&self.config.account_id);
        if region != self.config.region || account != self.config.account_id {
            let qualifier = r
                .qualifier
                .as_deref()
                .map(|q| format!(":{q}"))
                .unwrap_or_default();
            return Err(ControllerError::NotFound(format!(
                "Function not found: arn:aws:lambda:{region}:{account}:function:{}{qualifier}",
                r.name
            )));
        }
        Ok(r)
    }

    fn entry(&self, name: &str) -> Result<Arc<Entry>, ControllerError> {
        let r = self.function_ref(name)?;
        let entry = self
            .table()
            .get(&r.name)
            .cloned()
            .ok_or_else(|| self.not_found(&r.name))?;
        match r.qualifier.as_deref() {
            None | Some("$LATEST") => Ok(entry),
            Some(other) => Err(ControllerError::NotFound(format!(
                "Function not found: {}:{other} (kiln serves only $LATEST)",
                self.arn(&r.name)
            ))),
        }
    }

    fn not_found(&self, name: &str) -> ControllerError {
        ControllerError::NotFound(format!("Function not found: {}", self.arn(name)))
    }

    pub fn get(&self, name: &str) -> Result<Function, ControllerError> {
        Ok(self.entry(name)?.function.clone())
    }

    pub fn list(&self) -> Vec<Function> {
        let mut all: Vec<Function> = self.table().values().map(|e| e.function.clone()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    fn validate(&self, config: &FunctionConfig) -> Result<(), ControllerError> {
        let invalid = |m: String| Err(ControllerError::InvalidParameter(m));
        if !self.runtimes.contains(&config.runtime) {
            return invalid(format!(
                "Value {} at 'runtime' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
                config.runtime,
                self.runtimes.join(", ")
            ));
        }
        if config.handler.is_empty()
            || config.handler.len() > 128
            || config.handler.chars().any(char::is_whitespace)
        {
            return invalid(format!(
                "Value '{}' at 'handler' failed to satisfy constraint",
                config.handler
            ));
        }
        if config.prebake.warmup_invocations > function::MAX_WARMUPS {
            return invalid(format!(
                "Value {} at 'kilnPrebake.warmupInvocations' failed to satisfy constraint: Member must have value less than or equal to {}",
                config.prebake.warmup_invocations,
                function::MAX_WARMUPS
            ));
        }
        if let Some(sessions) = &config.sessions {
            sessions.validate().or_else(invalid)?;
        }
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
        let mut env_bytes = 0;
        for (key, value) in &config.env {
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
            env_bytes += key.len() + value.len();
        }
        if env_bytes > function::MAX_ENV_BYTES {
            return invalid("Lambda was unable to configure your environment variables because the environment variables you have provided exceeded the 4KB limit.".into());
        }
        Ok(())
    }

    /// CreateFunction.
    pub async fn create(
        &self,
        name: &str,
        config: FunctionConfig,
        zip: Vec<u8>,
    ) -> Result<Function, ControllerError> {
        if !function::valid_name(name) {
            return Err(ControllerError::InvalidParameter(format!(
                "1 validation error detected: Value '{name}' at 'functionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9-_]+ and have length between 1 and 64"
            )));
        }
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
        };
        if !self.registry.insert(&function)? {
            return Err(ControllerError::Conflict(format!(
                "Function already exist: {name}"
            )));
        }
        Ok(self.publish(function))
    }

    /// Stores a package and returns with the mutation lock held, so that no concurrent
    /// DeleteFunction can collect the package before the caller has committed a reference to it.
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
            let guard = self.lock_mutations();
            if self.code.contains(&code.sha256_hex) {
                return Ok((code, guard));
            }
            // A DeleteFunction collected these very bytes meanwhile: store them again.
        }
    }

    fn lock_mutations(&self) -> MutexGuard<'_, ()> {
        self.mutation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a change to a stored function and commits it; the next invocation sees it.
    fn modify(
        &self,
        name: &str,
        change: impl FnOnce(&mut Function) -> Result<(), ControllerError>,
    ) -> Result<Function, ControllerError> {
        let guard = self.lock_mutations();
        self.modify_locked(&guard, name, change)
    }

    /// [`Self::modify`] for a caller that holds the mutation lock.
    fn modify_locked(
        &self,
        _mutation: &MutexGuard<'_, ()>,
        name: &str,
        change: impl FnOnce(&mut Function) -> Result<(), ControllerError>,
    ) -> Result<Function, ControllerError> {
        let mut function = self.entry(name)?.function.clone();
        change(&mut function)?;
        if !self.registry.update(&function)? {
            return Err(self.not_found(&function.name));
        }
        Ok(self.publish(function))
    }

    /// UpdateFunctionCode with DryRun: checks the function, the RevisionId and the package, and
    /// changes nothing.
    pub fn check_code(
        &self,
        name: &str,
        zip: &[u8],
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
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
        check_revision(&self.get(name)?, expected_revision)?;
        let (code, mutation) = self.store_code(zip).await?;
        self.modify_locked(&mutation, name, |f| {
            check_revision(f, expected_revision)?;
            f.code_sha256 = code.sha256_hex;
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
        self.modify(name, |f| {
            check_revision(f, expected_revision)?;
            let mut config = f.config.clone();
            if let Some(v) = patch.runtime {
                config.runtime = v;
            }
            if let Some(v) = patch.handler {
                config.handler = v;
            }
            if let Some(v) = patch.memory_mb {
                config.memory_mb = v;
            }
            if let Some(v) = patch.timeout_s {
                config.timeout_s = v;
            }
            if let Some(v) = patch.env {
                config.env = v;
            }
            if let Some(v) = patch.description {
                config.description = v;
            }
            if let Some(v) = patch.role {
                config.role = v;
            }
            if let Some(v) = patch.ephemeral_storage_mb {
                config.ephemeral_storage_mb = v;
            }
            if let Some(v) = patch.prebake {
                config.prebake = v;
            }
            if let Some(v) = patch.sessions {
                config.sessions = v;
            }
            if let Some(v) = patch.memory_sizing {
                config.memory_sizing = v;
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

    /// DeleteFunction. Its queued async invocations go with it, as on Lambda.
    /// DeleteFunction. With a qualifier (in the name or the `Qualifier` parameter) only that
    /// version would go, as on Lambda: `$LATEST` is refused, an alias is refused, and a version
    /// number deletes nothing (kiln publishes no versions), so the function is left alone.
    pub fn delete(&self, name: &str) -> Result<(), ControllerError> {
        let _mutation = self.lock_mutations();
        let r = self.function_ref(name)?;
        if let Some(qualifier) = r.qualifier.as_deref() {
            if !self.table().contains_key(&r.name) {
                return Err(self.not_found(&r.name));
            }
            return match qualifier {
                "$LATEST" => Err(ControllerError::InvalidParameter(
                    "$LATEST version cannot be deleted without deleting the function.".into(),
                )),
                q if q.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
                _ => Err(ControllerError::InvalidParameter(
                    "Deletion of aliases is not currently supported.".into(),
                )),
            };
        }
        let entry = self.entry(name)?;
        let name = entry.function.name.clone();
        if !self.registry.delete(&name)? {
            return Err(self.not_found(&name));
        }
        self.functions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.url_settings
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.agent.retire(&name, None);
        self.logs.remove(&name);
        self.predictor.forget(&name);
        let live: Vec<String> = self
            .table()
            .values()
            .map(|e| e.function.code_sha256.clone())
            .collect();
        if !live.contains(&entry.function.code_sha256) {
            // Only this package, and unlinked under the lock: packages that creates and updates
            // in flight have stored are not referenced yet, but are not garbage.
            if let Some(doomed) = self.code.unlink(&entry.function.code_sha256) {
                tokio::task::spawn_blocking(move || {
                    let _ = std::fs::remove_dir_all(doomed);
                });
            }
        }
        Ok(())
    }

    /// PutFunctionConcurrency (`Some`) and DeleteFunctionConcurrency (`None`).
    pub fn set_concurrency(
        &self,
        name: &str,
        reserved: Option<u32>,
    ) -> Result<Function, ControllerError> {
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
        let mut function = self.entry(name)?.function.clone();
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
            let mut all = self.url_settings.write().unwrap_or_else(|p| p.into_inner());
            match &settings {
                Some(s) => all.insert(function.name.clone(), s.clone()),
                None => all.remove(&function.name),
            };
        }
        Ok((self.publish(function), settings))
    }

    /// GetFunctionUrlConfig: the function and its URL settings.
    pub fn url_config(&self, name: &str) -> Result<(Function, UrlSettings), ControllerError> {
        let function = self.get(name)?;
        if function.url_auth.is_none() {
            return Err(self.url_not_found(&function.name));
        }
        let settings = self.url_settings_of(&function);
        Ok((function, settings))
    }

    fn url_settings_of(&self, function: &Function) -> UrlSettings {
        self.url_settings
            .read()
            .unwrap_or_else(|p| p.into_inner())
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

    /// Invoke. `source` is where a function with sessions finds the request's session id (its
    /// `json` defaults to the payload).
    pub async fn invoke(
        &self,
        name: &str,
        payload: Bytes,
        kind: InvocationType,
        client_context: Option<String>,
        source: crate::session::HintSource<'_>,
    ) -> Result<Invoked, ControllerError> {
        if let Some(sequence) = self.sequence(name) {
            if !self.table().contains_key(name) {
                return match kind {
                    InvocationType::DryRun => Ok(Invoked::DryRun),
                    InvocationType::Event => {
                        let payload = checked_payload(payload, MAX_ASYNC_PAYLOAD, "Event")?;
                        self.enqueue_event(&sequence.name, &payload)
                    }
                    InvocationType::RequestResponse => {
                        let payload =
                            checked_payload(payload, MAX_SYNC_PAYLOAD, "RequestResponse")?;
                        let ran = self
                            .invoke_sequence(&sequence, payload, client_context)
                            .await?;
                        Ok(Invoked::Done {
                            outcome: ran.outcome,
                            request_id: ran.request_id,
                        })
                    }
                };
            }
        }
        let entry = self.entry(name)?;
        let payload = if kind == InvocationType::Event {
            checked_payload(payload, MAX_ASYNC_PAYLOAD, "Event")?
        } else {
            checked_payload(payload, MAX_SYNC_PAYLOAD, "RequestResponse")?
        };
        let hints = route_hints(&entry.spec, source, &payload)?;
        let request_id = function::new_request_id().to_string();
        match kind {
            InvocationType::DryRun => Ok(Invoked::DryRun),
            InvocationType::Event => self.enqueue_event(&entry.function.name, &payload),
            InvocationType::RequestResponse => {
                let request = InvokeRequest {
                    request_id: request_id.clone(),
                    payload,
                    trace_id: trace_id(),
                    client_context,
                    hints,
                    memory_limit_mb: None,
                    storage: None,
                    admit_objects: None,
                };
                let outcome = self.run(&entry.spec, request).await?;
                Ok(Invoked::Done {
                    outcome,
                    request_id,
                })
            }
        }
    }

    /// Queues an Event invocation of `target` (a function or a sequence) durably: it is
    /// acknowledged once it is in SQLite, and delivered by the queue.
    fn enqueue_event(&self, target: &str, payload: &[u8]) -> Result<Invoked, ControllerError> {
        let request_id = function::new_request_id().to_string();
        let registry = &self.registry;
        tokio::task::block_in_place(|| registry.enqueue(&request_id, target, payload))?;
        self.metrics
            .async_events
            .get_or_create(&crate::metrics::OutcomeLabels {
                outcome: "queued".into(),
            })
            .inc();
        self.queue_wakeup.notify_one();
        Ok(Invoked::Queued { request_id })
    }

    /// Runs one invocation on the agent, at the memory its function's model predicts, and
    /// records its log and metrics. An invocation killed for memory under a predicted limit is
    /// run again at once at MemorySize: the caller never sees an under-prediction.
    async fn run(
        &self,
        spec: &SharedSpec,
        mut request: InvokeRequest,
    ) -> Result<InvokeOutcome, ControllerError> {
        let labels = Metrics::function(&spec.function);
        let cache = self.config.object_cache.as_ref();
        let features = (self.predictor.applies(spec.memory_mb) || cache.is_some()).then(|| {
            let (mut features, object) = predict::Features::of_event(&request.payload);
            // The input object's size and media metadata, as far as kiln knows them (a remote
            // backing store is asked nothing on the invocation's path).
            if let Some(known) =
                object.and_then(|o| self.config.object_features.object(&o.bucket, &o.key))
            {
                features.add_object(object_features(&known));
            }
            features
        });
        request.memory_limit_mb = features
            .as_ref()
            .filter(|_| spec.memory_sizing == MemorySizing::Predicted)
            .and_then(|f| self.predictor.predict(&spec.function, spec.memory_mb, f));
        request.hints.memory_mb = request.memory_limit_mb;
        let io_before = match (cache, &features) {
            (Some(cache), Some(features)) => {
                // The invocation's own decision travels with it to its sandbox's object store;
                // the function's latest one covers requests that cannot be told apart.
                let decision = match cache.configured_admission() {
                    // The configuration decides (`--object-cache-admission all`, a draining cache).
                    Some(true) => "all",
                    Some(false) => "none",
                    None => {
                        let admit = self.predictor.benefits(&spec.function, features);
                        cache.set_admission(&spec.function, admit.unwrap_or(true));
                        request.admit_objects = admit;
                        match admit {
                            Some(true) => "admit",
                            Some(false) => "bypass",
                            None => "learning",
                        }
                    }
                };
                self.metrics
                    .cache_admissions
                    .get_or_create(&crate::metrics::DecisionLabels {
                        function: spec.function.clone(),
                        decision: decision.into(),
                    })
                    .inc();
                Some(cache.io_times(&spec.function))
            }
            _ => None,
        };
        let mut result = self.agent.invoke(spec.clone(), request.clone()).await;
        if let Ok(outcome) = &result {
            if request.memory_limit_mb.is_some() {
                self.metrics.sized_invocations.get_or_create(&labels).inc();
            }
            if let Some(write) = outcome.limit_write {
                self.metrics
                    .memory_limit_writes
                    .observe(write.as_secs_f64());
            }
            if outcome.out_of_memory && request.memory_limit_mb.is_some() {
                tracing::info!(
                    function = %spec.function,
                    request_id = %request.request_id,
                    "killed for memory at the predicted {} MB; running it again at {} MB",
                    request.memory_limit_mb.unwrap_or_default(),
                    spec.memory_mb
                );
                self.metrics.prediction_retries.get_or_create(&labels).inc();
                self.learn(spec, features.clone(), outcome);
                request.memory_limit_mb = None;
                result = self.agent.invoke(spec.clone(), request).await;
            }
        }
        if let (Ok(outcome), Some(cache), Some(before), Some(features)) =
            (&result, cache, io_before, &features)
        {
            // The invocation's Extract + Load, as the backing store would have served them, and
            // the rest of its time (concurrent invocations of the function share the counters).
            let after = cache.io_times(&spec.function);
            let served_ms = after.served_ns.saturating_sub(before.served_ns) as f64 / 1e6;
            let backend_ms = after.backend_ns.saturating_sub(before.backend_ns) as f64 / 1e6;
            let duration_ms = outcome.duration.as_secs_f64() * 1e3;
            self.predictor.observe_benefit(
                &spec.function,
                features.clone(),
                predict::Etl {
                    extract_load_ms: backend_ms,
                    transform_ms: (duration_ms - served_ms).max(0.0),
                },
                // The first run in a new instance. A hot fork's zygote ran the function's
                // init and warm-up, but not its handler's first calls (an SDK client's first
                // request resolves and connects): it counts as a first run too.
                outcome.cold_start.is_some(),
            );
        }
        if let (Ok(outcome), Some(features)) = (&result, features) {
            self.learn(spec, Some(features), outcome);
        }
        match result {
            Ok(outcome) => {
                self.metrics.invocations.get_or_create(&labels).inc();
                if outcome.function_error {
                    self.metrics.errors.get_or_create(&labels).inc();
                }
                if let Some(path) = outcome.cold_start {
                    self.metrics
                        .cold_starts
                        .get_or_create(&crate::metrics::StartLabels {
                            function: spec.function.clone(),
                            path: path.as_str().into(),
                        })
                        .inc();
                }
                self.metrics
                    .duration
                    .get_or_create(&labels)
                    .observe(outcome.duration.as_secs_f64());
                self.logs.append(&spec.function, outcome.log.clone());
                Ok(outcome)
            }
            Err(e) => {
                if matches!(e, AgentError::ThrottledNode | AgentError::ThrottledReserved) {
                    self.metrics.throttles.get_or_create(&labels).inc();
                }
                Err(e.into())
            }
        }
    }

    /// Tells the function's memory model what an invocation used; a training it calls for runs
    /// on the blocking pool.
    fn learn(
        &self,
        spec: &SharedSpec,
        features: Option<predict::Features>,
        outcome: &InvokeOutcome,
    ) {
        let Some(features) = features else {
            return;
        };
        let training = self.predictor.observe(
            &spec.function,
            spec.memory_mb,
            features,
            outcome.max_memory_mb,
            outcome.out_of_memory,
        );
        if let Some(training) = training {
            tokio::task::spawn_blocking(move || training.run());
        }
    }

    /// The memory models of the node's functions.
    pub fn models(&self) -> Vec<predict::ModelStatus> {
        self.predictor.status()
    }

    /// The object cache's write-back state, if the node has a cache.
    pub fn object_cache_status(&self) -> Option<crate::objects::cache::WritebackStatus> {
        self.config
            .object_cache
            .as_ref()
            .map(|c| c.writeback_status())
    }

    pub fn queue_depth(&self) -> u64 {
        self.registry.queue_depth().unwrap_or(0)
    }

    /// The recorded error of an async invocation that failed all its attempts.
    pub fn async_failure(&self, request_id: &str) -> Option<String> {
        self.registry.failure(request_id).ok().flatten()
    }

    /// Renders `/metrics`.
    pub fn render_metrics(&self) -> String {
        self.metrics
            .render(&self.agent.status(), self.queue_depth())
    }
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

/// Optimistic locking: an update that names a RevisionId applies only to that revision.
fn check_revision(f: &Function, expected: Option<&str>) -> Result<(), ControllerError> {
    match expected {
        Some(expected) if expected != revision_id(f) => Err(ControllerError::PreconditionFailed(
            "The Revision Id provided does not match the latest Revision Id. Call the GetFunction/GetAlias API to retrieve the latest Revision Id".into(),
        )),
        _ => Ok(()),
    }
}

/// An X-Ray style trace header, which Lambda hands every invocation.
fn trace_id() -> String {
    let id = function::new_request_id().simple().to_string();
    format!(
        "Root=1-{:08x}-{};Parent={};Sampled=0",
        Utc::now().timestamp(),
        &id[..24],
        &id[16..32]
    )
}

/// The routing hints of a request to `spec`: its session id, if the function has sessions and
/// the request names one.
pub(crate) fn route_hints(
    spec: &InstanceSpec,
    source: crate::session::HintSource<'_>,
    payload: &[u8],
) -> Result<RouteHints, ControllerError> {
    let Some(sessions) = &spec.sessions else {
        return Ok(RouteHints::default());
    };
    let source = crate::session::HintSource {
        json: Some(source.json.unwrap_or(payload)),
        ..source
    };
    let session = crate::session::extract(&sessions.hint, &source)
        .map_err(|e| ControllerError::InvalidParameter(format!("Invalid session id: {e}")))?;
    Ok(RouteHints {
        session,
        memory_mb: None,
    })
}
