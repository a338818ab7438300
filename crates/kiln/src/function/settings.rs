//! Lambda settings kiln keeps with a function and returns as Lambda does, but that change
//! nothing in how kiln runs it (README "Lambda API" lists them): tracing, logging, VPC,
//! dead-letter queue, KMS key. Infrastructure tools set them and read them back, and a
//! setting that came back different would be a change they try to make again on every run.

use serde::{Deserialize, Serialize};

/// `TracingConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TracingConfig {
    pub mode: String,
}

/// `LoggingConfig`; every field optional, as UpdateFunctionConfiguration takes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LoggingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_log_level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_log_level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_group: Option<String>,
}

/// `VpcConfig` as it is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VpcConfig {
    #[serde(default)]
    pub subnet_ids: Vec<String>,
    #[serde(default)]
    pub security_group_ids: Vec<String>,
    #[serde(default)]
    pub ipv6_allowed_for_dual_stack: bool,
}

/// `DeadLetterConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DeadLetterConfig {
    #[serde(default)]
    pub target_arn: Option<String>,
}

/// These settings as CreateFunction and UpdateFunctionConfiguration take them; `None` leaves
/// one as it is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SettingsInput {
    pub tracing_config: Option<TracingConfig>,
    pub logging_config: Option<LoggingConfig>,
    pub vpc_config: Option<VpcConfig>,
    pub dead_letter_config: Option<DeadLetterConfig>,
    #[serde(rename = "KMSKeyArn")]
    pub kms_key_arn: Option<String>,
}

/// The settings a function has. Absent ones take Lambda's defaults when they are returned.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LambdaSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<LoggingConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc: Option<VpcConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
    /// `Environment` was given, with or without variables: Lambda then returns it, even empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub environment_set: bool,
}

const APPLICATION_LOG_LEVELS: &[&str] = &["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];
const SYSTEM_LOG_LEVELS: &[&str] = &["DEBUG", "INFO", "WARN"];
/// Lambda's pattern for the ARNs of a dead-letter target and a KMS key (empty clears them).
const ARN_PATTERN: &str = "(arn:(aws[a-zA-Z-]*)?:[a-z0-9-.]+:.*)|()";

impl LambdaSettings {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Applies what a CreateFunction or UpdateFunctionConfiguration gave. A `LoggingConfig`
    /// changes the fields it names; an empty dead-letter target or KMS key clears it.
    pub fn apply(&mut self, input: SettingsInput) {
        if let Some(tracing) = input.tracing_config {
            self.tracing = Some(tracing);
        }
        if let Some(given) = input.logging_config {
            let logging = self.logging.get_or_insert_with(LoggingConfig::default);
            let merge = |into: &mut Option<String>, from: Option<String>| {
                if from.is_some() {
                    *into = from;
                }
            };
            merge(&mut logging.log_format, given.log_format);
            merge(
                &mut logging.application_log_level,
                given.application_log_level,
            );
            merge(&mut logging.system_log_level, given.system_log_level);
            merge(&mut logging.log_group, given.log_group);
        }
        if let Some(vpc) = input.vpc_config {
            self.vpc = Some(vpc);
        }
        if let Some(dead_letter) = input.dead_letter_config {
            self.dead_letter_target = dead_letter.target_arn.filter(|t| !t.is_empty());
        }
        if let Some(key) = input.kms_key_arn {
            self.kms_key_arn = Some(key).filter(|k| !k.is_empty());
        }
    }

    /// Checks the settings against Lambda's input model; the error is its ValidationException
    /// message.
    pub fn validate(&self) -> Result<(), String> {
        let one_of = |field: &str, value: &str, allowed: &[&str]| {
            if allowed.contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
                    allowed.join(", ")
                ))
            }
        };
        if let Some(tracing) = &self.tracing {
            one_of(
                "tracingConfig.mode",
                &tracing.mode,
                &["Active", "PassThrough"],
            )?;
        }
        if let Some(logging) = &self.logging {
            if let Some(format) = &logging.log_format {
                one_of("loggingConfig.logFormat", format, &["JSON", "Text"])?;
            }
            if let Some(level) = &logging.application_log_level {
                one_of(
                    "loggingConfig.applicationLogLevel",
                    level,
                    APPLICATION_LOG_LEVELS,
                )?;
            }
            if let Some(level) = &logging.system_log_level {
                one_of("loggingConfig.systemLogLevel", level, SYSTEM_LOG_LEVELS)?;
            }
            if let Some(group) = &logging.log_group {
                let valid = !group.is_empty()
                    && group.len() <= 512
                    && group
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._-/#".contains(&b));
                if !valid {
                    return Err(format!(
                        "1 validation error detected: Value '{group}' at 'loggingConfig.logGroup' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\.\\-_/#A-Za-z0-9]+"
                    ));
                }
            }
        }
        for (field, arn) in [
            ("deadLetterConfig.targetArn", &self.dead_letter_target),
            ("kMSKeyArn", &self.kms_key_arn),
        ] {
            if let Some(arn) = arn {
                if !arn_like(arn) {
                    return Err(format!(
                        "1 validation error detected: Value '{arn}' at '{field}' failed to satisfy constraint: Member must satisfy regular expression pattern: {ARN_PATTERN}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The log format, `Text` unless set.
    pub fn log_format(&self) -> &str {
        self.logging
            .as_ref()
            .and_then(|l| l.log_format.as_deref())
            .unwrap_or("Text")
    }
}

/// `arn:(aws[a-zA-Z-]*)?:[a-z0-9-.]+:.*`
fn arn_like(value: &str) -> bool {
    let mut parts = value.splitn(4, ':');
    let (Some("arn"), Some(partition), Some(service), Some(_)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let partition_ok = partition.is_empty()
        || partition
            .strip_prefix("aws")
            .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-'));
    let service_ok = !service.is_empty()
        && service
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    partition_ok && service_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logging_config_updates_merge_and_empty_arns_clear() {
        let mut settings = LambdaSettings::default();
        settings.apply(SettingsInput {
            logging_config: Some(LoggingConfig {
                log_format: Some("JSON".into()),
                application_log_level: Some("DEBUG".into()),
                ..LoggingConfig::default()
            }),
            kms_key_arn: Some("arn:aws:kms:us-east-1:000000000000:key/k".into()),
            ..SettingsInput::default()
        });
        settings.apply(SettingsInput {
            logging_config: Some(LoggingConfig {
                system_log_level: Some("WARN".into()),
                ..LoggingConfig::default()
            }),
            ..SettingsInput::default()
        });
        let logging = settings.logging.clone().unwrap();
        assert_eq!(logging.log_format.as_deref(), Some("JSON"));
        assert_eq!(logging.application_log_level.as_deref(), Some("DEBUG"));
        assert_eq!(logging.system_log_level.as_deref(), Some("WARN"));
        assert!(settings.validate().is_ok());
        settings.apply(SettingsInput {
            kms_key_arn: Some(String::new()),
            ..SettingsInput::default()
        });
        assert_eq!(settings.kms_key_arn, None);
    }

    #[test]
    fn values_outside_lambdas_model_are_refused() {
        let tracing = LambdaSettings {
            tracing: Some(TracingConfig {
                mode: "Sometimes".into(),
            }),
            ..LambdaSettings::default()
        };
        assert!(tracing
            .validate()
            .unwrap_err()
            .contains("tracingConfig.mode"));
        let kms = LambdaSettings {
            kms_key_arn: Some("not-an-arn".into()),
            ..LambdaSettings::default()
        };
        assert!(kms.validate().unwrap_err().contains("kMSKeyArn"));
        assert!(arn_like("arn:aws:sqs:us-east-1:000000000000:dlq"));
        assert!(arn_like("arn::sns:x"));
        assert!(!arn_like("arn:gcp:sqs:x"));
    }
}
