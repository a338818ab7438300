//! Function tags: TagResource, UntagResource, ListTags and CreateFunction's `Tags`. A `kiln:`
//! tag also sets one of kiln's extension settings (`function::tags`), checked as the extension
//! parameters are.

use std::collections::BTreeMap;

use chrono::Utc;

use super::{Controller, ControllerError};
use crate::function::{tags, Function, FunctionConfig};

/// Lambda's pattern for the resource of a tagging call: a function's ARN.
const RESOURCE_PATTERN: &str = "arn:(aws[a-zA-Z-]*):lambda:[a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\\d{1}:\\d{12}:function:[a-zA-Z0-9-_]+(:(\\$LATEST|[a-zA-Z0-9-_]+))?";

impl Controller {
    /// ListTags.
    pub fn tags(&self, resource: &str) -> Result<BTreeMap<String, String>, ControllerError> {
        Ok(self.tagged(resource)?.tags)
    }

    /// TagResource: adds tags, replacing the values of keys the function has.
    pub fn tag(
        &self,
        resource: &str,
        new: BTreeMap<String, String>,
    ) -> Result<Function, ControllerError> {
        self.tagged(resource)?;
        self.modify(resource, |f| {
            let mut all = f.tags.clone();
            all.extend(new.clone());
            self.retag(f, all, &new, &[])
        })
    }

    /// UntagResource: removes tags; keys the function does not have are ignored.
    pub fn untag(&self, resource: &str, keys: &[String]) -> Result<Function, ControllerError> {
        self.tagged(resource)?;
        self.modify(resource, |f| {
            let mut all = f.tags.clone();
            let removed: Vec<String> = keys
                .iter()
                .filter(|k| all.remove(k.as_str()).is_some())
                .cloned()
                .collect();
            self.retag(f, all, &BTreeMap::new(), &removed)
        })
    }

    /// Checks the tags CreateFunction was given and applies their `kiln:` settings.
    pub(super) fn tags_for_create(
        &self,
        config: &mut FunctionConfig,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        tags::check(tags).map_err(ControllerError::InvalidParameter)?;
        tags::apply(config, &tags::kiln_tags(tags), &[]).map_err(ControllerError::InvalidParameter)
    }

    /// Gives `f` the tags `all`; `set` and `removed` are what changed. A change of kiln's
    /// settings is a configuration update (a new revision), refused as UpdateFunctionConfiguration
    /// is while the function is `Pending` or an update is in progress; other tags change nothing
    /// else and are accepted then, as on Lambda.
    fn retag(
        &self,
        f: &mut Function,
        all: BTreeMap<String, String>,
        set: &BTreeMap<String, String>,
        removed: &[String],
    ) -> Result<(), ControllerError> {
        tags::check(&all).map_err(ControllerError::InvalidParameter)?;
        let mut config = f.config.clone();
        tags::apply(&mut config, &tags::kiln_tags(set), removed)
            .map_err(ControllerError::InvalidParameter)?;
        if config != f.config {
            self.validate(&config)?;
            // After validation, as UpdateFunctionConfiguration: an invalid setting is reported
            // as invalid, not as a conflict that waiting would not resolve.
            self.settled(f)?;
            f.config = config;
            f.revision += 1;
            f.last_modified = Utc::now();
        }
        f.tags = all;
        Ok(())
    }

    /// The function a tagging call names, by its ARN (Lambda takes no plain name there).
    fn tagged(&self, resource: &str) -> Result<Function, ControllerError> {
        let r = self
            .function_ref(resource)
            .map_err(|_| resource_error(resource))?;
        if r.region.is_none() {
            return Err(resource_error(resource));
        }
        self.get(resource)
    }
}

fn resource_error(resource: &str) -> ControllerError {
    ControllerError::Validation(format!(
        "1 validation error detected: Value '{resource}' at 'resource' failed to satisfy constraint: Member must satisfy regular expression pattern: {RESOURCE_PATTERN}"
    ))
}
