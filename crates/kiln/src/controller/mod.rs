//! The controller: the function registry, scheduling onto the node agent, and the async queue.
//!
//! The HTTP layer turns each request into a call on [`Controller`]; the controller never sees
//! HTTP (a session hint reads headers through `session::Headers`), and the API reaches the
//! node agent only through it. Every metadata change is committed to the registry (SQLite, or
//! etcd in cluster mode) before it is acknowledged and then mirrored in an in-memory table,
//! which is all the invoke path reads; in cluster mode what other nodes commit reaches that
//! table through a watch ([`replica`]).

mod aliases;
mod cache;
pub mod code;
mod event_invoke;
pub mod function_page;
mod functions;
mod invoke;
mod queue;
pub mod registry;
mod replica;
mod revision;
pub mod sequences;
mod tags;
mod urls;
mod validate;
mod versions;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::Notify;

use crate::agent::{AgentError, InvokeOutcome, NodeAgent};
use crate::function::{
    self, BreakoutConfig, Function, InstanceSpec, NetworkMode, SharedSpec, UrlAuth,
};
use crate::logs::LogStore;
use crate::metrics::Metrics;
use crate::predict;
use crate::sync::RwLockExt;
pub use aliases::AliasInput;
pub use cache::InvocationCache;
use code::{CodeError, CodeStore};
pub use event_invoke::EventInvokePatch;
pub(crate) use invoke::route_hints;
use invoke::trace_id;
pub use invoke::InvokeOptions;
pub use queue::AsyncEvents;
pub use registry::{Cors, UrlSettings};
use registry::{Database, EventQueue, Registry, RegistryError};
use replica::Versions;
pub use revision::revision_id;
pub use versions::Qualified;

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
    /// a parameter fails Lambda's input model (a pattern, a length, an enum)
    #[error("{0}")]
    Validation(String),
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
    /// what the change needs (the cluster's etcd, the shared store) cannot be reached
    #[error("{0}")]
    Unavailable(String),
}

impl From<RegistryError> for ControllerError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Etcd(_) => ControllerError::Unavailable(format!(
                "{e}: the change was not made; try again once etcd has a quorum"
            )),
            RegistryError::SharedStore(_) => ControllerError::Unavailable(e.to_string()),
            RegistryError::Unsupported(what) => ControllerError::InvalidParameter(what.into()),
            other => ControllerError::Internal(other.to_string()),
        }
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
            // Busy reaches a client only if a router let it through: the node is full.
            AgentError::ThrottledNode | AgentError::Busy => {
                ControllerError::Throttled { reserved: false }
            }
            AgentError::ShuttingDown => ControllerError::ShuttingDown,
            AgentError::Sandbox(message) | AgentError::Session(message) => {
                ControllerError::Internal(message)
            }
            lost @ AgentError::PeerLost(_) => ControllerError::Internal(lost.to_string()),
        }
    }
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
    pub object_cache: Option<Arc<dyn InvocationCache>>,
    /// Where input objects' features come from.
    pub object_features: crate::objects::FeatureLookup,
    /// Cluster mode: the registry in etcd and packages in the shared store.
    pub cluster: Option<ClusterRegistry>,
}

/// Where a cluster keeps its registry and its packages.
#[derive(Debug, Clone)]
pub struct ClusterRegistry {
    pub etcd: crate::cluster::etcd::Etcd,
    /// The cluster's key prefix (`/kiln`).
    pub prefix: String,
    pub code: crate::cluster::code::SharedCode,
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
    /// `Some(None)` makes the function a plain one again.
    pub web: Option<Option<crate::function::WebConfig>>,
    /// `Some(None)` turns the fast path off.
    pub breakout: Option<Option<crate::function::BreakoutConfig>>,
    /// Tracing, logging, VPC, dead-letter and KMS settings, stored and returned.
    pub settings: crate::function::settings::SettingsInput,
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
        /// The version that ran: `$LATEST` or a number (an alias's pick).
        version: String,
    },
    Queued {
        request_id: String,
    },
    DryRun,
}

struct Entry {
    function: Function,
    spec: SharedSpec,
    /// Its per-invocation metrics, bound once.
    series: crate::metrics::FunctionSeries,
    /// What a CreateFunction or an update made of this version while its start paths are
    /// being built (`Pending`, or `LastUpdateStatus: InProgress`); `None` for a function
    /// loaded at start.
    change: Option<Change>,
    /// Set once the agent said this version is prepared: no invocation waits any more.
    settled: AtomicBool,
    /// `$LATEST`'s entry: its published versions' entries, by number (a version's entry has
    /// none).
    versions: BTreeMap<u64, Arc<Entry>>,
}

/// What made a function's current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Create,
    Update,
}

/// A function's `State` and `LastUpdateStatus`, as Lambda reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Created, its start paths still being built: `Pending` (`Creating`).
    Creating,
    /// Updated, the new version's start paths still being built: `Active`, `InProgress`.
    Updating,
    /// `Active`, `Successful`.
    Ready,
}

impl Entry {
    fn new(function: Function, spec: SharedSpec) -> Self {
        Self::changed(function, spec, None)
    }

    fn changed(function: Function, spec: SharedSpec, change: Option<Change>) -> Self {
        let series = crate::metrics::FunctionSeries::new(&function.name);
        Self {
            function,
            spec,
            series,
            settled: AtomicBool::new(change.is_none()),
            change,
            versions: BTreeMap::new(),
        }
    }

    /// Whether this version is still being prepared, as the agent says; remembers when not.
    fn preparing(&self, agent: &dyn NodeAgent) -> Option<crate::agent::Prepared> {
        if self.settled.load(Ordering::Relaxed) {
            return None;
        }
        let prepared = agent.prepared(&self.spec.function, self.spec.revision);
        if prepared.is_done() {
            self.settled.store(true, Ordering::Relaxed);
            return None;
        }
        Some(prepared)
    }
}

pub struct Controller {
    config: ControllerConfig,
    registry: Arc<dyn Registry>,
    /// The queue of async invocations: the node's SQLite database, or etcd in cluster mode.
    events: Arc<dyn EventQueue>,
    /// Cluster mode: the queue in etcd, whose scheduler needs this node's lease.
    cluster_events: Option<Arc<registry::EtcdEvents>>,
    /// Each record's version, as the in-memory tables hold it.
    versions: Versions,
    /// Cluster mode: where packages are shared.
    shared_code: Option<crate::cluster::code::SharedCode>,
    /// Cluster mode: functions whose package could not be fetched yet.
    unfetched: replica::Unfetched,
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
        let database = Arc::new(Database::open(&config.data_dir.join("kiln.db"))?);
        let (registry, events, cluster_events, shared_code): (
            Arc<dyn Registry>,
            Arc<dyn EventQueue>,
            _,
            _,
        ) = match &config.cluster {
            Some(cluster) => {
                let events = Arc::new(registry::EtcdEvents::new(
                    cluster.etcd.clone(),
                    &cluster.prefix,
                    cluster.code.clone(),
                ));
                (
                    Arc::new(registry::EtcdRegistry::new(
                        cluster.etcd.clone(),
                        &cluster.prefix,
                        events.clone(),
                    )),
                    events.clone(),
                    Some(events),
                    Some(cluster.code.clone()),
                )
            }
            None => (database.clone(), database, None, None),
        };
        let code = CodeStore::open(&config.data_dir.join("store")).map_err(internal)?;
        let logs = LogStore::open(&config.data_dir.join("logs")).map_err(internal)?;
        let runtimes = agent.status().runtimes;
        let predictor =
            predict::Predictor::new(config.prediction.clone(), &config.data_dir.join("models"));
        let mut metrics =
            Metrics::with_object_cache(config.object_cache.as_ref().map(|c| c.metrics()));
        if config.cluster.is_some() {
            metrics = metrics.with_cluster();
        }
        let controller = Arc::new(Self {
            config,
            registry,
            events,
            cluster_events,
            versions: Versions::default(),
            shared_code,
            unfetched: replica::Unfetched::default(),
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
        let loaded = controller.registry.load()?;
        let mut table = HashMap::new();
        let mut live_code = Vec::new();
        {
            let mut sequences = controller.sequences_mut();
            for (sequence, version) in loaded.sequences {
                controller
                    .versions
                    .set(replica::Record::Sequence, &sequence.name, version);
                sequences.insert(sequence.name.clone(), Arc::new(sequence));
            }
        }
        for (function, version) in loaded.functions {
            if let Err(e) = versions::packages(&function)
                .iter()
                .try_for_each(|digest| controller.ensure_code_blocking(digest))
            {
                // Left out until its package can be fetched (tried again every few seconds).
                eprintln!(
                    "kiln: function {} is not available on this node yet: {e}",
                    function.name
                );
                controller.unfetched.insert(Box::new(function), version);
                continue;
            }
            controller
                .versions
                .set(replica::Record::Function, &function.name, version);
            live_code.extend(versions::packages(&function));
            let warm = versions::kept_warm(&function);
            let (entry, prepare, _) = controller.build_entry(function, versions::Before::Loaded);
            for spec in prepare {
                if spec.version == function::versions::LATEST || warm.contains(&spec.version) {
                    controller.agent.prepare(spec);
                } else {
                    // Its snapshot is built after its first cold start; until then the node
                    // only knows its revision.
                    controller.agent.retire(&spec.function, Some(spec.revision));
                }
            }
            table.insert(entry.function.name.clone(), Arc::new(entry));
        }
        *controller.functions.write_locked() = table;
        let mut urls = HashMap::new();
        for (name, settings, version) in loaded.urls {
            controller
                .versions
                .set(replica::Record::Url, &name, version);
            urls.insert(name, settings);
        }
        *controller.url_settings.write_locked() = urls;
        controller.code.collect_garbage(&live_code);
        if let Some(changes) = controller.registry.changes() {
            replica::follow(controller.clone(), changes);
        }
        queue::start(controller.clone());
        Ok(controller)
    }

    /// Cluster mode: this node has joined; its lease lets it take part in the election of the
    /// async queue's scheduler.
    pub fn attach_membership(&self, membership: Arc<crate::cluster::Membership>) {
        if let Some(events) = &self.cluster_events {
            events.attach(membership);
        }
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
        Arc::new(self.instance_spec(f))
    }

    fn instance_spec(&self, f: &Function) -> InstanceSpec {
        InstanceSpec {
            function: f.name.clone(),
            version: function::versions::latest(),
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
            web: f.config.web.clone(),
            breakout: f.config.breakout.clone().filter(BreakoutConfig::enabled),
        }
    }

    fn sequences(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<sequences::Sequence>>> {
        self.sequences.read_locked()
    }

    fn sequences_mut(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<sequences::Sequence>>> {
        self.sequences.write_locked()
    }

    /// The spec invocations of `key` (a function's name for `$LATEST`, `name:N` for a
    /// published version, as the node keys them) run with on this node, if the node has its
    /// package (cluster mode fetches packages in the background).
    pub fn current_spec(&self, key: &str) -> Option<SharedSpec> {
        let spec = {
            let table = self.table();
            match key.split_once(':') {
                None => table.get(key)?.spec.clone(),
                Some((name, version)) => {
                    let number = function::versions::version_number(version)?;
                    table.get(name)?.versions.get(&number)?.spec.clone()
                }
            }
        };
        spec.code_dir.exists().then_some(spec)
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Entry>>> {
        self.functions.read_locked()
    }

    fn publish(&self, function: Function) -> Function {
        let name = function.name.clone();
        let mut table = self.functions.write_locked();
        let previous = table.get(&name).cloned();
        let before = match previous.as_deref() {
            Some(entry) => versions::Before::Was(entry),
            None => versions::Before::Created,
        };
        let (entry, prepare, gone) = self.build_entry(function.clone(), before);
        table.insert(name.clone(), Arc::new(entry));
        drop(table);
        // New code uses memory its own way: its model starts afresh. (A new MemorySize is a
        // new model already.)
        if previous.is_some_and(|p| {
            p.function.code_sha256 != function.code_sha256
                || p.function.config.runtime != function.config.runtime
                || p.function.config.handler != function.config.handler
        }) {
            self.predictor.forget(&name);
        }
        for key in gone {
            self.agent.retire(&key, None);
            self.predictor.forget(&key);
        }
        for spec in prepare {
            self.agent.retire(&spec.function, Some(spec.revision));
            self.agent.prepare(spec);
        }
        function
    }

    /// Parses a FunctionName parameter and checks that it names this node's region and
    /// account: an ARN of another region or account names a function kiln does not have.
    fn function_ref(&self, raw: &str) -> Result<function::FunctionRef, ControllerError> {
        self.function_ref_against(raw, function::NAMESPACED_FUNCTION_NAME_PATTERN)
    }

    /// [`Self::function_ref`] for the operations whose model calls the parameter `FunctionName`
    /// (create, updates, concurrency): a dotted name is malformed there.
    fn strict_function_ref(&self, raw: &str) -> Result<function::FunctionRef, ControllerError> {
        let r = self.function_ref_against(raw, function::FUNCTION_NAME_PATTERN)?;
        if r.name.contains('.') {
            return Err(ControllerError::Validation(
                function::NameError::Pattern.message(raw, function::FUNCTION_NAME_PATTERN),
            ));
        }
        Ok(r)
    }

    /// Parses a FunctionName parameter; a malformed one is refused quoting `pattern`.
    fn function_ref_against(
        &self,
        raw: &str,
        pattern: &str,
    ) -> Result<function::FunctionRef, ControllerError> {
        let r = function::parse_function_ref(raw)
            .map_err(|e| ControllerError::Validation(e.message(raw, pattern)))?;
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
                "Function not found: {}:{other} (this call takes the unqualified function)",
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

    /// What the node runs and keeps (`kiln status`).
    /// Saves what the models learned since their last save (at shutdown).
    pub fn save_models(&self) {
        self.predictor.save_models();
    }

    /// Tells the node that `concurrency` instances of `name` are about to be needed, so that
    /// that many are made ahead (burst offloading's pre-warm).
    pub fn expect_demand(&self, name: &str, concurrency: u32) -> Result<(), ControllerError> {
        let entry = self.entry(name)?;
        self.agent.expect(entry.spec.clone(), concurrency);
        Ok(())
    }

    /// Warm-ups of `name` replay `events` from now on (burst offloading's recent requests),
    /// and its snapshot is built again with them.
    pub fn warm_with(&self, name: &str, events: Vec<bytes::Bytes>) -> Result<(), ControllerError> {
        let entry = self.entry(name)?;
        self.agent.warm_with(entry.spec.clone(), events);
        Ok(())
    }

    pub fn node_status(&self) -> crate::agent::NodeStatus {
        self.agent.status()
    }

    /// Where the fast path of `f`'s current revision is, if it asked for one: `tracing` with
    /// nothing traced until the node has seen the revision.
    /// `f`'s `State` and `LastUpdateStatus`: `Pending` after CreateFunction and `InProgress`
    /// after an update until the start paths of the version are built.
    pub fn lifecycle(&self, f: &Function) -> Lifecycle {
        let Some(entry) = self.table().get(&f.name).cloned() else {
            return Lifecycle::Ready;
        };
        if entry.function.revision != f.revision || entry.preparing(&*self.agent).is_none() {
            return Lifecycle::Ready;
        }
        match entry.change {
            Some(Change::Create) => Lifecycle::Creating,
            _ => Lifecycle::Updating,
        }
    }

    pub fn breakout_status(&self, f: &Function) -> Option<crate::agent::BreakoutStatus> {
        f.config.breakout.as_ref().filter(|b| b.enabled())?;
        Some(
            self.agent
                .breakout_status(&f.name)
                .filter(|s| s.revision == f.revision)
                .unwrap_or_else(|| crate::agent::BreakoutStatus::new(&f.name, f.revision)),
        )
    }

    /// The open sessions of `name`, most recently used first.
    pub fn sessions(
        &self,
        name: &str,
    ) -> Result<Vec<crate::agent::SessionStatus>, ControllerError> {
        let entry = self.entry(name)?;
        Ok(self.agent.sessions(&entry.function.name))
    }

    /// Ends one session of `name`: false if the function has no such session.
    pub fn end_session(&self, name: &str, session: &str) -> Result<bool, ControllerError> {
        let entry = self.entry(name)?;
        Ok(self.agent.end_session(&entry.function.name, session))
    }

    /// The memory models of the node's functions.
    pub fn models(&self) -> Vec<predict::ModelStatus> {
        self.predictor.status()
    }

    /// One function's memory model, if it has one.
    pub fn model(&self, function: &str) -> Option<predict::ModelStatus> {
        self.predictor.status_of(function)
    }

    /// The functions table's rows: each function's name, runtime and memory, with its last
    /// hour as `activity` (the console's history, when it is kept) has it.
    pub fn function_rows(
        &self,
        activity: &HashMap<String, crate::history::Activity>,
    ) -> Vec<function_page::Row> {
        self.table()
            .values()
            .map(|entry| {
                let f = &entry.function;
                let seen = activity.get(&f.name);
                function_page::Row {
                    name: f.name.clone(),
                    runtime: f.config.runtime.clone(),
                    memory_mb: f.config.memory_mb,
                    last_invocation: seen.and_then(|a| a.last_invocation),
                    error_rate: seen.and_then(|a| a.error_rate()),
                }
            })
            .collect()
    }

    /// The object cache's write-back state, if the node has a cache.
    pub fn object_cache_status(&self) -> Option<crate::objects::cache::WritebackStatus> {
        self.config
            .object_cache
            .as_ref()
            .map(|c| c.writeback_status())
    }

    /// The object cache's memory, if the node has a cache.
    pub fn object_cache_memory(&self) -> Option<crate::objects::cache::CacheMemory> {
        self.config
            .object_cache
            .as_ref()
            .map(|c| c.metrics().memory())
    }

    /// Each function's counters (the console's history).
    pub fn counts(&self) -> Vec<(String, crate::history::Counts)> {
        let names: Vec<String> = self.table().keys().cloned().collect();
        names
            .into_iter()
            .map(|name| {
                let counts = self.metrics.counts(&name);
                (name, counts)
            })
            .collect()
    }

    pub fn queue_depth(&self) -> u64 {
        self.events.queue_depth().unwrap_or(0)
    }

    /// The recorded error of an async invocation that failed all its attempts.
    pub fn async_failure(&self, request_id: &str) -> Option<String> {
        self.events.failure(request_id).ok().flatten()
    }

    /// Renders `/metrics`.
    pub fn render_metrics(&self) -> String {
        self.metrics
            .render(&self.agent.status(), self.queue_depth())
    }
}

#[cfg(test)]
mod tests;
