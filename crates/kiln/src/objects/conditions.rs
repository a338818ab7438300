//! Conditional requests (RFC 9110 §13, as S3 applies them): `If-Match`, `If-None-Match`,
//! `If-Modified-Since`, `If-Unmodified-Since` on reads and copies, `If-Match` / `If-None-Match`
//! on writes.

use http::{HeaderMap, HeaderValue};
use s3s::dto::{ETagCondition, Timestamp, TimestampFormat};
use s3s::{s3_error, S3Error, S3ErrorCode};

/// The preconditions of a read (GetObject, HeadObject, CopyObject's source).
#[derive(Debug, Clone, Default)]
pub struct ReadConditions {
    pub if_match: Option<ETagCondition>,
    pub if_none_match: Option<ETagCondition>,
    pub if_modified_since: Option<Timestamp>,
    pub if_unmodified_since: Option<Timestamp>,
}

/// What a read's preconditions decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: a precondition the client set does not hold.
    PreconditionFailed,
}

fn matches(condition: &ETagCondition, etag: &str) -> bool {
    match condition {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

fn unix_seconds(ts: &Timestamp) -> i64 {
    time::OffsetDateTime::from(ts.clone()).unix_timestamp()
}

impl ReadConditions {
    /// Evaluates in RFC 9110's order. HTTP dates have whole seconds, so the object's time is
    /// truncated before comparing; `If-Match` overrides `If-Unmodified-Since` and `If-None-Match`
    /// overrides `If-Modified-Since`, as on S3.
    pub fn evaluate(&self, etag: &str, modified_ms: i64) -> Verdict {
        let modified = modified_ms.div_euclid(1000);
        match &self.if_match {
            Some(condition) if !matches(condition, etag) => return Verdict::PreconditionFailed,
            Some(_) => {}
            None => {
                if let Some(since) = &self.if_unmodified_since {
                    if modified > unix_seconds(since) {
                        return Verdict::PreconditionFailed;
                    }
                }
            }
        }
        match &self.if_none_match {
            Some(condition) if matches(condition, etag) => return Verdict::NotModified,
            Some(_) => {}
            None => {
                if let Some(since) = &self.if_modified_since {
                    if modified <= unix_seconds(since) {
                        return Verdict::NotModified;
                    }
                }
            }
        }
        Verdict::Proceed
    }
}

/// 412, for [`Verdict::PreconditionFailed`].
pub fn precondition_failed() -> S3Error {
    s3_error!(
        PreconditionFailed,
        "At least one of the pre-conditions you specified did not hold"
    )
}

/// 304, for [`Verdict::NotModified`]: it carries the object's ETag and Last-Modified.
pub fn not_modified(etag: &str, modified_ms: i64) -> S3Error {
    let mut e = S3Error::new(S3ErrorCode::NotModified);
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        headers.insert(http::header::ETAG, v);
    }
    let mut date = Vec::new();
    if crate::objects::shared::timestamp(modified_ms)
        .format(TimestampFormat::HttpDate, &mut date)
        .is_ok()
    {
        if let Ok(v) = HeaderValue::from_bytes(&date) {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(headers);
    e
}

/// The precondition of a write (PutObject, CompleteMultipartUpload, CopyObject's target,
/// DeleteObject), checked inside the transaction that commits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    Always,
    /// `If-None-Match: *`: only if no object has the key.
    IfAbsent,
    /// `If-Match`: only if the object exists (and has this ETag, when one is given).
    IfMatch(Option<String>),
    /// `If-None-Match` with an ETag: unless the object has this ETag (S3 itself takes only
    /// `*` here; the ETag form is HTTP's, and what S3-compatible stores serve).
    IfNoneMatch(String),
}

impl WriteCondition {
    pub fn from_headers(
        if_match: Option<&ETagCondition>,
        if_none_match: Option<&ETagCondition>,
    ) -> Result<Self, &'static str> {
        match (if_match, if_none_match) {
            (Some(_), Some(_)) => Err("If-Match and If-None-Match cannot be combined on a write"),
            (Some(ETagCondition::Any), None) => Ok(Self::IfMatch(None)),
            (Some(ETagCondition::ETag(e)), None) => Ok(Self::IfMatch(Some(e.value().to_string()))),
            (None, Some(ETagCondition::Any)) => Ok(Self::IfAbsent),
            (None, Some(ETagCondition::ETag(e))) => Ok(Self::IfNoneMatch(e.value().to_string())),
            (None, None) => Ok(Self::Always),
        }
    }

    /// Whether the write may proceed given the current object's ETag (None: no object).
    pub fn allows(&self, current_etag: Option<&str>) -> bool {
        match self {
            Self::Always => true,
            Self::IfAbsent => current_etag.is_none(),
            Self::IfMatch(None) => current_etag.is_some(),
            Self::IfMatch(Some(expected)) => current_etag == Some(expected.as_str()),
            Self::IfNoneMatch(other) => current_etag != Some(other.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;
    use std::time::{Duration, SystemTime};

    fn at(secs: u64) -> Timestamp {
        Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    }

    fn tag(v: &str) -> Option<ETagCondition> {
        Some(ETagCondition::ETag(ETag::Strong(v.into())))
    }

    #[test]
    fn read_conditions_follow_rfc_order() {
        let modified_ms = 1_000_500; // 1000.5 s
        let c = ReadConditions::default();
        assert_eq!(c.evaluate("e", modified_ms), Verdict::Proceed);

        let c = ReadConditions {
            if_match: tag("x"),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::PreconditionFailed);

        // If-Match true wins over a failing If-Unmodified-Since.
        let c = ReadConditions {
            if_match: tag("e"),
            if_unmodified_since: Some(at(10)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::Proceed);

        let c = ReadConditions {
            if_unmodified_since: Some(at(999)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::PreconditionFailed);
        // Sub-second parts do not count: modified at 1000.5 is "not modified since 1000".
        let c = ReadConditions {
            if_unmodified_since: Some(at(1000)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::Proceed);

        let c = ReadConditions {
            if_none_match: tag("e"),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::NotModified);
        let c = ReadConditions {
            if_none_match: Some(ETagCondition::Any),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::NotModified);

        // If-None-Match false (differs) overrides If-Modified-Since.
        let c = ReadConditions {
            if_none_match: tag("x"),
            if_modified_since: Some(at(5000)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::Proceed);
        let c = ReadConditions {
            if_modified_since: Some(at(1000)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::NotModified);
        let c = ReadConditions {
            if_modified_since: Some(at(999)),
            ..Default::default()
        };
        assert_eq!(c.evaluate("e", modified_ms), Verdict::Proceed);
    }

    #[test]
    fn write_conditions() {
        let any = ETagCondition::Any;
        let e = ETagCondition::ETag(ETag::Strong("e".into()));
        assert!(WriteCondition::from_headers(Some(&any), Some(&any)).is_err());
        let unless = WriteCondition::from_headers(None, Some(&e)).unwrap();
        assert!(unless.allows(None) && unless.allows(Some("x")) && !unless.allows(Some("e")));
        let absent = WriteCondition::from_headers(None, Some(&any)).unwrap();
        assert!(absent.allows(None) && !absent.allows(Some("e")));
        let exists = WriteCondition::from_headers(Some(&any), None).unwrap();
        assert!(!exists.allows(None) && exists.allows(Some("x")));
        let exact = WriteCondition::from_headers(Some(&e), None).unwrap();
        assert!(exact.allows(Some("e")) && !exact.allows(Some("x")) && !exact.allows(None));
        assert!(WriteCondition::Always.allows(None));
    }
}
