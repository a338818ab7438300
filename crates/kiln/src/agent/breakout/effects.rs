//! A fast request's effects on the platform, held until it answers: its log lines, written
//! as the Node shim writes them (`TIMESTAMP\tREQUEST_ID\tLEVEL\tMESSAGE`, a message's line
//! breaks as `\r`, `AWS_LAMBDA_LOG_LEVEL` filtering), so the function's log reads the same
//! whichever path served it. A request that misses drops them: Node runs it again from the
//! start and writes its own.

use std::sync::{Arc, Mutex};

use kiln_breakout::runtime::{Intrinsics, LogLevel, Miss};

use crate::sync::LockExt;

/// The shim's levels, lowest first.
const LEVELS: [&str; 6] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"];

/// What one fast request did, read by the dispatcher once the run is over.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// The function's output: whole lines, each ending in `\n`.
    pub output: String,
}

/// The [`Intrinsics`] of one fast request.
pub(super) struct FastEffects {
    request_id: String,
    /// The lowest level written (`AWS_LAMBDA_LOG_LEVEL`, as the shim reads it).
    min_level: usize,
    held: Arc<Mutex<Held>>,
}

impl FastEffects {
    /// The effects of request `request_id` of a function with environment `env`, and the
    /// handle the dispatcher reads them through.
    pub(super) fn new(
        request_id: &str,
        env: &std::collections::BTreeMap<String, String>,
    ) -> (Self, Arc<Mutex<Held>>) {
        let held = Arc::new(Mutex::new(Held::default()));
        let effects = Self {
            request_id: request_id.to_string(),
            min_level: min_level(env.get("AWS_LAMBDA_LOG_LEVEL").map(String::as_str)),
            held: held.clone(),
        };
        (effects, held)
    }
}

/// The shim's `Math.max(0, LEVELS.indexOf(String(level || 'TRACE').toUpperCase()))`.
fn min_level(level: Option<&str>) -> usize {
    let level = level.filter(|l| !l.is_empty()).unwrap_or("TRACE");
    let upper = level.to_uppercase();
    LEVELS.iter().position(|l| *l == upper).unwrap_or(0)
}

/// One log line as the shim writes it.
fn log_line(timestamp: &str, request_id: &str, level: &str, message: &str) -> String {
    format!(
        "{timestamp}\t{request_id}\t{level}\t{}\n",
        message.replace('\n', "\r")
    )
}

impl Intrinsics for FastEffects {
    fn log(&mut self, level: LogLevel, message: &str) -> Result<(), Miss> {
        let name = level.as_str();
        let rank = LEVELS.iter().position(|l| *l == name).unwrap_or(0);
        if rank < self.min_level {
            return Ok(());
        }
        let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        self.held
            .locked()
            .output
            .push_str(&log_line(&timestamp, &self.request_id, name, message));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_the_shims_and_levels_filter_as_it_does() {
        assert_eq!(
            log_line("2026-01-02T03:04:05.006Z", "id-1", "INFO", "a\nb"),
            "2026-01-02T03:04:05.006Z\tid-1\tINFO\ta\rb\n"
        );
        assert_eq!(min_level(None), 0);
        assert_eq!(min_level(Some("")), 0);
        assert_eq!(min_level(Some("warn")), 3);
        assert_eq!(min_level(Some("bogus")), 0);

        let env = [("AWS_LAMBDA_LOG_LEVEL".to_string(), "WARN".to_string())]
            .into_iter()
            .collect();
        let (mut effects, held) = FastEffects::new("id-2", &env);
        effects.log(LogLevel::Info, "quiet").unwrap();
        effects.log(LogLevel::Error, "loud").unwrap();
        let output = held.locked().output.clone();
        let fields: Vec<&str> = output.trim_end().split('\t').collect();
        assert_eq!(fields[1..], ["id-2", "ERROR", "loud"]);
        assert!(chrono::DateTime::parse_from_rfc3339(fields[0]).is_ok());
        assert_eq!(output.lines().count(), 1);
    }
}
