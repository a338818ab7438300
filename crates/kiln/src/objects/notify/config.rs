//! A bucket's notification configuration: validated as PutBucketNotificationConfiguration
//! validates it, kept as JSON with the bucket, answered by GetBucketNotificationConfiguration,
//! and matched against each write. Pure functions over the rules.

use s3s::dto::{
    Event, FilterRule, FilterRuleName, LambdaFunctionConfiguration, NotificationConfiguration,
    NotificationConfigurationFilter, S3KeyFilter,
};
use s3s::{s3_error, S3Result};
use serde::{Deserialize, Serialize};

/// S3's limit on a configuration's ID.
const MAX_ID_CHARS: usize = 255;
/// S3's limit on a filter rule's value.
const MAX_FILTER_CHARS: usize = 1024;

/// The event types a rule may name: kiln's writes produce each of them.
const EVENTS: [&str; 8] = [
    "s3:ObjectCreated:*",
    "s3:ObjectCreated:Put",
    "s3:ObjectCreated:Post",
    "s3:ObjectCreated:Copy",
    "s3:ObjectCreated:CompleteMultipartUpload",
    "s3:ObjectRemoved:*",
    "s3:ObjectRemoved:Delete",
    "s3:ObjectRemoved:DeleteMarkerCreated",
];

/// What a write did to a key, as its event names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Post,
    Copy,
    CompleteMultipartUpload,
    Delete,
    DeleteMarkerCreated,
}

impl EventKind {
    /// The record's `eventName`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Put => "ObjectCreated:Put",
            Self::Post => "ObjectCreated:Post",
            Self::Copy => "ObjectCreated:Copy",
            Self::CompleteMultipartUpload => "ObjectCreated:CompleteMultipartUpload",
            Self::Delete => "ObjectRemoved:Delete",
            Self::DeleteMarkerCreated => "ObjectRemoved:DeleteMarkerCreated",
        }
    }

    /// Whether the write created an object (its record has a size and an ETag).
    pub fn creates(self) -> bool {
        self.name().starts_with("ObjectCreated:")
    }
}

/// Whether the configured event type `pattern` (`s3:ObjectCreated:*`) covers `name`
/// (`ObjectCreated:Put`).
fn covers(pattern: &str, name: &str) -> bool {
    let pattern = pattern.strip_prefix("s3:").unwrap_or(pattern);
    match pattern.strip_suffix('*') {
        Some(category) => name.starts_with(category),
        None => pattern == name,
    }
}

/// Whether two configured event types have an event in common.
fn events_overlap(a: &str, b: &str) -> bool {
    let concrete = |p: &str| !p.ends_with('*');
    match (concrete(a), concrete(b)) {
        (true, _) => covers(b, a.trim_start_matches("s3:")),
        (false, true) => covers(a, b.trim_start_matches("s3:")),
        (false, false) => a == b,
    }
}

/// One function to invoke for some of a bucket's writes, as kiln stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionRule {
    pub id: String,
    /// The function's ARN as the configuration gave it.
    pub function_arn: String,
    pub events: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
}

impl FunctionRule {
    /// Whether a write of `kind` to `key` is one this rule sends.
    pub fn matches(&self, kind: EventKind, key: &str) -> bool {
        self.prefix.as_deref().is_none_or(|p| key.starts_with(p))
            && self.suffix.as_deref().is_none_or(|s| key.ends_with(s))
            && self.events.iter().any(|e| covers(e, kind.name()))
    }

    /// Whether some key could match both rules' filters for a common event type: S3 refuses
    /// such configurations ("Configurations overlap").
    fn overlaps(&self, other: &FunctionRule) -> bool {
        let shares_event = self
            .events
            .iter()
            .any(|a| other.events.iter().any(|b| events_overlap(a, b)));
        // Two prefixes overlap when one starts the other; two suffixes when one ends the other;
        // a missing filter overlaps everything.
        let prefixes = match (&self.prefix, &other.prefix) {
            (Some(a), Some(b)) => a.starts_with(b.as_str()) || b.starts_with(a.as_str()),
            _ => true,
        };
        let suffixes = match (&self.suffix, &other.suffix) {
            (Some(a), Some(b)) => a.ends_with(b.as_str()) || b.ends_with(a.as_str()),
            _ => true,
        };
        shares_event && prefixes && suffixes
    }
}

/// A PutBucketNotificationConfiguration body's rules (empty: the configuration is removed), or
/// S3's error for what is wrong with it. The functions' existence is checked by the caller.
pub fn rules_of(config: NotificationConfiguration) -> S3Result<Vec<FunctionRule>> {
    if config.queue_configurations.is_some_and(|q| !q.is_empty())
        || config.topic_configurations.is_some_and(|t| !t.is_empty())
    {
        return Err(s3_error!(
            InvalidArgument,
            "kiln has no SQS queues or SNS topics: a notification configuration may hold CloudFunctionConfiguration (Lambda function) elements only"
        ));
    }
    if config.event_bridge_configuration.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "kiln has no EventBridge: a notification configuration may hold CloudFunctionConfiguration (Lambda function) elements only"
        ));
    }
    let rules = config
        .lambda_function_configurations
        .unwrap_or_default()
        .into_iter()
        .map(rule_of)
        .collect::<S3Result<Vec<_>>>()?;
    for (i, rule) in rules.iter().enumerate() {
        if rules[..i].iter().any(|r| r.id == rule.id) {
            return Err(s3_error!(
                InvalidArgument,
                "The configuration ID {} is used more than once",
                rule.id
            ));
        }
        if rules[..i].iter().any(|r| r.overlaps(rule)) {
            return Err(s3_error!(
                InvalidArgument,
                "Configurations overlap. Configurations on the same bucket cannot share a common event type."
            ));
        }
    }
    Ok(rules)
}

fn rule_of(config: LambdaFunctionConfiguration) -> S3Result<FunctionRule> {
    let id = match config.id {
        Some(id) if id.chars().count() > MAX_ID_CHARS => {
            return Err(s3_error!(
                InvalidArgument,
                "A configuration ID must be {MAX_ID_CHARS} characters or less"
            ))
        }
        Some(id) if !id.is_empty() => id,
        // S3 names a configuration without an ID itself.
        _ => crate::function::new_request_id().to_string(),
    };
    if config.events.is_empty() {
        return Err(s3_error!(
            InvalidArgument,
            "A CloudFunctionConfiguration needs at least one Event"
        ));
    }
    let mut events: Vec<String> = Vec::with_capacity(config.events.len());
    for event in config.events {
        let event: &str = event.as_ref();
        if !EVENTS.contains(&event) {
            return Err(s3_error!(
                InvalidArgument,
                "The event is not supported for notifications: {event} (kiln sends {})",
                EVENTS.join(", ")
            ));
        }
        if !events.iter().any(|e| e == event) {
            events.push(event.to_string());
        }
    }
    let (mut prefix, mut suffix) = (None, None);
    let filter_rules = config
        .filter
        .and_then(|f| f.key)
        .and_then(|k| k.filter_rules)
        .unwrap_or_default();
    for rule in filter_rules {
        let name = rule.name.as_ref().map(|n| n.as_str().to_ascii_lowercase());
        let value = rule.value.unwrap_or_default();
        if value.chars().count() > MAX_FILTER_CHARS {
            return Err(s3_error!(
                InvalidArgument,
                "A filter rule's value must be {MAX_FILTER_CHARS} characters or less"
            ));
        }
        let slot = match name.as_deref() {
            Some("prefix") => &mut prefix,
            Some("suffix") => &mut suffix,
            _ => {
                return Err(s3_error!(
                    InvalidArgument,
                    "filter rule name must be either prefix or suffix"
                ))
            }
        };
        if slot.is_some() {
            return Err(s3_error!(
                InvalidArgument,
                "Cannot specify more than one {} rule in a filter.",
                name.unwrap_or_default()
            ));
        }
        *slot = Some(value);
    }
    Ok(FunctionRule {
        id,
        function_arn: config.lambda_function_arn,
        events,
        prefix,
        suffix,
    })
}

/// The rules as GetBucketNotificationConfiguration answers them.
pub fn to_dto(rules: &[FunctionRule]) -> Vec<LambdaFunctionConfiguration> {
    rules
        .iter()
        .map(|r| {
            let filter_rules: Vec<FilterRule> = [
                (FilterRuleName::PREFIX, &r.prefix),
                (FilterRuleName::SUFFIX, &r.suffix),
            ]
            .into_iter()
            .filter_map(|(name, value)| {
                Some(FilterRule {
                    name: Some(FilterRuleName::from_static(name)),
                    value: Some(value.clone()?),
                })
            })
            .collect();
            LambdaFunctionConfiguration {
                events: r.events.iter().cloned().map(Event::from).collect(),
                filter: (!filter_rules.is_empty()).then_some(NotificationConfigurationFilter {
                    key: Some(S3KeyFilter {
                        filter_rules: Some(filter_rules),
                    }),
                }),
                id: Some(r.id.clone()),
                lambda_function_arn: r.function_arn.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn function(
        events: &[&str],
        prefix: Option<&str>,
        suffix: Option<&str>,
    ) -> LambdaFunctionConfiguration {
        let mut filter_rules = Vec::new();
        if let Some(p) = prefix {
            filter_rules.push(FilterRule {
                name: Some(FilterRuleName::from_static(FilterRuleName::PREFIX)),
                value: Some(p.into()),
            });
        }
        if let Some(s) = suffix {
            filter_rules.push(FilterRule {
                name: Some(FilterRuleName::from_static(FilterRuleName::SUFFIX)),
                value: Some(s.into()),
            });
        }
        LambdaFunctionConfiguration {
            events: events.iter().map(|e| Event::from(e.to_string())).collect(),
            filter: Some(NotificationConfigurationFilter {
                key: Some(S3KeyFilter {
                    filter_rules: Some(filter_rules),
                }),
            }),
            id: None,
            lambda_function_arn: "arn:aws:lambda:us-east-1:000000000000:function:f".into(),
        }
    }

    fn config(functions: Vec<LambdaFunctionConfiguration>) -> NotificationConfiguration {
        NotificationConfiguration {
            lambda_function_configurations: Some(functions),
            ..Default::default()
        }
    }

    fn code(result: S3Result<Vec<FunctionRule>>) -> String {
        result.unwrap_err().code().as_str().to_string()
    }

    #[test]
    fn configurations_are_validated_as_s3_validates_them() {
        assert_eq!(
            code(rules_of(config(vec![function(
                &["s3:ObjectCreated"],
                None,
                None
            )]))),
            "InvalidArgument"
        );
        assert_eq!(
            code(rules_of(config(vec![function(
                &["s3:ObjectRestore:*"],
                None,
                None
            )]))),
            "InvalidArgument"
        );
        // The same event type for keys both filters take.
        let overlapping = vec![
            function(&["s3:ObjectCreated:*"], Some("img/"), None),
            function(&["s3:ObjectCreated:Put"], Some("img/2024/"), Some(".png")),
        ];
        assert_eq!(code(rules_of(config(overlapping))), "InvalidArgument");
        let queue = NotificationConfiguration {
            queue_configurations: Some(vec![Default::default()]),
            ..Default::default()
        };
        assert_eq!(code(rules_of(queue)), "InvalidArgument");
        let mut twice = function(&["s3:ObjectCreated:*"], Some("a"), None);
        twice.filter = Some(NotificationConfigurationFilter {
            key: Some(S3KeyFilter {
                filter_rules: Some(vec![
                    FilterRule {
                        name: Some(FilterRuleName::from_static("prefix")),
                        value: Some("a".into()),
                    },
                    FilterRule {
                        name: Some(FilterRuleName::from_static("prefix")),
                        value: Some("b".into()),
                    },
                ]),
            }),
        });
        assert_eq!(code(rules_of(config(vec![twice]))), "InvalidArgument");
        // Disjoint prefixes, or disjoint event types, may share a bucket.
        let kept = rules_of(config(vec![
            function(&["s3:ObjectCreated:*"], Some("img/"), None),
            function(&["s3:ObjectCreated:*"], Some("doc/"), None),
            function(&["s3:ObjectRemoved:*"], Some("img/"), None),
        ]))
        .unwrap();
        assert_eq!(kept.len(), 3);
        assert!(rules_of(NotificationConfiguration::default())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_stored_rules_answer_what_was_put() {
        let mut put = function(
            &["s3:ObjectCreated:Put", "s3:ObjectRemoved:*"],
            Some("in/"),
            Some(".txt"),
        );
        put.id = Some("mine".into());
        let rules = rules_of(config(vec![put.clone()])).unwrap();
        assert_eq!(to_dto(&rules), vec![put]);
    }

    #[test]
    fn rules_match_their_events_and_keys() {
        let rules = rules_of(config(vec![function(
            &["s3:ObjectCreated:*"],
            Some("in/"),
            Some(".txt"),
        )]))
        .unwrap();
        let rule = &rules[0];
        assert!(rule.matches(EventKind::Put, "in/a.txt"));
        assert!(rule.matches(EventKind::CompleteMultipartUpload, "in/a.txt"));
        assert!(!rule.matches(EventKind::Delete, "in/a.txt"));
        assert!(!rule.matches(EventKind::Put, "out/a.txt"));
        assert!(!rule.matches(EventKind::Put, "in/a.png"));
        let removed = rules_of(config(vec![function(
            &["s3:ObjectRemoved:DeleteMarkerCreated"],
            None,
            None,
        )]))
        .unwrap();
        assert!(removed[0].matches(EventKind::DeleteMarkerCreated, "any"));
        assert!(!removed[0].matches(EventKind::Delete, "any"));
    }

    proptest! {
        #[test]
        fn accepted_configurations_send_each_write_to_at_most_one_rule_per_event(
            filters in proptest::collection::vec(
                (0usize..EVENTS.len(), proptest::option::of("[ab]{0,2}"), proptest::option::of("[ab]{0,2}")),
                1..5,
            ),
            key in "[ab]{0,4}",
        ) {
            let functions = filters
                .iter()
                .map(|(e, p, s)| function(&[EVENTS[*e]], p.as_deref(), s.as_deref()))
                .collect();
            if let Ok(rules) = rules_of(config(functions)) {
                for kind in [EventKind::Put, EventKind::Post, EventKind::Copy,
                             EventKind::CompleteMultipartUpload, EventKind::Delete,
                             EventKind::DeleteMarkerCreated] {
                    prop_assert!(rules.iter().filter(|r| r.matches(kind, &key)).count() <= 1);
                }
            }
        }
    }
}
