//! kiln's extension `KilnBreakout`: BREAKOUT's trace-compiled fast path for a Node function
//! (docs/breakout.md). With `Mode` `auto` the function's requests are first served by one
//! tracing instance (its code instrumented) until `TraceRequests` were traced; the trace is then
//! compiled, and later requests on traced paths run in kiln without an instance.

use serde::{Deserialize, Serialize};

/// Whether a function takes the fast path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BreakoutMode {
    #[default]
    Off,
    Auto,
}

/// `KilnBreakout` as CreateFunction and UpdateFunctionConfiguration take it and kiln stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct BreakoutConfig {
    #[serde(default)]
    pub mode: BreakoutMode,
    /// Requests the tracing instance serves before its trace is compiled (the paper's artifact
    /// switches at 100).
    #[serde(default = "default_trace_requests")]
    pub trace_requests: u32,
    /// Recompiles after misses before the function gives up on the fast path (the bounce limit).
    #[serde(default = "default_max_retraces")]
    pub max_retraces: u32,
    /// CPU time a fast request may take before it runs in the sandbox instead.
    #[serde(default = "default_timeout_ms")]
    pub fast_path_timeout_ms: u32,
    /// The fast path's arena: at most MemorySize.
    #[serde(default = "default_memory_mb")]
    pub fast_path_memory_mb: u32,
}

fn default_trace_requests() -> u32 {
    100
}

fn default_max_retraces() -> u32 {
    3
}

fn default_timeout_ms() -> u32 {
    1000
}

fn default_memory_mb() -> u32 {
    32
}

impl Default for BreakoutConfig {
    fn default() -> Self {
        Self {
            mode: BreakoutMode::Off,
            trace_requests: default_trace_requests(),
            max_retraces: default_max_retraces(),
            fast_path_timeout_ms: default_timeout_ms(),
            fast_path_memory_mb: default_memory_mb(),
        }
    }
}

/// The most requests a trace may be built from before it is compiled.
pub const MAX_TRACE_REQUESTS: u32 = 100_000;
/// The most recompiles the bounce limit may allow.
pub const MAX_RETRACES: u32 = 100;
/// The longest CPU budget of a fast request.
pub const MAX_FAST_PATH_TIMEOUT_MS: u32 = 60_000;

impl BreakoutConfig {
    /// Whether the function asked for the fast path at all.
    pub fn enabled(&self) -> bool {
        self.mode == BreakoutMode::Auto
    }

    /// Checks the fields against each other and the function's runtime and MemorySize, with
    /// messages naming the field.
    pub fn validate(&self, runtime: &str, memory_mb: u32, web: bool) -> Result<(), String> {
        if self.enabled() && !runtime.starts_with("nodejs") {
            return Err(format!(
                "KilnBreakout is not available for the {runtime} runtime: the fast path compiles Node functions (nodejs runtimes) only"
            ));
        }
        if self.enabled() && web {
            return Err(
                "KilnBreakout cannot be used with KilnWeb: a web app serves requests through its own server, not a handler that can be traced"
                    .into(),
            );
        }
        let range = |field: &str, value: u32, min: u32, max: u32| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "Value {value} at 'kilnBreakout.{field}' failed to satisfy constraint: Member must have value between {min} and {max}"
                ))
            }
        };
        range("traceRequests", self.trace_requests, 1, MAX_TRACE_REQUESTS)?;
        range("maxRetraces", self.max_retraces, 0, MAX_RETRACES)?;
        range(
            "fastPathTimeoutMs",
            self.fast_path_timeout_ms,
            1,
            MAX_FAST_PATH_TIMEOUT_MS,
        )?;
        range("fastPathMemoryMb", self.fast_path_memory_mb, 1, memory_mb)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> BreakoutConfig {
        BreakoutConfig {
            mode: BreakoutMode::Auto,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c: BreakoutConfig = serde_json::from_str(r#"{"Mode":"auto"}"#).unwrap();
        assert_eq!(c, auto());
        assert_eq!(
            (
                c.trace_requests,
                c.max_retraces,
                c.fast_path_timeout_ms,
                c.fast_path_memory_mb
            ),
            (100, 3, 1000, 32)
        );
        assert!(serde_json::from_str::<BreakoutConfig>(r#"{"Mode":"on"}"#).is_err());
        assert!(serde_json::from_str::<BreakoutConfig>(r#"{"Tracerequests":5}"#).is_err());
    }

    #[test]
    fn node_only_and_fields_named() {
        assert!(auto().validate("nodejs20.x", 128, false).is_ok());
        assert!(auto()
            .validate("python3.11", 128, false)
            .unwrap_err()
            .contains("python3.11"));
        assert!(auto()
            .validate("nodejs20.x", 128, true)
            .unwrap_err()
            .contains("KilnWeb"));
        // Off is allowed anywhere: it is what every function has.
        assert!(BreakoutConfig::default()
            .validate("python3.11", 128, true)
            .is_ok());
        let big = BreakoutConfig {
            fast_path_memory_mb: 256,
            ..auto()
        };
        assert!(big
            .validate("nodejs20.x", 128, false)
            .unwrap_err()
            .contains("kilnBreakout.fastPathMemoryMb"));
        let none = BreakoutConfig {
            trace_requests: 0,
            ..auto()
        };
        assert!(none
            .validate("nodejs20.x", 128, false)
            .unwrap_err()
            .contains("kilnBreakout.traceRequests"));
    }
}
