//! The controller: the function registry, scheduling onto the node agent, and the async queue.
//!
//! The HTTP layer turns each request into a call on [`Controller`]; the controller never sees
//! HTTP (a session hint reads headers through `session::Headers`), and the API reaches the
//! node agent only through it. Every metadata change is committed to the registry (SQLite, or
//! etcd in cluster mode) before it is acknowledged and then mirrored in an in-memory table,
//! which is all the invoke path reads; in cluster mode what other nodes commit reaches that
//! table through a watch ([`replica`]).
//!
//! This file holds [`Controller`] and what every call uses: its table of functions, the specs
//! the node runs them with, and the parsing of a FunctionName. [`open`] starts it, [`node`]
//! holds what it asks of the node and reports about it, [`errors`] what a call can fail with.

mod aliases;
mod bucket_events;
mod cache;
pub mod code;
mod config;
mod entry;
mod errors;
mod event_invoke;
pub mod function_page;
mod functions;
mod invoke;
pub mod layers;
mod node;
mod open;
mod provisioned;
mod queue;
pub mod registry;
mod replica;
mod revision;
pub mod sequences;
mod tags;
mod test_events;
mod unpack;
mod urls;
mod validate;
mod versions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::Notify;

use crate::agent::NodeAgent;
use crate::function::{self, BreakoutConfig, Function, InstanceSpec, SharedSpec};
use crate::logs::LogStore;
use crate::metrics::Metrics;
use crate::predict;
use crate::sync::RwLockExt;
pub use aliases::AliasInput;
pub use cache::InvocationCache;
use code::CodeStore;
pub use config::{ClusterRegistry, ControllerConfig};
pub use entry::Lifecycle;
use entry::{Change, Entry};
pub use errors::ControllerError;
pub use event_invoke::EventInvokePatch;
pub use functions::{AccountSettings, ConfigPatch};
pub(crate) use invoke::route_hints;
use invoke::trace_id;
pub use invoke::{InvocationType, InvokeOptions, Invoked};
pub use provisioned::ProvisionedStatus;
pub use queue::AsyncEvents;
pub use registry::{Cors, UrlSettings};
use registry::{EventQueue, Registry};
use replica::Versions;
pub use revision::revision_id;
pub use unpack::UnpackFailure;
pub use urls::{UrlChange, UrlConfig};
pub use versions::Qualified;

/// Lambda's payload limits.
pub const MAX_SYNC_PAYLOAD: usize = 6 * 1024 * 1024;
pub const MAX_ASYNC_PAYLOAD: usize = 256 * 1024;
/// Lambda attempts an asynchronous invocation three times in all.
pub const ASYNC_ATTEMPTS: u32 = 3;

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
    /// Cluster mode: the shared store's sweep (run by the scheduler) and uploads' records.
    gc: Option<Arc<crate::cluster::gc::Collector>>,
    /// Cluster mode: functions whose package could not be fetched yet.
    unfetched: replica::Unfetched,
    code: CodeStore,
    /// Packages being extracted after their CreateFunction or UpdateFunctionCode answered.
    unpacks: unpack::Unpacks,
    /// The controller itself, for the work it leaves running in the background.
    me: Weak<Controller>,
    /// Layers: their versions, their contents and the functions' merged `/opt`s.
    layers: layers::Layers,
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
            opt_dir: (!f.config.layers.is_empty()).then(|| self.layers.opt_dir(&f.config.layers)),
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
        let prepare = self.defer_unpacking(&entry, prepare);
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
        let entry = self.table().get(&name).cloned();
        if let Some(entry) = entry {
            self.provision_versions(&entry);
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
}

#[cfg(test)]
mod tests;
