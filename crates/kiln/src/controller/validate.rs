//! The validation of a function's configuration, as CreateFunction and
//! UpdateFunctionConfiguration check it: Lambda's API model first (every violation at once, a
//! ValidationException), then what kiln runs (an InvalidParameterValueException).

use super::{Controller, ControllerError};
use crate::function::{self, FunctionConfig};
use crate::runtime::RESERVED_ENV;

/// The `Runtime` values of Lambda's API model (its enum, retired runtimes included): a value
/// outside it is a ValidationException, one inside it that kiln does not run an
/// InvalidParameterValueException.
pub(super) const LAMBDA_RUNTIMES: &[&str] = &[
    "nodejs",
    "nodejs4.3",
    "nodejs6.10",
    "nodejs8.10",
    "nodejs10.x",
    "nodejs12.x",
    "nodejs14.x",
    "nodejs16.x",
    "nodejs18.x",
    "nodejs20.x",
    "nodejs22.x",
    "nodejs24.x",
    "nodejs26.x",
    "java8",
    "java8.al2",
    "java8.al2023",
    "java11",
    "java11.al2023",
    "java17",
    "java17.al2023",
    "java21",
    "java25",
    "python2.7",
    "python3.6",
    "python3.7",
    "python3.8",
    "python3.9",
    "python3.10",
    "python3.11",
    "python3.12",
    "python3.13",
    "python3.14",
    "python3.15",
    "dotnetcore1.0",
    "dotnetcore2.0",
    "dotnetcore2.1",
    "dotnetcore3.1",
    "dotnet6",
    "dotnet8",
    "dotnet10",
    "nodejs4.3-edge",
    "go1.x",
    "ruby2.5",
    "ruby2.7",
    "ruby3.2",
    "ruby3.3",
    "ruby3.4",
    "ruby4.0",
    "provided",
    "provided.al2",
    "provided.al2023",
];

impl Controller {
    pub(super) fn validate(&self, config: &FunctionConfig) -> Result<(), ControllerError> {
        let invalid = |m: String| Err(ControllerError::InvalidParameter(m));
        // Below the bounds of Lambda's API model (or off its patterns) is its ValidationException,
        // every violation of the request at once; within the model but beyond what Lambda runs,
        // its InvalidParameterValueException.
        let mut model = Violations::default();
        if !role_is_valid(&config.role) {
            model.add(
                &config.role,
                "role",
                &format!("Member must satisfy regular expression pattern: {ROLE_PATTERN}"),
            );
        }
        if !self.runtimes.contains(&config.runtime)
            && !LAMBDA_RUNTIMES.contains(&config.runtime.as_str())
        {
            model.add(
                &config.runtime,
                "runtime",
                &format!(
                    "Member must satisfy enum value set: [{}]",
                    LAMBDA_RUNTIMES.join(", ")
                ),
            );
        }
        if config.handler.is_empty() || config.handler.chars().any(char::is_whitespace) {
            model.add(
                &config.handler,
                "handler",
                "Member must satisfy regular expression pattern: [^\\s]+",
            );
        }
        if config.handler.chars().count() > 128 {
            model.add(
                &config.handler,
                "handler",
                "Member must have length less than or equal to 128",
            );
        }
        if config.description.chars().count() > 256 {
            model.add(
                &config.description,
                "description",
                "Member must have length less than or equal to 256",
            );
        }
        if config.memory_mb < function::MIN_MEMORY_MB {
            model.add(
                &config.memory_mb,
                "memorySize",
                "Member must have value greater than or equal to 128",
            );
        }
        if config.timeout_s < 1 {
            model.add(
                &config.timeout_s,
                "timeout",
                "Member must have value greater than or equal to 1",
            );
        }
        if config.ephemeral_storage_mb < 512 {
            model.add(
                &config.ephemeral_storage_mb,
                "ephemeralStorage.size",
                "Member must have value greater than or equal to 512",
            );
        }
        model.into_result()?;
        if !self.runtimes.contains(&config.runtime) {
            // A runtime Lambda knows and this node does not run.
            return invalid(format!(
                "Value {} at 'runtime' failed to satisfy constraint: Member must satisfy enum value set: [{}]",
                config.runtime,
                self.runtimes.join(", ")
            ));
        }
        if let Some(warmups) = config
            .prebake
            .warmup_invocations
            .filter(|n| *n > function::MAX_WARMUPS)
        {
            return invalid(format!(
                "Value {warmups} at 'kilnPrebake.warmupInvocations' failed to satisfy constraint: Member must have value less than or equal to {}",
                function::MAX_WARMUPS
            ));
        }
        if config.prebake.standbys > function::MAX_STANDBYS {
            return invalid(format!(
                "Value {} at 'kilnPrebake.standbys' failed to satisfy constraint: Member must have value less than or equal to {}",
                config.prebake.standbys,
                function::MAX_STANDBYS
            ));
        }
        if config.prebake.standbys > 0 && config.prebake.mode == function::PrebakeMode::Off {
            return invalid(
                "KilnPrebake.Standbys needs a snapshot to make them from: Mode must be deploy or lazy"
                    .into(),
            );
        }
        if let Some(sessions) = &config.sessions {
            sessions.validate().or_else(invalid)?;
        }
        if let Some(web) = &config.web {
            web.mode(&config.runtime, config.network)
                .map_err(ControllerError::Validation)?;
        }
        if let Some(breakout) = &config.breakout {
            breakout
                .validate(&config.runtime, config.memory_mb, config.web.is_some())
                .map_err(ControllerError::Validation)?;
        }
        config
            .settings
            .validate()
            .map_err(ControllerError::Validation)?;
        if let Some(event) = &config.prebake.warmup_event {
            if event.to_string().len() > function::MAX_WARMUP_EVENT_BYTES {
                return invalid(format!(
                    "Value at 'kilnPrebake.warmupEvent' failed to satisfy constraint: Member must have length less than or equal to {}",
                    function::MAX_WARMUP_EVENT_BYTES
                ));
            }
        }
        if !(function::MIN_MEMORY_MB..=function::MAX_MEMORY_MB).contains(&config.memory_mb) {
            return invalid(format!(
                "Value {} at 'memorySize' failed to satisfy constraint: Member must have value between {} and {}",
                config.memory_mb,
                function::MIN_MEMORY_MB,
                function::MAX_MEMORY_MB
            ));
        }
        if !(1..=function::MAX_TIMEOUT_S).contains(&config.timeout_s) {
            return invalid(format!(
                "Value {} at 'timeout' failed to satisfy constraint: Member must have value between 1 and {}",
                config.timeout_s,
                function::MAX_TIMEOUT_S
            ));
        }
        if !(512..=10_240).contains(&config.ephemeral_storage_mb) {
            return invalid("EphemeralStorage size must be between 512 and 10240 MB".into());
        }
        for key in config.env.keys() {
            let valid_key = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_key {
                return invalid(format!("Environment variable name '{key}' is invalid: it must match [a-zA-Z]([a-zA-Z0-9_])+"));
            }
            if RESERVED_ENV.contains(&key.as_str()) {
                return invalid(format!(
                    "Lambda was unable to configure your environment variables because the environment variables you have provided contains reserved keys that are currently not supported for modification. Reserved keys used in this request: {key}"
                ));
            }
        }
        // Lambda measures the variables as the JSON of their map.
        let measured = serde_json::to_string(&config.env).unwrap_or_default();
        if measured.len() > function::MAX_ENV_BYTES {
            return invalid(format!("Lambda was unable to configure your environment variables because the environment variables you have provided exceeded the 4KB limit. String measured: {measured}"));
        }
        Ok(())
    }
}

/// Lambda's pattern for an execution role: an IAM role's ARN. kiln assumes no role, but a
/// value that could not be one is refused as Lambda refuses it.
const ROLE_PATTERN: &str = r"arn:(aws[a-zA-Z-]*)?:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+";

/// Violations of Lambda's API model in one request, answered together as its
/// ValidationException answers them: `2 validation errors detected: Value 'x' at 'a' failed to
/// satisfy constraint: …; Value …`.
#[derive(Debug, Default)]
struct Violations(Vec<String>);

impl Violations {
    fn add(&mut self, value: &dyn std::fmt::Display, field: &str, constraint: &str) {
        self.0.push(format!(
            "Value '{value}' at '{field}' failed to satisfy constraint: {constraint}"
        ));
    }

    fn into_result(self) -> Result<(), ControllerError> {
        let message = match self.0.as_slice() {
            [] => return Ok(()),
            [one] => format!("1 validation error detected: {one}"),
            many => format!(
                "{} validation errors detected: {}",
                many.len(),
                many.join("; ")
            ),
        };
        Err(ControllerError::Validation(message))
    }
}

fn role_is_valid(role: &str) -> bool {
    (|| {
        let rest = role.strip_prefix("arn:")?;
        let (partition, rest) = rest.split_once(':')?;
        let partition_ok = partition.is_empty()
            || partition
                .strip_prefix("aws")
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-'));
        let rest = rest.strip_prefix("iam::")?;
        let (account, rest) = rest.split_at_checked(12)?;
        // `role/?` then one or more of a class that holds `/` itself: one or more of the class.
        let path = rest.strip_prefix(":role")?;
        let path_ok = !path.is_empty()
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_+=,.@-/".contains(&b));
        Some(partition_ok && account.bytes().all(|b| b.is_ascii_digit()) && path_ok)
    })()
    .unwrap_or(false)
}

#[cfg(test)]
mod role_tests {
    use super::{role_is_valid, ControllerError, Violations};

    #[test]
    fn every_violation_of_the_model_is_reported_at_once() {
        assert!(Violations::default().into_result().is_ok());
        let mut one = Violations::default();
        one.add(
            &64,
            "memorySize",
            "Member must have value greater than or equal to 128",
        );
        let Err(ControllerError::Validation(m)) = one.into_result() else {
            panic!("a violation is a ValidationException")
        };
        assert_eq!(m, "1 validation error detected: Value '64' at 'memorySize' failed to satisfy constraint: Member must have value greater than or equal to 128");
        let mut two = Violations::default();
        two.add(&"r", "role", "A");
        two.add(&0, "timeout", "B");
        let Err(ControllerError::Validation(m)) = two.into_result() else {
            panic!("violations are a ValidationException")
        };
        assert_eq!(m, "2 validation errors detected: Value 'r' at 'role' failed to satisfy constraint: A; Value '0' at 'timeout' failed to satisfy constraint: B");
    }

    #[test]
    fn roles_are_iam_role_arns() {
        for good in [
            "arn:aws:iam::000000000000:role/test",
            "arn:aws-cn:iam::123456789012:role/path/to/r+=,.@-_",
            "arn::iam::123456789012:roleX",
        ] {
            assert!(role_is_valid(good), "{good}");
        }
        for bad in [
            "",
            "my-role",
            "arn:aws:iam::0000:role/test",
            "arn:aws:iam::000000000000:user/test",
            "arn:aws:iam::000000000000:role",
            "arn:aws:iam::000000000000:role/has space",
            "arn:gcp:iam::000000000000:role/test",
        ] {
            assert!(!role_is_valid(bad), "{bad}");
        }
    }
}
