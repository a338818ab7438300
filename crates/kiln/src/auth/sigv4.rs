//! AWS Signature Version 4: verifying requests from stock AWS clients, and signing kiln's own.
//!
//! Clients only interoperate if every canonicalization detail matches theirs byte for byte, so
//! the rules follow botocore and the published AWS test suite rather than a reading of the spec;
//! the tests pin both.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use hmac::{Hmac, Mac};
use http::header::{HeaderName, AUTHORIZATION, DATE, HOST};
use http::{HeaderMap, HeaderValue, Method, Uri};
use percent_encoding::{percent_decode_str, percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;
type Query = Vec<(Vec<u8>, Vec<u8>)>;
type SecretLookup = dyn Fn(&str) -> Option<String> + Send + Sync;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
const AMZ_DATE_FORMAT: &str = "%Y%m%dT%H%M%SZ";
const CONTENT_SHA256: &str = "x-amz-content-sha256";
const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// AWS's tolerance for header-signed requests; presigned URLs only get it for future dates.
const MAX_SKEW_SECS: i64 = 15 * 60;
/// AWS's ceiling on X-Amz-Expires (7 days).
const MAX_EXPIRES_SECS: i64 = 7 * 24 * 60 * 60;
/// Derived keys roll over daily, so dropping them all when full is cheap and bounds memory.
const KEY_CACHE_LIMIT: usize = 1024;
/// botocore never signs these: proxies may rewrite or drop them in transit.
const UNSIGNED_HEADERS: &str = "authorization connection expect keep-alive proxy-authenticate \
    proxy-authorization te trailer transfer-encoding upgrade user-agent x-amzn-trace-id";
const QUERY_FIELDS: [&str; 6] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
];
/// AWS's wording for each malformed case, so SDK users see familiar text.
const TWO_MECHANISMS: &str = "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization header should be specified";
const HOST_UNSIGNED: &str =
    "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.";
const BAD_CONTENT_SHA256: &str =
    "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-..., or a valid sha256 value.";
const HEADER_FIELDS_MISSING: &str =
    "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.";
const QUERY_FIELDS_MISSING: &str = "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.";
const BAD_ALGORITHM: &str = "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"";
const BAD_EXPIRES: &str = "X-Amz-Expires must be a number of seconds, at most 604800 (a week).";
const BAD_DATE: &str = "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"";
const NO_DATE: &str =
    "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.";
/// SigV4 escapes everything but the RFC 3986 unreserved set.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');

/// An access key pair; `Debug` redacts the secret so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <redacted>)", self.access_key_id)
    }
}

/// What a verified request proved: the access key id, region and service from its scope.
/// The client chose the region and service, so callers check them against what they serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub access_key_id: String,
    pub region: String,
    pub service: String,
}

/// Why a request was rejected; messages mirror AWS's so SDK users see familiar text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// Missing Authentication Token
    #[error("Missing Authentication Token")]
    Missing,
    /// The signing parameters are incomplete or unparseable; the message says which.
    #[error("{0}")]
    Malformed(String),
    /// The security token included in the request is invalid.
    #[error("The security token included in the request is invalid.")]
    UnknownAccessKey,
    /// The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.
    #[error("The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.")]
    SignatureMismatch,
    /// Signature expired: the request is more than 15 minutes old, or its presigned URL has expired.
    #[error("Signature expired: the request is more than 15 minutes old, or its presigned URL has expired.")]
    Expired,
    /// Signature not yet current: the request is dated more than 15 minutes in the future.
    #[error("Signature not yet current: the request is dated more than 15 minutes in the future.")]
    NotYetValid,
    /// The provided 'x-amz-content-sha256' header does not match what was computed.
    #[error("The provided 'x-amz-content-sha256' header does not match what was computed.")]
    ContentHashMismatch,
}

impl AuthError {
    /// The AWS error code for the response, which SDKs match on to pick an exception type.
    pub fn aws_code(&self) -> &'static str {
        match self {
            Self::Missing => "MissingAuthenticationTokenException",
            Self::Malformed(_) => "IncompleteSignatureException",
            Self::UnknownAccessKey => "UnrecognizedClientException",
            Self::SignatureMismatch | Self::Expired | Self::NotYetValid => {
                "InvalidSignatureException"
            }
            Self::ContentHashMismatch => "XAmzContentSHA256Mismatch",
        }
    }
}

fn malformed(message: impl Into<String>) -> AuthError {
    AuthError::Malformed(message.into())
}

/// Caches derived signing keys per (secret, date, region, service): the hot path must not redo 4 HMACs per request.
pub struct Verifier {
    lookup: Box<SecretLookup>,
    keys: RwLock<HashMap<String, [u8; 32]>>,
}

impl Verifier {
    /// `lookup` maps an access key id to its secret; it runs per request, so revoking or
    /// rotating a key takes effect at once.
    pub fn new(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        let (lookup, keys) = (Box::new(lookup), RwLock::default());
        Self { lookup, keys }
    }

    /// Verify a request signed in the Authorization header, or presigned in the query string (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature).
    /// `body` is the full request body; when the x-amz-content-sha256 header is present its value is used as the payload hash (including "UNSIGNED-PAYLOAD"; for "STREAMING-..." values return the identity and leave chunk verification to the caller), else sha256(body).
    pub fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Identity, AuthError> {
        let mut query = parse_query(uri.query().unwrap_or_default());
        let presigned = query.iter().any(|(k, _)| k == b"X-Amz-Signature");
        let claim = match (headers.get(AUTHORIZATION), presigned) {
            (Some(_), true) => return Err(malformed(TWO_MECHANISMS)),
            (Some(value), false) => Claim::from_header(value, headers)?,
            (None, true) => Claim::from_query(&query)?,
            (None, false) => return Err(AuthError::Missing),
        };
        let [id, date, region, service] = claim.scope()?;
        claim.check_time(date, now)?;
        let signed: Vec<&str> = claim.signed_headers.split(';').collect();
        if !signed.contains(&"host") {
            return Err(malformed(HOST_UNSIGNED));
        }
        let secret = (self.lookup)(id).ok_or(AuthError::UnknownAccessKey)?;
        let claimed_hash = match headers.get(CONTENT_SHA256).map(HeaderValue::to_str) {
            None => None,
            // Only S3 lets a signature leave the body out (unsigned or chunk-signed payloads);
            // for every other service the body must be covered.
            Some(Ok(hash))
                if is_sha256_hex(hash) || (service == "s3" && valid_payload_hash(hash)) =>
            {
                Some(hash)
            }
            Some(_) => return Err(malformed(BAD_CONTENT_SHA256)),
        };
        let payload = match claimed_hash {
            Some(hash) => hash.to_owned(),
            // Presigned S3 URLs are made before any body exists, so AWS signs this constant.
            None if presigned && service == "s3" => UNSIGNED_PAYLOAD.to_owned(),
            None => sha256_hex(body),
        };
        query.retain(|(k, _)| !(presigned && k == b"X-Amz-Signature"));
        let s3 = service == "s3";
        let canonical = canonical_request(method, uri, headers, &query, &signed, &payload, !s3);
        let scope = [date, region, service];
        let sts = string_to_sign(&claim.amz_date, scope, &canonical);
        self.check_signature(&secret, scope, &sts, &claim.signature)?;
        // The signature covers only the claimed hash, so the body must be held to it.
        if let Some(hash) = claimed_hash.filter(|h| is_sha256_hex(h)) {
            if !hash.eq_ignore_ascii_case(&sha256_hex(body)) {
                return Err(AuthError::ContentHashMismatch);
            }
        }
        let [access_key_id, region, service] = [id, region, service].map(str::to_owned);
        Ok(Identity {
            access_key_id,
            region,
            service,
        })
    }

    fn check_signature(
        &self,
        secret: &str,
        scope: [&str; 3],
        string_to_sign: &str,
        signature: &str,
    ) -> Result<(), AuthError> {
        let cache_id = format!("{}/{secret}", scope.join("/"));
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        let cached = keys.get(&cache_id).copied();
        drop(keys);
        let key = cached.unwrap_or_else(|| derive_key(secret, scope));
        let mut provided = [0u8; 32];
        hex::decode_to_slice(signature, &mut provided).map_err(|_| AuthError::SignatureMismatch)?;
        let mut mac = new_mac(&key);
        mac.update(string_to_sign.as_bytes());
        // verify_slice compares in constant time, so timing leaks nothing about the expected value.
        let verified = mac.verify_slice(&provided);
        verified.map_err(|_| AuthError::SignatureMismatch)?;
        if cached.is_none() {
            // Only keys that just verified are cached, so forged requests cannot churn the cache.
            let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
            if keys.len() >= KEY_CACHE_LIMIT {
                keys.clear();
            }
            keys.insert(cache_id, key);
        }
        Ok(())
    }
}

/// `YYYYMMDDTHHMMSSZ`, read by hand: it is on every request's path, and chrono's format-string
/// parser costs more than the rest of the date check.
fn parse_amz_date(text: &str) -> Option<DateTime<Utc>> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| {
        b[range].iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let date = chrono::NaiveDate::from_ymd_opt(number(0..4)? as i32, number(4..6)?, number(6..8)?)?;
    let time = chrono::NaiveTime::from_hms_opt(number(9..11)?, number(11..13)?, number(13..15)?)?;
    Some(NaiveDateTime::new(date, time).and_utc())
}

/// The signing parameters a request claims, wherever it carried them.
struct Claim {
    credential: String,
    signed_headers: String,
    signature: String,
    amz_date: String,
    /// Only presigned URLs state a lifetime; header auth gets the skew window instead.
    expires: Option<i64>,
}

impl Claim {
    fn from_header(value: &HeaderValue, headers: &HeaderMap) -> Result<Self, AuthError> {
        let raw = value.to_str().unwrap_or_default();
        let (algorithm, rest) = raw.split_once(' ').unwrap_or((raw, ""));
        if algorithm != ALGORITHM {
            let message = format!("Unsupported AWS 'algorithm': '{algorithm}'.");
            return Err(malformed(message));
        }
        let mut fields = [None, None, None];
        for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let names = ["Credential", "SignedHeaders", "Signature"];
            let slot = names
                .iter()
                .position(|name| *name == key)
                .map(|i| &mut fields[i]);
            let Some(slot @ None) = slot else {
                let message = format!("Invalid or repeated Authorization component '{part}'.");
                return Err(malformed(message));
            };
            *slot = Some(value.to_owned());
        }
        let [Some(credential), Some(signed_headers), Some(signature)] = fields else {
            return Err(malformed(format!(
                "{HEADER_FIELDS_MISSING} Authorization={raw}"
            )));
        };
        let (amz_date, expires) = (request_date(headers)?, None);
        Ok(Self {
            credential,
            signed_headers,
            signature,
            amz_date,
            expires,
        })
    }

    fn from_query(query: &Query) -> Result<Self, AuthError> {
        let get = |name: &str| {
            let (_, value) = query.iter().find(|(k, _)| k == name.as_bytes())?;
            Some(String::from_utf8_lossy(value).into_owned())
        };
        let [Some(algorithm), Some(credential), Some(amz_date), Some(expires), Some(signed_headers), Some(signature)] =
            QUERY_FIELDS.map(get)
        else {
            return Err(malformed(QUERY_FIELDS_MISSING));
        };
        if algorithm != ALGORITHM {
            return Err(malformed(BAD_ALGORITHM));
        }
        let expires = expires.parse().ok();
        if !expires.is_some_and(|secs| (0..=MAX_EXPIRES_SECS).contains(&secs)) {
            return Err(malformed(BAD_EXPIRES));
        }
        Ok(Self {
            credential,
            signed_headers,
            signature,
            amz_date,
            expires,
        })
    }

    /// The access key id, date, region and service of the credential scope.
    fn scope(&self) -> Result<[&str; 4], AuthError> {
        let parts: Vec<&str> = self.credential.split('/').collect();
        match parts[..] {
            [id, date, region, service, "aws4_request"] if !parts.contains(&"") => {
                Ok([id, date, region, service])
            }
            _ => Err(malformed(format!("Credential should be scoped as <key>/<date>/<region>/<service>/aws4_request, not '{}'.", self.credential))),
        }
    }

    fn check_time(&self, scope_date: &str, now: DateTime<Utc>) -> Result<(), AuthError> {
        let at = parse_amz_date(&self.amz_date).ok_or_else(|| malformed(BAD_DATE))?;
        let date = &self.amz_date;
        if date.get(..8) != Some(scope_date) {
            return Err(malformed(format!("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{scope_date}' != '{}', from '{date}'.", &date[..8])));
        }
        if at - now > TimeDelta::seconds(MAX_SKEW_SECS) {
            return Err(AuthError::NotYetValid);
        }
        if now - at > TimeDelta::seconds(self.expires.unwrap_or(MAX_SKEW_SECS)) {
            return Err(AuthError::Expired);
        }
        Ok(())
    }
}

/// botocore signs `Date` instead of adding `X-Amz-Date` when the caller set one.
fn request_date(headers: &HeaderMap) -> Result<String, AuthError> {
    if let Some(value) = headers.get("x-amz-date") {
        return Ok(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    let date = headers.get(DATE).and_then(|v| v.to_str().ok());
    match date.map(DateTime::parse_from_rfc2822) {
        Some(Ok(date)) => Ok(date.with_timezone(&Utc).format(AMZ_DATE_FORMAT).to_string()),
        _ => Err(malformed(NO_DATE)),
    }
}

/// Sign a request the way botocore does (Authorization header + x-amz-date + x-amz-content-sha256 optional): used by kiln's CLI and benchmark client.
///
/// Adds `Host` from `uri` when absent, and `x-amz-content-sha256` for "s3", which requires it;
/// one the caller set (e.g. "UNSIGNED-PAYLOAD") is signed as is.
///
/// # Panics
/// If the access key id, region or service contain bytes not allowed in a header value.
#[allow(clippy::too_many_arguments)] // the shape kiln's callers were written against
pub fn sign(
    method: &Method,
    uri: &Uri,
    headers: &mut HeaderMap,
    body: &[u8],
    creds: &Credentials,
    region: &str,
    service: &str,
    now: DateTime<Utc>,
) {
    let amz_date = now.format(AMZ_DATE_FORMAT).to_string();
    headers.remove(AUTHORIZATION);
    headers.insert("x-amz-date", header_value(&amz_date));
    if let Some(host) = default_host(uri).filter(|_| !headers.contains_key(HOST)) {
        headers.insert(HOST, header_value(&host));
    }
    if service == "s3" && !headers.contains_key(CONTENT_SHA256) {
        headers.insert(CONTENT_SHA256, header_value(&sha256_hex(body)));
    }
    let payload = match headers.get(CONTENT_SHA256) {
        Some(value) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
        None => sha256_hex(body),
    };
    let mut signed: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
    signed.retain(|name| !UNSIGNED_HEADERS.split(' ').any(|u| u == *name));
    signed.sort_unstable();
    let query = parse_query(uri.query().unwrap_or_default());
    let s3 = service == "s3";
    let canonical = canonical_request(method, uri, headers, &query, &signed, &payload, !s3);
    let scope = [&amz_date[..8], region, service];
    let key = derive_key(&creds.secret_access_key, scope);
    let signature = hmac(
        &key,
        string_to_sign(&amz_date, scope, &canonical).as_bytes(),
    );
    let (id, signature) = (&creds.access_key_id, hex::encode(signature));
    let credential = format!("{id}/{}/aws4_request", scope.join("/"));
    let signed = signed.join(";");
    let value = format!(
        "{ALGORITHM} Credential={credential}, SignedHeaders={signed}, Signature={signature}"
    );
    headers.insert(AUTHORIZATION, header_value(&value));
}

fn header_value(value: &str) -> HeaderValue {
    HeaderValue::from_str(value).expect("signing inputs must be valid header values")
}

/// The Host botocore derives from a URL: lowercase, without a default port.
fn default_host(uri: &Uri) -> Option<String> {
    let host = uri.host()?.to_ascii_lowercase();
    match (uri.scheme_str(), uri.port_u16()) {
        (_, None) | (Some("http"), Some(80)) | (Some("https"), Some(443)) => Some(host),
        (_, Some(port)) => Some(format!("{host}:{port}")),
    }
}

/// Decoded, so canonicalization re-encodes every client's spelling the same way.
fn parse_query(query: &str) -> Query {
    let decode = |s: &str| percent_decode_str(s).collect::<Vec<u8>>();
    let pairs = query.split('&').filter(|p| !p.is_empty());
    let pairs = pairs.map(|p| p.split_once('=').unwrap_or((p, "")));
    pairs.map(|(k, v)| (decode(k), decode(v))).collect()
}

fn encode(bytes: &[u8]) -> String {
    percent_encode(bytes, UNRESERVED).to_string()
}

fn canonical_request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    query: &Query,
    signed: &[&str],
    payload: &str,
    double_encode: bool,
) -> Vec<u8> {
    // Written in place, piece by piece: this runs on every request.
    let mut pairs: Vec<_> = query.iter().map(|(k, v)| (encode(k), encode(v))).collect();
    pairs.sort_unstable();
    let path = canonical_uri(uri.path(), double_encode);
    let mut out = Vec::with_capacity(256 + path.len());
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(path.as_bytes());
    out.push(b'\n');
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
    }
    out.push(b'\n');
    for &name in signed {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        let mut any = false;
        for value in headers.get_all(name) {
            if any {
                out.push(b',');
            }
            trim_all_into(value.as_bytes(), &mut out);
            any = true;
        }
        if name == "host" && !any {
            // HTTP/2 carries the host as :authority, which lands in the URI instead.
            if let Some(host) = default_host(uri) {
                out.extend_from_slice(host.as_bytes());
            }
        }
        out.push(b'\n');
    }
    out.push(b'\n');
    for (i, name) in signed.iter().enumerate() {
        if i > 0 {
            out.push(b';');
        }
        out.extend_from_slice(name.as_bytes());
    }
    out.push(b'\n');
    out.extend_from_slice(payload.as_bytes());
    out
}

/// Non-S3 services sign the dot-segment-normalized wire path encoded a second time, exactly as
/// botocore does. S3 keys are opaque, so their path is neither normalized nor double-encoded:
/// each segment is brought to its canonical single encoding, keeping an encoded '/' intact.
fn canonical_uri(path: &str, double_encode: bool) -> String {
    let path = if path.is_empty() { "/" } else { path };
    if double_encode {
        let normalized = remove_dot_segments(path);
        return percent_encode(normalized.as_bytes(), UNRESERVED_AND_SLASH).to_string();
    }
    let decoded = path
        .split('/')
        .map(|s| percent_decode_str(s).collect::<Vec<u8>>());
    decoded.map(|s| encode(&s)).collect::<Vec<_>>().join("/")
}

/// botocore's `remove_dot_segments`, which also collapses repeated slashes as AWS expects.
fn remove_dot_segments(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => drop(kept.pop()),
            s => kept.push(s),
        }
    }
    let trailing = path.ends_with('/') && !kept.is_empty();
    format!("/{}{}", kept.join("/"), if trailing { "/" } else { "" })
}

/// Appends `value` trimmed, with runs of spaces collapsed, as botocore's
/// `' '.join(value.split())` does.
fn trim_all_into(value: &[u8], out: &mut Vec<u8>) {
    let words = value
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty());
    for (i, word) in words.enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(word);
    }
}

/// `scope` is (date, region, service), as in the two functions below.
fn string_to_sign(amz_date: &str, scope: [&str; 3], canonical_request: &[u8]) -> String {
    let hash = Sha256::digest(canonical_request);
    let mut out = String::with_capacity(ALGORITHM.len() + amz_date.len() + 64 + 128);
    for part in [
        ALGORITHM, "\n", amz_date, "\n", scope[0], "/", scope[1], "/", scope[2],
    ] {
        out.push_str(part);
    }
    out.push_str("/aws4_request\n");
    push_hex(&mut out, &hash);
    out
}

fn derive_key(secret: &str, scope: [&str; 3]) -> [u8; 32] {
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), scope[0].as_bytes());
    for part in [scope[1], scope[2], "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    key
}

fn new_mac(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = new_mac(key);
    mac.update(message);
    mac.finalize().into_bytes().into()
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    push_hex(&mut out, &Sha256::digest(bytes));
    out
}

/// Appends `bytes` in lowercase hex (a table lookup per nibble, no per-char iterator).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

fn is_sha256_hex(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

fn valid_payload_hash(value: &str) -> bool {
    value == UNSIGNED_PAYLOAD || value.starts_with("STREAMING-") || is_sha256_hex(value)
}

#[cfg(test)]
mod tests;
