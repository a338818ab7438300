//! An entry of the in-memory table of functions: a function's version as the invoke path reads
//! it (its spec, its metrics) and whether the node is still preparing it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::unpack::UnpackFailure;
use crate::agent::NodeAgent;
use crate::function::{Function, SharedSpec};

pub(super) struct Entry {
    pub(super) function: Function,
    pub(super) spec: SharedSpec,
    /// Its per-invocation metrics, bound once.
    pub(super) series: crate::metrics::FunctionSeries,
    /// What a CreateFunction or an update made of this version while its start paths are
    /// being built (`Pending`, or `LastUpdateStatus: InProgress`); `None` for a function
    /// loaded at start, or a new revision of a settled function that only changed its reserved
    /// concurrency.
    pub(super) change: Option<Change>,
    /// Set once the agent said this version is prepared: no invocation waits any more.
    pub(super) settled: AtomicBool,
    /// Its package is still being extracted (or failed to be): the node was asked to prepare
    /// nothing yet ([`super::unpack`]).
    pub(super) deferred: AtomicBool,
    /// `$LATEST`'s entry: its published versions' entries, by number (a version's entry has
    /// none).
    pub(super) versions: BTreeMap<u64, Arc<Entry>>,
    /// What runs while this version's package is being extracted, or after its extraction
    /// failed: the code `$LATEST` ran before the update, as on Lambda (kept in the function's
    /// record as its `previous_code`, so a restart has it too). `None` for a version that was
    /// created, or whose code did not change.
    pub(super) fallback: Option<Arc<Entry>>,
}

/// What made a function's current version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    Create,
    Update,
}

/// A function's `State` and `LastUpdateStatus`, as Lambda reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    /// Created, its package still being extracted or its start paths built: `Pending`
    /// (`Creating`).
    Creating,
    /// Updated, the new version's package still being extracted or its start paths built:
    /// `Active`, `InProgress`.
    Updating,
    /// `Active`, `Successful`.
    Ready,
    /// Created, but its package could not be extracted: `Failed`.
    Failed(UnpackFailure),
    /// Updated, but the new package could not be extracted: `Active`, `LastUpdateStatus:
    /// Failed`.
    UpdateFailed(UnpackFailure),
}

impl Entry {
    pub(super) fn new(function: Function, spec: SharedSpec) -> Self {
        Self::changed(function, spec, None)
    }

    pub(super) fn changed(function: Function, spec: SharedSpec, change: Option<Change>) -> Self {
        let series = crate::metrics::FunctionSeries::new(&function.name);
        Self {
            function,
            spec,
            series,
            settled: AtomicBool::new(change.is_none()),
            deferred: AtomicBool::new(false),
            change,
            versions: BTreeMap::new(),
            fallback: None,
        }
    }

    /// What runs while the code of an update of `previous` is being extracted (or after its
    /// extraction failed): `previous` itself if it ran, or what ran before it.
    pub(super) fn fallback_of(previous: &Entry) -> Option<Arc<Entry>> {
        if previous.deferred.load(Ordering::Relaxed) {
            return previous.fallback.clone();
        }
        let ran = Entry::changed(previous.function.clone(), previous.spec.clone(), None);
        ran.settled
            .store(previous.settled.load(Ordering::Relaxed), Ordering::Relaxed);
        Some(Arc::new(ran))
    }

    /// Whether its package is still being extracted (or failed to be).
    pub(super) fn is_deferred(&self) -> bool {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Whether a CreateFunction (or PublishVersion) made this version, rather than an update.
    /// A version loaded at start counts as created if it is its function's first revision.
    pub(super) fn created(&self) -> bool {
        match self.change {
            Some(change) => change == Change::Create,
            None => self.function.revision <= 1,
        }
    }

    /// Whether this version is still being prepared, as the agent says; remembers when not.
    pub(super) fn preparing(&self, agent: &dyn NodeAgent) -> Option<crate::agent::Prepared> {
        if self.deferred.load(Ordering::Relaxed) {
            // Its package is not extracted: the agent knows nothing of it yet.
            return None;
        }
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
