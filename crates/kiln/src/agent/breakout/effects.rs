//! A fast request's effects on the platform, held until it answers: its log lines, written
//! as the Node shim writes them (`TIMESTAMP\tREQUEST_ID\tLEVEL\tMESSAGE`, a message's line
//! breaks as `\r`, `AWS_LAMBDA_LOG_LEVEL` filtering), so the function's log reads the same
//! whichever path served it; and its object writes, staged (reads in the request see them)
//! and committed by the dispatcher only once the run has answered. A request that misses drops
//! them all: Node runs it again from the start, sees none of them, and writes its own.
//!
//! Several writes are committed together, all or none, where the store can (the local store
//! without the object cache: one SQLite transaction); elsewhere one write is, as a single
//! object's write is all-or-nothing already, and a second write misses: Node runs the
//! request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kiln_breakout::runtime::{Intrinsics, LogLevel, Miss};
use serde_json::{json, Map, Value};

use super::store::{FastStore, ListQuery, Object, StoreError, Write};
use crate::agent::sessions::log::{CommitError, Entry, Kind};
use crate::agent::sessions::txn::Txn;
use crate::sync::LockExt;

/// The shim's levels, lowest first.
const LEVELS: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];

/// What one fast request did, read by the dispatcher once the run is over.
#[derive(Default)]
pub(super) struct Held {
    /// The function's output: whole lines, each ending in `\n`.
    pub output: String,
    /// Its object writes, not yet in the store: one per key, in the order made.
    pub staged: Vec<Staged>,
    /// Its session's writes (a request of a session), not yet in the session's log.
    pub session: Option<Txn>,
}

/// An object write held until the request answers.
#[derive(Debug, Clone)]
pub(super) enum Staged {
    Put {
        bucket: String,
        key: String,
        object: Object,
    },
    Delete {
        bucket: String,
        key: String,
    },
}

impl Staged {
    fn target(&self) -> (&str, &str) {
        match self {
            Staged::Put { bucket, key, .. } | Staged::Delete { bucket, key } => (bucket, key),
        }
    }

    fn into_write(self) -> Write {
        match self {
            Staged::Put {
                bucket,
                key,
                object,
            } => Write::Put {
                bucket,
                key,
                body: object.body,
                content_type: object.content_type,
                metadata: object.metadata,
            },
            Staged::Delete { bucket, key } => Write::Delete { bucket, key },
        }
    }
}

/// Writes what a request staged to the store, all or none: the commit, after the request
/// answered.
pub(super) async fn commit(staged: Vec<Staged>, store: &FastStore) -> Result<(), StoreError> {
    store
        .commit(staged.into_iter().map(Staged::into_write).collect())
        .await
}

/// The store, and the runtime its calls are made on (a fast run is on a blocking thread).
pub(super) type StoreAccess = (FastStore, tokio::runtime::Handle);

/// The [`Intrinsics`] of one fast request.
pub(super) struct FastEffects {
    request_id: String,
    /// The lowest level written (`AWS_LAMBDA_LOG_LEVEL`, as the shim reads it).
    min_level: usize,
    held: Arc<Mutex<Held>>,
    store: Option<StoreAccess>,
    /// The handler's `context` fields, as the shim gives them.
    context: Value,
    /// When the function's timeout runs out (`getRemainingTimeInMillis`).
    deadline: std::time::Instant,
    /// The request's session id, if it has one (its transaction is in [`Held`]).
    session: Option<String>,
}

/// What the handler's `context` says: the shim's fields (a record on the fast path, so their
/// order is not seen).
pub(super) struct ContextFields<'a> {
    pub request_id: &'a str,
    pub function: &'a str,
    /// `$LATEST` or a published version's number.
    pub version: &'a str,
    pub arn: &'a str,
    pub memory_mb: u32,
    /// The caller's client context (JSON text), if it sent one.
    pub client_context: Option<&'a str>,
}

impl ContextFields<'_> {
    /// The fields as JSON; a client context that is not JSON misses (the shim's
    /// `JSON.parse` throws, which Node reports).
    fn to_json(&self) -> Result<Value, Miss> {
        let mut out = Map::new();
        out.insert("callbackWaitsForEmptyEventLoop".into(), json!(true));
        out.insert("functionVersion".into(), json!(self.version));
        out.insert("functionName".into(), json!(self.function));
        out.insert("memoryLimitInMB".into(), json!(self.memory_mb.to_string()));
        out.insert(
            "logGroupName".into(),
            json!(format!("/aws/lambda/{}", self.function)),
        );
        out.insert(
            "logStreamName".into(),
            json!(format!(
                "{}/[{}]fastpath",
                chrono::Utc::now().format("%Y/%m/%d"),
                self.version
            )),
        );
        if let Some(text) = self.client_context.filter(|t| !t.is_empty()) {
            let parsed: Value = serde_json::from_str(text)
                .map_err(|_| Miss::new("a client context that is not JSON"))?;
            out.insert("clientContext".into(), parsed);
        }
        out.insert("invokedFunctionArn".into(), json!(self.arn));
        out.insert("awsRequestId".into(), json!(self.request_id));
        Ok(Value::Object(out))
    }
}

impl FastEffects {
    /// The effects of the request `context` describes, of a function with environment `env`
    /// whose timeout runs out at `deadline`, and the handle the dispatcher reads them through.
    pub(super) fn new(
        context: &ContextFields<'_>,
        env: &BTreeMap<String, String>,
        store: Option<StoreAccess>,
        deadline: std::time::Instant,
        session: Option<(String, Txn)>,
    ) -> (Self, Arc<Mutex<Held>>) {
        let (session, txn) = session.unzip();
        let held = Arc::new(Mutex::new(Held {
            session: txn,
            ..Held::default()
        }));
        let effects = Self {
            request_id: context.request_id.to_string(),
            min_level: min_level(env.get("AWS_LAMBDA_LOG_LEVEL").map(String::as_str)),
            held: held.clone(),
            store,
            // A client context that is not JSON is found when the handler asks for `context`.
            context: context.to_json().unwrap_or(Value::Null),
            deadline,
            session,
        };
        (effects, held)
    }

    fn store(&self) -> Result<&StoreAccess, Miss> {
        self.store
            .as_ref()
            .ok_or_else(|| Miss::new("intrinsic S3: the store is not reachable from the fast path"))
    }

    /// The staged write to `bucket`/`key`, if any.
    fn staged_at(&self, bucket: &str, key: &str) -> Option<Staged> {
        let held = self.held.locked();
        held.staged
            .iter()
            .find(|s| s.target() == (bucket, key))
            .cloned()
    }

    /// The object as the request sees it: its staged write, else the store's.
    fn read(&self, bucket: &str, key: &str) -> Result<Object, Miss> {
        match self.staged_at(bucket, key) {
            Some(Staged::Put { object, .. }) => return Ok(object),
            Some(Staged::Delete { .. }) => return Err(no_such_key()),
            None => {}
        }
        let (store, runtime) = self.store()?;
        match runtime.block_on(store.get(bucket, key)) {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(no_such_key()),
            Err(e) => Err(Miss::new(format!("intrinsic S3: {e}"))),
        }
    }

    /// Stages a write; a later write to the same key replaces the earlier one.
    fn stage(&self, write: Staged) -> Result<(), Miss> {
        let together = self
            .store
            .as_ref()
            .is_some_and(|(store, _)| store.commits_together());
        let mut held = self.held.locked();
        held.staged.retain(|s| s.target() != write.target());
        if !held.staged.is_empty() && !together {
            return Err(Miss::new(
                "intrinsic S3: a second object write in one request, and a store that commits one at a time",
            ));
        }
        held.staged.push(write);
        Ok(())
    }

    fn get_object(&self, bucket: &str, key: &str, head: bool) -> Result<Value, Miss> {
        let (object, size) = if head && self.staged_at(bucket, key).is_none() {
            let (store, runtime) = self.store()?;
            match runtime.block_on(store.head(bucket, key)) {
                Ok(Some(found)) => found,
                Ok(None) => return Err(no_such_key()),
                Err(e) => return Err(Miss::new(format!("intrinsic S3: {e}"))),
            }
        } else {
            let object = self.read(bucket, key)?;
            let size = object.body.len() as u64;
            (object, size)
        };
        let mut out = Map::new();
        if !head {
            out.insert(
                "Body".into(),
                Value::String(String::from_utf8_lossy(&object.body).into_owned()),
            );
        }
        out.insert("AcceptRanges".into(), json!("bytes"));
        out.insert("LastModified".into(), json!(object.last_modified_ms));
        out.insert("ContentLength".into(), json!(size));
        out.insert("ETag".into(), json!(object.etag));
        if let Some(content_type) = object.content_type {
            out.insert("ContentType".into(), json!(content_type));
        }
        out.insert("Metadata".into(), json!(object.metadata));
        Ok(Value::Object(out))
    }

    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        input: &Map<String, Value>,
    ) -> Result<Value, Miss> {
        let body = match input.get("Body") {
            Some(Value::String(text)) => Bytes::from(text.clone().into_bytes()),
            None | Some(Value::Null) => Bytes::new(),
            Some(_) => return Err(Miss::new("PutObject with a Body that is not a string")),
        };
        let content_type = input
            .get("ContentType")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut metadata = BTreeMap::new();
        if let Some(Value::Object(pairs)) = input.get("Metadata") {
            for (name, value) in pairs {
                let Value::String(value) = value else {
                    return Err(Miss::new("PutObject with Metadata that is not text"));
                };
                // S3 keeps metadata names in lower case.
                metadata.insert(name.to_lowercase(), value.clone());
            }
        }
        let etag = format!("\"{}\"", md5_hex(&body));
        let object = Object {
            body,
            // S3's default for an object stored without a type.
            content_type: Some(content_type.unwrap_or_else(|| "binary/octet-stream".into())),
            metadata,
            etag: etag.clone(),
            last_modified_ms: (chrono::Utc::now().timestamp_millis()) as f64,
        };
        self.stage(Staged::Put {
            bucket: bucket.to_string(),
            key: key.to_string(),
            object,
        })?;
        Ok(json!({ "ETag": etag }))
    }

    fn list_objects(&self, bucket: &str, input: &Map<String, Value>) -> Result<Value, Miss> {
        if self
            .held
            .locked()
            .staged
            .iter()
            .any(|s| s.target().0 == bucket)
        {
            return Err(Miss::new(
                "a listing of a bucket the request wrote to not compiled",
            ));
        }
        let text = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_string);
        let query = ListQuery {
            prefix: text("Prefix"),
            delimiter: text("Delimiter"),
            max_keys: input
                .get("MaxKeys")
                .and_then(Value::as_f64)
                .map(|n| n as i32),
            start_after: text("StartAfter"),
            continuation_token: text("ContinuationToken"),
        };
        let (store, runtime) = self.store()?;
        let listing = runtime
            .block_on(store.list(bucket, &query))
            .map_err(|e| Miss::new(format!("intrinsic S3: {e}")))?;
        let mut out = Map::new();
        if !listing.contents.is_empty() {
            let contents: Vec<Value> = listing
                .contents
                .iter()
                .map(|o| {
                    json!({"Key": o.key, "LastModified": o.last_modified_ms, "ETag": o.etag,
                           "Size": o.size, "StorageClass": "STANDARD"})
                })
                .collect();
            out.insert("Contents".into(), Value::Array(contents));
        }
        if !listing.common_prefixes.is_empty() {
            let prefixes: Vec<Value> = listing
                .common_prefixes
                .iter()
                .map(|p| json!({ "Prefix": p }))
                .collect();
            out.insert("CommonPrefixes".into(), Value::Array(prefixes));
        }
        out.insert("IsTruncated".into(), json!(listing.is_truncated));
        out.insert("KeyCount".into(), json!(listing.key_count));
        out.insert("MaxKeys".into(), json!(listing.max_keys.unwrap_or(1000)));
        out.insert("Name".into(), json!(bucket));
        out.insert("Prefix".into(), json!(query.prefix.unwrap_or_default()));
        for (name, value) in [
            ("Delimiter", query.delimiter),
            ("StartAfter", query.start_after),
            ("ContinuationToken", query.continuation_token),
            ("NextContinuationToken", listing.next_continuation_token),
        ] {
            if let Some(value) = value {
                out.insert(name.into(), json!(value));
            }
        }
        Ok(Value::Object(out))
    }
}

impl FastEffects {
    /// A call of the session's (`kiln_breakout::runtime::session`) on the request's
    /// transaction: reads see its writes; a limit broken, or a value of bytes, misses (Node
    /// answers it, with the shim's error).
    fn session_call(&mut self, op: &str, args: &[Value]) -> Result<Value, Miss> {
        let mut held = self.held.locked();
        let txn = held
            .session
            .as_mut()
            .ok_or_else(|| Miss::new("intrinsic session: the request has no session"))?;
        let text = |i: usize| {
            args.get(i)
                .and_then(Value::as_str)
                .ok_or_else(|| Miss::new(format!("intrinsic session.{op} without its arguments")))
        };
        let failed = |e: CommitError| Miss::new(format!("intrinsic session.{op}: {e}"));
        match op {
            "get" => match txn.get(text(0)?) {
                None => Ok(Value::Null),
                Some((Kind::Json, value)) => std::str::from_utf8(&value)
                    .map(|v| Value::String(v.to_string()))
                    .map_err(|_| Miss::new("a session value that is not UTF-8")),
                Some((Kind::Bytes, _)) => Err(Miss::new("a session value of bytes not compiled")),
            },
            "put" => {
                let entry = Entry::Put {
                    key: text(0)?.to_string(),
                    kind: Kind::Json,
                    value: Bytes::from(text(1)?.to_string()),
                };
                txn.apply(vec![entry]).map_err(failed)?;
                Ok(Value::Null)
            }
            "delete" => {
                let entry = Entry::Delete {
                    key: text(0)?.to_string(),
                };
                txn.apply(vec![entry]).map_err(failed)?;
                Ok(Value::Null)
            }
            "keys" => Ok(Value::from(txn.keys())),
            "begin" => txn.begin().map(|()| Value::Null).map_err(failed),
            "end" => {
                let commit = args.first().and_then(Value::as_bool).unwrap_or(false);
                txn.end(commit).map(|()| Value::Null).map_err(failed)
            }
            _ => Err(Miss::new(format!("intrinsic session.{op} not available"))),
        }
    }
}

/// The shim's `Math.max(0, LEVELS.indexOf(String(level || 'TRACE').toUpperCase()))`.
fn min_level(level: Option<&str>) -> usize {
    let level = level.filter(|l| !l.is_empty()).unwrap_or("TRACE");
    let upper = level.to_uppercase();
    LEVELS.iter().position(|l| *l == upper).unwrap_or(0)
}

/// The runtime's `ERROR` line for a function error, as the shim writes it (now, for the
/// request `request_id`).
pub(super) fn invoke_error_line(request_id: &str, message: &str) -> String {
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    log_line(&timestamp, request_id, "ERROR", message)
}

/// One log line as the shim writes it.
fn log_line(timestamp: &str, request_id: &str, level: &str, message: &str) -> String {
    format!(
        "{timestamp}\t{request_id}\t{level}\t{}\n",
        message.replace('\n', "\r")
    )
}

/// A read of a key with no object: the SDK throws `NoSuchKey`, which Node reports.
fn no_such_key() -> Miss {
    Miss::new("intrinsic S3: NoSuchKey (Node answers it)")
}

fn md5_hex(bytes: &[u8]) -> String {
    use s3s::crypto::Checksum as _;
    let mut md5 = s3s::crypto::Md5::new();
    md5.update(bytes);
    hex::encode(md5.finalize())
}

impl Intrinsics for FastEffects {
    fn context(&mut self) -> Result<Value, Miss> {
        match &self.context {
            Value::Null => Err(Miss::new("a client context that is not JSON")),
            fields => Ok(fields.clone()),
        }
    }

    fn remaining_ms(&mut self) -> Result<f64, Miss> {
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        Ok(left.as_millis() as f64)
    }

    fn session(&mut self) -> Option<String> {
        self.session.clone()
    }

    fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        if let Some(op) = name.strip_prefix("session.") {
            return self.session_call(op, args);
        }
        let Some(Value::Object(input)) = args.first() else {
            return Err(Miss::new(format!("intrinsic {name} without its input")));
        };
        let text = |field: &str| input.get(field).and_then(Value::as_str);
        let (Some(bucket), key) = (text("Bucket"), text("Key")) else {
            return Err(Miss::new(format!("intrinsic {name} without a Bucket")));
        };
        let key = match (name, key) {
            ("s3.ListObjectsV2", _) => "",
            (_, Some(key)) if !key.is_empty() => key,
            _ => return Err(Miss::new(format!("intrinsic {name} without a Key"))),
        };
        match name {
            "s3.GetObject" => self.get_object(bucket, key, false),
            "s3.HeadObject" => self.get_object(bucket, key, true),
            "s3.PutObject" => self.put_object(bucket, key, input),
            "s3.DeleteObject" => {
                self.stage(Staged::Delete {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                })?;
                Ok(json!({}))
            }
            "s3.ListObjectsV2" => self.list_objects(bucket, input),
            _ => Err(Miss::new(format!("intrinsic {name} not available"))),
        }
    }

    fn log(&mut self, level: LogLevel, message: &str) -> Result<(), Miss> {
        let name = level.as_str();
        let rank = LEVELS.iter().position(|l| *l == name).unwrap_or(0);
        if rank < self.min_level {
            return Ok(());
        }
        let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        self.held
            .locked()
            .output
            .push_str(&log_line(&timestamp, &self.request_id, name, message));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(request_id: &str) -> ContextFields<'_> {
        ContextFields {
            request_id,
            function: "f",
            version: "$LATEST",
            arn: "arn:aws:lambda:us-east-1:000000000000:function:f",
            memory_mb: 128,
            client_context: None,
        }
    }

    #[test]
    fn lines_are_the_shims_and_levels_filter_as_it_does() {
        assert_eq!(
            log_line("2026-01-02T03:04:05.006Z", "id-1", "INFO", "a\nb"),
            "2026-01-02T03:04:05.006Z\tid-1\tINFO\ta\rb\n"
        );
        assert_eq!(min_level(None), 0);
        assert_eq!(min_level(Some("")), 0);
        assert_eq!(min_level(Some("warn")), 3);
        assert_eq!(min_level(Some("bogus")), 0);

        let env = [("AWS_LAMBDA_LOG_LEVEL".to_string(), "WARN".to_string())]
            .into_iter()
            .collect();
        let (mut effects, held) =
            FastEffects::new(&fields("id-2"), &env, None, std::time::Instant::now(), None);
        effects.log(LogLevel::Info, "quiet").unwrap();
        effects.log(LogLevel::Error, "loud").unwrap();
        let output = held.locked().output.clone();
        let fields: Vec<&str> = output.trim_end().split('\t').collect();
        assert_eq!(fields[1..], ["id-2", "ERROR", "loud"]);
        assert!(chrono::DateTime::parse_from_rfc3339(fields[0]).is_ok());
        assert_eq!(output.lines().count(), 1);
    }

    fn call(effects: &mut FastEffects, name: &str, input: Value) -> Result<Value, Miss> {
        effects.call(name, &[input])
    }

    #[test]
    fn a_write_is_staged_seen_by_reads_and_one_per_request() {
        let (mut effects, held) = FastEffects::new(
            &fields("id-3"),
            &BTreeMap::new(),
            None,
            std::time::Instant::now(),
            None,
        );
        let put = call(
            &mut effects,
            "s3.PutObject",
            json!({"Bucket": "b", "Key": "k", "Body": "hello", "Metadata": {"Who": "me"}}),
        )
        .unwrap();
        // MD5 of "hello", as S3 answers it.
        assert_eq!(put, json!({"ETag": "\"5d41402abc4b2a76b9719d911017c592\""}));
        let got = call(
            &mut effects,
            "s3.GetObject",
            json!({"Bucket": "b", "Key": "k"}),
        )
        .unwrap();
        assert_eq!(got["Body"], "hello");
        assert_eq!(got["ContentLength"], 5);
        assert_eq!(got["ContentType"], "binary/octet-stream");
        assert_eq!(got["Metadata"], json!({"who": "me"}));
        let head = call(
            &mut effects,
            "s3.HeadObject",
            json!({"Bucket": "b", "Key": "k"}),
        )
        .unwrap();
        assert!(head.get("Body").is_none() && head["ContentLength"] == 5);
        // A second write, a listing of the bucket written to: misses.
        let second = call(
            &mut effects,
            "s3.DeleteObject",
            json!({"Bucket": "b", "Key": "x"}),
        );
        assert!(second.unwrap_err().reason.contains("second object write"));
        let list = call(&mut effects, "s3.ListObjectsV2", json!({"Bucket": "b"}));
        assert!(list.unwrap_err().reason.contains("listing"));
        // Nothing reached a store: the write waits for the dispatcher's commit.
        assert!(matches!(held.locked().staged[..], [Staged::Put { .. }]));
    }

    #[test]
    fn a_staged_delete_hides_the_object_and_bad_input_misses() {
        let (mut effects, _held) = FastEffects::new(
            &fields("id-4"),
            &BTreeMap::new(),
            None,
            std::time::Instant::now(),
            None,
        );
        call(
            &mut effects,
            "s3.DeleteObject",
            json!({"Bucket": "b", "Key": "k"}),
        )
        .unwrap();
        let got = call(
            &mut effects,
            "s3.GetObject",
            json!({"Bucket": "b", "Key": "k"}),
        );
        assert!(got.unwrap_err().reason.contains("NoSuchKey"));
        // Without a store, a read of another key misses with the reason.
        let other = call(
            &mut effects,
            "s3.GetObject",
            json!({"Bucket": "b", "Key": "z"}),
        );
        assert!(other.unwrap_err().reason.contains("not reachable"));
        for bad in [json!({"Key": "k"}), json!({"Bucket": "b"}), json!("text")] {
            assert!(call(&mut effects, "s3.GetObject", bad).is_err());
        }
        let body = call(
            &mut effects,
            "s3.PutObject",
            json!({"Bucket": "b", "Key": "n", "Body": 5}),
        );
        assert!(body.is_err());
        assert!(call(
            &mut effects,
            "s3.CopyObject",
            json!({"Bucket": "b", "Key": "k"})
        )
        .is_err());
    }
}
