//! Packages extracted after CreateFunction or UpdateFunctionCode has answered, as on Lambda:
//! the call checks the zip from its central directory, stores it and commits the function
//! (`Pending`, or `LastUpdateStatus: InProgress`); the package is extracted here, in the
//! background, and only then are the start paths of the versions that use it prepared.
//!
//! An entry whose package is still being extracted is *deferred*: the node was asked to prepare
//! nothing for it yet. [`Unpacks`] holds each package being extracted and each whose extraction
//! failed; a package is marked extracted, and the deferred entries that use it collected,
//! under the table's lock, so that an entry published meanwhile is either collected here or
//! sees the package extracted and is prepared as any other ([`Controller::defer_unpacking`]).
//!
//! Cluster mode does not come here: a package is extracted before the call answers, since the
//! other nodes fetch it from the shared store and extract it as they apply the change.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::code::CodeError;
use super::{Controller, ControllerError, Entry};
use crate::function::SharedSpec;
use crate::sync::LockExt;

/// Why a package could not be extracted, as a function's state reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpackFailure {
    /// `StateReason` (or `LastUpdateStatusReason`).
    pub reason: String,
    /// `StateReasonCode` (or `LastUpdateStatusReasonCode`), one of Lambda's.
    pub code: &'static str,
}

impl UnpackFailure {
    fn of(error: &CodeError) -> Self {
        Self {
            reason: error.to_string(),
            code: error.reason_code(),
        }
    }
}

/// Where a package's extraction is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Unpacking {
    Running,
    Done,
    Failed(UnpackFailure),
}

/// The packages being extracted, and those whose extraction failed (until they are stored
/// again or no function uses them).
#[derive(Default)]
pub(super) struct Unpacks(Mutex<HashMap<String, watch::Sender<Unpacking>>>);

impl Unpacks {
    /// Marks `digest` as being extracted; false if it is already.
    pub fn begin(&self, digest: &str) -> bool {
        let mut all = self.0.locked();
        if all
            .get(digest)
            .is_some_and(|s| *s.borrow() == Unpacking::Running)
        {
            return false;
        }
        // A failed extraction is tried again: the bytes were stored again.
        all.insert(digest.to_string(), watch::channel(Unpacking::Running).0);
        true
    }

    /// Whether `digest` is being extracted or failed to be: its entries wait.
    pub fn pending(&self, digest: &str) -> bool {
        self.0.locked().contains_key(digest)
    }

    /// `digest`'s extraction, if it is running or failed.
    pub fn state(&self, digest: &str) -> Option<Unpacking> {
        self.0.locked().get(digest).map(|s| s.borrow().clone())
    }

    fn subscribe(&self, digest: &str) -> Option<watch::Receiver<Unpacking>> {
        self.0.locked().get(digest).map(|s| s.subscribe())
    }

    /// Takes a finished extraction out; its sender, to tell the waiters once the entries are
    /// prepared.
    fn finish(&self, digest: &str) -> Option<watch::Sender<Unpacking>> {
        self.0.locked().remove(digest)
    }

    fn fail(&self, digest: &str, failure: UnpackFailure) {
        if let Some(sender) = self.0.locked().get(digest) {
            sender.send_replace(Unpacking::Failed(failure));
        }
    }

    /// Forgets a failed extraction of a package no function uses any more.
    pub fn forget_failed(&self, digest: &str) {
        let mut all = self.0.locked();
        if all
            .get(digest)
            .is_some_and(|s| matches!(*s.borrow(), Unpacking::Failed(_)))
        {
            all.remove(digest);
        }
    }
}

impl Controller {
    /// Waits until no package is being extracted (the tests' way to let the background work
    /// end).
    #[cfg(test)]
    pub(super) async fn unpacked_all(&self) {
        loop {
            let running = self
                .unpacks
                .0
                .locked()
                .values()
                .any(|s| *s.borrow() == Unpacking::Running);
            if !running {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Extracts a stored package in the background, unless its tree is in place (or it is
    /// being extracted already). Called before the entries that use it are published.
    pub(super) fn unpack_later(&self, digest: &str) {
        if self.code.is_extracted(digest) || !self.unpacks.begin(digest) {
            return;
        }
        self.spawn_unpack(digest.to_string());
    }

    /// Extracts `digest`, which [`Unpacks::begin`] marked, then prepares what waits for it.
    pub(super) fn spawn_unpack(&self, digest: String) {
        let store = self.code.clone();
        let controller = self.me.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let extracted = {
                let digest = digest.clone();
                tokio::task::spawn_blocking(move || store.extract_stored(&digest)).await
            };
            let Some(controller) = controller.upgrade() else {
                return;
            };
            let result = extracted.unwrap_or_else(|e| {
                Err(CodeError::Io(std::io::Error::other(format!(
                    "the extraction stopped: {e}"
                ))))
            });
            if result.is_ok() {
                tracing::info!("package {digest} extracted in {:?}", started.elapsed());
            }
            controller.unpacked(&digest, result);
        });
    }

    /// An extraction ended: on success the deferred entries that use the package are prepared,
    /// on failure they stay deferred, and their function is `Failed` (or its update is).
    fn unpacked(&self, digest: &str, result: Result<(), CodeError>) {
        if let Err(e) = result {
            tracing::error!("package {digest} could not be extracted: {e}");
            self.unpacks.fail(digest, UnpackFailure::of(&e));
            return;
        }
        let (waiting, sender) = {
            let table = self.table();
            let sender = self.unpacks.finish(digest);
            let waiting: Vec<Arc<Entry>> = table
                .values()
                .flat_map(|e| std::iter::once(e).chain(e.versions.values()))
                .filter(|e| e.deferred.load(Ordering::Relaxed) && e.spec.code_sha256 == digest)
                .cloned()
                .collect();
            (waiting, sender)
        };
        for entry in waiting {
            // The code that ran meanwhile (an update's fallback) is not needed any more.
            self.agent
                .retire(&entry.spec.function, Some(entry.spec.revision));
            self.agent.prepare(entry.spec.clone());
            entry.deferred.store(false, Ordering::Relaxed);
        }
        if let Some(sender) = sender {
            sender.send_replace(Unpacking::Done);
        }
        self.forget_previous_code(digest);
    }

    /// The functions whose update to `digest` kept the code from before it
    /// ([`crate::function::versions::PreviousCode`]) let go of it, now that `digest` is
    /// extracted. Under the mutation lock, so that an update committed meanwhile is seen here or
    /// sees the package extracted (and keeps nothing). A failed write leaves the record as it
    /// was, which the next start reads the same way.
    fn forget_previous_code(&self, digest: &str) {
        let mutation = self.lock_mutations();
        let names: Vec<String> = self
            .table()
            .values()
            .filter(|e| e.function.code_sha256 == digest && e.function.previous_code.is_some())
            .map(|e| e.function.name.clone())
            .collect();
        for name in names {
            let forgotten = self.modify_if(&mutation, &name, |f| {
                let kept = f.code_sha256 == digest && f.previous_code.is_some();
                f.previous_code = None;
                Ok(kept)
            });
            if let Err(e) = forgotten {
                tracing::warn!("function {name} keeps the code from before its update: {e}");
            }
        }
    }

    /// Marks `entry` and its versions deferred where their package is still being extracted;
    /// returns the specs of `prepare` that can be prepared now. The caller holds the table's
    /// write lock (or builds a table no one reads yet).
    pub(super) fn defer_unpacking(
        &self,
        entry: &Entry,
        prepare: Vec<SharedSpec>,
    ) -> Vec<SharedSpec> {
        for e in std::iter::once(entry).chain(entry.versions.values().map(|v| &**v)) {
            if self.unpacks.pending(&e.spec.code_sha256) {
                e.deferred.store(true, Ordering::Relaxed);
            }
        }
        prepare
            .into_iter()
            .filter(|spec| !self.unpacks.pending(&spec.code_sha256))
            .collect()
    }

    /// Waits (at most `limit`) for the package of a deferred entry; an extraction that failed,
    /// or did not end in time, is Lambda's answer to an invocation of a function in that state.
    pub(super) async fn wait_unpacked(
        &self,
        entry: &Entry,
        limit: Duration,
    ) -> Result<(), ControllerError> {
        let Some(mut state) = self.unpacks.subscribe(&entry.spec.code_sha256) else {
            return Ok(());
        };
        let ended = tokio::time::timeout(limit, async {
            let _ = state.wait_for(|s| *s != Unpacking::Running).await;
        })
        .await;
        let now = state.borrow().clone();
        let created = entry.created();
        match now {
            Unpacking::Done => Ok(()),
            // Lambda's words; the reason is the function's StateReason.
            Unpacking::Failed(_) if created => Err(ControllerError::Conflict(
                "The operation cannot be performed at this time. The function is currently in the following state: Failed".into(),
            )),
            Unpacking::Failed(failure) => Err(ControllerError::Conflict(format!(
                "The operation cannot be performed at this time. The last update of {} failed: {} Update its code again.",
                entry.spec.arn, failure.reason
            ))),
            Unpacking::Running if ended.is_err() && created => Err(ControllerError::Conflict(
                "The operation cannot be performed at this time. The function is currently in the following state: Pending".into(),
            )),
            Unpacking::Running => Err(ControllerError::Conflict(format!(
                "The operation cannot be performed at this time. An update is in progress for resource: {}",
                entry.spec.arn
            ))),
        }
    }
}
