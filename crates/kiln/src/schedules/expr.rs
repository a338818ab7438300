//! Schedule expressions as EventBridge Scheduler takes them: `rate(N unit)`, `cron(…)` with
//! its six fields (minutes, hours, day of month, month, day of week, year) and `at(…)`, in
//! a time zone (`ScheduleExpressionTimezone`, IANA names, UTC by default).

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A parsed schedule expression: when it fires next.
#[derive(Debug, Clone)]
pub enum Expression {
    /// Every `every`, counted from the schedule's start (its creation or `StartDate`).
    Rate { every: Duration },
    /// The cron fields, with the day of week numbered as cron-lite does (0 = Sunday).
    Cron(Box<cron_lite::Schedule>, Tz),
    /// Once, at a wall-clock time in the zone.
    At(DateTime<Utc>),
}

impl Expression {
    /// Parses `text` in `timezone` (None: UTC); the error is the message for the client.
    pub fn parse(text: &str, timezone: Option<&str>) -> Result<Self, String> {
        let tz: Tz = match timezone {
            None | Some("") => Tz::UTC,
            Some(name) => name
                .parse()
                .map_err(|_| format!("Invalid ScheduleExpressionTimezone: {name}"))?,
        };
        let inner = |prefix: &str| {
            text.strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(')'))
                .map(str::trim)
        };
        if let Some(rate) = inner("rate(") {
            return parse_rate(rate).map(|every| Expression::Rate { every });
        }
        if let Some(cron) = inner("cron(") {
            return parse_cron(cron).map(|schedule| Expression::Cron(Box::new(schedule), tz));
        }
        if let Some(at) = inner("at(") {
            let local = NaiveDateTime::parse_from_str(at, "%Y-%m-%dT%H:%M:%S").map_err(|_| {
                format!("Invalid Schedule Expression at({at}): expected yyyy-mm-ddThh:mm:ss")
            })?;
            let when = tz
                .from_local_datetime(&local)
                .earliest()
                .ok_or_else(|| format!("at({at}) does not exist in {tz}"))?;
            return Ok(Expression::At(when.with_timezone(&Utc)));
        }
        Err(format!(
            "Invalid Schedule Expression {text}: expected rate(…), cron(…) or at(…)"
        ))
    }

    /// The first time strictly after `after` it fires, for a schedule that started at `start`.
    pub fn next_after(&self, after: DateTime<Utc>, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Expression::Rate { every } => {
                if after < start {
                    return Some(start + *every);
                }
                let periods = (after - start).num_milliseconds() / every.num_milliseconds() + 1;
                Some(start + Duration::milliseconds(periods * every.num_milliseconds()))
            }
            Expression::Cron(schedule, tz) => {
                let local = after.with_timezone(tz);
                schedule
                    .upcoming(&local)
                    .map(|next| next.with_timezone(&Utc))
            }
            Expression::At(when) => (*when > after).then_some(*when),
        }
    }

    pub fn is_once(&self) -> bool {
        matches!(self, Expression::At(_))
    }
}

fn parse_rate(rate: &str) -> Result<Duration, String> {
    let invalid = || format!("Invalid Schedule Expression rate({rate}): expected rate(value unit)");
    let (value, unit) = rate.split_once(' ').ok_or_else(invalid)?;
    let value: i64 = value.trim().parse().map_err(|_| invalid())?;
    if value < 1 {
        return Err(format!(
            "Invalid Schedule Expression rate({rate}): the value must be positive"
        ));
    }
    let unit_length = match (value, unit.trim()) {
        (1, "minute") | (2.., "minutes") => Duration::minutes(1),
        (1, "hour") | (2.., "hours") => Duration::hours(1),
        (1, "day") | (2.., "days") => Duration::days(1),
        _ => return Err(invalid()),
    };
    Ok(unit_length * value as i32)
}

/// AWS's six cron fields become cron-lite's seven (seconds first, 0), its day of week
/// numbered 1–7 from Sunday becomes 0–6.
fn parse_cron(cron: &str) -> Result<cron_lite::Schedule, String> {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    if fields.len() != 6 {
        return Err(format!(
            "Invalid Schedule Expression cron({cron}): expected six fields (minutes hours day-of-month month day-of-week year)"
        ));
    }
    // One of day of month and day of week must be `?`, as AWS requires.
    if (fields[2] == "?") == (fields[4] == "?") {
        return Err(format!(
            "Invalid Schedule Expression cron({cron}): exactly one of day-of-month and day-of-week must be ?"
        ));
    }
    let day_of_week = renumber_weekdays(fields[4]).ok_or_else(|| {
        format!(
            "Invalid Schedule Expression cron({cron}): day-of-week {}",
            fields[4]
        )
    })?;
    let pattern = format!(
        "0 {} {} {} {} {} {}",
        fields[0], fields[1], fields[2], fields[3], day_of_week, fields[5]
    );
    cron_lite::Schedule::new(pattern)
        .map_err(|e| format!("Invalid Schedule Expression cron({cron}): {e}"))
}

/// Every weekday number (not a step after `/`, not the occurrence after `#`) one less.
fn renumber_weekdays(field: &str) -> Option<String> {
    let mut out = String::with_capacity(field.len());
    let mut number = String::new();
    let mut previous = ' ';
    let flush = |number: &mut String, out: &mut String, previous: char| -> Option<()> {
        if number.is_empty() {
            return Some(());
        }
        let n: u32 = number.parse().ok()?;
        if previous == '/' || previous == '#' {
            out.push_str(number);
        } else {
            if !(1..=7).contains(&n) {
                return None;
            }
            out.push_str(&(n - 1).to_string());
        }
        number.clear();
        Some(())
    };
    let mut before_number = ' ';
    for c in field.chars() {
        if c.is_ascii_digit() {
            if number.is_empty() {
                before_number = previous;
            }
            number.push(c);
        } else {
            flush(&mut number, &mut out, before_number)?;
            out.push(c);
        }
        previous = c;
    }
    flush(&mut number, &mut out, before_number)?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn rates_count_from_the_start() {
        let e = Expression::parse("rate(5 minutes)", None).unwrap();
        let start = utc("2026-01-01T00:00:00Z");
        assert_eq!(
            e.next_after(start, start),
            Some(utc("2026-01-01T00:05:00Z"))
        );
        assert_eq!(
            e.next_after(utc("2026-01-01T00:07:30Z"), start),
            Some(utc("2026-01-01T00:10:00Z"))
        );
        assert!(Expression::parse("rate(1 minutes)", None).is_err());
        assert!(Expression::parse("rate(2 minute)", None).is_err());
        assert!(Expression::parse("rate(0 hours)", None).is_err());
        assert!(Expression::parse("rate(1 week)", None).is_err());
    }

    #[test]
    fn cron_fields_are_awss() {
        // 10:15 UTC on weekdays: MON-FRI is 2-6 in AWS's numbering.
        let e = Expression::parse("cron(15 10 ? * 2-6 *)", None).unwrap();
        let saturday = utc("2026-11-28T12:00:00Z");
        assert_eq!(
            e.next_after(saturday, saturday),
            Some(utc("2026-11-30T10:15:00Z"))
        );
        let names = Expression::parse("cron(15 10 ? * MON-FRI *)", None).unwrap();
        assert_eq!(
            names.next_after(saturday, saturday),
            Some(utc("2026-11-30T10:15:00Z"))
        );
        // The first day of every month, at midnight in New York.
        let e = Expression::parse("cron(0 0 1 * ? *)", Some("America/New_York")).unwrap();
        let now = utc("2026-11-25T00:00:00Z");
        assert_eq!(e.next_after(now, now), Some(utc("2026-12-01T05:00:00Z")));
        // Sunday is 1.
        let e = Expression::parse("cron(0 12 ? * 1 *)", None).unwrap();
        assert_eq!(
            e.next_after(saturday, saturday),
            Some(utc("2026-11-29T12:00:00Z"))
        );
    }

    #[test]
    fn bad_cron_is_refused_with_the_reason() {
        for bad in [
            "cron(* * * * *)",
            "cron(0 0 * * * *)",
            "cron(0 0 ? * ? *)",
            "cron(0 0 ? * 8 *)",
            "cron(x 0 1 * ? *)",
        ] {
            assert!(Expression::parse(bad, None).is_err(), "{bad}");
        }
        assert!(Expression::parse("cron(0 0 1 * ? *)", Some("Mars/Olympus")).is_err());
    }

    #[test]
    fn at_fires_once_in_its_zone() {
        let e = Expression::parse("at(2026-12-01T09:30:00)", Some("Europe/Paris")).unwrap();
        let before = utc("2026-11-30T00:00:00Z");
        assert_eq!(
            e.next_after(before, before),
            Some(utc("2026-12-01T08:30:00Z"))
        );
        assert_eq!(e.next_after(utc("2026-12-01T08:30:00Z"), before), None);
        assert!(e.is_once());
        assert!(Expression::parse("at(2026-12-01 09:30)", None).is_err());
    }

    #[test]
    fn weekday_numbers_move_but_steps_and_occurrences_do_not() {
        assert_eq!(renumber_weekdays("2-6").unwrap(), "1-5");
        assert_eq!(renumber_weekdays("1,7").unwrap(), "0,6");
        assert_eq!(renumber_weekdays("3#2").unwrap(), "2#2");
        assert_eq!(renumber_weekdays("2/2").unwrap(), "1/2");
        assert_eq!(renumber_weekdays("6L").unwrap(), "5L");
        assert_eq!(renumber_weekdays("MON-FRI").unwrap(), "MON-FRI");
        assert!(renumber_weekdays("0").is_none());
    }
}
