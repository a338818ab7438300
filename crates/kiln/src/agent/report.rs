//! Lambda's framing of an invocation's log: `START`, the function's output, `END`, and the
//! `REPORT` line with its durations, memory, and on a cold start the init duration and path.

use std::time::Duration;

use super::StartPath;
use crate::function::SharedSpec;

/// Lambda's START / END / REPORT framing of an invocation's output.
pub(super) fn report(
    spec: &SharedSpec,
    request_id: &str,
    output: &str,
    duration: Duration,
    start_path: Option<StartPath>,
    init_duration: Option<Duration>,
    max_memory_mb: u64,
) -> String {
    use std::fmt::Write;
    let mut log = String::with_capacity(output.len() + 256);
    let _ = writeln!(
        log,
        "START RequestId: {request_id} Version: {}",
        spec.version
    );
    log.push_str(output);
    if !output.is_empty() && !output.ends_with('\n') {
        log.push('\n');
    }
    let _ = writeln!(log, "END RequestId: {request_id}");
    let _ = write!(
        log,
        "REPORT RequestId: {request_id}\tDuration: {} ms\tBilled Duration: {} ms\tMemory Size: {} MB\tMax Memory Used: {max_memory_mb} MB",
        Millis(duration),
        duration.as_nanos().div_ceil(1_000_000).max(1),
        spec.memory_mb,
    );
    if let Some(init) = init_duration {
        let _ = write!(log, "\tInit Duration: {} ms", Millis(init));
    }
    if let Some(path) = start_path {
        let _ = write!(log, "\tStart Path: {}", path.as_str());
    }
    log.push('\n');
    log
}

/// A duration in milliseconds to two decimals, as Lambda writes them: integer arithmetic, on
/// every invocation's path, where a float's formatting costs more.
struct Millis(Duration);

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hundredths = (self.0.as_nanos() + 5_000) / 10_000;
        write!(f, "{}.{:02}", hundredths / 100, hundredths % 100)
    }
}

/// Adds `name: value` to the end of `log`'s REPORT line.
pub(super) fn report_field(log: &mut String, name: &str, value: &str) {
    if log.ends_with('\n') {
        log.pop();
    }
    log.push('\t');
    log.push_str(name);
    log.push_str(": ");
    log.push_str(value);
    log.push('\n');
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::function::InstanceSpec;

    #[test]
    fn milliseconds_have_two_decimals_rounded_to_the_nearest() {
        let shown = |nanos| Millis(Duration::from_nanos(nanos)).to_string();
        assert_eq!(shown(0), "0.00");
        assert_eq!(shown(4_999), "0.00");
        assert_eq!(shown(5_000), "0.01");
        assert_eq!(shown(1_234_567), "1.23");
        assert_eq!(shown(1_235_000), "1.24");
        assert_eq!(shown(999_995_000), "1000.00");
        assert_eq!(shown(12_345_678_901), "12345.68");
    }

    #[test]
    fn report_has_lambda_fields() {
        let spec = Arc::new(InstanceSpec {
            function: "f".into(),
            arn: "arn".into(),
            ..InstanceSpec::example("f", 256)
        });
        let log = report(
            &spec,
            "id-1",
            "hello",
            Duration::from_micros(1500),
            Some(StartPath::Coldest),
            Some(Duration::from_millis(80)),
            40,
        );
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines[0], "START RequestId: id-1 Version: $LATEST");
        assert_eq!(lines[1], "hello");
        assert_eq!(lines[2], "END RequestId: id-1");
        assert!(lines[3].starts_with("REPORT RequestId: id-1\tDuration: 1.50 ms\tBilled Duration: 2 ms\tMemory Size: 256 MB\tMax Memory Used: 40 MB\tInit Duration: 80.00 ms\tStart Path: coldest"), "{}", lines[3]);
    }
}
