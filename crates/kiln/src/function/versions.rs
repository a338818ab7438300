//! A function's published versions and aliases (Lambda's PublishVersion and CreateAlias).
//!
//! A version is an immutable snapshot of the function's code and configuration, numbered 1,
//! 2, … (a number is never given twice, even after its version is deleted). An alias names
//! `$LATEST` or a version, and may send a share of its invocations to one more version
//! (`RoutingConfig.AdditionalVersionWeights`). Both live in the function's record, so they
//! are committed, replicated and deleted with it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Function, FunctionConfig};

/// `$LATEST`: the function's unpublished, changeable version.
pub const LATEST: &str = "$LATEST";

/// `$LATEST`, for serde's defaults.
pub fn latest() -> String {
    LATEST.to_string()
}

/// Lambda's pattern of an alias name: not all digits (a version's number), and at most 128
/// characters.
pub const ALIAS_PATTERN: &str = "(?!^[0-9]+$)([a-zA-Z0-9-_]+)";

/// Whether `name` matches [`ALIAS_PATTERN`] within 1 to 128 characters.
pub fn valid_alias_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.bytes().all(|b| b.is_ascii_digit())
}

/// A qualifier as a version's number: `Some` for digits only (no sign, no leading `+`).
pub fn version_number(qualifier: &str) -> Option<u64> {
    if qualifier.is_empty() || !qualifier.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    qualifier.parse().ok()
}

/// What a function has published.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Published {
    /// The highest number given so far.
    #[serde(default)]
    pub last: u64,
    /// Its versions, by ascending number.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<Version>,
    /// Its aliases, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aliases: BTreeMap<String, Alias>,
    /// The asynchronous invocation configs of its versions and aliases, by version number
    /// or alias name: Lambda applies the config of the qualifier an event was sent to, and
    /// a config goes with its version or alias.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event_invoke: BTreeMap<String, super::event_invoke::EventInvokeConfig>,
    /// Provisioned concurrency, by version number or alias name (never `$LATEST`): goes with
    /// its version or alias.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provisioned: BTreeMap<String, Provisioned>,
}

/// A version's or alias's provisioned concurrency (PutProvisionedConcurrencyConfig): instances
/// kiln keeps initialised ahead of demand for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provisioned {
    pub requested: u32,
    pub last_modified: DateTime<Utc>,
}

impl Published {
    pub fn is_empty(&self) -> bool {
        self.last == 0
            && self.versions.is_empty()
            && self.aliases.is_empty()
            && self.event_invoke.is_empty()
            && self.provisioned.is_empty()
    }

    /// The provisioned concurrency version `number` serves: its own, and its share of that of
    /// each alias that routes to it.
    pub fn provisioned_for(&self, number: u64) -> u32 {
        self.provisioned
            .keys()
            .map(|qualifier| self.provisioned_share(qualifier, number))
            .sum()
    }

    /// What of `qualifier`'s provisioned concurrency version `number` serves: all of a
    /// version's own; an alias's split between its two versions by its weights, rounded up
    /// (as Lambda splits it).
    pub fn provisioned_share(&self, qualifier: &str, number: u64) -> u32 {
        let Some(p) = self.provisioned.get(qualifier) else {
            return 0;
        };
        let version = number.to_string();
        if qualifier == version {
            return p.requested;
        }
        let Some(alias) = self.aliases.get(qualifier) else {
            return 0;
        };
        let extra: f64 = alias.weights.values().sum();
        let share = match alias.weights.get(&version) {
            Some(weight) => *weight,
            None if alias.function_version == version => 1.0 - extra,
            None => return 0,
        };
        (f64::from(p.requested) * share).ceil() as u32
    }

    /// Forgets what goes with the version or alias `qualifier`.
    pub fn forget_qualifier(&mut self, qualifier: &str) {
        self.event_invoke.remove(qualifier);
        self.provisioned.remove(qualifier);
    }

    pub fn version(&self, number: u64) -> Option<&Version> {
        self.versions
            .binary_search_by_key(&number, |v| v.number)
            .ok()
            .map(|i| &self.versions[i])
    }

    /// The aliases that route to version `target` (`$LATEST` or a number), by name.
    pub fn aliases_of(&self, target: &str) -> Vec<String> {
        self.aliases
            .values()
            .filter(|a| a.function_version == target || a.weights.contains_key(target))
            .map(|a| a.name.clone())
            .collect()
    }
}

/// One published version: the code and configuration `$LATEST` had when it was published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Version {
    pub number: u64,
    /// `$LATEST`'s configuration when it was published ([`Version::config_of`]).
    pub config: FunctionConfig,
    /// The Description PublishVersion gave it instead of the configuration's, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub code_sha256: String,
    pub code_size: u64,
    pub last_modified: DateTime<Utc>,
    /// The function's revision it was published from: its instances' revision on the node.
    pub revision: u64,
    /// Its RevisionId, fixed at publication.
    pub revision_id: String,
}

impl Version {
    /// What of `$LATEST`'s configuration a version keeps: all but its asynchronous invocation
    /// settings, which are the function's, as on Lambda (they are not versioned).
    pub fn config_of(f: &Function) -> FunctionConfig {
        FunctionConfig {
            event_invoke: None,
            ..f.config.clone()
        }
    }

    /// Whether `$LATEST` (`f`) has the code and configuration this version was published from.
    pub fn same_as(&self, f: &Function) -> bool {
        self.code_sha256 == f.code_sha256 && self.config == Self::config_of(f)
    }

    /// `f` as this version: its name and function-wide settings, this version's code and
    /// configuration.
    pub fn as_function(&self, f: &Function) -> Function {
        let mut config = self.config.clone();
        if let Some(description) = &self.description {
            config.description.clone_from(description);
        }
        Function {
            name: f.name.clone(),
            config,
            code_sha256: self.code_sha256.clone(),
            code_size: self.code_size,
            revision: self.revision,
            last_modified: self.last_modified,
            reserved_concurrency: f.reserved_concurrency,
            url_auth: None,
            tags: f.tags.clone(),
            published: Published::default(),
            previous_code: None,
        }
    }
}

/// What `$LATEST` ran before an UpdateFunctionCode whose package is not extracted yet: it runs
/// meanwhile and, if the extraction fails, until the code is updated again, as on Lambda. Kept
/// in the function's record, so a restart still has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviousCode {
    pub config: FunctionConfig,
    pub code_sha256: String,
    pub code_size: u64,
    pub last_modified: DateTime<Utc>,
    /// The function's revision it ran at: its instances' revision on the node.
    pub revision: u64,
}

impl PreviousCode {
    /// What `f` runs now.
    pub fn of(f: &Function) -> Self {
        Self {
            config: f.config.clone(),
            code_sha256: f.code_sha256.clone(),
            code_size: f.code_size,
            last_modified: f.last_modified,
            revision: f.revision,
        }
    }

    /// `f` as it ran: its name and function-wide settings, this code and configuration.
    pub fn as_function(&self, f: &Function) -> Function {
        Function {
            name: f.name.clone(),
            config: self.config.clone(),
            code_sha256: self.code_sha256.clone(),
            code_size: self.code_size,
            revision: self.revision,
            last_modified: self.last_modified,
            reserved_concurrency: f.reserved_concurrency,
            url_auth: f.url_auth,
            tags: f.tags.clone(),
            published: Published::default(),
            previous_code: None,
        }
    }
}

/// An alias: a name for `$LATEST` or a version, optionally with a weighted second version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alias {
    pub name: String,
    /// `$LATEST` or a version's number.
    pub function_version: String,
    #[serde(default)]
    pub description: String,
    /// The one additional version and the share of invocations it gets (0.0 to 1.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, f64>,
    pub revision_id: String,
    /// The alias's function URL config: each alias has its own, as in Lambda, and it goes
    /// with the alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<AliasUrl>,
}

/// An alias's function URL config: who may call it and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AliasUrl {
    pub auth: super::UrlAuth,
    pub settings: crate::controller::UrlSettings,
}

impl Alias {
    /// The version an invocation runs: the additional one with its weight's probability,
    /// `draw` being uniform in [0, 1).
    pub fn route(&self, draw: f64) -> &str {
        match self.weights.iter().next() {
            Some((version, weight)) if draw < *weight => version,
            _ => &self.function_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_names_are_never_version_numbers() {
        for good in ["prod", "v1", "1a", "a-b_c", &"x".repeat(128)] {
            assert!(valid_alias_name(good), "{good}");
        }
        for bad in ["", "1", "007", "a b", "$LATEST", "a:b", &"x".repeat(129)] {
            assert!(!valid_alias_name(bad), "{bad}");
        }
        assert_eq!(version_number("12"), Some(12));
        for bad in ["", "+1", "-1", "1.0", "$LATEST", "prod"] {
            assert_eq!(version_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_aliass_provisioned_concurrency_is_split_by_its_weights() {
        let mut published = Published::default();
        let provisioned = |requested| Provisioned {
            requested,
            last_modified: Utc::now(),
        };
        published.aliases.insert(
            "live".into(),
            Alias {
                name: "live".into(),
                function_version: "1".into(),
                description: String::new(),
                weights: BTreeMap::from([("2".into(), 0.25)]),
                revision_id: String::new(),
                url: None,
            },
        );
        published.provisioned.insert("live".into(), provisioned(10));
        published.provisioned.insert("1".into(), provisioned(2));
        assert_eq!(published.provisioned_share("live", 1), 8, "7.5, rounded up");
        assert_eq!(published.provisioned_share("live", 2), 3, "2.5, rounded up");
        assert_eq!(published.provisioned_share("live", 3), 0);
        assert_eq!(published.provisioned_for(1), 10);
        assert_eq!(published.provisioned_for(2), 3);
        published.forget_qualifier("live");
        assert_eq!(published.provisioned_for(1), 2);
        assert_eq!(published.provisioned_for(2), 0);
    }

    #[test]
    fn an_alias_routes_by_its_weight() {
        let mut alias = Alias {
            name: "live".into(),
            function_version: "1".into(),
            description: String::new(),
            weights: BTreeMap::new(),
            revision_id: String::new(),
            url: None,
        };
        assert_eq!(alias.route(0.0), "1");
        alias.weights.insert("2".into(), 0.25);
        assert_eq!(alias.route(0.0), "2");
        assert_eq!(alias.route(0.2499), "2");
        assert_eq!(alias.route(0.25), "1");
        assert_eq!(alias.route(0.99), "1");
    }
}
