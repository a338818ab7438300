//! Every key S3 allows, through aws-sdk-s3.
//!
//! S3 accepts any UTF-8 key of 1 to 1024 bytes, a key of spaces or tabs included, but the SDK
//! builds its endpoint parameters from `key.trim()` and refuses a key that trims to nothing
//! ("key: A required field was not set") before anything is sent. kiln's remote mode and
//! `kiln s3` send such keys anyway: [`sdk_key`] hands the SDK a stand-in (a prefix no client
//! sends, then the key's bytes in hex), and [`KeyLabels`], an interceptor on the client, puts
//! the real key, percent-encoded as the SDK encodes every key, back into the request's path
//! before it is signed. Only keys that need it take the detour: a key that trims to nothing,
//! or one that happens to begin with the stand-in's prefix (so the mapping stays one to one).

use std::borrow::Cow;
use std::fmt::Write as _;

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_s3::config::{
    BehaviorVersion, ConfigBag, Credentials as AwsCredentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_s3::error::BoxError;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The stand-in's prefix: a noncharacter (U+10FFFF) that no text a client sends should hold.
const PREFIX: &str = "\u{10FFFF}kiln-key-";

/// A part of the stand-in's prefix that stays as it is when percent-encoded: a request whose URI
/// lacks it holds no stand-in.
const ENCODED_MARK: &str = "kiln-key-";

/// What a key's path segment keeps unescaped: RFC 3986's unreserved characters and `/` (the SDK's
/// "greedy" label encoding, which S3's SigV4 signs as it is).
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// The key to give the SDK for `key`: itself, or a stand-in that [`KeyLabels`] turns back.
pub fn sdk_key(key: &str) -> Cow<'_, str> {
    if needs_stand_in(key) {
        let mut out = String::with_capacity(PREFIX.len() + 2 * key.len());
        out.push_str(PREFIX);
        for b in key.bytes() {
            let _ = write!(out, "{b:02x}");
        }
        Cow::Owned(out)
    } else {
        Cow::Borrowed(key)
    }
}

/// Replaces `key` in place with what the SDK should be given.
pub fn to_sdk(key: &mut String) {
    if needs_stand_in(key) {
        *key = sdk_key(key).into_owned();
    }
}

fn needs_stand_in(key: &str) -> bool {
    (!key.is_empty() && key.trim().is_empty()) || key.contains(PREFIX)
}

/// An SDK client of the store at `endpoint` signing with `credentials`: path-style (kiln
/// answers on one address), every key sent through [`KeyLabels`].
pub fn client(
    endpoint: &str,
    credentials: &crate::auth::Credentials,
    region: &str,
) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .endpoint_url(endpoint)
        .credentials_provider(AwsCredentials::new(
            credentials.access_key_id.clone(),
            credentials.secret_access_key.clone(),
            None,
            None,
            "kiln",
        ))
        .force_path_style(true)
        .interceptor(KeyLabels)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The path with a stand-in's encoded form replaced by the real key's, if it holds one: the
/// stand-in is the path's last segment, the key (the query is never looked at).
fn restore(path_and_query: &str) -> Option<String> {
    let encoded_prefix = utf8_percent_encode(PREFIX, PATH).to_string();
    let path_end = path_and_query.find('?').unwrap_or(path_and_query.len());
    let path = &path_and_query[..path_end];
    let start = path.find(&encoded_prefix)?;
    let hex = &path[start + encoded_prefix.len()..];
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .ok()?;
    let key = String::from_utf8(bytes).ok()?;
    let mut out = String::with_capacity(path_and_query.len());
    out.push_str(&path_and_query[..start]);
    out.extend(utf8_percent_encode(&key, PATH));
    out.push_str(&path_and_query[path_end..]);
    Some(out)
}

/// The interceptor that puts real keys back into requests' paths before they are signed.
#[derive(Debug, Default)]
pub struct KeyLabels;

impl Intercept for KeyLabels {
    fn name(&self) -> &'static str {
        "kiln::KeyLabels"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        // Most requests carry no stand-in: they are left as they are, unparsed.
        if !request.uri().contains(ENCODED_MARK) {
            return Ok(());
        }
        let uri: http::Uri = request.uri().parse()?;
        let Some(path) = uri.path_and_query().and_then(|p| restore(p.as_str())) else {
            return Ok(());
        };
        let mut parts = uri.into_parts();
        parts.path_and_query = Some(path.parse()?);
        request.set_uri(http::Uri::from_parts(parts)?.to_string())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the SDK puts in the path for a key it accepts.
    fn path_of(bucket: &str, key: &str) -> String {
        format!("/{bucket}/{}", utf8_percent_encode(key, PATH))
    }

    #[test]
    fn ordinary_keys_are_left_alone() {
        for key in ["a", " a ", "a/b", "%", "+", "../x", "\r\nx"] {
            assert_eq!(sdk_key(key), key);
        }
        assert_eq!(sdk_key(""), "");
        assert_eq!(restore("/b/plain?x-id=GetObject"), None);
    }

    #[test]
    fn blank_keys_come_back_in_the_path() {
        for key in [" ", "  ", "\t", "\r\n", " \u{3000} "] {
            let stand_in = sdk_key(key);
            assert!(!stand_in.trim().is_empty());
            let sent = format!("{}?x-id=PutObject", path_of("b", &stand_in));
            assert_eq!(
                restore(&sent).unwrap(),
                format!("{}?x-id=PutObject", path_of("b", key))
            );
        }
    }

    proptest! {
        #[test]
        fn every_key_round_trips(
            key in "\\PC{1,40}|[ \\t\\r\\n\\u{3000}]{1,5}",
            holds_prefix in any::<bool>(),
        ) {
            let key = if holds_prefix { format!("{key}{PREFIX}{key}") } else { key };
            let stand_in = sdk_key(&key);
            prop_assert!(!stand_in.trim().is_empty());
            let sent = path_of("bucket", &stand_in);
            let wanted = path_of("bucket", &key);
            prop_assert_eq!(restore(&sent).unwrap_or(sent), wanted);
        }
    }
}
