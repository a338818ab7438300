//! Put/Get/Delete/ListProvisionedConcurrencyConfigs: instances kept initialised ahead of
//! demand for a version or an alias, as on Lambda.
//!
//! A config is part of the function's record (it goes with its version or alias). The node
//! keeps the version's instances made ahead of demand (its spare forks or standbys) at least at
//! the provisioned count, beside `KilnPrebake.Standbys` and what demand predicts; an alias's
//! count goes to the versions it routes to, split by its weights. What is allocated is what the
//! node has initialised of that version: live instances and ready standbys.

use chrono::Utc;

use super::{Controller, ControllerError, Entry};
use crate::function::versions::{self, Provisioned, LATEST};
use crate::function::{self, Function, MAX_STANDBYS};

/// A config and where its instances are.
#[derive(Debug, Clone, PartialEq)]
pub struct ProvisionedStatus {
    pub requested: u32,
    pub allocated: u32,
    /// Of the allocated, those free to take a request now (Lambda's "available").
    pub available: u32,
    /// `IN_PROGRESS`, `READY` or `FAILED`.
    pub status: &'static str,
    pub reason: Option<String>,
    pub last_modified: chrono::DateTime<Utc>,
}

impl Controller {
    /// PutProvisionedConcurrencyConfig.
    pub fn put_provisioned(
        &self,
        name: &str,
        qualifier: Option<&str>,
        requested: i64,
    ) -> Result<(Function, String, ProvisionedStatus), ControllerError> {
        if requested < 1 {
            return Err(ControllerError::Validation(format!(
                "1 validation error detected: Value '{requested}' at 'provisionedConcurrentExecutions' failed to satisfy constraint: Member must have value greater than or equal to 1"
            )));
        }
        let (target, qualifier) = self.provisioned_target(name, qualifier)?;
        let requested = u32::try_from(requested).unwrap_or(u32::MAX);
        let function = self.modify(&target.name, |f| {
            let others: u32 = f
                .published
                .provisioned
                .iter()
                .filter(|(q, _)| **q != qualifier)
                .map(|(_, p)| p.requested)
                .sum();
            if let Some(reserved) = f.reserved_concurrency {
                if others.saturating_add(requested) > reserved {
                    return Err(ControllerError::InvalidParameter(
                        "Requested Provisioned Concurrency should not be greater than the reservedConcurrentExecution for function".into(),
                    ));
                }
            }
            let limit = MAX_STANDBYS.min(self.config.node_max_instances);
            if others.saturating_add(requested) > limit {
                return Err(ControllerError::InvalidParameter(format!(
                    "Requested Provisioned Concurrency exceeds what kiln keeps initialised for one function on a node: {limit} in all, {others} provisioned already"
                )));
            }
            f.published.provisioned.insert(
                qualifier.clone(),
                Provisioned {
                    requested,
                    last_modified: Utc::now(),
                },
            );
            Ok(())
        })?;
        // A version's snapshot is otherwise built at its first start (or at kiln's, for the
        // versions kept warm): these versions need theirs now.
        if let Ok(entry) = self.entry(&function.name) {
            for (number, version) in &entry.versions {
                let covered = function.published.provisioned_share(&qualifier, *number) > 0;
                if covered && !version.deferred.load(std::sync::atomic::Ordering::Relaxed) {
                    self.agent.prepare(version.spec.clone());
                }
            }
        }
        let status = self
            .provisioned_status(&function, &qualifier)
            .ok_or_else(|| self.qualifier_gone(&function.name, &qualifier))?;
        Ok((function, qualifier, status))
    }

    /// GetProvisionedConcurrencyConfig: `None` for a version or alias without one.
    pub fn provisioned(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<Option<ProvisionedStatus>, ControllerError> {
        let (function, qualifier) = self.provisioned_target(name, qualifier)?;
        Ok(self.provisioned_status(&function, &qualifier))
    }

    /// DeleteProvisionedConcurrencyConfig: false if there was none.
    pub fn delete_provisioned(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<bool, ControllerError> {
        let (function, qualifier) = self.provisioned_target(name, qualifier)?;
        if !function.published.provisioned.contains_key(&qualifier) {
            return Ok(false);
        }
        let mutation = self.lock_mutations();
        self.modify_if(&mutation, &function.name, |f| {
            Ok(f.published.provisioned.remove(&qualifier).is_some())
        })?;
        Ok(true)
    }

    /// ListProvisionedConcurrencyConfigs: each of the function's, by qualifier.
    pub fn provisioned_configs(
        &self,
        name: &str,
    ) -> Result<(Function, Vec<(String, ProvisionedStatus)>), ControllerError> {
        self.strict_function_ref(name)?;
        let function = self.get(name)?;
        let configs = function
            .published
            .provisioned
            .keys()
            .filter_map(|q| Some((q.clone(), self.provisioned_status(&function, q)?)))
            .collect();
        Ok((function, configs))
    }

    /// Tells the node what each version of `entry` is provisioned with.
    pub(super) fn provision_versions(&self, entry: &Entry) {
        for (number, version) in &entry.versions {
            let instances = entry.function.published.provisioned_for(*number);
            self.agent.provision(version.spec.clone(), instances);
        }
    }

    /// The function a provisioned concurrency call names, and its qualifier: a version or an
    /// alias of a version (never `$LATEST`, as on Lambda).
    fn provisioned_target(
        &self,
        name: &str,
        qualifier: Option<&str>,
    ) -> Result<(Function, String), ControllerError> {
        if self.config.cluster.is_some() {
            return Err(ControllerError::InvalidParameter(
                "kiln does not keep provisioned concurrency in cluster mode yet: use KilnPrebake.Standbys".into(),
            ));
        }
        let r = self.strict_function_ref(name)?;
        super::urls::check_same_qualifier(r.qualifier.as_deref(), qualifier)?;
        let function = self.entry(&r.name)?.function.clone();
        let Some(qualifier) = r.qualifier.as_deref().or(qualifier) else {
            return Err(ControllerError::Validation(
                "1 validation error detected: Value null at 'qualifier' failed to satisfy constraint: Member must not be null".into(),
            ));
        };
        let unpublished = || {
            ControllerError::InvalidParameter(
                "Provisioned Concurrency Configs cannot be applied to unpublished function versions."
                    .into(),
            )
        };
        if qualifier == LATEST {
            return Err(unpublished());
        }
        match versions::version_number(qualifier) {
            Some(n) if function.published.version(n).is_some() => {}
            Some(_) => return Err(self.qualifier_gone(&function.name, qualifier)),
            None => match function.published.aliases.get(qualifier) {
                Some(alias) if alias.function_version == LATEST => return Err(unpublished()),
                Some(_) => {}
                None => return Err(self.qualifier_gone(&function.name, qualifier)),
            },
        }
        Ok((function, qualifier.to_string()))
    }

    /// Where `qualifier`'s config is: what the node has initialised of the versions it covers.
    fn provisioned_status(&self, f: &Function, qualifier: &str) -> Option<ProvisionedStatus> {
        let config = f.published.provisioned.get(qualifier)?;
        let entry = self.entry(&f.name).ok()?;
        let numbers: Vec<u64> = match versions::version_number(qualifier) {
            Some(n) => vec![n],
            None => {
                let alias = f.published.aliases.get(qualifier)?;
                std::iter::once(&alias.function_version)
                    .chain(alias.weights.keys())
                    .filter_map(|v| versions::version_number(v))
                    .collect()
            }
        };
        let (mut allocated, mut available) = (0u32, 0u32);
        let mut failed = None;
        for n in numbers {
            let Some(version) = entry.versions.get(&n) else {
                continue;
            };
            if version.spec.prebake.mode == function::PrebakeMode::Off {
                failed = Some(
                    "KilnPrebake.Mode is off for this function: kiln initialises no instance ahead of demand"
                        .to_string(),
                );
                continue;
            }
            // The version's instances serve every config that covers it, each in proportion.
            let own = f.published.provisioned_share(qualifier, n);
            let wanted = f.published.provisioned_for(n).max(1);
            let share = |have: usize| {
                let have = u32::try_from(have).unwrap_or(u32::MAX).min(wanted);
                (u64::from(have) * u64::from(own) / u64::from(wanted)) as u32
            };
            let have = self
                .agent
                .initialised(&version.spec)
                .unwrap_or(crate::agent::Initialised {
                    all: wanted as usize,
                    idle: wanted as usize,
                });
            allocated += share(have.all);
            available += share(have.idle);
        }
        let allocated = allocated.min(config.requested);
        let available = available.min(allocated);
        let (status, reason) = match failed {
            Some(reason) => ("FAILED", Some(reason)),
            None if allocated >= config.requested => ("READY", None),
            None => ("IN_PROGRESS", None),
        };
        Some(ProvisionedStatus {
            requested: config.requested,
            allocated,
            available,
            status,
            reason,
            last_modified: config.last_modified,
        })
    }
}
