//! A function's tags: Lambda's limits on them, and kiln's extension settings written as
//! `kiln:` tags. AWS SDKs refuse parameters their model does not know (`KilnPrebake`, …), so
//! tags, which every client can set, are how a plain boto3, AWS CLI or Terraform user turns
//! them: `kiln:prebake=off` sets what `KilnPrebake: {"Mode": "off"}` sets, through the same
//! parsers and the same checks.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::FunctionConfig;

/// Tags a resource may have (Lambda's limit).
pub const MAX_TAGS: usize = 50;
const MAX_KEY_CHARS: usize = 128;
const MAX_VALUE_CHARS: usize = 256;
/// The prefix of kiln's own tags.
pub const KILN_PREFIX: &str = "kiln:";

/// How a `kiln:` tag's value is read.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Number,
    Boolean,
    Json,
}

/// Each `kiln:` tag: the extension parameter it sets, the field inside it (`None`: the
/// parameter itself), and how its value is read.
const KILN_TAGS: &[(&str, &str, Option<&str>, Kind)] = &[
    ("kiln:network", "KilnNetwork", None, Kind::Text),
    ("kiln:memory-sizing", "KilnMemorySizing", None, Kind::Text),
    ("kiln:prebake", "KilnPrebake", Some("Mode"), Kind::Text),
    (
        "kiln:warmup",
        "KilnPrebake",
        Some("WarmupInvocations"),
        Kind::Number,
    ),
    (
        "kiln:standbys",
        "KilnPrebake",
        Some("Standbys"),
        Kind::Number,
    ),
    (
        "kiln:warmup-event",
        "KilnPrebake",
        Some("WarmupEvent"),
        Kind::Json,
    ),
    (
        "kiln:session-hint",
        "KilnSessions",
        Some("Hint"),
        Kind::Text,
    ),
    (
        "kiln:session-placement",
        "KilnSessions",
        Some("Placement"),
        Kind::Text,
    ),
    (
        "kiln:sessions-per-instance",
        "KilnSessions",
        Some("MaxSessionsPerInstance"),
        Kind::Number,
    ),
    (
        "kiln:session-ttl",
        "KilnSessions",
        Some("IdleTtlSeconds"),
        Kind::Number,
    ),
    (
        "kiln:session-max-value",
        "KilnSessions",
        Some("MaxValueBytes"),
        Kind::Number,
    ),
    (
        "kiln:session-max-bytes",
        "KilnSessions",
        Some("MaxSessionBytes"),
        Kind::Number,
    ),
    (
        "kiln:session-fsync",
        "KilnSessions",
        Some("Fsync"),
        Kind::Boolean,
    ),
    ("kiln:web-app", "KilnWeb", Some("App"), Kind::Text),
    ("kiln:web-start", "KilnWeb", Some("Start"), Kind::Text),
    ("kiln:web-command", "KilnWeb", Some("Command"), Kind::Text),
    ("kiln:web-port", "KilnWeb", Some("Port"), Kind::Number),
];

/// Checks tags against Lambda's limits: keys of 1 to 128 characters, not starting with the
/// reserved `aws:`, values up to 256, and `kiln:` keys kiln knows.
pub fn check(tags: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in tags {
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS {
            return Err(format!(
                "Tag key '{key}' must be between 1 and {MAX_KEY_CHARS} characters long"
            ));
        }
        if key.to_ascii_lowercase().starts_with("aws:") {
            return Err(format!(
                "Tag key '{key}' uses the prefix aws:, which is reserved for AWS use"
            ));
        }
        if value.chars().count() > MAX_VALUE_CHARS {
            return Err(format!(
                "The value of tag '{key}' must be at most {MAX_VALUE_CHARS} characters long"
            ));
        }
        if key.starts_with(KILN_PREFIX) && !KILN_TAGS.iter().any(|(k, ..)| k == key) {
            let known: Vec<&str> = KILN_TAGS.iter().map(|(k, ..)| *k).collect();
            return Err(format!(
                "Unknown kiln tag '{key}': kiln's tags are {}",
                known.join(", ")
            ));
        }
    }
    if tags.len() > MAX_TAGS {
        return Err(format!(
            "A function has at most {MAX_TAGS} tags; this request would give it {}",
            tags.len()
        ));
    }
    Ok(())
}

/// Applies `kiln:` tags set (`set`) and removed (`removed`) to a configuration. A removed tag
/// gives its setting back its default (`kiln:session-hint` turns sessions off); `kiln:session-hint`
/// `off` does too. The caller validates the result as it validates the extension parameters.
pub fn apply(
    config: &mut FunctionConfig,
    set: &BTreeMap<String, String>,
    removed: &[String],
) -> Result<(), String> {
    let mut params = Map::new();
    params.insert("KilnNetwork".into(), to_value(&config.network));
    params.insert("KilnMemorySizing".into(), to_value(&config.memory_sizing));
    params.insert("KilnPrebake".into(), to_value(&config.prebake));
    params.insert("KilnSessions".into(), to_value(&config.sessions));
    params.insert("KilnWeb".into(), to_value(&config.web));
    for key in removed {
        let Some((_, param, field, _)) = KILN_TAGS.iter().find(|(k, ..)| k == key) else {
            continue;
        };
        match (field, *param) {
            (None, param) => {
                params.insert(param.into(), Value::Null);
            }
            (Some("Hint"), param) => {
                params.insert(param.into(), Value::Null);
            }
            (Some(field), param) => {
                if let Some(object) = params.get_mut(param).and_then(Value::as_object_mut) {
                    object.remove(*field);
                }
            }
        }
    }
    // The hint first: the other session tags need sessions to be on.
    let ordered = set
        .iter()
        .filter(|(k, _)| *k == "kiln:session-hint")
        .chain(set.iter().filter(|(k, _)| *k != "kiln:session-hint"));
    for (key, raw) in ordered {
        let Some((_, param, field, kind)) = KILN_TAGS.iter().find(|(k, ..)| k == key) else {
            continue;
        };
        let bad = |why: &str| format!("Value '{raw}' of tag '{key}' is invalid: {why}");
        let value = match kind {
            Kind::Text => Value::String(raw.clone()),
            Kind::Number => raw
                .parse::<u32>()
                .map(Value::from)
                .map_err(|_| bad("it must be a whole number"))?,
            Kind::Boolean => match raw.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(bad("it must be true or false")),
            },
            Kind::Json => serde_json::from_str(raw).map_err(|e| bad(&e.to_string()))?,
        };
        match field {
            None => {
                params.insert((*param).into(), value);
            }
            Some("Hint") if raw == "off" => {
                params.insert((*param).into(), Value::Null);
            }
            Some(field) => {
                let entry = params.entry(*param).or_insert(Value::Null);
                if entry.is_null() {
                    if *param == "KilnSessions" && *field != "Hint" {
                        return Err(format!(
                            "Tag '{key}' needs sessions: set kiln:session-hint too"
                        ));
                    }
                    *entry = json!({});
                }
                if let Some(object) = entry.as_object_mut() {
                    object.insert((*field).into(), value);
                }
            }
        }
    }
    let read = |param: &str| params.get(param).cloned().unwrap_or(Value::Null);
    let parse_error = |param: &str, e: serde_json::Error| {
        let tags: Vec<&str> = KILN_TAGS
            .iter()
            .filter(|(_, p, ..)| *p == param)
            .map(|(k, ..)| *k)
            .collect();
        format!("Tags {}: {e}", tags.join(", "))
    };
    let or_default = |v: Value| if v.is_null() { None } else { Some(v) };
    config.network = match or_default(read("KilnNetwork")) {
        Some(v) => serde_json::from_value(v).map_err(|e| parse_error("KilnNetwork", e))?,
        None => Default::default(),
    };
    config.memory_sizing = match or_default(read("KilnMemorySizing")) {
        Some(v) => serde_json::from_value(v).map_err(|e| parse_error("KilnMemorySizing", e))?,
        None => Default::default(),
    };
    config.prebake = match or_default(read("KilnPrebake")) {
        Some(v) => serde_json::from_value(v).map_err(|e| parse_error("KilnPrebake", e))?,
        None => Default::default(),
    };
    config.sessions = match or_default(read("KilnSessions")) {
        Some(v) => Some(serde_json::from_value(v).map_err(|e| parse_error("KilnSessions", e))?),
        None => None,
    };
    // Removing a function's last web tag makes it a plain function again.
    config.web = match or_default(read("KilnWeb")) {
        Some(v) => Some(
            serde_json::from_value::<super::WebConfig>(v).map_err(|e| parse_error("KilnWeb", e))?,
        )
        .filter(|web| !web.is_empty()),
        None => None,
    };
    Ok(())
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The `kiln:` tags among `tags`.
pub fn kiln_tags(tags: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    tags.iter()
        .filter(|(k, _)| k.starts_with(KILN_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::function::{MemorySizing, NetworkMode, PrebakeMode};

    fn config() -> FunctionConfig {
        serde_json::from_value(json!({
            "runtime": "python3.11", "handler": "app.handler", "memory_mb": 128, "timeout_s": 3
        }))
        .unwrap()
    }

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kiln_tags_set_the_extension_settings_and_removing_them_restores_defaults() {
        let mut c = config();
        apply(
            &mut c,
            &tags(&[
                ("kiln:prebake", "off"),
                ("kiln:warmup", "0"),
                ("kiln:network", "host"),
                ("kiln:memory-sizing", "booked"),
                ("kiln:session-placement", "spread"),
                ("kiln:session-hint", "header:X-Session-Id"),
                ("team", "a"),
            ]),
            &[],
        )
        .unwrap();
        assert_eq!(c.prebake.mode, PrebakeMode::Off);
        assert_eq!(c.prebake.warmup_invocations, Some(0));
        assert_eq!(c.network, NetworkMode::Host);
        assert_eq!(c.memory_sizing, MemorySizing::Booked);
        let sessions = c.sessions.clone().unwrap();
        assert_eq!(sessions.hint.to_string(), "header:x-session-id");
        assert_eq!(sessions.placement, crate::session::Placement::Spread);

        apply(&mut c, &BTreeMap::new(), &["kiln:warmup".into()]).unwrap();
        assert_eq!(c.prebake.mode, PrebakeMode::Off, "only the warm-ups went");
        assert_eq!(c.prebake.warmup_invocations, None);
        apply(
            &mut c,
            &BTreeMap::new(),
            &["kiln:session-hint".into(), "kiln:network".into()],
        )
        .unwrap();
        assert_eq!(c.sessions, None);
        assert_eq!(c.network, NetworkMode::Isolated);
        apply(&mut c, &tags(&[("kiln:session-hint", "query:s")]), &[]).unwrap();
        apply(&mut c, &tags(&[("kiln:session-hint", "off")]), &[]).unwrap();
        assert_eq!(c.sessions, None);
    }

    #[test]
    fn web_tags_make_a_web_function_and_removing_the_last_makes_a_plain_one() {
        let mut c = config();
        apply(
            &mut c,
            &tags(&[("kiln:web-start", "server.js"), ("kiln:web-port", "3000")]),
            &[],
        )
        .unwrap();
        let web = c.web.clone().unwrap();
        assert_eq!(
            (web.start.as_deref(), web.port),
            (Some("server.js"), Some(3000))
        );
        apply(&mut c, &BTreeMap::new(), &["kiln:web-port".into()]).unwrap();
        assert_eq!(c.web.clone().unwrap().port, None);
        apply(&mut c, &BTreeMap::new(), &["kiln:web-start".into()]).unwrap();
        assert_eq!(c.web, None);
    }

    #[test]
    fn bad_kiln_tags_are_refused_with_the_parsers_errors() {
        let refused = |pairs: &[(&str, &str)]| apply(&mut config(), &tags(pairs), &[]).unwrap_err();
        assert!(refused(&[("kiln:prebake", "sometimes")]).contains("unknown variant"));
        assert!(refused(&[("kiln:warmup", "many")]).contains("whole number"));
        assert!(refused(&[("kiln:session-hint", "body")]).contains("kilnSessions.hint"));
        assert!(refused(&[("kiln:session-ttl", "60")]).contains("kiln:session-hint"));
        assert!(refused(&[("kiln:warmup-event", "{")]).contains("kiln:warmup-event"));
        assert!(check(&tags(&[("kiln:nonsense", "1")])).is_err());
        assert!(check(&tags(&[("aws:x", "1")])).is_err());
        assert!(check(&tags(&[("", "1")])).is_err());
        assert!(check(&tags(&[("k", &"v".repeat(257))])).is_err());
        assert!(check(&tags(&[("k", &"v".repeat(256)), ("kiln:warmup", "1")])).is_ok());
    }
}
