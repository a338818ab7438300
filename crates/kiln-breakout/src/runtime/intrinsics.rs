//! The intrinsics: the builtins whose effects are the platform's (the function's log, the
//! clock, randomness, later the object store), as the fast path calls them. The runtime does
//! the JavaScript side (formatting a log line as Node's `util.format`, a `Date`'s methods);
//! the [`Intrinsics`] the platform hands each request does the rest, so a fast request's
//! effects can be held back until it answers.

pub use super::date::{construct_date, host_json, iso_string};

use super::builtin::Builtin;
use super::date::time_of;
use super::format;
use super::value::Value;
use super::{Guest, Miss};

/// A log line's level, as the Node shim writes it (`console.log` and `console.info` are
/// `INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
            LogLevel::Error => "ERROR",
        }
    }
}

/// The platform's effects the fast path may ask for (the function's log, the clock,
/// randomness, the object store). `log` and `call` miss unless the platform provides them,
/// so such a request runs in Node; the clock and randomness are the host's. `Send`: the
/// instance that holds them is reused by the next request, on any thread.
pub trait Intrinsics: Send {
    /// A line for the function's log: `message` is `util.format` of the arguments.
    fn log(&mut self, level: LogLevel, message: &str) -> Result<(), Miss> {
        let _ = message;
        Err(Miss::new(format!(
            "intrinsic console ({}) not available",
            level.as_str()
        )))
    }

    /// `Date.now()`: milliseconds since the epoch.
    fn now(&mut self) -> f64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_millis() as f64)
    }

    /// `Math.random()`: uniform in [0, 1).
    fn random(&mut self) -> f64 {
        fastrand::f64()
    }

    /// The handler's `context` fields (`awsRequestId`, `functionName`, …) as JSON; the
    /// default has none.
    fn context(&mut self) -> Result<serde_json::Value, Miss> {
        Ok(serde_json::Value::Object(serde_json::Map::new()))
    }

    /// The id of the request's session (`context.session`), if it has one. Its state is
    /// reached through [`Intrinsics::call`]: `session.get`, `session.put`, `session.delete`,
    /// `session.keys`, `session.begin` and `session.end` (`runtime/session.rs`).
    fn session(&mut self) -> Option<String> {
        None
    }

    /// `context.getRemainingTimeInMillis()`.
    fn remaining_ms(&mut self) -> Result<f64, Miss> {
        Err(Miss::new(
            "intrinsic context.getRemainingTimeInMillis not available",
        ))
    }

    /// Any other intrinsic, by name (`s3.send`), its arguments and answer as JSON.
    fn call(&mut self, name: &str, args: &[serde_json::Value]) -> Result<serde_json::Value, Miss> {
        let _ = args;
        Err(Miss::new(format!("intrinsic {name} not available")))
    }
}

/// An [`Intrinsics`] without the platform's: a log line or a store call misses.
pub struct NoIntrinsics;

impl Intrinsics for NoIntrinsics {}

fn arg(args: &[Value], i: usize) -> Value {
    args.get(i).copied().unwrap_or(Value::UNDEFINED)
}

/// Calls the intrinsic `builtin`, or `None` when it is not one.
pub fn call(
    guest: &mut dyn Guest,
    builtin: Builtin,
    this: Value,
    args: &[Value],
) -> Option<Result<Value, Miss>> {
    use Builtin as B;
    let level = match builtin {
        B::ConsoleLog | B::ConsoleInfo => Some(LogLevel::Info),
        B::ConsoleWarn => Some(LogLevel::Warn),
        B::ConsoleError => Some(LogLevel::Error),
        _ => None,
    };
    if let Some(level) = level {
        let line = format::format(&mut guest.heap(), args);
        return Some(line.and_then(|line| {
            guest.intrinsics().log(level, &line)?;
            Ok(Value::UNDEFINED)
        }));
    }
    Some(match builtin {
        B::Require => super::s3::require(&mut guest.heap(), arg(args, 0)),
        B::S3Send => super::s3::send(guest, this, arg(args, 0)),
        B::S3TransformToString => super::s3::transform_to_string(&guest.heap(), this, arg(args, 0)),
        B::DateNow => Ok(Value::number(guest.intrinsics().now())),
        B::MathRandom => Ok(Value::number(guest.intrinsics().random())),
        B::ContextRemainingTime => guest.intrinsics().remaining_ms().map(Value::number),
        B::Date => Err(Miss::new("builtin Date called without new not compiled")),
        B::DateGetTime | B::DateValueOf => time_of(&guest.heap(), this).map(Value::number),
        B::DateToIsoString => {
            let mut heap = guest.heap();
            time_of(&heap, this).and_then(|t| match iso_string(t) {
                Some(text) => heap.str(&text),
                None => Err(Miss::new("RangeError: Invalid time value")),
            })
        }
        B::DateToJson => {
            let mut heap = guest.heap();
            time_of(&heap, this).and_then(|t| match iso_string(t) {
                Some(text) => heap.str(&text),
                None => Ok(Value::NULL),
            })
        }
        _ => return None,
    })
}
