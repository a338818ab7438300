//! The function registry's calls: CreateFunction, UpdateFunctionCode and
//! UpdateFunctionConfiguration (with RevisionId checks), DeleteFunction, concurrency.
//!
//! The configuration's checks are in [`super::validate`]; RevisionId and the retries of an
//! overtaken change in [`super::revision`].

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

use chrono::Utc;

use super::code;
use super::registry::{UrlWrite, Written};
use super::replica::Record;
use super::revision::{check_revision, overtaken, STALE_RETRIES};
use super::{Controller, ControllerError, Entry, Lifecycle};
use crate::cluster::gc::UploadPin;
use crate::function::versions::PreviousCode;
use crate::function::{Function, FunctionConfig, NetworkMode};
use crate::sync::{LockExt, RwLockExt};

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
    /// Its layers, resolved ([`Controller::resolve_layers`]) and merged
    /// ([`Controller::prepare_layers`]).
    pub layers: Option<Vec<crate::function::layers::LayerRef>>,
}

impl Controller {
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
        self.prepare_layers(&config.layers).await?;
        let (code, _mutation, _upload) = self.store_code(zip).await?;
        self.check_layer_contents(&config.layers)?;
        self.check_unzipped(&code.sha256_hex, &config.layers)?;
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
            previous_code: None,
        };
        let Some(version) = self.registry.insert(&function)? else {
            return Err(ControllerError::Conflict(format!(
                "Function already exist: {name}"
            )));
        };
        self.versions.set(Record::Function, name, version);
        self.unpack_later(&function.code_sha256);
        Ok(self.publish(function))
    }

    /// Stores a package and returns with the mutation lock held, so that no concurrent
    /// DeleteFunction can collect the package before the caller has committed a reference to
    /// it. On a single node the package is checked and stored, and extracted later
    /// ([`Self::unpack_later`]); in cluster mode it is extracted now and put in the shared store
    /// too, before any node is told of it.
    ///
    /// In cluster mode the upload is recorded in etcd first (the returned pin, which the caller
    /// keeps until the function record naming the package is committed), so that the shared
    /// store's sweep cannot remove the package in between.
    async fn store_code(
        &self,
        zip: Vec<u8>,
    ) -> Result<(code::StoredCode, MutexGuard<'_, ()>, Option<UploadPin>), ControllerError> {
        let zip = Arc::new(zip);
        let extract_now = self.shared_code.is_some();
        let mut pin = None;
        loop {
            let store = self.code.clone();
            let bytes = zip.clone();
            let code = tokio::task::spawn_blocking(move || {
                if extract_now {
                    store.put_zip(&bytes)
                } else {
                    store.put_package(&bytes)
                }
            })
            .await
            .map_err(|e| ControllerError::Internal(e.to_string()))??;
            if let Some(shared) = &self.shared_code {
                if pin.is_none() {
                    pin = Some(self.pin_upload(&code.sha256_hex).await?);
                }
                shared
                    .put(&code.sha256_hex, bytes::Bytes::from(zip.to_vec()))
                    .await
                    .map_err(|e| ControllerError::Unavailable(e.to_string()))?;
                self.check_pin(pin.as_ref())?;
            }
            let guard = self.lock_mutations();
            if self.code.has_zip(&code.sha256_hex) {
                return Ok((code, guard, pin));
            }
            // A DeleteFunction collected these very bytes meanwhile: store them again.
        }
    }

    /// Cluster mode: records in etcd that this node uploads package `digest` (see
    /// `cluster/gc.rs`), on its lease.
    async fn pin_upload(&self, digest: &str) -> Result<UploadPin, ControllerError> {
        let (Some(gc), Some(events)) = (&self.gc, &self.cluster_events) else {
            return Err(ControllerError::Internal(
                "a package upload outside cluster mode".into(),
            ));
        };
        let Some((node, lease)) = events.node_lease() else {
            return Err(ControllerError::Unavailable(
                "this node cannot vouch for its etcd lease (it has not joined, or it is fenced): \
                 the package was not stored; try again"
                    .into(),
            ));
        };
        gc.pin_upload(digest, &node, lease)
            .await
            .map_err(ControllerError::Unavailable)
    }

    /// Whether an upload's record still lives: a node that was fenced meanwhile has a new
    /// lease, and its record went (or goes) with the old one.
    fn check_pin(&self, pin: Option<&UploadPin>) -> Result<(), ControllerError> {
        let live = self
            .cluster_events
            .as_ref()
            .and_then(|events| events.node_lease())
            .map(|(_, lease)| lease);
        match pin {
            Some(pin) if live != Some(pin.lease()) => Err(ControllerError::Unavailable(
                "this node lost its etcd lease during the package's upload: try again".into(),
            )),
            _ => Ok(()),
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

    /// Refuses a change to `name` while it is being created or its last update is in
    /// progress, with Lambda's 409 and its words: a deploy tool waits (`function-updated-v2`)
    /// between two changes, and a second change never races the first one's start paths.
    pub fn check_settled(&self, name: &str) -> Result<(), ControllerError> {
        let r = self.strict_function_ref(name)?;
        let f = self.get(&r.name)?;
        self.settled(&f)
    }

    pub(super) fn settled(&self, f: &Function) -> Result<(), ControllerError> {
        const NOT_NOW: &str = "The operation cannot be performed at this time.";
        match self.lifecycle(f) {
            Lifecycle::Creating => Err(ControllerError::Conflict(format!(
                "{NOT_NOW} The function is currently in the following state: Pending"
            ))),
            Lifecycle::Updating => Err(ControllerError::Conflict(format!(
                "{NOT_NOW} An update is in progress for resource: {}",
                self.arn(&f.name)
            ))),
            _ => Ok(()),
        }
    }

    /// UpdateFunctionCode.
    pub async fn update_code(
        &self,
        name: &str,
        zip: Vec<u8>,
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        let current = self.get(name)?;
        check_revision(&current, expected_revision)?;
        self.settled(&current)?;
        let (code, mutation, _upload) = self.store_code(zip).await?;
        self.unpack_later(&code.sha256_hex);
        self.modify_locked(&mutation, name, |f| {
            check_revision(f, expected_revision)?;
            self.settled(f)?;
            self.check_unzipped(&code.sha256_hex, &f.config.layers)?;
            f.previous_code = self.previous_code(f, &code.sha256_hex);
            f.code_sha256 = code.sha256_hex.clone();
            f.code_size = code.size;
            f.revision += 1;
            f.last_modified = Utc::now();
            Ok(())
        })
    }

    /// What runs, until package `digest` is extracted, after an update of `f` to it: what `f`
    /// runs now (its own fallback, if its package is not extracted either). Kept in the
    /// function's record, so that a restart still has it; nothing once `digest` is extracted.
    fn previous_code(&self, f: &Function, digest: &str) -> Option<Box<PreviousCode>> {
        if self.code.is_extracted(digest) {
            return None;
        }
        let deferred = self.table().get(&f.name).is_some_and(|e| e.is_deferred());
        if deferred {
            f.previous_code.clone()
        } else {
            Some(Box::new(PreviousCode::of(f)))
        }
    }

    /// UpdateFunctionConfiguration.
    pub fn update_config(
        &self,
        name: &str,
        patch: ConfigPatch,
        expected_revision: Option<&str>,
    ) -> Result<Function, ControllerError> {
        self.strict_function_ref(name)?;
        let mutation = self.lock_mutations();
        let updated = self.modify_locked(&mutation, name, |f| {
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
            if let Some(v) = patch.layers.clone() {
                self.check_layer_contents(&v)?;
                self.check_unzipped(&f.code_sha256, &v)?;
                config.layers = v;
            }
            self.validate(&config)?;
            // After validation: an invalid configuration is reported as invalid, not as a
            // conflict that waiting would not resolve.
            self.settled(f)?;
            f.config = config;
            f.revision += 1;
            f.last_modified = Utc::now();
            Ok(())
        })?;
        // Layers the function let go of may have been deleted already.
        if patch.layers.is_some() {
            self.release_layer_contents();
        }
        Ok(updated)
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
        if let Some(gc) = &self.gc {
            gc.wake();
        }
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
        if super::layers::has_layers(&entry.function) {
            self.release_layer_contents();
        }
    }

    /// GetAccountSettings: the node's limits and what its functions use of them.
    pub fn account_settings(&self) -> AccountSettings {
        let table = self.table();
        let mut total_code_size = 0;
        let mut reserved: u64 = 0;
        for entry in table.values() {
            total_code_size += entry.function.code_size;
            total_code_size += entry
                .versions
                .values()
                .map(|v| v.function.code_size)
                .sum::<u64>();
            reserved += u64::from(entry.function.reserved_concurrency.unwrap_or(0));
        }
        let limit = u64::from(self.config.node_max_instances);
        AccountSettings {
            concurrent_executions: limit,
            unreserved_concurrent_executions: limit.saturating_sub(reserved),
            total_code_size,
            function_count: table.len() as u64,
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

/// What GetAccountSettings reports of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountSettings {
    /// The node's instance limit: every function's concurrency comes out of it.
    pub concurrent_executions: u64,
    /// What reserved concurrency leaves of it.
    pub unreserved_concurrent_executions: u64,
    /// The functions' packages, their published versions' included, in bytes.
    pub total_code_size: u64,
    pub function_count: u64,
}
