//! The warm start path: runtime-generic standbys, booted before any function needs them.
//!
//! For each runtime that speaks kiln's shim protocol the agent keeps a few standby instances:
//! sandboxes whose runtime has started, imported its common modules and is waiting, with an
//! empty code slot at `/var/task` (kiln-sandbox's `slot.rs`). A cold start that finds no
//! function-specific snapshot takes one ([`Instance::assign`]): the cgroup gets the function's
//! limits, its code appears in the slot, and the shim loads the handler. The pool is topped up
//! in the background. A standby serves exactly one function: it is never handed back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent::instance::{Instance, PlatformError, StartError};
use crate::agent::Inner;
use crate::function::{InstanceSpec, NetworkMode, Prebake, SharedSpec};
use crate::runtime::Protocol;

/// A standby's memory limit until it is assigned: room to boot a runtime, nothing more.
const STANDBY_MEMORY_MB: u32 = 256;
/// The `/tmp` size of a standby: Lambda's default ephemeral storage. A function asking for
/// another size takes the coldest path.
const STANDBY_TMP_MB: u32 = 512;
/// Prefixes of environment variables a runtime (or the dynamic loader) reads once, at boot: a
/// function that sets one must boot its own runtime for it to apply.
const BOOT_ENV_PREFIXES: &[&str] = &["NODE_", "PYTHON", "LD_", "UV_", "MALLOC_", "GLIBC_"];
/// After a standby fails to start, its runtime's pool rests this long before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The standbys of one runtime.
#[derive(Default)]
pub(in crate::agent) struct WarmPool {
    pub ready: Vec<Instance>,
    /// Ids of the standbys booting now.
    pub starting: Vec<u64>,
    /// Set after a standby failed to start.
    retry_at: Option<Instant>,
    pub last_error: Option<String>,
    pub taken: u64,
}

/// The spec a standby of `runtime` boots with: no code, no function.
fn standby_spec(runtime: &str) -> SharedSpec {
    Arc::new(InstanceSpec {
        function: format!("standby-{runtime}"),
        version: crate::function::versions::latest(),
        arn: String::new(),
        revision: 0,
        runtime: runtime.to_string(),
        handler: String::new(),
        memory_mb: STANDBY_MEMORY_MB,
        timeout_s: 10,
        env: Default::default(),
        network: NetworkMode::Isolated,
        tmp_mb: STANDBY_TMP_MB,
        code_dir: Default::default(),
        opt_dir: None,
        code_sha256: String::new(),
        region: String::new(),
        max_instances: 1,
        reserved_concurrency: None,
        prebake: Prebake::default(),
        memory_sizing: Default::default(),
        web: None,
        breakout: None,
        sessions: None,
    })
}

impl Inner {
    /// The runtimes that get standbys: those whose shim can load a function late.
    fn standby_runtimes(&self) -> Vec<String> {
        if self.config.warm_standbys == 0 || self.ctx.code_slots.is_none() {
            return Vec::new();
        }
        self.ctx
            .runtimes
            .names()
            .into_iter()
            .filter(|name| {
                self.ctx
                    .runtimes
                    .get(name)
                    .is_some_and(|r| r.protocol() == Protocol::Shim)
            })
            .collect()
    }

    /// Whether a cold start of `spec` can take a standby at all (not with layers: a standby's
    /// `/opt` was mounted before any function was known).
    fn warm_eligible(&self, spec: &InstanceSpec) -> bool {
        spec.network == NetworkMode::Isolated
            && spec.opt_dir.is_none()
            && spec.tmp_mb == STANDBY_TMP_MB
            && !spec
                .env
                .keys()
                .any(|k| BOOT_ENV_PREFIXES.iter().any(|p| k.starts_with(p)))
            && self.config.warm_standbys > 0
            && self.ctx.code_slots.is_some()
            && self
                .ctx
                .runtimes
                .get(&spec.runtime)
                .is_some_and(|r| r.protocol() == Protocol::Shim)
    }

    /// Starts standbys in the background until every runtime has its share ready or starting.
    pub(in crate::agent) fn refill_standbys(self: &Arc<Self>) {
        let now = Instant::now();
        for runtime in self.standby_runtimes() {
            loop {
                let id = {
                    let mut state = self.state();
                    if state.shutting_down {
                        return;
                    }
                    let pool = state.ahead.warm.entry(runtime.clone()).or_default();
                    if pool.retry_at.is_some_and(|at| now < at)
                        || pool.ready.len() + pool.starting.len() >= self.config.warm_standbys
                    {
                        break;
                    }
                    let id = state.new_id();
                    state
                        .ahead
                        .warm
                        .get_mut(&runtime)
                        .expect("just inserted")
                        .starting
                        .push(id);
                    id
                };
                let inner = self.clone();
                let runtime = runtime.clone();
                tokio::spawn(async move { inner.start_standby(runtime, id).await });
            }
        }
    }

    async fn start_standby(self: Arc<Self>, runtime: String, id: u64) {
        let slot = match &self.ctx.code_slots {
            Some(slots) => slots
                .slot(&format!("w{id}"))
                .map_err(|e| PlatformError::os("code slot", e)),
            None => Err(PlatformError::Unsupported("no code slots on this node")),
        };
        let started = match slot {
            Ok(slot) => Instance::start_standby(&self.ctx, &standby_spec(&runtime), id, slot)
                .await
                .map_err(|e| match e {
                    StartError::Function { body, log, .. } => PlatformError::StandbyInit {
                        body: String::from_utf8_lossy(&body).into_owned(),
                        log,
                    },
                    StartError::Platform(e) => e,
                }),
            Err(e) => Err(e),
        };
        let leftover = {
            let mut state = self.state();
            let shutting_down = state.shutting_down;
            let pool = state.ahead.warm.entry(runtime.clone()).or_default();
            pool.starting.retain(|s| *s != id);
            match started {
                Ok(instance) if !shutting_down => {
                    pool.ready.push(instance);
                    pool.retry_at = None;
                    None
                }
                Ok(instance) => Some(instance),
                Err(e) => {
                    tracing::warn!(%runtime, "a warm standby could not start: {e}");
                    pool.last_error = Some(e.to_string());
                    pool.retry_at = Some(Instant::now() + RETRY_AFTER);
                    None
                }
            }
        };
        if let Some(instance) = leftover {
            self.destroy_later(instance);
        }
    }

    /// The warm path: `spec` loaded into a standby of its runtime, if one is ready. The instance
    /// keeps the standby's id; `None` when there is no standby to take. The pool is topped up
    /// after the first invocation (`Inner::after_cold_start`).
    pub(in crate::agent) async fn start_warm(
        self: &Arc<Self>,
        spec: &SharedSpec,
    ) -> Option<Result<Instance, StartError>> {
        if !self.warm_eligible(spec) {
            return None;
        }
        let mut standby = {
            let mut state = self.state();
            let pool = state.ahead.warm.get_mut(&spec.runtime)?;
            let standby = pool.ready.pop()?;
            pool.taken += 1;
            standby
        };
        if !standby.alive() {
            tracing::warn!(runtime = %spec.runtime, "a warm standby was gone; falling back");
            self.destroy_later(standby);
            return None;
        }
        Some(standby.assign(&self.ctx, spec).await)
    }

    /// Takes every standby out of the pools (at shutdown).
    pub(in crate::agent) fn drain_standbys(&self) -> Vec<Instance> {
        let mut state = self.state();
        state
            .ahead
            .warm
            .values_mut()
            .flat_map(|pool| std::mem::take(&mut pool.ready))
            .collect()
    }
}
