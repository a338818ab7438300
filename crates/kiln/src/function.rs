//! The function model shared by the controller and the node agent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Prebake {
    #[serde(default)]
    pub mode: PrebakeMode,
    /// Invocations with `warmup_event` run before the snapshot is taken (Prebaking's warm-up);
    /// 0 for functions with side effects.
    #[serde(default = "default_warmups")]
    pub warmup_invocations: u32,
    /// The sample event of the warm-up invocations; `{}` when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_event: Option<serde_json::Value>,
}

/// The most warm-up invocations a snapshot may take.
pub const MAX_WARMUPS: u32 = 100;
/// The largest warm-up event, as serialized JSON (Lambda's async payload limit).
pub const MAX_WARMUP_EVENT_BYTES: usize = 256 * 1024;

fn default_warmups() -> u32 {
    3
}

impl Default for Prebake {
    fn default() -> Self {
        Self {
            mode: PrebakeMode::default(),
            warmup_invocations: default_warmups(),
            warmup_event: None,
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
}

/// The resolved, versioned spec the controller hands the node agent. The agent never looks
/// anything up again: an instance belongs to exactly one spec, and a new revision means new
/// instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceSpec {
    pub function: String,
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
    pub code_sha256: String,
    pub region: String,
    /// Most instances this function may have on the node (reserved concurrency or the node cap).
    pub max_instances: u32,
    pub reserved_concurrency: Option<u32>,
    pub prebake: Prebake,
    pub sessions: Option<crate::session::SessionConfig>,
    #[serde(default)]
    pub memory_sizing: MemorySizing,
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

/// Turns a FunctionName parameter (a name, a partial ARN `123456789012:function:name` or a
/// full ARN, each optionally with `:qualifier`) into the bare name and its qualifier.
pub fn parse_function_ref(raw: &str) -> Option<(String, Option<String>)> {
    let parts: Vec<&str> = raw.split(':').collect();
    let (name, qualifier) = match parts.as_slice() {
        [name] => (*name, None),
        [name, qualifier] => (*name, Some(*qualifier)),
        [_account, "function", name] => (*name, None),
        [_account, "function", name, qualifier] => (*name, Some(*qualifier)),
        ["arn", _partition, "lambda", _region, _account, "function", name] => (*name, None),
        ["arn", _partition, "lambda", _region, _account, "function", name, qualifier] => {
            (*name, Some(*qualifier))
        }
        _ => return None,
    };
    valid_name(name).then(|| (name.to_string(), qualifier.map(str::to_string)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn function_refs_in_every_form() {
        assert_eq!(parse_function_ref("f"), Some(("f".into(), None)));
        assert_eq!(
            parse_function_ref("f:$LATEST"),
            Some(("f".into(), Some("$LATEST".into())))
        );
        assert_eq!(
            parse_function_ref("123456789012:function:f"),
            Some(("f".into(), None))
        );
        assert_eq!(
            parse_function_ref("arn:aws:lambda:us-east-1:123456789012:function:my_fn:prod"),
            Some(("my_fn".into(), Some("prod".into())))
        );
        assert_eq!(parse_function_ref("bad name"), None);
        assert_eq!(parse_function_ref("a:b:c:d:e"), None);
        assert_eq!(parse_function_ref(&"x".repeat(65)), None);
    }

    proptest! {
        #[test]
        fn parsing_never_panics_and_names_stay_valid(raw in ".{0,200}") {
            if let Some((name, _)) = parse_function_ref(&raw) {
                prop_assert!(valid_name(&name));
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
/// and whether the object cache admits its objects (its cache-benefit prediction, OFC §5.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationTags {
    pub storage: Option<StorageTag>,
    pub admit: Option<bool>,
}

/// The tags of the invocations an instance (or the forks of one zygote, which share its
/// sandbox and so its services) is serving, shared with its sandbox services, whose requests
/// carry them. A request has a tag only when every invocation in flight has that same tag: with
/// two invocations of different runs (or one with none) behind one listener, nobody's writes
/// are treated as a sequence's, and they are simply durable; with two that disagree on
/// admission, the function's latest decision holds.
#[derive(Debug, Clone, Default)]
pub struct InvocationSlot(Arc<std::sync::Mutex<Vec<InvocationTags>>>);

impl InvocationSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<InvocationTags>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An invocation with `tags` begins.
    pub fn enter(&self, tags: InvocationTags) {
        self.lock().push(tags);
    }

    /// An invocation with `tags` ended.
    pub fn leave(&self, tags: &InvocationTags) {
        let mut active = self.lock();
        if let Some(i) = active.iter().position(|t| t == tags) {
            active.swap_remove(i);
        }
    }

    /// The storage tag the requests arriving now have.
    pub fn get(&self) -> Option<StorageTag> {
        self.agreed(|t| t.storage.clone())
    }

    /// Whether the requests arriving now have their objects admitted, if their invocations
    /// were told.
    pub fn admit(&self) -> Option<bool> {
        self.agreed(|t| t.admit)
    }

    /// `field` of the invocations in flight, if every one has the same, and it is set.
    fn agreed<T: PartialEq>(&self, field: impl Fn(&InvocationTags) -> Option<T>) -> Option<T> {
        let active = self.lock();
        let first = field(active.first()?)?;
        active
            .iter()
            .all(|t| field(t).as_ref() == Some(&first))
            .then_some(first)
    }
}

#[cfg(test)]
mod slot_tests {
    use super::*;

    #[test]
    fn a_tag_holds_only_while_every_invocation_in_flight_has_it() {
        let slot = InvocationSlot::default();
        let tag = |run: &str| InvocationTags {
            storage: Some(StorageTag {
                run: run.into(),
                stage: Stage::Intermediate,
            }),
            admit: None,
        };
        let none = InvocationTags::default();
        assert_eq!(slot.get(), None);
        slot.enter(tag("a"));
        assert_eq!(slot.get(), tag("a").storage);
        slot.enter(none.clone());
        assert_eq!(
            slot.get(),
            None,
            "a request of the other invocation could be anyone's"
        );
        slot.leave(&none);
        slot.enter(tag("b"));
        assert_eq!(slot.get(), None);
        slot.leave(&tag("a"));
        assert_eq!(slot.get(), tag("b").storage);
        slot.leave(&tag("b"));
        assert_eq!(slot.get(), None);
    }

    #[test]
    fn admission_holds_only_while_every_invocation_in_flight_agrees() {
        let slot = InvocationSlot::default();
        let admit = |a: Option<bool>| InvocationTags {
            storage: None,
            admit: a,
        };
        assert_eq!(slot.admit(), None);
        slot.enter(admit(Some(false)));
        assert_eq!(slot.admit(), Some(false));
        slot.enter(admit(Some(false)));
        assert_eq!(slot.admit(), Some(false));
        slot.enter(admit(Some(true)));
        assert_eq!(slot.admit(), None);
        slot.leave(&admit(Some(false)));
        slot.leave(&admit(Some(false)));
        assert_eq!(slot.admit(), Some(true));
        slot.enter(admit(None));
        assert_eq!(slot.admit(), None);
    }
}
