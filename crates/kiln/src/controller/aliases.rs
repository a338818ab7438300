//! Aliases: CreateAlias, GetAlias, UpdateAlias, DeleteAlias, ListAliases. An alias names
//! `$LATEST` or a version, and may send a weighted share of its invocations to one more
//! version; it lives in the function's record with its versions ([`super::versions`]).

use std::collections::BTreeMap;

use super::versions::new_revision_id;
use super::{Controller, ControllerError};
use crate::function::versions::{self, Alias, LATEST};
use crate::function::Function;

/// CreateAlias's and UpdateAlias's fields; `None` leaves a field as it is (UpdateAlias).
#[derive(Debug, Clone, Default)]
pub struct AliasInput {
    pub function_version: Option<String>,
    pub description: Option<String>,
    /// `Some(empty)` removes the routing.
    pub weights: Option<BTreeMap<String, f64>>,
    pub revision_id: Option<String>,
}

impl Controller {
    /// `name`'s alias `alias`, if it has one.
    fn alias_of(&self, name: &str, alias: &str) -> Result<(Function, Alias), ControllerError> {
        let function = self.get(name)?;
        let found = function.published.aliases.get(alias).cloned();
        match found {
            Some(a) => Ok((function, a)),
            None => Err(ControllerError::NotFound(format!(
                "Cannot find alias arn: {}:{alias}",
                self.arn(&function.name)
            ))),
        }
    }

    /// An alias's ARN.
    pub fn alias_arn(&self, function: &str, alias: &str) -> String {
        format!("{}:{alias}", self.arn(function))
    }

    /// GetAlias.
    pub fn get_alias(&self, name: &str, alias: &str) -> Result<(Function, Alias), ControllerError> {
        check_alias_name(alias)?;
        self.strict_function_ref(name)?;
        self.alias_of(name, alias)
    }

    /// ListAliases: every alias of `name`, or those that route to `version`.
    pub fn list_aliases(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<(Function, Vec<Alias>), ControllerError> {
        self.strict_function_ref(name)?;
        let function = self.get(name)?;
        let aliases = function
            .published
            .aliases
            .values()
            .filter(|a| {
                version.is_none_or(|v| a.function_version == v || a.weights.contains_key(v))
            })
            .cloned()
            .collect();
        Ok((function, aliases))
    }

    /// CreateAlias.
    pub fn create_alias(
        &self,
        name: &str,
        alias: &str,
        input: AliasInput,
    ) -> Result<(Function, Alias), ControllerError> {
        check_alias_name(alias)?;
        self.strict_function_ref(name)?;
        let Some(target) = input.function_version.clone() else {
            return Err(ControllerError::InvalidParameter(
                "FunctionVersion is a mandatory parameter for CreateAlias".into(),
            ));
        };
        let mutation = self.lock_mutations();
        let function = self.modify_if(&mutation, name, |f| {
            if f.published.aliases.contains_key(alias) {
                return Err(ControllerError::Conflict(format!(
                    "Alias already exists: {}",
                    self.alias_arn(&f.name, alias)
                )));
            }
            let weights = input.weights.clone().unwrap_or_default();
            self.check_routing(f, &target, &weights)?;
            f.published.aliases.insert(
                alias.to_string(),
                Alias {
                    name: alias.to_string(),
                    function_version: target.clone(),
                    description: input.description.clone().unwrap_or_default(),
                    weights,
                    revision_id: new_revision_id(),
                    url: None,
                },
            );
            Ok(true)
        })?;
        drop(mutation);
        self.alias_of(&function.name, alias)
    }

    /// UpdateAlias.
    pub fn update_alias(
        &self,
        name: &str,
        alias: &str,
        input: AliasInput,
    ) -> Result<(Function, Alias), ControllerError> {
        check_alias_name(alias)?;
        self.strict_function_ref(name)?;
        let mutation = self.lock_mutations();
        let function = self.modify_if(&mutation, name, |f| {
            let Some(current) = f.published.aliases.get(alias).cloned() else {
                return Err(ControllerError::NotFound(format!(
                    "Alias not found: {}",
                    self.alias_arn(&f.name, alias)
                )));
            };
            if input
                .revision_id
                .as_deref()
                .is_some_and(|r| r != current.revision_id)
            {
                return Err(ControllerError::PreconditionFailed(
                    "The Revision Id provided does not match the latest Revision Id. Call the GetFunction/GetAlias API to retrieve the latest Revision Id".into(),
                ));
            }
            let target = input
                .function_version
                .clone()
                .unwrap_or(current.function_version.clone());
            let weights = input.weights.clone().unwrap_or(current.weights.clone());
            self.check_routing(f, &target, &weights)?;
            f.published.aliases.insert(
                alias.to_string(),
                Alias {
                    name: alias.to_string(),
                    function_version: target,
                    description: input
                        .description
                        .clone()
                        .unwrap_or(current.description.clone()),
                    weights,
                    revision_id: new_revision_id(),
                    url: current.url.clone(),
                },
            );
            Ok(true)
        })?;
        drop(mutation);
        self.alias_of(&function.name, alias)
    }

    /// DeleteAlias: nothing to do for an alias that does not exist.
    pub fn delete_alias(&self, name: &str, alias: &str) -> Result<(), ControllerError> {
        check_alias_name(alias)?;
        self.strict_function_ref(name)?;
        let mutation = self.lock_mutations();
        self.modify_if(&mutation, name, |f| {
            f.published.forget_qualifier(alias);
            Ok(f.published.aliases.remove(alias).is_some())
        })?;
        Ok(())
    }

    /// An alias's target and routing: versions `f` has, the additional one a published
    /// version other than the target, which is then not `$LATEST`; one additional version
    /// at most, weighted 0 to 1.
    fn check_routing(
        &self,
        f: &Function,
        target: &str,
        weights: &BTreeMap<String, f64>,
    ) -> Result<(), ControllerError> {
        if target != LATEST && versions::version_number(target).is_none() {
            return Err(ControllerError::Validation(format!(
                "1 validation error detected: Value '{target}' at 'functionVersion' failed to satisfy constraint: Member must satisfy regular expression pattern: (\\$LATEST|[0-9]+)"
            )));
        }
        let exists = |v: &str| {
            v == LATEST
                || versions::version_number(v).is_some_and(|n| f.published.version(n).is_some())
        };
        if !exists(target) {
            return Err(self.qualifier_not_found(&f.name, target));
        }
        if weights.len() > 1 {
            return Err(ControllerError::InvalidParameter(
                "Number of items in AdditionalVersionWeights cannot be greater than 1".into(),
            ));
        }
        for (version, weight) in weights {
            if !(0.0..=1.0).contains(weight) || weight.is_nan() {
                return Err(ControllerError::Validation(format!(
                    "1 validation error detected: Value '{weight}' at 'routingConfig.additionalVersionWeights' failed to satisfy constraint: Map value must satisfy constraint: [Member must have value less than or equal to 1.0, Member must have value greater than or equal to 0.0]"
                )));
            }
            if version == target {
                return Err(ControllerError::InvalidParameter(format!(
                    "Invalid function version {version}. Function version {version} is already included in routing configuration."
                )));
            }
            if target == LATEST || version == LATEST {
                return Err(ControllerError::InvalidParameter(
                    "$LATEST is not supported for an alias pointing to more than 1 version".into(),
                ));
            }
            if !exists(version) {
                return Err(self.qualifier_not_found(&f.name, version));
            }
        }
        Ok(())
    }
}

/// An alias name must match Lambda's pattern.
fn check_alias_name(alias: &str) -> Result<(), ControllerError> {
    if versions::valid_alias_name(alias) {
        return Ok(());
    }
    let constraint = if alias.len() > 128 {
        "Member must have length less than or equal to 128".to_string()
    } else {
        format!(
            "Member must satisfy regular expression pattern: {}",
            versions::ALIAS_PATTERN
        )
    };
    Err(ControllerError::Validation(format!(
        "1 validation error detected: Value '{alias}' at 'name' failed to satisfy constraint: {constraint}"
    )))
}
