//! Versions: PublishVersion, ListVersionsByFunction, the calls that take a `Qualifier` (a
//! version or an alias, [`super::aliases`]), and DeleteFunction of one version.
//!
//! They are kept in the function's record ([`Published`]), so the registry commits them with
//! it. Each version has an entry of its own beside `$LATEST`'s, whose spec's key on the node
//! is `name:N`: its instances and snapshot are its own, built from its code and
//! configuration, and reaped when idle as any others.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::revision::check_revision;
use super::{Change, Controller, ControllerError, Entry, Lifecycle};
use crate::function::versions::{self, Version, LATEST};
use crate::function::{Function, SharedSpec};

/// Where an entry's table row came from, for [`Controller::build_entry`].
pub(super) enum Before<'a> {
    /// Read from the registry at start: nothing to wait for.
    Loaded,
    /// Created just now.
    Created,
    /// Changed from this entry.
    Was(&'a Entry),
}

/// What a qualified function name names, as the Get calls answer it.
#[derive(Debug, Clone)]
pub struct Qualified {
    /// `$LATEST`'s record, or a version's code and configuration under the function's name.
    pub function: Function,
    /// `$LATEST` or the version's number.
    pub version: String,
    /// The ARN as the caller qualified it (the alias's, when an alias named the version).
    pub arn: String,
    pub revision_id: String,
    pub lifecycle: Lifecycle,
}

/// Every package `f` uses: `$LATEST`'s, its versions' and the one `$LATEST` ran before an
/// update whose package is not extracted yet.
pub(super) fn packages(f: &Function) -> Vec<String> {
    let mut all = vec![f.code_sha256.clone()];
    let others = f.published.versions.iter().map(|v| &v.code_sha256);
    for digest in others.chain(f.previous_code.as_ref().map(|p| &p.code_sha256)) {
        if !all.contains(digest) {
            all.push(digest.clone());
        }
    }
    all
}

/// The versions of `f` prepared at start: its newest, those its aliases route to and those
/// with provisioned concurrency. The
/// others, which a function may have many of, build their snapshots after their first cold
/// start, so that a restart does not build one for every version ever published.
pub(super) fn kept_warm(f: &Function) -> Vec<String> {
    let mut warm: Vec<String> = f
        .published
        .aliases
        .values()
        .flat_map(|a| std::iter::once(&a.function_version).chain(a.weights.keys()))
        .cloned()
        .collect();
    if let Some(newest) = f.published.versions.last() {
        warm.push(newest.number.to_string());
    }
    warm.extend(
        f.published
            .versions
            .iter()
            .filter(|v| f.published.provisioned_for(v.number) > 0)
            .map(|v| v.number.to_string()),
    );
    warm
}

/// A fresh RevisionId for a version or an alias.
pub(super) fn new_revision_id() -> String {
    crate::function::new_request_id().to_string()
}

impl Controller {
    /// `$LATEST`'s entry for `function` with an entry for each of its versions; the specs the
    /// node must prepare (new or changed), and the node keys of versions that went.
    pub(super) fn build_entry(
        &self,
        function: Function,
        before: Before<'_>,
    ) -> (Entry, Vec<SharedSpec>, Vec<String>) {
        let previous = match before {
            Before::Was(entry) => Some(entry),
            _ => None,
        };
        let mut prepare = Vec::new();
        let mut versions = BTreeMap::new();
        for v in &function.published.versions {
            let spec = self.version_spec(&function, v);
            match previous.and_then(|p| p.versions.get(&v.number)) {
                Some(old) if old.spec == spec => {
                    versions.insert(v.number, old.clone());
                }
                old => {
                    let change = match (&before, old) {
                        (Before::Loaded, _) => None,
                        (_, Some(_)) => Some(Change::Update),
                        (_, None) => Some(Change::Create),
                    };
                    let entry = Entry::changed(v.as_function(&function), spec.clone(), change);
                    versions.insert(v.number, Arc::new(entry));
                    prepare.push(spec);
                }
            }
        }
        let gone = previous
            .map(|p| {
                p.versions
                    .iter()
                    .filter(|(n, _)| !versions.contains_key(n))
                    .map(|(_, e)| e.spec.function.clone())
                    .collect()
            })
            .unwrap_or_default();
        let spec = self.spec_for(&function);
        let mut entry = match (before, previous) {
            // Only its versions or aliases changed: `$LATEST` is as it was.
            (_, Some(p)) if p.spec == spec => {
                let mut entry = Entry::changed(function, p.spec.clone(), p.change);
                entry.settled.store(
                    p.settled.load(std::sync::atomic::Ordering::Relaxed),
                    std::sync::atomic::Ordering::Relaxed,
                );
                entry.fallback = p.fallback.clone();
                entry
            }
            (Before::Loaded, _) => {
                prepare.insert(0, spec.clone());
                // An update whose package was not extracted when kiln stopped (or failed to
                // be): what ran before it runs meanwhile, as before the restart.
                let fallback = function.previous_code.as_ref().map(|previous| {
                    let ran = previous.as_function(&function);
                    let spec = self.spec_for(&ran);
                    Arc::new(Entry::new(ran, spec))
                });
                let mut entry = Entry::new(function, spec);
                entry.fallback = fallback;
                entry
            }
            (Before::Created, _) => {
                prepare.insert(0, spec.clone());
                Entry::changed(function, spec, Some(Change::Create))
            }
            // Only its reserved concurrency changed, which Lambda does not count as an update
            // (no `InProgress`, no 409 for the next change): the new revision is prepared and
            // waited for by invocations as any other, but the lifecycle stays the previous one's.
            (Before::Was(_), Some(p)) if only_concurrency_differs(&p.spec, &spec) => {
                prepare.insert(0, spec.clone());
                let change = match self.entry_lifecycle(p) {
                    Lifecycle::Creating | Lifecycle::Updating => p.change,
                    _ => None,
                };
                let mut entry = Entry::changed(function, spec, change);
                entry
                    .settled
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                entry.fallback = p.fallback.clone();
                entry
            }
            (Before::Was(_), previous) => {
                prepare.insert(0, spec.clone());
                let mut entry = Entry::changed(function, spec, Some(Change::Update));
                entry.fallback = previous.and_then(|p| {
                    let code_changed = p.spec.code_sha256 != entry.spec.code_sha256;
                    let extracting = p.deferred.load(std::sync::atomic::Ordering::Relaxed);
                    (code_changed || extracting).then(|| Entry::fallback_of(p))?
                });
                entry
            }
        };
        entry.versions = versions;
        (entry, prepare, gone)
    }

    /// The spec of version `v` of `f`: its own key (`name:N`) and qualified ARN.
    fn version_spec(&self, f: &Function, v: &Version) -> SharedSpec {
        let mut spec = self.instance_spec(&v.as_function(f));
        spec.function = format!("{}:{}", f.name, v.number);
        spec.version = v.number.to_string();
        spec.arn = format!("{}:{}", self.arn(&f.name), v.number);
        Arc::new(spec)
    }

    /// `$LATEST`'s entry of a name that may carry a qualifier, and the qualifier.
    fn qualified_entry(&self, name: &str) -> Result<(Arc<Entry>, Option<String>), ControllerError> {
        let r = self.function_ref(name)?;
        let entry = self
            .table()
            .get(&r.name)
            .cloned()
            .ok_or_else(|| self.not_found(&r.name))?;
        Ok((entry, r.qualifier))
    }

    /// A missing version or alias of `f`.
    pub(super) fn qualifier_not_found(&self, f: &str, qualifier: &str) -> ControllerError {
        ControllerError::NotFound(format!("Function not found: {}:{qualifier}", self.arn(f)))
    }

    /// The entry an invocation of `name` (a qualifier in it or not) runs on, and the version
    /// it runs: an alias with a weighted second version picks one of the two here.
    pub(super) fn invocation_target(
        &self,
        name: &str,
    ) -> Result<(Arc<Entry>, String), ControllerError> {
        let (latest, qualifier) = self.qualified_entry(name)?;
        let Some(qualifier) = qualifier else {
            return Ok((latest, LATEST.to_string()));
        };
        let target = match latest.function.published.aliases.get(&qualifier) {
            Some(alias) => alias.route(rand::random::<f64>()).to_string(),
            None => qualifier.clone(),
        };
        if target == LATEST {
            return Ok((latest, target));
        }
        let entry = versions::version_number(&target)
            .and_then(|n| latest.versions.get(&n))
            .cloned()
            .ok_or_else(|| self.qualifier_not_found(&latest.function.name, &qualifier))?;
        Ok((entry, target))
    }

    /// GetFunction and GetFunctionConfiguration: `$LATEST`, a version, or what an alias names.
    pub fn get_qualified(&self, name: &str) -> Result<Qualified, ControllerError> {
        let (latest, qualifier) = self.qualified_entry(name)?;
        let f = &latest.function;
        let Some(qualifier) = qualifier else {
            return Ok(self.latest_view(f, self.arn(&f.name)));
        };
        let arn = format!("{}:{qualifier}", self.arn(&f.name));
        let target = match f.published.aliases.get(&qualifier) {
            Some(alias) => alias.function_version.clone(),
            None => qualifier.clone(),
        };
        if target == LATEST {
            return Ok(self.latest_view(f, arn));
        }
        let entry = versions::version_number(&target)
            .and_then(|n| latest.versions.get(&n))
            .ok_or_else(|| self.qualifier_not_found(&f.name, &qualifier))?;
        Ok(self.version_view(&latest, entry, arn))
    }

    fn latest_view(&self, f: &Function, arn: String) -> Qualified {
        Qualified {
            function: f.clone(),
            version: LATEST.to_string(),
            arn,
            revision_id: super::revision_id(f),
            lifecycle: self.lifecycle(f),
        }
    }

    fn version_view(&self, latest: &Entry, entry: &Entry, arn: String) -> Qualified {
        let number = entry.spec.version.clone();
        let revision_id = versions::version_number(&number)
            .and_then(|n| latest.function.published.version(n))
            .map(|v| v.revision_id.clone())
            .unwrap_or_default();
        Qualified {
            function: entry.function.clone(),
            version: number,
            arn,
            revision_id,
            // A version is never updated: it is created, then ready (or failed).
            lifecycle: match self.entry_lifecycle(entry) {
                Lifecycle::Updating => Lifecycle::Creating,
                Lifecycle::UpdateFailed(failure) => Lifecycle::Failed(failure),
                other => other,
            },
        }
    }

    /// ListVersionsByFunction: `$LATEST` (under its qualified ARN) and each version, in order.
    pub fn list_versions(&self, name: &str) -> Result<Vec<Qualified>, ControllerError> {
        // A qualifier in the name is allowed by the call's pattern, and names the same list.
        let (latest, _) = self.qualified_entry(name)?;
        let f = &latest.function;
        let mut all = vec![self.latest_view(f, format!("{}:{LATEST}", self.arn(&f.name)))];
        for entry in latest.versions.values() {
            let arn = entry.spec.arn.clone();
            all.push(self.version_view(&latest, entry, arn));
        }
        Ok(all)
    }

    /// PublishVersion (and `Publish` on CreateFunction and UpdateFunctionCode): a version of
    /// `$LATEST` as it is now, unless the latest version has its code and configuration
    /// already, which is then returned. `code_sha256` (base64, as Lambda reports it) and
    /// `expected_revision` must match `$LATEST`'s if given.
    pub fn publish_version(
        &self,
        name: &str,
        code_sha256: Option<&str>,
        description: Option<String>,
        expected_revision: Option<&str>,
    ) -> Result<Qualified, ControllerError> {
        let r = self.strict_function_ref(name)?;
        if r.qualifier.is_some() {
            return Err(ControllerError::InvalidParameter(format!(
                "Function name '{name}' has a qualifier: versions are published from the unqualified function"
            )));
        }
        let mutation = self.lock_mutations();
        let mut number = 0;
        let published = self.modify_if(&mutation, &r.name, |f| {
            check_revision(f, expected_revision)?;
            let current = super::code::StoredCode::sha256_base64(&f.code_sha256);
            if let Some(given) = code_sha256.filter(|given| *given != current) {
                return Err(ControllerError::InvalidParameter(format!(
                    "CodeSHA256 ({given}) is different from current CodeSHA256 in $LATEST ({current}). Please try again with the current CodeSHA256."
                )));
            }
            if let Some(last) = f.published.versions.last().filter(|v| v.same_as(f)) {
                number = last.number;
                return Ok(false);
            }
            number = f.published.last + 1;
            f.published.last = number;
            f.published.versions.push(Version {
                number,
                config: Version::config_of(f),
                description: description.clone(),
                code_sha256: f.code_sha256.clone(),
                code_size: f.code_size,
                last_modified: chrono::Utc::now(),
                revision: f.revision,
                revision_id: new_revision_id(),
            });
            Ok(true)
        })?;
        drop(mutation);
        self.get_qualified(&format!("{}:{number}", published.name))
    }

    /// DeleteFunction with a qualifier: that version only. `$LATEST` cannot go without the
    /// function, an alias is refused, a version an alias routes to is refused, and a version
    /// that does not exist deletes nothing.
    pub(super) fn delete_version(
        &self,
        name: &str,
        qualifier: &str,
    ) -> Result<(), ControllerError> {
        let mutation = self.lock_mutations();
        let (latest, _) = self.qualified_entry(name)?;
        let Some(number) = versions::version_number(qualifier) else {
            return Err(ControllerError::InvalidParameter(if qualifier == LATEST {
                "$LATEST version cannot be deleted without deleting the function.".into()
            } else {
                "Deletion of aliases is not currently supported.".into()
            }));
        };
        if latest.function.published.version(number).is_none() {
            return Ok(());
        }
        let doomed = latest.versions.get(&number).cloned();
        self.modify_if(&mutation, &latest.function.name, |f| {
            let users = f.published.aliases_of(qualifier);
            if !users.is_empty() {
                return Err(ControllerError::Conflict(format!(
                    "Unable to delete version because the following aliases reference it: [{}]",
                    users.join(", ")
                )));
            }
            let before = f.published.versions.len();
            f.published.versions.retain(|v| v.number != number);
            f.published.forget_qualifier(&number.to_string());
            Ok(f.published.versions.len() != before)
        })?;
        if let Some(doomed) = doomed {
            self.drop_unused_code(&doomed.function.code_sha256);
            if !doomed.function.config.layers.is_empty() {
                self.release_layer_contents();
            }
        }
        Ok(())
    }

    /// Unlinks package `digest` if no function or version uses it any more. The caller holds
    /// the mutation lock.
    pub(super) fn drop_unused_code(&self, digest: &str) {
        let live = self
            .table()
            .values()
            .any(|e| packages(&e.function).iter().any(|p| p == digest));
        if live {
            return;
        }
        self.unpacks.forget_failed(digest);
        // Unlinked under the lock: packages that creates and updates in flight have stored
        // are not referenced yet, but are not garbage.
        if let Some(doomed) = self.code.unlink(digest) {
            tokio::task::spawn_blocking(move || {
                let _ = std::fs::remove_dir_all(doomed);
            });
        }
    }

    /// [`Self::modify_locked`] for a change that may find nothing to do (`change` returns
    /// false): then nothing is written, and the function is returned as it is.
    pub(super) fn modify_if(
        &self,
        mutation: &std::sync::MutexGuard<'_, ()>,
        name: &str,
        mut change: impl FnMut(&mut Function) -> Result<bool, ControllerError>,
    ) -> Result<Function, ControllerError> {
        let current = self.entry(name)?.function.clone();
        let mut probe = current.clone();
        if !change(&mut probe)? {
            return Ok(current);
        }
        self.modify_locked(mutation, name, |f| {
            change(f)?;
            Ok(())
        })
    }
}

/// Whether `new` differs from `old` only in what PutFunctionConcurrency changes (and the
/// revision that comes with it).
fn only_concurrency_differs(old: &SharedSpec, new: &SharedSpec) -> bool {
    let mut carried = (**old).clone();
    carried.revision = new.revision;
    carried.max_instances = new.max_instances;
    carried.reserved_concurrency = new.reserved_concurrency;
    carried == **new
}
