//! Who may use the object store, and from where.
//!
//! Two kinds of keys are accepted: kiln's admin key (the one the control API accepts) and
//! function keys. A function key is derived from the admin secret and the function's name, so
//! kiln can hand one to every sandbox without storing anything, and anyone holding the admin
//! credentials (the CLI, with the data dir) can compute it too. The control API's verifier only
//! knows the admin key: a function key opens the object store and nothing else.
//!
//! Listeners carry a [`Scope`]: the store's own listener takes every key, a sandbox's listener
//! only that function's key.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::{HeaderMap, Uri};
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::host::{S3Host, VirtualHost};
use s3s::{s3_error, S3Result};
use sha2::Sha256;

use super::acl::Anonymous;
use crate::auth::Credentials;

type HmacSha256 = Hmac<Sha256>;

/// Function keys name their function after this prefix.
const FUNCTION_KEY_PREFIX: &str = "KILNFN-";
/// … or its hex encoding after this one, for names that are not plain `[A-Za-z0-9_-]`.
const FUNCTION_HEX_KEY_PREFIX: &str = "KILNFX-";

/// Which keys a listener accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// kiln's admin key and every function's key: the store's own listener.
    All,
    /// Only this function's key: a listener inside that function's sandbox.
    Function(String),
}

/// Whose key signed a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Function(String),
}

pub struct KeyRing {
    admin: Credentials,
    function_master: [u8; 32],
}

fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

impl KeyRing {
    pub fn new(admin: Credentials) -> Self {
        let function_master = hmac(
            admin.secret_access_key.as_bytes(),
            b"kiln object store: function keys v1",
        );
        Self {
            admin,
            function_master,
        }
    }

    /// The key pair of one function. The same name always gets the same pair (until the admin
    /// credentials change).
    pub fn function_credentials(&self, function: &str) -> Credentials {
        let plain = !function.is_empty()
            && function
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let access_key_id = if plain {
            format!("{FUNCTION_KEY_PREFIX}{function}")
        } else {
            format!(
                "{FUNCTION_HEX_KEY_PREFIX}{}",
                crate::objects::checksum::hex(function.as_bytes())
            )
        };
        Credentials {
            access_key_id,
            secret_access_key: self.function_secret(function),
        }
    }

    fn function_secret(&self, function: &str) -> String {
        let digest = hmac(
            &self.function_master,
            format!("function:{function}").as_bytes(),
        );
        BASE64.encode(&digest[..30])
    }

    /// The principal an access key belongs to, with its secret.
    pub fn lookup(&self, access_key: &str) -> Option<(Principal, String)> {
        if access_key == self.admin.access_key_id {
            return Some((Principal::Admin, self.admin.secret_access_key.clone()));
        }
        let function = function_named_by(access_key)?;
        if function.is_empty() || self.function_credentials(&function).access_key_id != access_key {
            return None;
        }
        let secret = self.function_secret(&function);
        Some((Principal::Function(function), secret))
    }
}

/// The function a function key names (not checked: s3s has verified the request's signature
/// against the key's secret by the time an operation sees its credentials).
pub(crate) fn function_named_by(access_key: &str) -> Option<String> {
    if let Some(name) = access_key.strip_prefix(FUNCTION_KEY_PREFIX) {
        return Some(name.to_string());
    }
    let hex = access_key.strip_prefix(FUNCTION_HEX_KEY_PREFIX)?;
    let bytes = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// s3s's key lookup.
pub(crate) struct Auth(pub Arc<KeyRing>);

#[async_trait::async_trait]
impl S3Auth for Auth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.lookup(access_key) {
            Some((_, secret)) => Ok(SecretKey::from(secret)),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}

/// The checks after a valid signature: SigV4 scoped to `s3` (SigV2 only as a presigned URL),
/// and a key the listener takes. Unsigned requests only read (GET and HEAD of objects,
/// listings) or write objects (what `public-read-write` opens) on the store's own listener,
/// marked [`Anonymous`] for the backend to check: the local store checks its ACLs, remote mode
/// re-issues them unsigned.
pub(crate) struct Access {
    pub keys: Arc<KeyRing>,
    /// The backend is kiln's own store, whose every bucket is kiln's: an expected bucket owner
    /// is checked here (a remote checks it itself).
    pub owns_buckets: bool,
}

/// The operations an unsigned request may ask for, of what `public-read` opens.
const ANONYMOUS_READS: [&str; 4] = ["GetObject", "HeadObject", "ListObjects", "ListObjectsV2"];

/// The writes of objects an unsigned request may ask for, of what `public-read-write` opens
/// (the store checks the bucket's ACL).
const ANONYMOUS_WRITES: [&str; 8] = [
    "PutObject",
    "PostObject",
    "DeleteObject",
    "DeleteObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
];

/// Operations only kiln's admin key may call: a bucket's notifications invoke functions, so a
/// function's key that could set them could have any function invoked with events it shaped.
const ADMIN_ONLY: [&str; 2] = [
    "PutBucketNotificationConfiguration",
    "GetBucketNotificationConfiguration",
];

impl Access {
    fn let_anonymous(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let on_own_listener = cx
            .extensions_mut()
            .get::<Scope>()
            .is_none_or(|s| *s == Scope::All);
        let op = cx.s3_op().name();
        let allowed = ANONYMOUS_READS.contains(&op) || ANONYMOUS_WRITES.contains(&op);
        if allowed && on_own_listener {
            cx.extensions_mut().insert(Anonymous);
            return Ok(());
        }
        Err(s3_error!(AccessDenied, "Anonymous access is not allowed"))
    }
}

/// How a request was signed.
#[derive(Debug, PartialEq, Eq)]
enum Signing {
    /// SigV4, with the service named in its credential scope (`AK/date/region/SERVICE/...`).
    V4(String),
    /// A SigV2 presigned URL: boto3 still makes these for us-east-1 unless told otherwise.
    PresignedV2,
    /// A browser POST upload: the form's policy signed with SigV4 (s3s has checked the
    /// signature, the policy's expiry and its conditions).
    PostPolicy,
    /// Anything else s3s accepts (SigV2 headers), which kiln does not offer.
    Other,
}

/// The longest validity of a presigned URL S3 accepts: a week.
const MAX_PRESIGNED_EXPIRY_S: u64 = 7 * 24 * 3600;

fn signing(op: &str, headers: &HeaderMap, uri: &Uri) -> Signing {
    if op == "PostObject" {
        return Signing::PostPolicy;
    }
    let service = |credential: &str| match credential.split('/').nth(3) {
        Some(service) => Signing::V4(service.to_string()),
        None => Signing::Other,
    };
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return auth
            .split([',', ' '])
            .find_map(|part| part.trim().strip_prefix("Credential="))
            .map_or(Signing::Other, service);
    }
    let query = uri.query().unwrap_or_default();
    let param = |name: &str| {
        query.split('&').find_map(|pair| {
            let value = pair.strip_prefix(name)?.strip_prefix('=')?;
            Some(
                percent_encoding::percent_decode_str(value)
                    .decode_utf8_lossy()
                    .into_owned(),
            )
        })
    };
    if let Some(credential) = param("X-Amz-Credential") {
        service(&credential)
    } else if param("AWSAccessKeyId").is_some() && param("Signature").is_some() {
        Signing::PresignedV2
    } else {
        Signing::Other
    }
}

/// What S3 refuses of a signed request before looking at what it asks for: a presigned URL
/// valid for more than a week, an empty `Content-MD5`.
fn check_request(headers: &HeaderMap, uri: &Uri) -> S3Result<()> {
    let expires = uri.query().unwrap_or_default().split('&').find_map(|pair| {
        pair.strip_prefix("X-Amz-Expires=")
            .map(|v| v.parse::<u64>().unwrap_or(u64::MAX))
    });
    if expires.is_some_and(|s| s > MAX_PRESIGNED_EXPIRY_S) {
        return Err(s3_error!(
            AuthorizationQueryParametersError,
            "X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_EXPIRY_S}"
        ));
    }
    if headers
        .get("content-md5")
        .is_some_and(|v| v.as_bytes().iter().all(u8::is_ascii_whitespace))
    {
        return Err(s3_error!(
            InvalidDigest,
            "The Content-MD5 you specified is not valid."
        ));
    }
    Ok(())
}

/// `x-amz-expected-bucket-owner` (and its copy source's): a request that names an owner other
/// than kiln's is refused, as S3 refuses one naming an account that does not own the bucket.
fn check_expected_owner(headers: &HeaderMap) -> S3Result<()> {
    let owner = super::shared::owner().id.unwrap_or_default();
    for name in [
        "x-amz-expected-bucket-owner",
        "x-amz-source-expected-bucket-owner",
    ] {
        if headers
            .get(name)
            .is_some_and(|v| v.as_bytes() != owner.as_bytes())
        {
            return Err(s3_error!(AccessDenied, "Access Denied"));
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if self.owns_buckets {
            check_expected_owner(cx.headers())?;
        }
        let Some(credentials) = cx.credentials() else {
            return self.let_anonymous(cx);
        };
        let access_key = credentials.access_key.clone();
        check_request(cx.headers(), cx.uri())?;
        match signing(cx.s3_op().name(), cx.headers(), cx.uri()) {
            Signing::V4(service) if service == "s3" => {}
            Signing::PresignedV2 | Signing::PostPolicy => {}
            Signing::V4(_) => {
                return Err(s3_error!(
                    AccessDenied,
                    "The credential scope of the signature must name the s3 service"
                ))
            }
            Signing::Other => {
                return Err(s3_error!(
                    InvalidRequest,
                    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256."
                ))
            }
        }
        let scope = cx
            .extensions_mut()
            .get::<Scope>()
            .cloned()
            .unwrap_or(Scope::All);
        let principal = self.keys.lookup(&access_key).map(|(p, _)| p);
        let op = cx.s3_op().name();
        if matches!(principal, Some(Principal::Function(_))) && ADMIN_ONLY.contains(&op) {
            return Err(s3_error!(
                AccessDenied,
                "{op} takes kiln's admin key: a function's key may not configure what invokes functions"
            ));
        }
        match (&scope, principal) {
            (Scope::All, Some(_)) => Ok(()),
            (Scope::Function(f), Some(Principal::Function(g))) if *f == g => Ok(()),
            _ => Err(s3_error!(
                AccessDenied,
                "This endpoint does not accept the key {access_key}"
            )),
        }
    }
}

/// Virtual-host addressing: `BUCKET.localhost` and `BUCKET.<domain>` name a bucket; IP
/// addresses (s3s handles those before asking), `localhost`, the domains themselves and any
/// other name are path-style.
pub(crate) struct Hosts {
    domains: Vec<String>,
}

impl Hosts {
    pub fn new(extra_domains: &[String]) -> Self {
        let mut domains = vec!["localhost".to_string()];
        domains.extend(
            extra_domains
                .iter()
                .map(|d| d.trim_matches('.').to_ascii_lowercase())
                .filter(|d| !d.is_empty()),
        );
        Self { domains }
    }
}

/// The host name of a Host header, without its port.
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split(']').next().map_or(host, |h| &h[1..]);
    }
    host.rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
}

impl S3Host for Hosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = host_name(host).trim_end_matches('.');
        for domain in &self.domains {
            if name.eq_ignore_ascii_case(domain) {
                return Ok(VirtualHost::new(domain.as_str()));
            }
            let bucket = name
                .len()
                .checked_sub(domain.len() + 1)
                .filter(|&cut| {
                    name.as_bytes()[cut] == b'.' && name[cut + 1..].eq_ignore_ascii_case(domain)
                })
                .map(|cut| &name[..cut]);
            if let Some(bucket) = bucket.filter(|b| !b.is_empty()) {
                return Ok(VirtualHost::new(domain.as_str()).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn ring() -> KeyRing {
        KeyRing::new(Credentials {
            access_key_id: "AKIAADMIN".into(),
            secret_access_key: "admin-secret".into(),
        })
    }

    #[test]
    fn function_keys_are_stable_distinct_and_resolve() {
        let keys = ring();
        let a = keys.function_credentials("thumbs");
        assert_eq!(a, keys.function_credentials("thumbs"));
        assert_eq!(a.access_key_id, "KILNFN-thumbs");
        assert_eq!(a.secret_access_key.len(), 40);
        let b = keys.function_credentials("other");
        assert_ne!(a.secret_access_key, b.secret_access_key);
        assert_eq!(
            keys.lookup(&a.access_key_id),
            Some((Principal::Function("thumbs".into()), a.secret_access_key))
        );
        let odd = keys.function_credentials("a b/c");
        assert!(odd.access_key_id.starts_with("KILNFX-"));
        assert_eq!(
            keys.lookup(&odd.access_key_id).map(|p| p.0),
            Some(Principal::Function("a b/c".into()))
        );
        assert_eq!(
            keys.lookup("AKIAADMIN").map(|p| p.0),
            Some(Principal::Admin)
        );
        assert!(keys.lookup("KILNFN-").is_none());
        assert!(keys.lookup("KILNFX-zz").is_none());
        assert!(keys.lookup("AKIAOTHER").is_none());
        // Another admin secret yields other function secrets.
        let other = KeyRing::new(Credentials {
            access_key_id: "AKIAADMIN".into(),
            secret_access_key: "rotated".into(),
        });
        assert_ne!(
            other.function_credentials("thumbs").secret_access_key,
            keys.function_credentials("thumbs").secret_access_key
        );
    }

    #[test]
    fn hosts_pick_virtual_or_path_style() {
        let hosts = Hosts::new(&["s3.kiln.test".into()]);
        let parse = |h: &str| {
            let vh = hosts.parse_host_header(h).unwrap();
            vh.bucket().map(str::to_string)
        };
        assert_eq!(parse("photos.localhost:9001").as_deref(), Some("photos"));
        assert_eq!(parse("localhost:9001"), None);
        assert_eq!(parse("a.b.s3.kiln.test").as_deref(), Some("a.b"));
        assert_eq!(parse("S3.KILN.TEST"), None);
        assert_eq!(parse("myhost:9001"), None);
        assert_eq!(parse("[::1]:9001"), None);
        assert_eq!(host_name("[::1]:9001"), "::1");
    }

    #[test]
    fn signing_is_read_from_header_and_query() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=x"
                .parse()
                .unwrap(),
        );
        let uri: Uri = "/b/k".parse().unwrap();
        assert_eq!(
            signing("GetObject", &headers, &uri),
            Signing::V4("s3".into())
        );
        let uri: Uri = "/b/k?X-Amz-Credential=AK%2F20240101%2Fus-east-1%2Flambda%2Faws4_request"
            .parse()
            .unwrap();
        assert_eq!(
            signing("GetObject", &HeaderMap::new(), &uri),
            Signing::V4("lambda".into())
        );
        let uri: Uri = "/b/k?AWSAccessKeyId=AK&Signature=x%3D&Expires=1"
            .parse()
            .unwrap();
        assert_eq!(
            signing("GetObject", &HeaderMap::new(), &uri),
            Signing::PresignedV2
        );
        headers.insert(http::header::AUTHORIZATION, "AWS AK:sig".parse().unwrap());
        assert_eq!(
            signing("GetObject", &headers, &"/".parse().unwrap()),
            Signing::Other
        );
        // A browser upload's signature is in its form, which s3s has verified.
        let form: Uri = "/b".parse().unwrap();
        assert_eq!(
            signing("PostObject", &HeaderMap::new(), &form),
            Signing::PostPolicy
        );
    }

    #[test]
    fn presigned_urls_past_a_week_and_empty_digests_are_refused() {
        let uri = |q: &str| {
            format!("/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&{q}")
                .parse::<Uri>()
                .unwrap()
        };
        let none = HeaderMap::new();
        assert!(check_request(&none, &uri("X-Amz-Expires=604800")).is_ok());
        for refused in [
            "X-Amz-Expires=604801",
            "X-Amz-Expires=-1",
            "X-Amz-Expires=x",
        ] {
            let e = check_request(&none, &uri(refused)).unwrap_err();
            assert_eq!(
                e.code(),
                &S3ErrorCode::AuthorizationQueryParametersError,
                "{refused}"
            );
        }
        assert!(check_request(&none, &"/b/k".parse().unwrap()).is_ok());
        let mut headers = HeaderMap::new();
        headers.insert("content-md5", "".parse().unwrap());
        let e = check_request(&headers, &"/b/k".parse().unwrap()).unwrap_err();
        assert_eq!(e.code(), &S3ErrorCode::InvalidDigest);
        headers.insert("content-md5", "XUFAKrxLKna5cZ2REBfFkg==".parse().unwrap());
        assert!(check_request(&headers, &"/b/k".parse().unwrap()).is_ok());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Every function name gets a key that resolves back to it, and nothing else.
            #[test]
            fn function_keys_round_trip(name in ".{1,40}") {
                let keys = ring();
                let creds = keys.function_credentials(&name);
                prop_assert_eq!(
                    keys.lookup(&creds.access_key_id),
                    Some((Principal::Function(name.clone()), creds.secret_access_key))
                );
            }

            /// Whatever a client sends as access key, Host header or query, parsing answers.
            #[test]
            fn parsers_never_panic(key in ".{0,60}", host in ".{0,60}", query in ".{0,80}") {
                let _ = ring().lookup(&key);
                let _ = Hosts::new(&["example.test".into()]).parse_host_header(&host);
                if let Ok(uri) = format!("/b/k?{query}").parse::<Uri>() {
                    let _ = signing("GetObject", &HeaderMap::new(), &uri);
                }
                let mut headers = HeaderMap::new();
                if let Ok(v) = http::HeaderValue::from_str(&query) {
                    headers.insert(http::header::AUTHORIZATION, v);
                    let _ = signing("GetObject", &headers, &"/".parse().unwrap());
                }
            }
        }
    }
}
