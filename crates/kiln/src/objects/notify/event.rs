//! The event record S3 sends a function for one write (`{"Records":[...]}`, event version 2.1),
//! built from what the write's answer told: pure functions over plain data.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use super::config::{EventKind, FunctionRule};

/// What a write did, as its answer told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: EventKind,
    pub key: String,
    /// The object's size and ETag (unquoted): created objects only.
    pub size: Option<u64>,
    pub etag: Option<String>,
    /// The version written, or the delete marker's; none in an unversioned bucket.
    pub version_id: Option<String>,
}

/// Who asked for the write, and the ids its answer carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// `x-amz-request-id` of the write's answer (its number; written as 16 hex digits).
    pub request_id: u64,
    pub source_ip: IpAddr,
}

/// The record's fixed parts: where the bucket is, who wrote.
pub struct Writer<'a> {
    pub region: &'a str,
    pub bucket: &'a str,
    /// The access key that signed the write; `Anonymous` for an unsigned one.
    pub principal: &'a str,
    /// `x-amz-id-2` of the answer.
    pub host_id: &'a str,
}

/// Characters S3 writes as they are in an event's key (as a form encoder does, and `/`): every
/// other byte is percent-encoded, and a space becomes `+`.
const KEY_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'*')
    .remove(b'/')
    .remove(b' ');

/// A key as S3 writes it in an event: URL-encoded, a space as `+` (functions decode it with
/// `unquote_plus` / `decodeURIComponent(key.replace(/\+/g, ' '))`).
pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, KEY_ESCAPED)
        .to_string()
        .replace(' ', "+")
}

/// Sequencers of this process: each greater than the last, and than any of an earlier run (they
/// start at the clock's nanoseconds), so that a function can order the events of one key.
#[derive(Default)]
pub struct Sequencer(AtomicU64);

impl Sequencer {
    /// The next sequencer, as S3 writes it (hexadecimal).
    pub fn next(&self, now: DateTime<Utc>) -> String {
        let clock = now.timestamp_nanos_opt().unwrap_or(0).max(0) as u64;
        let mut last = self.0.load(Ordering::Relaxed);
        loop {
            let next = clock.max(last + 1);
            match self
                .0
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return format!("{next:016X}"),
                Err(seen) => last = seen,
            }
        }
    }
}

/// The event a function configured by `rule` receives for `change`.
pub fn record(
    rule: &FunctionRule,
    change: &Change,
    writer: &Writer<'_>,
    origin: &Origin,
    time: DateTime<Utc>,
    sequencer: &str,
) -> Value {
    let mut object = json!({
        "key": encode_key(&change.key),
        "sequencer": sequencer,
    });
    if let Some(size) = change.size {
        object["size"] = json!(size);
    }
    if let Some(etag) = &change.etag {
        object["eTag"] = json!(etag.trim_matches('"'));
    }
    if let Some(version) = change.version_id.as_deref().filter(|v| *v != "null") {
        object["versionId"] = json!(version);
    }
    json!({
        "Records": [{
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": writer.region,
            "eventTime": time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
            "eventName": change.kind.name(),
            "userIdentity": {"principalId": writer.principal},
            "requestParameters": {"sourceIPAddress": origin.source_ip.to_string()},
            "responseElements": {
                "x-amz-request-id": format!("{:016X}", origin.request_id),
                "x-amz-id-2": writer.host_id,
            },
            "s3": {
                "s3SchemaVersion": "1.0",
                "configurationId": rule.id,
                "bucket": {
                    "name": writer.bucket,
                    "ownerIdentity": {"principalId": crate::objects::shared::owner().id},
                    "arn": format!("arn:aws:s3:::{}", writer.bucket),
                },
                "object": object,
            },
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_are_encoded_as_s3_encodes_them() {
        assert_eq!(encode_key("photos/a b.jpg"), "photos/a+b.jpg");
        assert_eq!(encode_key("a+b=c&d"), "a%2Bb%3Dc%26d");
        assert_eq!(encode_key("é"), "%C3%A9");
    }

    #[test]
    fn a_record_has_s3s_shape() {
        let rule = FunctionRule {
            id: "thumbs".into(),
            function_arn: "arn:aws:lambda:us-east-1:000000000000:function:f".into(),
            events: vec!["s3:ObjectCreated:*".into()],
            prefix: None,
            suffix: None,
        };
        let change = Change {
            kind: EventKind::Put,
            key: "a b".into(),
            size: Some(5),
            etag: Some("\"abc\"".into()),
            version_id: Some("null".into()),
        };
        let writer = Writer {
            region: "us-east-1",
            bucket: "photos",
            principal: "AKID",
            host_id: "host",
        };
        let origin = Origin {
            request_id: 255,
            source_ip: [127, 0, 0, 1].into(),
        };
        let time = DateTime::from_timestamp(0, 0).unwrap();
        let r = &record(&rule, &change, &writer, &origin, time, "01")["Records"][0];
        assert_eq!(r["eventName"], "ObjectCreated:Put");
        assert_eq!(r["eventTime"], "1970-01-01T00:00:00.000Z");
        assert_eq!(
            r["responseElements"]["x-amz-request-id"],
            "00000000000000FF"
        );
        assert_eq!(r["s3"]["configurationId"], "thumbs");
        assert_eq!(r["s3"]["bucket"]["arn"], "arn:aws:s3:::photos");
        let object = &r["s3"]["object"];
        assert_eq!(object["key"], "a+b");
        assert_eq!(object["size"], 5);
        assert_eq!(object["eTag"], "abc");
        assert!(object.get("versionId").is_none());
        let removed = Change {
            kind: EventKind::DeleteMarkerCreated,
            size: None,
            etag: None,
            version_id: Some("v1".into()),
            ..change
        };
        let object =
            &record(&rule, &removed, &writer, &origin, time, "02")["Records"][0]["s3"]["object"];
        assert!(object.get("size").is_none() && object.get("eTag").is_none());
        assert_eq!(object["versionId"], "v1");
    }

    #[test]
    fn sequencers_increase_even_when_the_clock_does_not() {
        let sequencer = Sequencer::default();
        let now = Utc::now();
        let first = sequencer.next(now);
        let second = sequencer.next(now);
        let earlier = sequencer.next(now - chrono::TimeDelta::seconds(5));
        assert!(
            first < second && second < earlier,
            "{first} {second} {earlier}"
        );
    }

    proptest! {
        #[test]
        fn an_encoded_key_decodes_to_the_key(key in "\\PC{0,24}") {
            let encoded = encode_key(&key);
            prop_assert!(!encoded.contains(' '));
            let decoded = percent_encoding::percent_decode_str(&encoded.replace('+', " "))
                .decode_utf8()
                .unwrap()
                .into_owned();
            prop_assert_eq!(decoded, key);
        }
    }
}
