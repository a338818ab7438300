//! Schedules: the EventBridge Scheduler API's subset that invokes Lambda functions
//! (`CreateSchedule`, `GetSchedule`, `UpdateSchedule`, `DeleteSchedule`, `ListSchedules` in
//! the default group), kept in `schedules.json` in the data dir and fired by one task that
//! hands each due schedule's input to the function as an asynchronous invocation (the async
//! queue's retries and destinations apply). See docs/schedules.md.

pub mod expr;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::controller::Controller;
use crate::sync::LockExt;
use expr::Expression;

/// The only schedule group: kiln has no CreateScheduleGroup.
pub const DEFAULT_GROUP: &str = "default";

/// How often the firing task looks for due schedules.
const TICK: Duration = Duration::from_millis(500);

/// A schedule as the API returns it (GetSchedule's shape) and as it is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Schedule {
    pub name: String,
    pub group_name: String,
    pub arn: String,
    pub schedule_expression: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_expression_timezone: Option<String>,
    pub flexible_time_window: FlexibleTimeWindow,
    pub target: Target,
    pub state: State,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Seconds since the epoch, as the API's timestamps are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_date: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_date: Option<f64>,
    #[serde(default)]
    pub action_after_completion: AfterCompletion,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
    pub creation_date: f64,
    pub last_modification_date: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FlexibleTimeWindow {
    pub mode: WindowMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_window_in_minutes: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum WindowMode {
    Off,
    Flexible,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum State {
    #[default]
    Enabled,
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum AfterCompletion {
    #[default]
    None,
    Delete,
}

/// The target: a Lambda function's ARN and the input it is invoked with. The fields kiln does
/// not act on (the retry policy, the dead-letter queue) are kept and returned as given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Target {
    pub arn: String,
    pub role_arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_config: Option<Value>,
}

/// Why a schedule operation failed: the API's exception and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("cannot keep the schedules: {0}")]
    Storage(String),
}

/// What CreateSchedule and UpdateSchedule take.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScheduleInput {
    pub schedule_expression: Option<String>,
    pub schedule_expression_timezone: Option<String>,
    pub flexible_time_window: Option<FlexibleTimeWindow>,
    pub target: Option<Target>,
    pub state: Option<State>,
    pub description: Option<String>,
    pub start_date: Option<f64>,
    pub end_date: Option<f64>,
    pub action_after_completion: Option<AfterCompletion>,
    pub kms_key_arn: Option<String>,
    pub group_name: Option<String>,
}

struct Entry {
    schedule: Schedule,
    expression: Expression,
    /// When it fires next (None: never again).
    next: Option<DateTime<Utc>>,
}

/// Every schedule of this node, and the task that fires them.
pub struct Schedules {
    path: PathBuf,
    region: String,
    account: String,
    entries: Mutex<BTreeMap<String, Entry>>,
}

fn now_seconds() -> f64 {
    Utc::now().timestamp_millis() as f64 / 1000.0
}

fn from_seconds(seconds: f64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis((seconds * 1000.0) as i64).unwrap_or_default()
}

/// `Name` is 1 to 64 of letters, digits, `.`, `-` and `_`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The function a target ARN names, as the controller takes it: `NAME`, or `NAME:QUALIFIER`
/// for a version or alias (`arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER]`); kiln's
/// scheduler invokes nothing else.
pub fn target_function(arn: &str) -> Result<String, ScheduleError> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "lambda", _, _, "function", name] => Ok(name.to_string()),
        ["arn", _, "lambda", _, _, "function", name, "$LATEST"] => Ok(name.to_string()),
        ["arn", _, "lambda", _, _, "function", name, qualifier] => Ok(format!("{name}:{qualifier}")),
        _ => Err(ScheduleError::Validation(format!(
            "Target.Arn {arn}: kiln's scheduler invokes Lambda functions only (arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER])"
        ))),
    }
}

impl Schedules {
    /// The schedules kept in `data_dir`'s `schedules.json` (none if there is no file).
    pub fn open(data_dir: &std::path::Path, region: &str, account: &str) -> anyhow::Result<Self> {
        let path = data_dir.join("schedules.json");
        let kept: Vec<Schedule> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{} is not kiln's schedules: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let now = Utc::now();
        let mut entries = BTreeMap::new();
        for schedule in kept {
            let expression = match Expression::parse(
                &schedule.schedule_expression,
                schedule.schedule_expression_timezone.as_deref(),
            ) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(schedule = %schedule.name, "left out: {e}");
                    continue;
                }
            };
            // The next time after now; a time missed while kiln was down is caught up once
            // when the firing task starts (`catch_up`).
            let next = next_fire(&schedule, &expression, now);
            entries.insert(
                schedule.name.clone(),
                Entry {
                    schedule,
                    expression,
                    next,
                },
            );
        }
        Ok(Self {
            path,
            region: region.to_string(),
            account: account.to_string(),
            entries: Mutex::new(entries),
        })
    }

    fn arn(&self, name: &str) -> String {
        format!(
            "arn:aws:scheduler:{}:{}:schedule/{DEFAULT_GROUP}/{name}",
            self.region, self.account
        )
    }

    fn save(&self, entries: &BTreeMap<String, Entry>) -> Result<(), ScheduleError> {
        let all: Vec<&Schedule> = entries.values().map(|e| &e.schedule).collect();
        let bytes =
            serde_json::to_vec_pretty(&all).map_err(|e| ScheduleError::Storage(e.to_string()))?;
        let temporary = self.path.with_extension("json.tmp");
        std::fs::write(&temporary, bytes)
            .and_then(|()| std::fs::rename(&temporary, &self.path))
            .map_err(|e| ScheduleError::Storage(e.to_string()))
    }

    /// Validates `input` into a schedule named `name` (created now, or keeping `created`).
    fn build(
        &self,
        name: &str,
        input: ScheduleInput,
        created: Option<f64>,
    ) -> Result<(Schedule, Expression), ScheduleError> {
        let missing = |field: &str| ScheduleError::Validation(format!("{field} is required"));
        if !valid_name(name) {
            return Err(ScheduleError::Validation(format!(
                "Name {name}: use 1 to 64 letters, digits, '.', '-' or '_'"
            )));
        }
        let group = input
            .group_name
            .unwrap_or_else(|| DEFAULT_GROUP.to_string());
        if group != DEFAULT_GROUP {
            return Err(ScheduleError::NotFound(format!(
                "Schedule group {group} does not exist."
            )));
        }
        let expression_text = input
            .schedule_expression
            .ok_or_else(|| missing("ScheduleExpression"))?;
        let expression = Expression::parse(
            &expression_text,
            input.schedule_expression_timezone.as_deref(),
        )
        .map_err(ScheduleError::Validation)?;
        let window = input
            .flexible_time_window
            .ok_or_else(|| missing("FlexibleTimeWindow"))?;
        match (window.mode, window.maximum_window_in_minutes) {
            (WindowMode::Flexible, Some(1..=1440)) | (WindowMode::Off, None) => {}
            (WindowMode::Flexible, _) => return Err(ScheduleError::Validation(
                "FlexibleTimeWindow.MaximumWindowInMinutes must be 1 to 1440 when Mode is FLEXIBLE"
                    .into(),
            )),
            (WindowMode::Off, Some(_)) => {
                return Err(ScheduleError::Validation(
                    "FlexibleTimeWindow.MaximumWindowInMinutes is only for Mode FLEXIBLE".into(),
                ))
            }
        }
        let target = input.target.ok_or_else(|| missing("Target"))?;
        target_function(&target.arn)?;
        if let Some(text) = &target.input {
            if serde_json::from_str::<Value>(text).is_err() {
                return Err(ScheduleError::Validation(
                    "Target.Input must be JSON: it is the function's event".into(),
                ));
            }
        }
        if let (Some(start), Some(end)) = (input.start_date, input.end_date) {
            if end <= start {
                return Err(ScheduleError::Validation(
                    "EndDate must be after StartDate".into(),
                ));
            }
        }
        if input
            .description
            .as_ref()
            .is_some_and(|d| d.chars().count() > 512)
        {
            return Err(ScheduleError::Validation(
                "Description is at most 512 characters".into(),
            ));
        }
        let now = now_seconds();
        Ok((
            Schedule {
                name: name.to_string(),
                group_name: group,
                arn: self.arn(name),
                schedule_expression: expression_text,
                schedule_expression_timezone: input.schedule_expression_timezone,
                flexible_time_window: window,
                target,
                state: input.state.unwrap_or_default(),
                description: input.description,
                start_date: input.start_date,
                end_date: input.end_date,
                action_after_completion: input.action_after_completion.unwrap_or_default(),
                kms_key_arn: input.kms_key_arn,
                creation_date: created.unwrap_or(now),
                last_modification_date: now,
            },
            expression,
        ))
    }

    pub fn create(&self, name: &str, input: ScheduleInput) -> Result<String, ScheduleError> {
        let (schedule, expression) = self.build(name, input, None)?;
        let mut entries = self.entries.locked();
        if entries.contains_key(name) {
            return Err(ScheduleError::Conflict(format!(
                "Schedule {name} already exists."
            )));
        }
        let next = next_fire(&schedule, &expression, Utc::now());
        let arn = schedule.arn.clone();
        entries.insert(
            name.to_string(),
            Entry {
                schedule,
                expression,
                next,
            },
        );
        if let Err(e) = self.save(&entries) {
            entries.remove(name);
            return Err(e);
        }
        Ok(arn)
    }

    /// Replaces every setting of schedule `name` (UpdateSchedule is not a patch).
    pub fn update(&self, name: &str, input: ScheduleInput) -> Result<String, ScheduleError> {
        let mut entries = self.entries.locked();
        let Some(created) = entries.get(name).map(|e| e.schedule.creation_date) else {
            return Err(not_found(name));
        };
        let (schedule, expression) = self.build(name, input, Some(created))?;
        let next = next_fire(&schedule, &expression, Utc::now());
        let arn = schedule.arn.clone();
        let old = entries.insert(
            name.to_string(),
            Entry {
                schedule,
                expression,
                next,
            },
        );
        if let Err(e) = self.save(&entries) {
            if let Some(old) = old {
                entries.insert(name.to_string(), old);
            }
            return Err(e);
        }
        Ok(arn)
    }

    pub fn get(&self, name: &str, group: Option<&str>) -> Result<Schedule, ScheduleError> {
        check_group(group)?;
        self.entries
            .locked()
            .get(name)
            .map(|e| e.schedule.clone())
            .ok_or_else(|| not_found(name))
    }

    pub fn delete(&self, name: &str, group: Option<&str>) -> Result<(), ScheduleError> {
        check_group(group)?;
        let mut entries = self.entries.locked();
        let Some(old) = entries.remove(name) else {
            return Err(not_found(name));
        };
        if let Err(e) = self.save(&entries) {
            entries.insert(name.to_string(), old);
            return Err(e);
        }
        Ok(())
    }

    /// Schedules in name order, after `after` (the previous page's last name), filtered.
    pub fn list(
        &self,
        prefix: Option<&str>,
        state: Option<State>,
        group: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Schedule>, Option<String>), ScheduleError> {
        if group.is_some_and(|g| g != DEFAULT_GROUP) {
            return Ok((Vec::new(), None));
        }
        let entries = self.entries.locked();
        let mut matching = entries
            .values()
            .map(|e| &e.schedule)
            .filter(|s| after.is_none_or(|a| s.name.as_str() > a))
            .filter(|s| prefix.is_none_or(|p| s.name.starts_with(p)))
            .filter(|s| state.is_none_or(|st| s.state == st));
        let page: Vec<Schedule> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        let token = more.then(|| page.last().map(|s| s.name.clone())).flatten();
        Ok((page, token))
    }

    /// Takes the schedules due at `now`: each one's firing, with its next time set after `now`
    /// (a schedule that missed several times fires once). A one-time schedule that asked to be
    /// deleted afterwards goes once its firing is queued ([`Schedules::completed`]).
    fn due(&self, now: DateTime<Utc>) -> Vec<Firing> {
        let mut entries = self.entries.locked();
        let mut fired = Vec::new();
        for (name, entry) in entries.iter_mut() {
            let Some(at) = entry.next.filter(|at| *at <= now) else {
                continue;
            };
            entry.next = next_fire(&entry.schedule, &entry.expression, at.max(now));
            if entry.schedule.state != State::Enabled {
                continue;
            }
            let Ok(function) = target_function(&entry.schedule.target.arn) else {
                continue;
            };
            let input = entry
                .schedule
                .target
                .input
                .clone()
                .unwrap_or_else(|| "{}".into());
            fired.push(Firing {
                schedule: name.clone(),
                function,
                input: Bytes::from(input),
                at,
                delete_after: deletes_itself(entry),
            });
        }
        fired
    }

    /// A firing is queued: a one-time schedule that asked to be deleted afterwards goes.
    fn completed(&self, firing: &Firing) {
        if !firing.delete_after {
            return;
        }
        let mut entries = self.entries.locked();
        if entries.remove(&firing.schedule).is_some() {
            if let Err(e) = self.save(&entries) {
                tracing::warn!("schedules: {e}");
            }
        }
    }

    /// At the start, from the time each schedule last fired for (`fired`, kept with the async
    /// queue): a schedule whose time came while kiln was down fires once now, for the first
    /// time it missed; a one-time schedule that fired and was to be deleted, but was not yet
    /// when kiln stopped, goes.
    fn catch_up(&self, fired: &HashMap<String, DateTime<Utc>>) {
        let mut entries = self.entries.locked();
        let mut done = Vec::new();
        for (name, entry) in entries.iter_mut() {
            let modified = from_seconds(entry.schedule.last_modification_date);
            let last = fired.get(name).copied().filter(|at| *at >= modified);
            if last.is_some() && deletes_itself(entry) {
                done.push(name.clone());
                continue;
            }
            // The first time after the last it fired for: a missed one if it is before
            // `now`, else the next one (nothing lies between).
            let since = last.unwrap_or(modified);
            entry.next = next_fire(&entry.schedule, &entry.expression, since);
        }
        if !done.is_empty() {
            for name in &done {
                entries.remove(name);
            }
            if let Err(e) = self.save(&entries) {
                tracing::warn!("schedules: {e}");
            }
        }
    }

    /// Fires due schedules until the process ends: each as an asynchronous invocation of its
    /// function, so the async queue's retries and destinations apply. The event and the
    /// record that the schedule fired for its time are written in one transaction, so a
    /// crash neither loses a firing (it is caught up at the start) nor queues one twice.
    pub fn run(self: &Arc<Self>, controller: Arc<Controller>) {
        let schedules = Arc::downgrade(self);
        tokio::spawn(async move {
            match controller.schedule_firings() {
                Ok(fired) => {
                    if let Some(schedules) = schedules.upgrade() {
                        schedules.catch_up(&fired);
                    }
                }
                Err(e) => tracing::warn!("schedules: no catch-up, the firings are unreadable: {e}"),
            }
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(schedules) = schedules.upgrade() else {
                    return;
                };
                for firing in schedules.due(Utc::now()) {
                    let (schedule, function) = (&firing.schedule, &firing.function);
                    match controller.enqueue_firing(
                        function,
                        firing.input.clone(),
                        schedule,
                        firing.at,
                    ) {
                        Ok(_) => {
                            tracing::info!(%schedule, %function, "schedule fired");
                            schedules.completed(&firing);
                        }
                        Err(e) => {
                            tracing::warn!(%schedule, %function, "schedule fired, the invocation was refused: {e}")
                        }
                    }
                }
            }
        });
    }
}

/// A schedule's firing for one of its times.
#[derive(Debug, Clone, PartialEq)]
struct Firing {
    schedule: String,
    function: String,
    input: Bytes,
    /// The time it fires for.
    at: DateTime<Utc>,
    /// A one-time schedule to delete once the firing is queued.
    delete_after: bool,
}

fn deletes_itself(entry: &Entry) -> bool {
    entry.expression.is_once() && entry.schedule.action_after_completion == AfterCompletion::Delete
}

fn check_group(group: Option<&str>) -> Result<(), ScheduleError> {
    match group {
        Some(g) if g != DEFAULT_GROUP => Err(ScheduleError::NotFound(format!(
            "Schedule group {g} does not exist."
        ))),
        _ => Ok(()),
    }
}

fn not_found(name: &str) -> ScheduleError {
    ScheduleError::NotFound(format!("Schedule {name} does not exist."))
}

/// When `schedule` fires next after `after`: within its start and end dates, with a random
/// delay within a flexible window.
fn next_fire(
    schedule: &Schedule,
    expression: &Expression,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let start = schedule.start_date.map(from_seconds);
    let origin = start.unwrap_or_else(|| from_seconds(schedule.creation_date));
    let from = match start {
        Some(start) if start > after => start - chrono::Duration::milliseconds(1),
        _ => after,
    };
    let next = expression.next_after(from, origin)?;
    if schedule
        .end_date
        .map(from_seconds)
        .is_some_and(|end| next > end)
    {
        return None;
    }
    let jitter = match (
        schedule.flexible_time_window.mode,
        schedule.flexible_time_window.maximum_window_in_minutes,
    ) {
        (WindowMode::Flexible, Some(minutes)) => chrono::Duration::milliseconds(
            rand::random::<u64>() as i64 % (i64::from(minutes) * 60_000),
        ),
        _ => chrono::Duration::zero(),
    };
    Some(next + jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(expression: &str) -> ScheduleInput {
        serde_json::from_value(serde_json::json!({
            "ScheduleExpression": expression,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {"Arn": "arn:aws:lambda:us-east-1:000000000000:function:f", "RoleArn": "arn:aws:iam::000000000000:role/r", "Input": "{\"n\": 1}"}
        }))
        .unwrap()
    }

    fn schedules() -> (Schedules, PathBuf) {
        let dir = std::env::temp_dir().join(format!("kiln-schedules-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        (
            Schedules::open(&dir, "us-east-1", "000000000000").unwrap(),
            dir,
        )
    }

    #[test]
    fn schedules_are_kept_listed_and_paged() {
        let (s, dir) = schedules();
        for name in ["b", "a", "c"] {
            s.create(name, input("rate(1 hour)")).unwrap();
        }
        assert!(matches!(
            s.create("a", input("rate(1 hour)")),
            Err(ScheduleError::Conflict(_))
        ));
        let (page, token) = s.list(None, None, None, None, 2).unwrap();
        assert_eq!(
            page.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let (rest, token) = s.list(None, None, None, token.as_deref(), 2).unwrap();
        assert_eq!((rest.len(), token), (1, None));
        s.delete("b", None).unwrap();
        let again = Schedules::open(&dir, "us-east-1", "000000000000").unwrap();
        assert_eq!(again.list(None, None, None, None, 10).unwrap().0.len(), 2);
        assert_eq!(
            again.get("a", None).unwrap().arn,
            "arn:aws:scheduler:us-east-1:000000000000:schedule/default/a"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_target_may_name_a_version_or_alias() {
        let arn = |tail: &str| format!("arn:aws:lambda:us-east-1:000000000000:function:{tail}");
        assert_eq!(target_function(&arn("f")).unwrap(), "f");
        assert_eq!(target_function(&arn("f:$LATEST")).unwrap(), "f");
        assert_eq!(target_function(&arn("f:3")).unwrap(), "f:3");
        assert_eq!(target_function(&arn("f:live")).unwrap(), "f:live");
        assert!(target_function("arn:aws:lambda:us-east-1:000000000000:layer:x").is_err());
    }

    #[test]
    fn what_the_api_refuses() {
        let (s, dir) = schedules();
        let mut bad = input("rate(1 hour)");
        bad.target.as_mut().unwrap().arn = "arn:aws:sqs:us-east-1:000000000000:q".into();
        assert!(matches!(
            s.create("x", bad),
            Err(ScheduleError::Validation(_))
        ));
        let mut bad = input("rate(1 hour)");
        bad.target.as_mut().unwrap().input = Some("not json".into());
        assert!(matches!(
            s.create("x", bad),
            Err(ScheduleError::Validation(_))
        ));
        let mut bad = input("rate(1 hour)");
        bad.flexible_time_window = Some(FlexibleTimeWindow {
            mode: WindowMode::Flexible,
            maximum_window_in_minutes: None,
        });
        assert!(matches!(
            s.create("x", bad),
            Err(ScheduleError::Validation(_))
        ));
        assert!(matches!(
            s.create("bad name", input("rate(1 hour)")),
            Err(ScheduleError::Validation(_))
        ));
        assert!(matches!(
            s.update("missing", input("rate(1 hour)")),
            Err(ScheduleError::NotFound(_))
        ));
        assert!(matches!(
            s.get("x", Some("other")),
            Err(ScheduleError::NotFound(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_one_time_schedule_fires_once_and_may_delete_itself() {
        let (s, dir) = schedules();
        let at = (Utc::now() + chrono::Duration::seconds(2)).format("%Y-%m-%dT%H:%M:%S");
        let mut once = input(&format!("at({at})"));
        once.action_after_completion = Some(AfterCompletion::Delete);
        s.create("once", once).unwrap();
        s.create("kept", input(&format!("at({at})"))).unwrap();
        assert!(s.due(Utc::now()).is_empty());
        let later = Utc::now() + chrono::Duration::seconds(5);
        let fired = s.due(later);
        assert_eq!(fired.len(), 2);
        assert_eq!(fired[0].function, "f");
        assert_eq!(fired[0].input, Bytes::from_static(b"{\"n\": 1}"));
        assert!(s.due(later + chrono::Duration::hours(1)).is_empty());
        // Deleted once its firing is queued, not before.
        assert!(s.get("once", None).is_ok());
        for firing in &fired {
            s.completed(firing);
        }
        assert!(s.get("once", None).is_err() && s.get("kept", None).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_disabled_schedule_does_not_fire_and_dates_bound_it() {
        let (s, dir) = schedules();
        let mut off = input("rate(1 minute)");
        off.state = Some(State::Disabled);
        s.create("off", off).unwrap();
        let mut ended = input("rate(1 minute)");
        ended.end_date = Some(now_seconds() + 30.0);
        s.create("ended", ended).unwrap();
        assert!(s.due(Utc::now() + chrono::Duration::minutes(2)).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A restart: the schedules as kept in `dir`, opened again now.
    fn reopened(dir: &std::path::Path) -> Schedules {
        Schedules::open(dir, "us-east-1", "000000000000").unwrap()
    }

    #[test]
    fn a_time_missed_while_down_fires_once_and_a_fired_one_never_again() {
        let (s, dir) = schedules();
        let at = Utc::now() + chrono::Duration::seconds(1);
        let expression = format!("at({})", at.format("%Y-%m-%dT%H:%M:%S"));
        s.create("missed", input(&expression)).unwrap();
        s.create("fired", input(&expression)).unwrap();
        let mut once = input(&expression);
        once.action_after_completion = Some(AfterCompletion::Delete);
        s.create("fired-and-deleting", once).unwrap();
        drop(s);
        // Down across the time.
        std::thread::sleep(Duration::from_millis(1500));
        let s = reopened(&dir);
        let now = Utc::now();
        assert!(
            s.due(now).is_empty(),
            "past times are not due by themselves"
        );
        // `fired` fired for its time before the stop (its record says so), and so did the
        // one-time schedule that was to delete itself but had not yet.
        let time = s.due(now + chrono::Duration::days(1));
        assert!(time.is_empty());
        let s = reopened(&dir);
        let when = |name: &str| {
            let schedule = s.get(name, None).unwrap();
            let expression = Expression::parse(&schedule.schedule_expression, None).unwrap();
            next_fire(&schedule, &expression, from_seconds(schedule.creation_date)).unwrap()
        };
        let fired = HashMap::from([
            ("fired".to_string(), when("fired")),
            ("fired-and-deleting".to_string(), when("fired-and-deleting")),
        ]);
        s.catch_up(&fired);
        assert!(
            s.get("fired-and-deleting", None).is_err(),
            "deleted at the catch-up"
        );
        let caught = s.due(now);
        assert_eq!(
            caught
                .iter()
                .map(|f| f.schedule.as_str())
                .collect::<Vec<_>>(),
            ["missed"]
        );
        assert_eq!(caught[0].at, when("missed"));
        assert!(s.due(now + chrono::Duration::days(1)).is_empty(), "once");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_recurring_schedule_catches_up_once_not_once_a_missed_time() {
        let (s, dir) = schedules();
        s.create("every", input("rate(1 minute)")).unwrap();
        let created = from_seconds(s.get("every", None).unwrap().creation_date);
        // Ten minutes later, never having fired: one firing, for the first time missed.
        let later = created + chrono::Duration::minutes(10);
        s.catch_up(&HashMap::new());
        let caught = s.due(later);
        assert_eq!(caught.len(), 1);
        assert!(
            caught[0].at <= created + chrono::Duration::minutes(1) + chrono::Duration::seconds(1)
        );
        assert!(s.due(later).is_empty());
        // Its next time is after `later`, not the missed ones between.
        let next = s.due(later + chrono::Duration::seconds(61));
        assert_eq!(next.len(), 1);
        assert!(next[0].at > later);
        // Fired for a time just before now: nothing to catch up.
        let (t, dir2) = schedules();
        t.create("every", input("rate(1 minute)")).unwrap();
        let created = from_seconds(t.get("every", None).unwrap().creation_date);
        let fired_for = created + chrono::Duration::minutes(9);
        let now = fired_for + chrono::Duration::seconds(30);
        let t = {
            drop(t);
            reopened(&dir2)
        };
        t.catch_up(&HashMap::from([("every".to_string(), fired_for)]));
        assert!(t.due(now).is_empty());
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(dir2).unwrap();
    }
}
