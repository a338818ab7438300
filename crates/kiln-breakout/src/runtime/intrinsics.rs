//! The intrinsics: the builtins whose effects are the platform's (the function's log, the
//! clock, randomness, later the object store), as the fast path calls them. The runtime does
//! the JavaScript side (formatting a log line as Node's `util.format`, a `Date`'s methods);
//! the [`Intrinsics`] the platform hands each request does the rest, so a fast request's
//! effects can be held back until it answers.

use super::builtins::Builtin;
use super::format;
use super::heap::Heap;
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

/// `new Date(…)`: now, a time value, or a copy of another `Date`. Dates from text or from
/// fields depend on parsing and the time zone: misses.
pub fn construct_date(guest: &mut dyn Guest, args: &[Value]) -> Result<Value, Miss> {
    let time = match args {
        [] => guest.intrinsics().now(),
        [v] if v.is_number() => time_clip(v.as_number().unwrap_or(f64::NAN)),
        [v] if is_date(&guest.heap(), *v)? => time_of(&guest.heap(), *v)?,
        _ => return Err(Miss::new("builtin new Date of text or fields not compiled")),
    };
    guest
        .heap()
        .host_object(Builtin::DatePrototype.value(), Value::number(time))
}

fn is_date(heap: &Heap<'_>, v: Value) -> Result<bool, Miss> {
    Ok(heap.is_host(v)? && heap.proto(v)? == Builtin::DatePrototype.value())
}

/// A `Date`'s time value; a method of `Date.prototype` called on anything else misses.
fn time_of(heap: &Heap<'_>, this: Value) -> Result<f64, Miss> {
    if !is_date(heap, this)? {
        return Err(Miss::new("TypeError: this is not a Date object."));
    }
    heap.host_slot(this)?
        .as_number()
        .ok_or_else(|| Miss::new("a Date without a time value"))
}

/// JavaScript's TimeClip.
fn time_clip(t: f64) -> f64 {
    if !t.is_finite() || t.abs() > 8.64e15 {
        f64::NAN
    } else {
        t.trunc() + 0.0
    }
}

/// The JSON text of a host object (`JSON.stringify` calls a `Date`'s `toJSON`): `None` for
/// an invalid date (`null`); any other builtin class misses.
pub fn host_json(heap: &Heap<'_>, v: Value) -> Result<Option<String>, Miss> {
    if is_date(heap, v)? {
        return Ok(iso_string(time_of(heap, v)?));
    }
    Err(Miss::new("JSON.stringify of an object of a builtin class"))
}

/// `Date.prototype.toISOString`: `None` for an invalid date.
pub fn iso_string(t: f64) -> Option<String> {
    if !t.is_finite() {
        return None;
    }
    let ms = t as i64;
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", -year)
    } else {
        format!("+{year:06}")
    };
    Some(format!(
        "{year}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z"
    ))
}

/// The proleptic Gregorian date of a day number (days since 1970-01-01), after Howard
/// Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_strings_are_javascripts() {
        // Each against `new Date(t).toISOString()` in Node.
        assert_eq!(iso_string(0.0).unwrap(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso_string(1_795_000_000_123.0).unwrap(),
            "2026-11-18T11:06:40.123Z"
        );
        assert_eq!(iso_string(-1.0).unwrap(), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            iso_string(951_782_400_000.0).unwrap(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(iso_string(8.64e15).unwrap(), "+275760-09-13T00:00:00.000Z");
        assert_eq!(iso_string(-8.64e15).unwrap(), "-271821-04-20T00:00:00.000Z");
        assert_eq!(iso_string(f64::NAN), None);
        assert!(time_clip(8.64e15 + 1.0).is_nan());
        assert_eq!(time_clip(1.9), 1.0);
    }
}
