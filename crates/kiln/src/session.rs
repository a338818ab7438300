//! Sessions (XFaaS): a function opts in by naming where a request's session id comes from, and
//! every request of a session is then routed to the instance that holds the session.
//!
//! This module is the configuration (kiln's `KilnSessions` extension of the function
//! configuration) and the extraction of a session id from a request: pure functions, used by
//! the controller for Invoke calls, function URLs and async deliveries. Routing and placement
//! live in the node agent (`agent/sessions.rs`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest session id.
pub const MAX_SESSION_ID_BYTES: usize = 256;
/// Sessions one instance holds at most, unless configured (bin-packing's bound).
pub const DEFAULT_SESSIONS_PER_INSTANCE: u32 = 16;
/// A session nobody used for this long ends.
pub const DEFAULT_IDLE_TTL_S: u32 = 900;
/// The longest idle TTL (a day).
pub const MAX_IDLE_TTL_S: u32 = 86_400;
/// The most sessions an instance may be configured to hold.
pub const MAX_SESSIONS_PER_INSTANCE: u32 = 1024;
/// The longest key of a session's state, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;
/// The largest value, unless configured.
pub const DEFAULT_MAX_VALUE_BYTES: u32 = 1024 * 1024;
/// The largest state of one session (keys and values), unless configured.
pub const DEFAULT_MAX_SESSION_BYTES: u32 = 8 * 1024 * 1024;
/// The largest state a session may be configured to hold: one invocation's writes travel in
/// one frame of the shim protocol, which is at most 16 MiB.
pub const MAX_SESSION_BYTES: u32 = 12 * 1024 * 1024;

/// How a function's sessions are identified and placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct SessionConfig {
    /// Where a request's session id comes from.
    pub hint: SessionHint,
    #[serde(default)]
    pub placement: Placement,
    #[serde(default = "default_per_instance")]
    pub max_sessions_per_instance: u32,
    #[serde(default = "default_ttl")]
    pub idle_ttl_seconds: u32,
    /// The largest value one key may hold, in bytes (a JSON value counts as its encoding).
    #[serde(default = "default_max_value")]
    pub max_value_bytes: u32,
    /// The largest state of one session: the bytes of its keys and values together.
    #[serde(default = "default_max_session")]
    pub max_session_bytes: u32,
    /// `fdatasync` each commit before its answer: acknowledged writes then survive a power
    /// loss too, not only a crash of kiln (the page cache keeps them then).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fsync: bool,
}

fn default_max_value() -> u32 {
    DEFAULT_MAX_VALUE_BYTES
}

fn default_max_session() -> u32 {
    DEFAULT_MAX_SESSION_BYTES
}

fn default_per_instance() -> u32 {
    DEFAULT_SESSIONS_PER_INSTANCE
}

fn default_ttl() -> u32 {
    DEFAULT_IDLE_TTL_S
}

impl SessionConfig {
    /// Checks the limits; the message names the field as Lambda's validation errors do.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_SESSIONS_PER_INSTANCE).contains(&self.max_sessions_per_instance) {
            return Err(format!(
                "Value {} at 'kilnSessions.maxSessionsPerInstance' failed to satisfy constraint: Member must have value between 1 and {MAX_SESSIONS_PER_INSTANCE}",
                self.max_sessions_per_instance
            ));
        }
        if !(1..=MAX_SESSION_BYTES).contains(&self.max_session_bytes) {
            return Err(format!(
                "Value {} at 'kilnSessions.maxSessionBytes' failed to satisfy constraint: Member must have value between 1 and {MAX_SESSION_BYTES}",
                self.max_session_bytes
            ));
        }
        if !(1..=self.max_session_bytes).contains(&self.max_value_bytes) {
            return Err(format!(
                "Value {} at 'kilnSessions.maxValueBytes' failed to satisfy constraint: Member must have value between 1 and maxSessionBytes ({})",
                self.max_value_bytes, self.max_session_bytes
            ));
        }
        if !(1..=MAX_IDLE_TTL_S).contains(&self.idle_ttl_seconds) {
            return Err(format!(
                "Value {} at 'kilnSessions.idleTtlSeconds' failed to satisfy constraint: Member must have value between 1 and {MAX_IDLE_TTL_S}",
                self.idle_ttl_seconds
            ));
        }
        Ok(())
    }
}

/// Where new sessions go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Onto the instance that already holds the most sessions, up to the per-instance bound;
    /// a new instance only when all are full (XFaaS's default).
    #[default]
    Binpack,
    /// Each new session onto a new instance while the function may have more, then onto the
    /// instance holding the fewest.
    Spread,
}

/// The source of a request's session id, written `header:NAME`, `cookie:NAME`, `query:NAME` or
/// `json:PATH` (PATH like `$.user.id` or `$.items[0].key`, into the event, or for a function
/// URL into the JSON request body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SessionHint {
    Header(String),
    Cookie(String),
    Query(String),
    Json(Vec<Step>),
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

impl TryFrom<String> for SessionHint {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<SessionHint> for String {
    fn from(hint: SessionHint) -> String {
        hint.to_string()
    }
}

impl std::str::FromStr for SessionHint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("Value '{text}' at 'kilnSessions.hint' failed to satisfy constraint: {why}")
        };
        let (kind, name) = text.split_once(':').ok_or_else(|| {
            bad("Member must be header:NAME, cookie:NAME, query:NAME or json:PATH")
        })?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("the name after the colon is empty"));
        }
        let token = |name: &str| {
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        match kind {
            "header" if token(name) => Ok(SessionHint::Header(name.to_ascii_lowercase())),
            "cookie" if token(name) => Ok(SessionHint::Cookie(name.to_string())),
            "header" | "cookie" => Err(bad(
                "the name has characters a header or cookie name cannot have",
            )),
            "query" => Ok(SessionHint::Query(name.to_string())),
            "json" => parse_path(name).map(SessionHint::Json).map_err(|e| bad(&e)),
            _ => Err(bad(
                "Member must be header:NAME, cookie:NAME, query:NAME or json:PATH",
            )),
        }
    }
}

impl fmt::Display for SessionHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionHint::Header(name) => write!(f, "header:{name}"),
            SessionHint::Cookie(name) => write!(f, "cookie:{name}"),
            SessionHint::Query(name) => write!(f, "query:{name}"),
            SessionHint::Json(steps) => {
                f.write_str("json:$")?;
                for step in steps {
                    match step {
                        Step::Key(key) => write!(f, ".{key}")?,
                        Step::Index(i) => write!(f, "[{i}]")?,
                    }
                }
                Ok(())
            }
        }
    }
}

/// `$.a.b[0].c` (the leading `$.` optional): keys of letters, digits, `_` and `-`, and indices.
fn parse_path(text: &str) -> Result<Vec<Step>, String> {
    let rest = text.strip_prefix('$').unwrap_or(text);
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let mut steps = Vec::new();
    let mut key = String::new();
    let mut chars = rest.chars();
    // Just after a `.` (or at the start): a key must follow, not another `.`.
    let mut after_dot = true;
    while let Some(c) = chars.next() {
        match c {
            '.' | '[' => {
                if !key.is_empty() {
                    steps.push(Step::Key(std::mem::take(&mut key)));
                } else if c == '.' && (after_dot || steps.is_empty()) {
                    return Err("the path has an empty key".into());
                }
                if c == '[' {
                    let digits: String = chars.by_ref().take_while(|c| *c != ']').collect();
                    let index = digits
                        .parse()
                        .map_err(|_| format!("`[{digits}]` is not an array index"))?;
                    steps.push(Step::Index(index));
                    after_dot = false;
                } else {
                    after_dot = true;
                }
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => {
                key.push(c);
                after_dot = false;
            }
            c => return Err(format!("`{c}` cannot be part of a key in the path")),
        }
    }
    if !key.is_empty() {
        steps.push(Step::Key(key));
    } else if after_dot && !steps.is_empty() {
        return Err("the path ends with a `.`".into());
    }
    if steps.is_empty() {
        return Err("the path names no field".into());
    }
    Ok(steps)
}

/// A request's headers, as a session hint reads them. The API layer implements it for its HTTP
/// header map, so the controller, which carries a [`HintSource`] to [`extract`], sees no HTTP
/// type.
pub trait Headers: Sync {
    /// The first value of header `name` (in any case), as sent.
    fn first(&self, name: &str) -> Option<&[u8]>;
    /// Every value of header `name` (in any case), as sent.
    fn all(&self, name: &str) -> Vec<&[u8]>;
}

/// A header value as text, if it is what HTTP allows (visible ASCII, spaces and tabs).
fn header_text(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| (32..127).contains(&b) || b == b'\t')
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// What a session id may be taken from.
#[derive(Default, Clone, Copy)]
pub struct HintSource<'a> {
    pub headers: Option<&'a dyn Headers>,
    /// The raw query string.
    pub query: Option<&'a str>,
    /// The JSON a `json:` path reads: the event, or a function URL's request body.
    pub json: Option<&'a [u8]>,
}

/// The request's session id: `Ok(None)` for a sessionless request (the source has no id),
/// `Err` (a 400) for an id that is there but unusable.
pub fn extract(hint: &SessionHint, source: &HintSource<'_>) -> Result<Option<String>, String> {
    let raw = match hint {
        SessionHint::Header(name) => match source.headers.and_then(|h| h.first(name.as_str())) {
            None => None,
            Some(value) => Some(
                header_text(value)
                    .ok_or_else(|| format!("the session header {name} is not valid text"))?
                    .trim()
                    .to_string(),
            ),
        },
        SessionHint::Cookie(name) => source.headers.and_then(|headers| {
            headers
                .all("cookie")
                .into_iter()
                .filter_map(header_text)
                .flat_map(|v| v.split(';'))
                .filter_map(|pair| pair.trim().split_once('='))
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().trim_matches('"').to_string())
        }),
        SessionHint::Query(name) => source.query.and_then(|query| {
            query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (decode(k) == *name).then(|| decode(v))
            })
        }),
        SessionHint::Json(steps) => match source.json {
            // No body (a function URL's GET): a sessionless request.
            None => None,
            Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => None,
            Some(bytes) => {
                let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| {
                    format!("the session id is read from {hint}, and the payload is not JSON")
                })?;
                let mut at = &value;
                let mut found = true;
                for step in steps {
                    let next = match step {
                        Step::Key(key) => at.get(key.as_str()),
                        Step::Index(i) => at.get(*i),
                    };
                    match next {
                        Some(next) => at = next,
                        None => {
                            found = false;
                            break;
                        }
                    }
                }
                match (found, at) {
                    (false, _) | (true, serde_json::Value::Null) => None,
                    (true, serde_json::Value::String(s)) => Some(s.clone()),
                    (true, serde_json::Value::Number(n)) => Some(n.to_string()),
                    (true, serde_json::Value::Bool(b)) => Some(b.to_string()),
                    (true, _) => {
                        return Err(format!(
                            "the session id at {hint} must be a string or a number, not an object or array"
                        ))
                    }
                }
            }
        },
    };
    let Some(id) = raw else { return Ok(None) };
    if id.is_empty() {
        return Err(format!("the session id from {hint} is empty"));
    }
    if id.len() > MAX_SESSION_ID_BYTES {
        return Err(format!(
            "the session id from {hint} is {} bytes long; the limit is {MAX_SESSION_ID_BYTES}",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err(format!(
            "the session id from {hint} contains control characters"
        ));
    }
    Ok(Some(id))
}

fn decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(text: &str) -> SessionHint {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn hints_parse_and_print_back() {
        for text in [
            "header:x-session-id",
            "cookie:sid",
            "query:session",
            "json:$.user.id",
            "json:$.items[2].key",
        ] {
            assert_eq!(hint(text).to_string(), text);
        }
        assert_eq!(hint("json:user.id").to_string(), "json:$.user.id");
        assert_eq!(hint("header:X-Session").to_string(), "header:x-session");
        for bad in [
            "x-session",
            "body:x",
            "header:",
            "header:a b",
            "json:$",
            "json:$.a[x]",
            "json:$.a b",
        ] {
            assert!(bad.parse::<SessionHint>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn ids_come_from_each_source() {
        let h = headers(&[
            ("x-session-id", " abc "),
            ("cookie", "a=1; sid=\"s-9\"; b=2"),
        ]);
        let source = HintSource {
            headers: Some(&h),
            query: Some("x=1&session=caf%C3%A9+1"),
            json: Some(br#"{"user": {"id": 42}, "items": [{"key": "k0"}], "flag": true}"#),
        };
        let id = |text: &str| extract(&hint(text), &source).unwrap();
        assert_eq!(id("header:x-session-id").as_deref(), Some("abc"));
        assert_eq!(id("cookie:sid").as_deref(), Some("s-9"));
        assert_eq!(id("query:session").as_deref(), Some("café 1"));
        assert_eq!(id("json:$.user.id").as_deref(), Some("42"));
        assert_eq!(id("json:$.items[0].key").as_deref(), Some("k0"));
        assert_eq!(id("json:$.flag").as_deref(), Some("true"));
        // Absent: a sessionless request.
        for absent in [
            "header:x-other",
            "cookie:none",
            "query:none",
            "json:$.user.name",
            "json:$.items[5].key",
        ] {
            assert_eq!(id(absent), None, "{absent}");
        }
        assert_eq!(extract(&hint("json:$.a"), &HintSource::default()), Ok(None));
    }

    #[test]
    fn unusable_ids_are_errors() {
        let long = "x".repeat(MAX_SESSION_ID_BYTES + 1);
        let h = headers(&[("x-s", ""), ("x-long", &long)]);
        let source = HintSource {
            headers: Some(&h),
            query: None,
            json: Some(br#"{"user": {"id": {"nested": 1}}, "empty": ""}"#),
        };
        for bad in [
            "header:x-s",
            "header:x-long",
            "json:$.user.id",
            "json:$.empty",
        ] {
            assert!(extract(&hint(bad), &source).is_err(), "{bad}");
        }
        let not_json = HintSource {
            json: Some(b"not json"),
            ..HintSource::default()
        };
        let error = extract(&hint("json:$.a"), &not_json).unwrap_err();
        assert!(error.contains("not JSON"), "{error}");
    }

    #[test]
    fn config_defaults_and_limits() {
        let config: SessionConfig = serde_json::from_str(r#"{"Hint": "header:x-s"}"#).unwrap();
        assert_eq!(config.placement, Placement::Binpack);
        assert_eq!(
            config.max_sessions_per_instance,
            DEFAULT_SESSIONS_PER_INSTANCE
        );
        assert!(config.validate().is_ok());
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["Hint"], "header:x-s");
        assert_eq!(json["Placement"], "binpack");
        let zero = SessionConfig {
            max_sessions_per_instance: 0,
            ..config
        };
        assert!(zero.validate().is_err());
        assert!(serde_json::from_str::<SessionConfig>(r#"{"Hint": "nowhere"}"#).is_err());
    }
}
