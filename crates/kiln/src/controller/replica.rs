//! Cluster mode: what other nodes commit to the registry, applied to this node's in-memory
//! tables, and packages fetched by digest from the shared store.
//!
//! A change is applied only if it is newer than the version the table holds ([`Versions`]):
//! this node's own writes come back through the watch, and a change read back from a stale
//! update may be overtaken by the watch's copy of it. Changes are applied under the mutation
//! lock, as this node's own writes are, so that a write and a change never interleave. A
//! function's package is fetched before the lock is taken; a function whose package could not
//! be fetched waits in [`Unfetched`] and is tried again every [`REFETCH_PERIOD`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::registry::{Change, Loaded, Version};
use super::{Controller, ControllerError};
use crate::function::Function;
use crate::sync::{LockExt, RwLockExt};

/// The kinds of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Record {
    Function,
    Url,
    Sequence,
}

/// Each record's version as the in-memory tables hold it; a deleted record keeps the version
/// of its deletion, so that an older write arriving late does not bring it back.
#[derive(Debug, Default)]
pub(super) struct Versions(Mutex<HashMap<(Record, String), Version>>);

impl Versions {
    pub fn get(&self, record: Record, name: &str) -> Version {
        self.0
            .locked()
            .get(&(record, name.to_string()))
            .copied()
            .unwrap_or(0)
    }

    pub fn set(&self, record: Record, name: &str, version: Version) {
        self.0.locked().insert((record, name.to_string()), version);
    }

    /// Whether `version` is newer than what the tables hold.
    pub fn is_newer(&self, record: Record, name: &str, version: Version) -> bool {
        version > self.get(record, name)
    }
}

/// How often functions whose package could not be fetched are tried again.
const REFETCH_PERIOD: Duration = Duration::from_secs(2);

/// Functions this node knows of but does not serve yet: their package could not be fetched.
/// The latest version of each.
#[derive(Debug, Default)]
pub(super) struct Unfetched(Mutex<HashMap<String, (Box<Function>, Version)>>);

impl Unfetched {
    pub fn insert(&self, function: Box<Function>, version: Version) {
        let mut all = self.0.locked();
        let newer = all
            .get(&function.name)
            .is_none_or(|(_, held)| *held < version);
        if newer {
            all.insert(function.name.clone(), (function, version));
        }
    }

    pub fn remove(&self, name: &str) {
        self.0.locked().remove(name);
    }

    fn all(&self) -> Vec<(Box<Function>, Version)> {
        self.0.locked().values().cloned().collect()
    }
}

/// Applies the changes other nodes commit, as they come, for as long as the controller lives;
/// between them, tries again the functions whose package could not be fetched.
pub(super) fn follow(controller: Arc<Controller>, mut changes: mpsc::UnboundedReceiver<Change>) {
    let weak = Arc::downgrade(&controller);
    drop(controller);
    tokio::spawn(async move {
        let mut refetch = tokio::time::interval(REFETCH_PERIOD);
        refetch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let change = tokio::select! {
                change = changes.recv() => match change {
                    Some(change) => change,
                    None => return,
                },
                _ = refetch.tick() => {
                    let Some(controller) = weak.upgrade() else {
                        return;
                    };
                    controller.refetch().await;
                    continue;
                }
            };
            let Some(controller) = weak.upgrade() else {
                return;
            };
            for digest in packages(&change) {
                if let Err(e) = controller.ensure_code(&digest).await {
                    tracing::error!("{e}");
                }
            }
            tokio::task::block_in_place(|| {
                let _mutation = controller.lock_mutations();
                controller.apply_locked(change);
            });
        }
    });
}

/// The packages a change's functions (and their versions) use.
fn packages(change: &Change) -> Vec<String> {
    match change {
        Change::Function {
            function: Some(f), ..
        } => super::versions::packages(f),
        Change::Reset(loaded) => loaded
            .functions
            .iter()
            .flat_map(|(f, _)| super::versions::packages(f))
            .collect(),
        _ => Vec::new(),
    }
}

impl Controller {
    /// Tries again the functions whose package could not be fetched.
    async fn refetch(&self) {
        for (function, version) in self.unfetched.all() {
            let mut fetched = true;
            for digest in super::versions::packages(&function) {
                fetched &= self.ensure_code(&digest).await.is_ok();
            }
            if !fetched {
                continue;
            }
            let change = Change::Function {
                name: function.name.clone(),
                version,
                function: Some(function),
            };
            tokio::task::block_in_place(|| {
                let _mutation = self.lock_mutations();
                self.apply_locked(change);
            });
        }
    }

    /// Makes sure this node has package `digest`, fetching it from the shared store if it
    /// does not. Nothing to do on a single node (its packages are all local).
    pub(super) async fn ensure_code(&self, digest: &str) -> Result<(), ControllerError> {
        let Some(shared) = &self.shared_code else {
            return Ok(());
        };
        if self.code.contains(digest) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let zip = shared
            .get(digest)
            .await
            .map_err(|e| ControllerError::Internal(e.to_string()))?;
        let fetched = started.elapsed();
        let store = self.code.clone();
        let stored = tokio::task::spawn_blocking(move || store.put_fetched(&zip))
            .await
            .map_err(|e| ControllerError::Internal(e.to_string()))??;
        if stored.sha256_hex != digest {
            // put_fetched hashed what get() checked: only a bug gets here.
            return Err(ControllerError::Internal(format!(
                "package {digest} was stored as {}",
                stored.sha256_hex
            )));
        }
        self.metrics
            .code_fetches
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(
            "fetched package {digest} ({} bytes) from the shared store in {:?}, stored in {:?}",
            stored.size,
            fetched,
            started.elapsed() - fetched
        );
        Ok(())
    }

    /// [`Self::ensure_code`] from a blocking call.
    pub(super) fn ensure_code_blocking(&self, digest: &str) -> Result<(), ControllerError> {
        if self.shared_code.is_none() || self.code.contains(digest) {
            return Ok(());
        }
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.ensure_code(digest))
        })
    }

    /// Applies a change committed elsewhere, if it is newer than what the tables hold. The
    /// caller holds the mutation lock.
    pub(super) fn apply_locked(&self, change: Change) {
        match change {
            Change::Function {
                name,
                version,
                function,
            } => {
                if !self.versions.is_newer(Record::Function, &name, version) {
                    return;
                }
                match function {
                    Some(function) => {
                        if let Err(e) = super::versions::packages(&function)
                            .iter()
                            .try_for_each(|digest| self.ensure_code_blocking(digest))
                        {
                            // Not applied, and its version not taken: tried again later.
                            tracing::error!("function {name} not updated on this node: {e}");
                            self.unfetched.insert(function, version);
                            return;
                        }
                        self.unfetched.remove(&name);
                        self.versions.set(Record::Function, &name, version);
                        let function = self.publish(*function);
                        // bench/cluster/deploy.py times a deploy by this line.
                        tracing::debug!(
                            "registry: function {name} applied at version {version}, RevisionId {}",
                            super::revision_id(&function)
                        );
                    }
                    None => {
                        self.unfetched.remove(&name);
                        self.versions.set(Record::Function, &name, version);
                        self.versions.set(Record::Url, &name, version);
                        let removed = self.functions.write_locked().remove(&name);
                        self.url_settings.write_locked().remove(&name);
                        if let Err(e) = self.events.drop_events(&name) {
                            tracing::error!("queued events of deleted function {name}: {e}");
                        }
                        if let Some(entry) = removed {
                            self.forget_function(&entry);
                        }
                        if let Some(gc) = &self.gc {
                            gc.wake();
                        }
                    }
                }
            }
            Change::Url {
                name,
                version,
                settings,
            } => {
                if !self.versions.is_newer(Record::Url, &name, version) {
                    return;
                }
                self.versions.set(Record::Url, &name, version);
                let mut all = self.url_settings.write_locked();
                match settings {
                    Some(settings) => all.insert(name, settings),
                    None => all.remove(&name),
                };
            }
            Change::Sequence {
                name,
                version,
                sequence,
            } => {
                if !self.versions.is_newer(Record::Sequence, &name, version) {
                    return;
                }
                self.versions.set(Record::Sequence, &name, version);
                match sequence {
                    Some(sequence) => {
                        self.sequences_mut().insert(name, Arc::new(sequence));
                    }
                    None => {
                        self.sequences_mut().remove(&name);
                        match self.events.drop_events(&name) {
                            Ok(runs) => runs.iter().for_each(|run| self.end_run(run)),
                            Err(e) => {
                                tracing::error!("queued events of deleted sequence {name}: {e}")
                            }
                        }
                    }
                }
            }
            Change::Reset(loaded) => self.reset_locked(loaded),
        }
    }

    /// Applies a full list of the registry: each record in it, and the deletion of each one
    /// the tables hold that it lacks.
    fn reset_locked(&self, loaded: Loaded) {
        let Loaded {
            functions,
            urls,
            sequences,
            revision,
        } = loaded;
        let gone = |held: Vec<String>, listed: Vec<&String>| -> Vec<String> {
            held.into_iter().filter(|n| !listed.contains(&n)).collect()
        };
        let held_functions: Vec<String> = self.table().keys().cloned().collect();
        let held_urls: Vec<String> = self.url_settings.read_locked().keys().cloned().collect();
        let held_sequences: Vec<String> = self.sequences().keys().cloned().collect();
        let mut changes = Vec::new();
        for name in gone(
            held_functions,
            functions.iter().map(|(f, _)| &f.name).collect(),
        ) {
            changes.push(Change::Function {
                name,
                version: revision,
                function: None,
            });
        }
        for name in gone(held_urls, urls.iter().map(|(n, _, _)| n).collect()) {
            changes.push(Change::Url {
                name,
                version: revision,
                settings: None,
            });
        }
        for name in gone(
            held_sequences,
            sequences.iter().map(|(s, _)| &s.name).collect(),
        ) {
            changes.push(Change::Sequence {
                name,
                version: revision,
                sequence: None,
            });
        }
        changes.extend(functions.into_iter().map(|(f, version)| Change::Function {
            name: f.name.clone(),
            version,
            function: Some(Box::new(f)),
        }));
        changes.extend(
            urls.into_iter()
                .map(|(name, settings, version)| Change::Url {
                    name,
                    version,
                    settings: Some(settings),
                }),
        );
        changes.extend(sequences.into_iter().map(|(s, version)| Change::Sequence {
            name: s.name.clone(),
            version,
            sequence: Some(s),
        }));
        for change in changes {
            self.apply_locked(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_newer_versions_are_taken_and_deletions_keep_theirs() {
        let versions = Versions::default();
        assert!(versions.is_newer(Record::Function, "f", 5));
        versions.set(Record::Function, "f", 5);
        assert!(!versions.is_newer(Record::Function, "f", 5));
        assert!(!versions.is_newer(Record::Function, "f", 4));
        assert!(versions.is_newer(Record::Url, "f", 5), "kinds are apart");
        // A deletion at 9: the write at 7 that arrives after it stays dead.
        versions.set(Record::Function, "f", 9);
        assert!(!versions.is_newer(Record::Function, "f", 7));
    }
}
