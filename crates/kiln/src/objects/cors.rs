//! Cross-origin resource sharing, as S3 does it: a bucket's CORS rules (validated as
//! PutBucketCors validates them), the preflight `OPTIONS` answered from the first rule that
//! allows the origin, method and headers asked for, and the `Access-Control-*` headers on the
//! actual requests whose origin and method a rule allows. Pure functions over the rules;
//! `serve.rs` gathers the request's headers and the bucket's rules.

use s3s::dto::{CORSConfiguration, CORSRule};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

/// S3's limit on a bucket's rules.
const MAX_RULES: usize = 100;
/// S3's limit on a rule's ID.
const MAX_ID_CHARS: usize = 255;
/// The methods a rule may allow.
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// One rule, as kiln stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorsRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub methods: Vec<String>,
    pub origins: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<i32>,
}

/// A PutBucketCors configuration's rules, or S3's error for what is wrong with them.
pub fn rules_of(config: CORSConfiguration) -> S3Result<Vec<CorsRule>> {
    let rules = config.cors_rules;
    if rules.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "A CORS configuration needs at least one CORSRule"
        ));
    }
    if rules.len() > MAX_RULES {
        return Err(s3_error!(
            MalformedXML,
            "A CORS configuration may hold at most {MAX_RULES} rules"
        ));
    }
    rules.into_iter().map(rule_of).collect()
}

fn rule_of(rule: CORSRule) -> S3Result<CorsRule> {
    if rule.allowed_methods.is_empty() || rule.allowed_origins.is_empty() {
        return Err(s3_error!(
            MalformedXML,
            "Each CORSRule needs at least one AllowedMethod and one AllowedOrigin"
        ));
    }
    if let Some(method) = rule
        .allowed_methods
        .iter()
        .find(|m| !METHODS.contains(&m.as_str()))
    {
        return Err(s3_error!(
            InvalidRequest,
            "Found unsupported HTTP method in CORS config. Unsupported method is {method}"
        ));
    }
    let headers = rule.allowed_headers.unwrap_or_default();
    for (kind, patterns) in [
        ("AllowedOrigin", &rule.allowed_origins),
        ("AllowedHeader", &headers),
    ] {
        if let Some(p) = patterns.iter().find(|p| p.matches('*').count() > 1) {
            return Err(s3_error!(
                InvalidRequest,
                "{kind} \"{p}\" can not have more than one wildcard."
            ));
        }
    }
    let expose = rule.expose_headers.unwrap_or_default();
    if let Some(h) = expose.iter().find(|h| h.contains('*')) {
        return Err(s3_error!(
            InvalidRequest,
            "ExposeHeader \"{h}\" contains wildcard. We currently do not support wildcard for ExposeHeader."
        ));
    }
    if rule
        .id
        .as_ref()
        .is_some_and(|id| id.chars().count() > MAX_ID_CHARS)
    {
        return Err(s3_error!(
            InvalidArgument,
            "A CORSRule's ID must be {MAX_ID_CHARS} characters or less"
        ));
    }
    if rule.max_age_seconds.is_some_and(|s| s < 0) {
        return Err(s3_error!(
            MalformedXML,
            "MaxAgeSeconds must not be negative"
        ));
    }
    Ok(CorsRule {
        id: rule.id,
        methods: rule.allowed_methods,
        origins: rule.allowed_origins,
        headers,
        expose,
        max_age: rule.max_age_seconds,
    })
}

/// The rules as GetBucketCors answers them.
pub fn to_dto(rules: &[CorsRule]) -> Vec<CORSRule> {
    rules
        .iter()
        .map(|r| CORSRule {
            id: r.id.clone(),
            allowed_methods: r.methods.clone(),
            allowed_origins: r.origins.clone(),
            allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
            expose_headers: (!r.expose.is_empty()).then(|| r.expose.clone()),
            max_age_seconds: r.max_age,
        })
        .collect()
}

/// Whether `value` matches `pattern`, whose one `*` stands for any run of characters.
fn matches(pattern: &str, value: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| {
        if ignore_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    match pattern.split_once('*') {
        None => eq(pattern, value),
        Some((head, tail)) => {
            value.len() >= head.len() + tail.len()
                && value.is_char_boundary(head.len())
                && value.is_char_boundary(value.len() - tail.len())
                && eq(&value[..head.len()], head)
                && eq(&value[value.len() - tail.len()..], tail)
        }
    }
}

/// What a browser asks of a bucket: its origin, the method, and (for a preflight) the headers
/// it means to send.
pub struct Asked<'a> {
    pub origin: &'a str,
    pub method: &'a str,
    pub headers: &'a [String],
}

/// The first rule that allows what is asked: the origin and method, and every header.
pub fn find<'r>(rules: &'r [CorsRule], asked: &Asked<'_>) -> Option<&'r CorsRule> {
    rules.iter().find(|rule| {
        rule.origins.iter().any(|o| matches(o, asked.origin, false))
            && rule.methods.iter().any(|m| m == asked.method)
            && asked
                .headers
                .iter()
                .all(|h| rule.headers.iter().any(|p| matches(p, h, true)))
    })
}

/// The headers `Access-Control-Request-Headers` names, lower-cased.
pub fn requested_headers(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect()
}

/// The `Access-Control-*` headers of an answer allowed by `rule`; `preflight` adds the headers
/// a preflight grants.
pub fn response_headers(
    rule: &CorsRule,
    asked: &Asked<'_>,
    preflight: bool,
) -> Vec<(&'static str, String)> {
    let any_origin = rule.origins.iter().any(|o| o == "*");
    let mut out = vec![(
        "access-control-allow-origin",
        if any_origin {
            "*".to_string()
        } else {
            asked.origin.to_string()
        },
    )];
    out.push(("access-control-allow-methods", rule.methods.join(", ")));
    if !any_origin {
        out.push(("access-control-allow-credentials", "true".to_string()));
    }
    if preflight && !asked.headers.is_empty() {
        out.push(("access-control-allow-headers", asked.headers.join(", ")));
    }
    if !rule.expose.is_empty() {
        out.push(("access-control-expose-headers", rule.expose.join(", ")));
    }
    if let Some(age) = rule.max_age {
        out.push(("access-control-max-age", age.to_string()));
    }
    out.push((
        "vary",
        "Origin, Access-Control-Request-Headers, Access-Control-Request-Method".to_string(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(methods: &[&str], origins: &[&str], headers: &[&str]) -> CORSRule {
        CORSRule {
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_headers: Some(headers.iter().map(|s| s.to_string()).collect()),
            expose_headers: None,
            id: None,
            max_age_seconds: None,
        }
    }

    fn config(rules: Vec<CORSRule>) -> CORSConfiguration {
        CORSConfiguration { cors_rules: rules }
    }

    fn code(result: S3Result<Vec<CorsRule>>) -> String {
        result.unwrap_err().code().as_str().to_string()
    }

    #[test]
    fn configurations_are_validated_as_s3_validates_them() {
        assert_eq!(code(rules_of(config(vec![]))), "MalformedXML");
        assert_eq!(
            code(rules_of(config(vec![rule(&["get"], &["*"], &[])]))),
            "InvalidRequest"
        );
        assert_eq!(
            code(rules_of(config(vec![rule(&["GET"], &["*.a.*"], &[])]))),
            "InvalidRequest"
        );
        assert_eq!(
            code(rules_of(config(vec![rule(&["GET"], &["*"], &["x-*-*"])]))),
            "InvalidRequest"
        );
        assert_eq!(
            code(rules_of(config(vec![rule(&[], &["*"], &[])]))),
            "MalformedXML"
        );
        let many = (0..101).map(|_| rule(&["GET"], &["*"], &[])).collect();
        assert_eq!(code(rules_of(config(many))), "MalformedXML");
        let mut exposed = rule(&["GET"], &["*"], &[]);
        exposed.expose_headers = Some(vec!["x-*".into()]);
        assert_eq!(code(rules_of(config(vec![exposed]))), "InvalidRequest");
        let kept = rules_of(config(vec![rule(
            &["GET", "PUT"],
            &["https://*.a"],
            &["*"],
        )]))
        .unwrap();
        assert_eq!(
            to_dto(&kept),
            vec![rule(&["GET", "PUT"], &["https://*.a"], &["*"])]
        );
    }

    #[test]
    fn the_first_rule_that_allows_origin_method_and_headers_answers() {
        let rules = rules_of(config(vec![
            rule(&["GET"], &["*suffix"], &[]),
            rule(&["GET"], &["start*end"], &[]),
            rule(&["PUT"], &["*.put"], &["x-amz-*", "content-type"]),
            rule(&["GET"], &["*"], &[]),
        ]))
        .unwrap();
        let ask = |origin, method, headers: &[&str]| {
            let headers: Vec<String> = headers.iter().map(|s| s.to_string()).collect();
            find(
                &rules,
                &Asked {
                    origin,
                    method,
                    headers: &headers,
                },
            )
            .map(|r| r.origins[0].clone())
        };
        assert_eq!(ask("foo.suffix", "GET", &[]).as_deref(), Some("*suffix"));
        assert_eq!(ask("start12end", "GET", &[]).as_deref(), Some("start*end"));
        assert_eq!(ask("0start12end", "GET", &[]).as_deref(), Some("*"));
        assert_eq!(
            ask("a.put", "PUT", &["x-amz-meta-a", "Content-Type"]).as_deref(),
            Some("*.put")
        );
        assert_eq!(ask("a.put", "PUT", &["authorization"]), None);
        assert_eq!(ask("a.suffix", "DELETE", &[]), None);
        // `*` stands for any run, the empty one too.
        assert_eq!(ask("startend", "GET", &[]).as_deref(), Some("start*end"));
    }

    #[test]
    fn answers_name_the_origin_unless_any_origin_is_allowed() {
        let rules = rules_of(config(vec![rule(&["GET", "HEAD"], &["https://a"], &[])])).unwrap();
        let asked = Asked {
            origin: "https://a",
            method: "GET",
            headers: &["x-one".to_string()],
        };
        let headers = response_headers(&rules[0], &asked, true);
        assert!(headers.contains(&("access-control-allow-origin", "https://a".into())));
        assert!(headers.contains(&("access-control-allow-methods", "GET, HEAD".into())));
        assert!(headers.contains(&("access-control-allow-headers", "x-one".into())));
        assert!(headers.contains(&("access-control-allow-credentials", "true".into())));
        let any = rules_of(config(vec![rule(&["GET"], &["*"], &[])])).unwrap();
        let headers = response_headers(&any[0], &asked, false);
        assert!(headers.contains(&("access-control-allow-origin", "*".into())));
        assert!(!headers
            .iter()
            .any(|(n, _)| *n == "access-control-allow-headers"));
    }

    proptest! {
        #[test]
        fn a_wildcard_matches_exactly_what_surrounds_it(
            head in "[a-z.:/]{0,6}", middle in "[a-z.:/]{0,6}", tail in "[a-z.:/]{0,6}",
            other in "[a-z.:/]{0,12}",
        ) {
            let pattern = format!("{head}*{tail}");
            let inside = format!("{head}{middle}{tail}");
            prop_assert!(matches(&pattern, &inside, false));
            let expected = other.len() >= head.len() + tail.len()
                && other.starts_with(&head) && other.ends_with(&tail);
            prop_assert_eq!(matches(&pattern, &other, false), expected);
            prop_assert!(matches(&other, &other, false));
        }
    }
}
