//! Whether what a function revision's start paths need is built: its snapshot (a fork server
//! or a standby instance) or its compiled wasm module. The controller answers `Pending` (or
//! `LastUpdateStatus: InProgress`) until then, and an invocation that arrives meanwhile waits
//! for it rather than starting on a slower path.
//!
//! A preparation is done when its [`Preparing`] guard is dropped, whatever became of the build
//! (a snapshot that failed leaves the function on the coldest path, which is ready at once), so
//! no early return can leave a function pending.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::sync::LockExt;

/// The newest revision being prepared per function.
#[derive(Default)]
pub(in crate::agent) struct Preparations {
    by_function: Mutex<HashMap<String, (u64, watch::Receiver<bool>)>>,
}

/// A preparation in progress; dropping it marks the preparation done.
pub struct Preparing {
    done: watch::Sender<bool>,
}

impl Drop for Preparing {
    fn drop(&mut self) {
        self.done.send_replace(true);
    }
}

/// Whether a revision is prepared.
pub enum Prepared {
    Done,
    Pending(watch::Receiver<bool>),
}

impl Prepared {
    pub fn is_done(&self) -> bool {
        matches!(self, Prepared::Done)
    }

    /// Waits until the preparation is done or `limit` has passed; true if it is done.
    pub async fn wait(self, limit: Duration) -> bool {
        match self {
            Prepared::Done => true,
            Prepared::Pending(mut done) => {
                // A sender that went away without a value is a preparation that ended too.
                tokio::time::timeout(limit, done.wait_for(|d| *d))
                    .await
                    .is_ok()
            }
        }
    }
}

impl Preparations {
    /// Starts preparing `revision` of `function`; it replaces any older one.
    pub(in crate::agent) fn begin(&self, function: &str, revision: u64) -> Preparing {
        let (done, receiver) = watch::channel(false);
        let mut by_function = self.by_function.locked();
        match by_function.get(function) {
            // A restart's or a duplicate's preparation of a revision already prepared.
            Some((r, existing)) if *r == revision && *existing.borrow() => {
                done.send_replace(true);
            }
            Some((r, _)) if *r > revision => {
                done.send_replace(true);
                return Preparing { done };
            }
            _ => {}
        }
        by_function.insert(function.to_string(), (revision, receiver));
        Preparing { done }
    }

    /// Whether `revision` of `function` is prepared (a revision never prepared here is).
    pub(in crate::agent) fn of(&self, function: &str, revision: u64) -> Prepared {
        match self.by_function.locked().get(function) {
            Some((r, done)) if *r == revision && !*done.borrow() => Prepared::Pending(done.clone()),
            _ => Prepared::Done,
        }
    }

    /// Forgets a deleted function.
    pub(in crate::agent) fn forget(&self, function: &str) {
        self.by_function.locked().remove(function);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_revision_is_pending_until_its_guard_goes() {
        let preparations = Preparations::default();
        assert!(
            preparations.of("f", 1).is_done(),
            "never prepared: nothing to wait for"
        );
        let preparing = preparations.begin("f", 1);
        assert!(!preparations.of("f", 1).is_done());
        assert!(
            preparations.of("f", 2).is_done(),
            "another revision is not this one"
        );
        let waiting = preparations.of("f", 1);
        assert!(
            !preparations
                .of("f", 1)
                .wait(Duration::from_millis(10))
                .await
        );
        drop(preparing);
        assert!(waiting.wait(Duration::from_secs(5)).await);
        assert!(preparations.of("f", 1).is_done());
    }

    #[tokio::test]
    async fn a_newer_revision_replaces_an_older_one_and_not_the_reverse() {
        let preparations = Preparations::default();
        let old = preparations.begin("f", 1);
        let new = preparations.begin("f", 2);
        assert!(preparations.of("f", 1).is_done());
        assert!(!preparations.of("f", 2).is_done());
        // A late preparation of the old revision does not hide the new one's.
        let late = preparations.begin("f", 1);
        assert!(!preparations.of("f", 2).is_done());
        drop((old, late));
        assert!(!preparations.of("f", 2).is_done());
        drop(new);
        assert!(preparations.of("f", 2).is_done());
        // Preparing a prepared revision again (a restart) does not make it pending.
        let again = preparations.begin("f", 2);
        assert!(preparations.of("f", 2).is_done());
        drop(again);
        preparations.forget("f");
        assert!(preparations.of("f", 2).is_done());
    }
}
