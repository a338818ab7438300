//! What the controller asks of the node and tells about it: its status and each function's
//! lifecycle, sessions, memory models and pre-warm, the object cache's state, counters and
//! `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::unpack::Unpacking;
use super::{function_page, Change, Controller, ControllerError, Entry, Lifecycle};
use crate::function::Function;
use crate::predict;

impl Controller {
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

    /// What the node runs and keeps (`kiln status`).
    pub fn node_status(&self) -> crate::agent::NodeStatus {
        self.agent.status()
    }

    /// `f`'s `State` and `LastUpdateStatus`: `Pending` after CreateFunction and `InProgress`
    /// after an update until the version's package is extracted and its start paths built;
    /// `Failed` (or `LastUpdateStatus: Failed`) if the package could not be extracted.
    pub fn lifecycle(&self, f: &Function) -> Lifecycle {
        let Some(entry) = self.table().get(&f.name).cloned() else {
            return Lifecycle::Ready;
        };
        if entry.function.revision != f.revision {
            return Lifecycle::Ready;
        }
        self.entry_lifecycle(&entry)
    }

    /// The lifecycle of one entry (`$LATEST`'s or a version's).
    pub(super) fn entry_lifecycle(&self, entry: &Entry) -> Lifecycle {
        let created = entry.created();
        if entry.deferred.load(Ordering::Relaxed) {
            return match self.unpacks.state(&entry.spec.code_sha256) {
                Some(Unpacking::Failed(failure)) if created => Lifecycle::Failed(failure),
                Some(Unpacking::Failed(failure)) => Lifecycle::UpdateFailed(failure),
                _ if created => Lifecycle::Creating,
                _ => Lifecycle::Updating,
            };
        }
        if entry.preparing(&*self.agent).is_none() {
            return Lifecycle::Ready;
        }
        match entry.change {
            Some(Change::Create) => Lifecycle::Creating,
            Some(Change::Update) => Lifecycle::Updating,
            // Loaded at start, or a new revision that is no change on Lambda (reserved
            // concurrency): its start paths are being built, but nothing is in progress.
            None => Lifecycle::Ready,
        }
    }

    /// Where the fast path of `f`'s current revision is, if it asked for one: `tracing` with
    /// nothing traced until the node has seen the revision.
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
        let entries: Vec<(String, Arc<Entry>)> = self
            .table()
            .iter()
            .map(|(name, entry)| (name.clone(), entry.clone()))
            .collect();
        let models = self.predictor.accuracies();
        entries
            .into_iter()
            .map(|(name, entry)| {
                let mut counts = self.metrics.counts(&name);
                counts.model = models
                    .get(&name)
                    .map(|&(mature, accuracy)| crate::history::ModelReading::new(mature, accuracy));
                // Each version notes its own invocations' memory, and so does the code an
                // update falls back on.
                let noted = std::iter::once(&entry)
                    .chain(entry.versions.values())
                    .chain(entry.fallback.as_ref());
                for e in noted {
                    counts.memory.add(e.series.take_memory());
                }
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
