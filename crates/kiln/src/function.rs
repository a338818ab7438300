//! The function model shared by the controller and the node agent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::sync::LockExt;

pub mod breakout;
pub mod event_invoke;
pub mod layers;
pub mod settings;
pub mod tags;
pub mod versions;
pub mod web;
pub use breakout::BreakoutConfig;
pub use settings::LambdaSettings;
pub use web::WebConfig;

/// Lambda's limits, checked where configuration enters kiln.
pub const MIN_MEMORY_MB: u32 = 128;
pub const MAX_MEMORY_MB: u32 = 10_240;
pub const MAX_TIMEOUT_S: u32 = 900;
pub const MAX_ENV_BYTES: usize = 4 * 1024;

/// How a function's sandboxes reach the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// A private network namespace with only loopback, where kiln serves what the function may use.
    #[default]
    Isolated,
    /// The host's network namespace (outbound access; the control API still needs credentials).
    Host,
}

/// Who may call a function URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UrlAuth {
    /// Anyone (Lambda's `NONE`).
    #[serde(rename = "NONE")]
    None,
    /// Requests signed with kiln's credentials (Lambda's `AWS_IAM`).
    #[serde(rename = "AWS_IAM")]
    AwsIam,
}

/// What a user configured; everything but the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionConfig {
    pub runtime: String,
    pub handler: String,
    pub memory_mb: u32,
    pub timeout_s: u32,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub network: NetworkMode,
    #[serde(default = "default_tmp_mb")]
    pub ephemeral_storage_mb: u32,
    #[serde(default = "default_role")]
    pub role: String,
    #[serde(default)]
    pub prebake: Prebake,
    /// kiln's extension `KilnSessions`: where a request's session id comes from; `None`: the
    /// function has no sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::session::SessionConfig>,
    #[serde(default)]
    pub memory_sizing: MemorySizing,
    /// kiln's extension `KilnWeb`: the function is an unmodified web app, and its Handler is
    /// not used. Skipped when absent, so that other functions' RevisionIds stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web: Option<WebConfig>,
    /// kiln's extension `KilnBreakout`: the trace-compiled fast path. Skipped when absent, so
    /// that other functions' RevisionIds stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakout: Option<BreakoutConfig>,
    /// Lambda settings kiln keeps and returns but does not act on. Skipped when empty, so that
    /// the RevisionId of a function stored before they were kept does not change.
    #[serde(default, skip_serializing_if = "LambdaSettings::is_empty")]
    pub settings: LambdaSettings,
    /// Asynchronous invocations' retries, age limit and destinations
    /// (PutFunctionEventInvokeConfig); Lambda's defaults without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_invoke: Option<event_invoke::EventInvokeConfig>,
    /// Its layers, in the order they are extracted to `/opt`. Skipped when empty, so that
    /// other functions' RevisionIds stay as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<layers::LayerRef>,
}

/// How each invocation's memory limit is set: kiln's extension `KilnMemorySizing` of the
/// function configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemorySizing {
    /// At what the function's memory model predicts, once it is mature (OFC); an invocation
    /// killed for memory under a predicted limit runs again at once at MemorySize, so its
    /// handler runs twice.
    #[default]
    Predicted,
    /// Always at MemorySize (the model still learns): for handlers that must not run twice.
    Booked,
}

/// When kiln builds a function-specific snapshot (the hot start path), and how it warms the
/// function up first. kiln's extension `KilnPrebake` of the function configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Prebake {
    #[serde(default)]
    pub mode: PrebakeMode,
    /// Invocations with `warmup_event` run before the snapshot is taken (Prebaking's warm-up);
    /// 0 for functions with side effects. Unset: [`Prebake::warmups`] decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_invocations: Option<u32>,
    /// The sample event of the warm-up invocations; `{}` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_event: Option<serde_json::Value>,
    /// Instances kept made ahead of demand at least (like provisioned concurrency), whatever the
    /// function's recent demand sizes them at; 0: by demand alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub standbys: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The most warm-up invocations a snapshot may take.
pub const MAX_WARMUPS: u32 = 100;
/// The largest fixed number of standbys a function may ask for.
pub const MAX_STANDBYS: u32 = 64;
/// The largest warm-up event, as serialized JSON (Lambda's async payload limit).
pub const MAX_WARMUP_EVENT_BYTES: usize = 256 * 1024;

/// The warm-up invocations of a function that does not say.
const DEFAULT_WARMUPS: u32 = 3;

impl Prebake {
    /// The warm-up invocations a snapshot of a function on `network` takes: as the function
    /// set them, else 3 in the isolated network and none on the host network, where a warm-up
    /// could reach anything the host reaches (a function there is warmed up if it asks).
    pub fn warmups(&self, network: NetworkMode) -> u32 {
        self.warmup_invocations.unwrap_or(match network {
            NetworkMode::Isolated => DEFAULT_WARMUPS,
            NetworkMode::Host => 0,
        })
    }

    /// This configuration as the API answers it: the warm-ups it takes, set or not.
    pub fn answered(&self, network: NetworkMode) -> Prebake {
        Prebake {
            warmup_invocations: Some(self.warmups(network)),
            ..self.clone()
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrebakeMode {
    /// Built when the function is deployed or updated (Prebaking).
    #[default]
    Deploy,
    /// Built after the function's first start (SEUSS).
    Lazy,
    /// Never: every cold start takes the best path without a function-specific snapshot.
    Off,
}

fn default_role() -> String {
    "arn:aws:iam::000000000000:role/kiln-function".to_string()
}

fn default_tmp_mb() -> u32 {
    512
}

/// A deployed function, as the registry stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Function {
    pub name: String,
    pub config: FunctionConfig,
    /// Hex SHA-256 of the deployment package; the code store's key.
    pub code_sha256: String,
    pub code_size: u64,
    /// Bumped by every code or configuration update.
    pub revision: u64,
    pub last_modified: DateTime<Utc>,
    pub reserved_concurrency: Option<u32>,
    pub url_auth: Option<UrlAuth>,
    /// Its tags; `kiln:` ones also set kiln's extension settings (see `tags`).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Its published versions and aliases. Skipped when empty, so that a function stored
    /// before versions existed reads the same.
    #[serde(default, skip_serializing_if = "versions::Published::is_empty")]
    pub published: versions::Published,
    /// What ran before the last UpdateFunctionCode, while its package is not extracted (or
    /// failed to be); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_code: Option<Box<versions::PreviousCode>>,
}

impl Function {
    /// The asynchronous invocation config of `qualifier` (`None` or `$LATEST`: the
    /// unqualified function's; else a version's number or an alias's name).
    pub fn event_invoke(
        &self,
        qualifier: Option<&str>,
    ) -> Option<&event_invoke::EventInvokeConfig> {
        match qualifier {
            None | Some(versions::LATEST) => self.config.event_invoke.as_ref(),
            Some(q) => self.published.event_invoke.get(q),
        }
    }

    /// Sets or (`None`) removes `qualifier`'s asynchronous invocation config.
    pub fn set_event_invoke(
        &mut self,
        qualifier: Option<&str>,
        config: Option<event_invoke::EventInvokeConfig>,
    ) {
        match (qualifier, config) {
            (None | Some(versions::LATEST), config) => self.config.event_invoke = config,
            (Some(q), Some(config)) => {
                self.published.event_invoke.insert(q.to_string(), config);
            }
            (Some(q), None) => {
                self.published.event_invoke.remove(q);
            }
        }
    }
}

/// The resolved, versioned spec the controller hands the node agent. The agent never looks
/// anything up again: an instance belongs to exactly one spec, and a new revision means new
/// instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceSpec {
    /// The agent's key for the instances: the function's name for `$LATEST`, `name:N` for a
    /// published version, whose instances are apart from `$LATEST`'s.
    pub function: String,
    /// The version its instances run: `$LATEST` or a published version's number.
    #[serde(default = "versions::latest")]
    pub version: String,
    pub arn: String,
    pub revision: u64,
    pub runtime: String,
    pub handler: String,
    pub memory_mb: u32,
    pub timeout_s: u32,
    pub env: BTreeMap<String, String>,
    pub network: NetworkMode,
    pub tmp_mb: u32,
    /// The extracted code on the agent's host, mounted read-only at /var/task.
    pub code_dir: PathBuf,
    /// The function's layers merged on the agent's host, mounted read-only at /opt; `None`
    /// without layers.
    #[serde(default)]
    pub opt_dir: Option<PathBuf>,
    pub code_sha256: String,
    pub region: String,
    /// Most instances this function may have on the node (reserved concurrency or the node cap).
    pub max_instances: u32,
    pub reserved_concurrency: Option<u32>,
    pub prebake: Prebake,
    pub sessions: Option<crate::session::SessionConfig>,
    #[serde(default)]
    pub memory_sizing: MemorySizing,
    /// The web app the runtime's adapter serves (`KilnWeb`), if the function is one.
    #[serde(default)]
    pub web: Option<WebConfig>,
    /// The fast path (`KilnBreakout`), if the function asked for it (`Mode` `auto`).
    #[serde(default)]
    pub breakout: Option<BreakoutConfig>,
}

impl InstanceSpec {
    /// The function's name (a version's key without its `:N`).
    pub fn name(&self) -> &str {
        self.function
            .split_once(':')
            .map_or(self.function.as_str(), |(name, _)| name)
    }

    /// A Python function `function` of `memory_mb`, revision 1, for unit tests.
    #[cfg(test)]
    pub fn example(function: &str, memory_mb: u32) -> Self {
        Self {
            function: function.into(),
            version: "$LATEST".into(),
            arn: format!("arn:aws:lambda:us-east-1:000000000000:function:{function}"),
            revision: 1,
            runtime: "python3.11".into(),
            handler: "h".into(),
            memory_mb,
            timeout_s: 3,
            env: Default::default(),
            network: NetworkMode::Isolated,
            tmp_mb: 512,
            code_dir: PathBuf::new(),
            opt_dir: None,
            code_sha256: String::new(),
            region: "us-east-1".into(),
            max_instances: 1,
            reserved_concurrency: None,
            prebake: Default::default(),
            memory_sizing: Default::default(),
            web: None,
            breakout: None,
            sessions: None,
        }
    }
}

pub type SharedSpec = Arc<InstanceSpec>;

/// A random (v4) UUID from the thread's user-space generator: request ids are made on every
/// invocation, and the operating system's generator would cost a system call each.
pub fn new_request_id() -> uuid::Uuid {
    uuid::Builder::from_random_bytes(rand::random()).into_uuid()
}

/// Lambda's function name pattern: letters, digits, hyphens and underscores, 1 to 64 characters.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A FunctionName parameter, taken apart: a name, a partial ARN `123456789012:function:name` or
/// a full ARN, each optionally with `:qualifier`. The region and account are those the caller
/// wrote, to be checked against the node's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRef {
    pub name: String,
    pub qualifier: Option<String>,
    pub region: Option<String>,
    pub account: Option<String>,
}

/// Lambda's patterns for a FunctionName parameter (its API model's `FunctionName`, of
/// CreateFunction, the updates and the concurrency calls), as its validation errors quote them.
pub const FUNCTION_NAME_PATTERN: &str = r"(arn:(aws[a-zA-Z-]*)?:lambda:)?((eusc-)?[a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\d{1}:)?(\d{12}:)?(function:)?([a-zA-Z0-9-_]+)(:(\$LATEST|[a-zA-Z0-9-_]+))?";
/// `NamespacedFunctionName`, of GetFunction, GetFunctionConfiguration, Invoke, DeleteFunction:
/// it allows dots, so a dotted name there is a function that does not exist (404).
pub const NAMESPACED_FUNCTION_NAME_PATTERN: &str = r"(arn:(aws[a-zA-Z-]*)?:lambda:)?((eusc-)?[a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\d{1}:)?(\d{12}:)?(function:)?([a-zA-Z0-9-_\.]+)(:(\$LATEST(\.PUBLISHED)?|[a-zA-Z0-9-_]+))?";
/// `FunctionUrlFunctionName`, of the function URL config calls: no version qualifier.
pub const URL_FUNCTION_NAME_PATTERN: &str = r"(arn:(aws[a-zA-Z-]*)?:lambda:)?((eusc-)?[a-z]{2}((-gov)|(-iso([a-z]?)))?-[a-z]+-\d{1}:)?(\d{12}:)?(function:)?([a-zA-Z0-9-_]{1,64})(:((?!\d+$)[0-9a-zA-Z-_]+))?";

/// Why a FunctionName parameter is none of Lambda's forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// It does not match the operation's pattern.
    Pattern,
    /// The name itself is longer than 64 characters.
    TooLong,
}

impl NameError {
    /// Lambda's ValidationException message for `raw`, against an operation's `pattern`.
    pub fn message(self, raw: &str, pattern: &str) -> String {
        let constraint = match self {
            NameError::Pattern => {
                format!("Member must satisfy regular expression pattern: {pattern}")
            }
            NameError::TooLong => "Member must have length less than or equal to 64".to_string(),
        };
        format!("1 validation error detected: Value '{raw}' at 'functionName' failed to satisfy constraint: {constraint}")
    }
}

/// Parses a FunctionName parameter in any of Lambda's forms. The name may have dots
/// (`NamespacedFunctionName`); no function kiln creates has one ([`valid_name`]).
pub fn parse_function_ref(raw: &str) -> Result<FunctionRef, NameError> {
    let parts: Vec<&str> = raw.split(':').collect();
    let (name, qualifier, region, account) = match parts.as_slice() {
        [name] => (*name, None, None, None),
        [name, qualifier] => (*name, Some(*qualifier), None, None),
        [account, "function", name] => (*name, None, None, Some(*account)),
        [account, "function", name, qualifier] => (*name, Some(*qualifier), None, Some(*account)),
        ["arn", _partition, "lambda", region, account, "function", name] => {
            (*name, None, Some(*region), Some(*account))
        }
        ["arn", _partition, "lambda", region, account, "function", name, qualifier] => {
            (*name, Some(*qualifier), Some(*region), Some(*account))
        }
        _ => return Err(NameError::Pattern),
    };
    let qualifier_ok = |q: &str| {
        q == "$LATEST"
            || (!q.is_empty()
                && q.len() <= 128
                && q.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    };
    let account_ok = |a: &str| a.len() == 12 && a.bytes().all(|b| b.is_ascii_digit());
    let region_ok = |r: &str| {
        !r.is_empty()
            && r.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let name_chars_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    let valid = name_chars_ok
        && qualifier.is_none_or(qualifier_ok)
        && account.is_none_or(account_ok)
        && region.is_none_or(region_ok);
    if !valid {
        return Err(NameError::Pattern);
    }
    if name.len() > 64 {
        return Err(NameError::TooLong);
    }
    Ok(FunctionRef {
        name: name.to_string(),
        qualifier: qualifier.map(str::to_string),
        region: region.map(str::to_string),
        account: account.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Parts = (String, Option<String>, Option<String>, Option<String>);

    fn parsed(raw: &str) -> Option<Parts> {
        parse_function_ref(raw)
            .ok()
            .map(|r| (r.name, r.qualifier, r.region, r.account))
    }

    #[test]
    fn function_refs_in_every_form() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(parsed("f"), Some(("f".into(), None, None, None)));
        assert_eq!(
            parsed("f:$LATEST"),
            Some(("f".into(), s("$LATEST"), None, None))
        );
        assert_eq!(
            parsed("123456789012:function:f"),
            Some(("f".into(), None, None, s("123456789012")))
        );
        assert_eq!(
            parsed("arn:aws:lambda:us-east-1:123456789012:function:my_fn:prod"),
            Some(("my_fn".into(), s("prod"), s("us-east-1"), s("123456789012")))
        );
        assert_eq!(parsed("bad name"), None);
        assert_eq!(
            parsed("bad.name"),
            Some(("bad.name".into(), None, None, None))
        );
        assert_eq!(parsed("a:b:c:d:e"), None);
        assert_eq!(parsed(&"x".repeat(65)), None);
        assert_eq!(
            parse_function_ref(&"x".repeat(65)).unwrap_err(),
            NameError::TooLong
        );
        assert_eq!(
            parse_function_ref("bad name").unwrap_err(),
            NameError::Pattern
        );
        assert_eq!(parsed("f:"), None);
        assert_eq!(parsed("f:bad qualifier"), None);
        assert_eq!(parsed("12345:function:f"), None);
        assert_eq!(
            parsed("arn:aws:lambda:US-EAST-1:123456789012:function:f"),
            None
        );
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_names_stay_valid(raw in ".{0,200}") {
            if let Ok(r) = parse_function_ref(&raw) {
                prop_assert!(valid_name(&r.name.replace('.', "-")));
            }
        }
    }
}

/// How the object store treats what one invocation writes: the stage of a sequence it runs as
/// (OFC §6.3). Objects an intermediate stage writes live in the object cache only and go when
/// the run ends; a final stage's outputs are written back, then dropped from the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageTag {
    /// The sequence run.
    pub run: String,
    pub stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    Intermediate,
    Final,
}

/// What one invocation tells the object store about itself: the sequence stage it runs as,
/// whether the object cache admits its objects (its cache-benefit prediction, OFC §5.2), and
/// whether it is a shadow run, whose writes must have no visible effect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationTags {
    pub storage: Option<StorageTag>,
    pub admit: Option<bool>,
    pub shadow: Shadow,
    /// Where the invocation's writes are recorded, when its caller asked (an app's gateway,
    /// to know whether a failed request may be served again).
    pub ledger: Option<LedgerRef>,
}

/// One invocation's ledger of writes (its database commits, its acknowledged object writes),
/// compared by identity.
#[derive(Debug, Clone)]
pub struct LedgerRef(pub Arc<kiln_dbproxy::Ledger>);

impl PartialEq for LedgerRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LedgerRef {}

/// Whether a request comes from a shadow run (burst offloading's copy of a real request, run
/// for its answer only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shadow {
    #[default]
    No,
    Yes,
    /// A shadow run and a real one share the listener and the request's process is not
    /// known: its writes can be neither applied nor dropped, and are refused for a retry.
    Unknown,
}

/// The tags of the invocations an instance (or the forks of one zygote, which share its
/// sandbox and so its services) is serving, shared with its sandbox services, whose requests
/// carry them. A request gets the tags every invocation in flight agrees on; where they
/// disagree, those of the invocation whose process owns the request's connection, when the
/// listener can tell (forks know their pid); else none: with two invocations of different runs
/// (or one with none) behind one listener and no owner known, nobody's writes are treated as a
/// sequence's, and they are simply durable; with two that disagree on admission, the
/// function's latest decision holds.
#[derive(Debug, Clone, Default)]
pub struct InvocationSlot(Arc<std::sync::Mutex<Vec<InFlight>>>);

/// An invocation in flight: its tags, and its process where kiln knows it (a fork's pid).
type InFlight = (InvocationTags, Option<u32>);

impl InvocationSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<InFlight>> {
        self.0.locked()
    }

    /// An invocation with `tags` begins, in process `pid` if kiln knows it.
    pub fn enter(&self, tags: InvocationTags, pid: Option<u32>) {
        self.lock().push((tags, pid));
    }

    /// An invocation with `tags` in process `pid` ended.
    pub fn leave(&self, tags: &InvocationTags, pid: Option<u32>) {
        let mut active = self.lock();
        if let Some(i) = active.iter().position(|(t, p)| t == tags && *p == pid) {
            active.swap_remove(i);
        }
    }

    /// The tags of a request arriving now. Where the invocations in flight disagree, `owner`
    /// is asked (once) which of their processes sent it.
    pub fn tags_for(&self, owner: impl FnOnce(&[u32]) -> Option<u32>) -> InvocationTags {
        let active = self.lock();
        let storage = agreed(&active, |t| t.storage.clone());
        let admit = agreed(&active, |t| t.admit);
        let shadow = agreed(&active, |t| Some(t.shadow));
        let ledger = agreed(&active, |t| t.ledger.clone());
        if storage.is_ok() && admit.is_ok() && shadow.is_ok() && ledger.is_ok() {
            return InvocationTags {
                storage: storage.unwrap_or_default(),
                admit: admit.unwrap_or_default(),
                shadow: shadow.unwrap_or_default().unwrap_or_default(),
                ledger: ledger.unwrap_or_default(),
            };
        }
        // Whoever sent it, a write may be any in-flight invocation's: where the owner is not
        // found, every ledger in flight counts it (as unchecked, so none is served again).
        let ledgers: Vec<LedgerRef> = if ledger.is_err() {
            active
                .iter()
                .filter_map(|(t, _)| t.ledger.clone())
                .collect()
        } else {
            Vec::new()
        };
        let pids: Vec<u32> = active.iter().filter_map(|(_, pid)| *pid).collect();
        // The owner is looked up in /proc without the lock, which invocations take to begin
        // and end.
        drop(active);
        let own = owner(&pids).and_then(|pid| {
            let active = self.lock();
            active
                .iter()
                .find(|(_, p)| *p == Some(pid))
                .map(|(tags, _)| tags.clone())
        });
        let shadow = match (shadow, &own) {
            (Ok(agreed), _) => agreed.unwrap_or_default(),
            (Err(()), Some(own)) => own.shadow,
            (Err(()), None) => Shadow::Unknown,
        };
        let ledger = match (ledger, &own) {
            (Ok(agreed), _) => agreed,
            (Err(()), Some(own)) => own.ledger.clone(),
            (Err(()), None) => {
                for l in &ledgers {
                    l.0.unchecked();
                }
                None
            }
        };
        let own = own.unwrap_or_default();
        InvocationTags {
            storage: storage.unwrap_or(own.storage),
            admit: admit.unwrap_or(own.admit),
            shadow,
            ledger,
        }
    }
}

/// `field` of the invocations in flight if every one has the same (`Ok(None)`: none in
/// flight, or all without it); `Err` if they differ.
fn agreed<T: PartialEq>(
    active: &[InFlight],
    field: impl Fn(&InvocationTags) -> Option<T>,
) -> Result<Option<T>, ()> {
    let Some((first, _)) = active.first() else {
        return Ok(None);
    };
    let first = field(first);
    if active.iter().all(|(t, _)| field(t) == first) {
        Ok(first)
    } else {
        Err(())
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;

    fn tag(run: &str) -> InvocationTags {
        InvocationTags {
            storage: Some(StorageTag {
                run: run.into(),
                stage: Stage::Intermediate,
            }),
            admit: None,
            shadow: Shadow::No,
            ledger: None,
        }
    }

    fn nobody(_: &[u32]) -> Option<u32> {
        None
    }

    #[test]
    fn a_tag_holds_only_while_every_invocation_in_flight_has_it() {
        let slot = InvocationSlot::default();
        let none = InvocationTags::default();
        assert_eq!(slot.tags_for(nobody), none);
        slot.enter(tag("a"), None);
        assert_eq!(slot.tags_for(nobody), tag("a"));
        slot.enter(none.clone(), None);
        assert_eq!(
            slot.tags_for(nobody),
            none,
            "a request of the other invocation could be anyone's"
        );
        slot.leave(&none, None);
        slot.enter(tag("b"), None);
        assert_eq!(slot.tags_for(nobody), none);
        slot.leave(&tag("a"), None);
        assert_eq!(slot.tags_for(nobody), tag("b"));
        slot.leave(&tag("b"), None);
        assert_eq!(slot.tags_for(nobody), none);
    }

    #[test]
    fn admission_holds_only_while_every_invocation_in_flight_agrees() {
        let slot = InvocationSlot::default();
        let admit = |a: Option<bool>| InvocationTags {
            storage: None,
            admit: a,
            shadow: Shadow::No,
            ledger: None,
        };
        let admits = |slot: &InvocationSlot| slot.tags_for(nobody).admit;
        assert_eq!(admits(&slot), None);
        slot.enter(admit(Some(false)), None);
        assert_eq!(admits(&slot), Some(false));
        slot.enter(admit(Some(false)), None);
        assert_eq!(admits(&slot), Some(false));
        slot.enter(admit(Some(true)), None);
        assert_eq!(admits(&slot), None);
        slot.leave(&admit(Some(false)), None);
        slot.leave(&admit(Some(false)), None);
        assert_eq!(admits(&slot), Some(true));
        slot.enter(admit(None), None);
        assert_eq!(admits(&slot), None);
    }

    #[test]
    fn where_invocations_disagree_the_connections_owner_decides() {
        let slot = InvocationSlot::default();
        let both = |run: &str, admit: bool| InvocationTags {
            admit: Some(admit),
            ..tag(run)
        };
        slot.enter(both("a", true), Some(10));
        slot.enter(both("b", true), Some(11));
        // Asked only where they disagree, and given the processes in flight.
        let mut asked = None;
        let tags = slot.tags_for(|pids| {
            asked = Some(pids.to_vec());
            Some(11)
        });
        assert_eq!(tags, both("b", true));
        assert_eq!(asked, Some(vec![10, 11]));
        // An owner that is not in flight (a child process), or none known: nobody's.
        assert_eq!(slot.tags_for(|_| Some(12)).storage, None);
        assert_eq!(
            slot.tags_for(nobody).admit,
            Some(true),
            "they agree on this"
        );
        slot.leave(&both("b", true), Some(11));
        assert_eq!(
            slot.tags_for(|_| panic!("nothing to decide")),
            both("a", true)
        );
    }

    #[test]
    fn a_shadow_is_known_only_where_every_invocation_or_the_owner_says_so() {
        let slot = InvocationSlot::default();
        let shadow = |s: Shadow| InvocationTags {
            shadow: s,
            ..InvocationTags::default()
        };
        slot.enter(shadow(Shadow::Yes), Some(10));
        assert_eq!(slot.tags_for(nobody).shadow, Shadow::Yes);
        slot.enter(shadow(Shadow::No), Some(11));
        // Behind one listener with no owner known, a write can be neither applied nor dropped.
        assert_eq!(slot.tags_for(nobody).shadow, Shadow::Unknown);
        assert_eq!(slot.tags_for(|_| Some(10)).shadow, Shadow::Yes);
        assert_eq!(slot.tags_for(|_| Some(11)).shadow, Shadow::No);
        slot.leave(&shadow(Shadow::Yes), Some(10));
        assert_eq!(slot.tags_for(nobody).shadow, Shadow::No);
    }
}
