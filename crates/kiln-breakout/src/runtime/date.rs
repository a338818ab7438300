//! `Date` objects: making one (`new Date(…)`), reading its time value, and its ISO text
//! (`toISOString`, `toJSON`, and what `JSON.stringify` writes for one). The clock itself is
//! the platform's ([`super::Intrinsics`]).

use super::builtin::Builtin;
use super::heap::Heap;
use super::value::Value;
use super::{Guest, Miss};

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
pub(crate) fn time_of(heap: &Heap<'_>, this: Value) -> Result<f64, Miss> {
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
