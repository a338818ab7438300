//! `kiln schedule create|update NAME … | ls | get NAME | rm NAME`: schedules that invoke a
//! function, through the EventBridge Scheduler API kiln serves (the same calls boto3's
//! `scheduler` client makes, signed for `scheduler`).

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::{segment, Client};
use super::deploy::read_inline_or_file;

/// The role a schedule's target names: Scheduler requires one; kiln invokes as itself.
const ROLE: &str = "arn:aws:iam::000000000000:role/kiln-scheduler";

#[derive(Args, Debug)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    command: Option<ScheduleCommand>,
}

#[derive(Subcommand, Debug)]
enum ScheduleCommand {
    /// Every schedule (the default).
    Ls,
    /// One schedule, as GetSchedule answers.
    Get { name: String },
    /// A new schedule.
    Create(Box<Settings>),
    /// Replaces every setting of a schedule (UpdateSchedule, as on AWS).
    Update(Box<Settings>),
    /// Deletes a schedule.
    Rm { name: String },
}

#[derive(Args, Debug)]
struct Settings {
    name: String,
    /// `rate(5 minutes)`, `cron(0 12 * * ? *)` or `at(2026-12-01T09:00:00)`.
    #[arg(long)]
    expression: String,
    /// The function to invoke: a name, `NAME:QUALIFIER`, or its ARN.
    #[arg(long)]
    function: String,
    /// The event it gets: inline JSON, or @file (`{}` if not given).
    #[arg(long)]
    input: Option<String>,
    /// The time zone of a cron or at expression (an IANA name, UTC if not given).
    #[arg(long)]
    timezone: Option<String>,
    #[arg(long)]
    description: Option<String>,
    /// Created disabled: it does not fire until enabled.
    #[arg(long)]
    disabled: bool,
    /// A one-time (`at`) schedule deletes itself after it fired.
    #[arg(long)]
    delete_after_completion: bool,
}

impl Settings {
    /// The body of CreateSchedule and UpdateSchedule.
    fn body(&self, region: &str) -> anyhow::Result<Value> {
        let arn = if self.function.starts_with("arn:") {
            self.function.clone()
        } else {
            format!(
                "arn:aws:lambda:{region}:000000000000:function:{}",
                self.function
            )
        };
        let mut target = json!({ "Arn": arn, "RoleArn": ROLE });
        if let Some(input) = &self.input {
            let bytes = read_inline_or_file(input)?;
            let text = String::from_utf8(bytes).context("--input is not UTF-8")?;
            serde_json::from_str::<Value>(&text).context("--input is not JSON")?;
            target["Input"] = json!(text);
        }
        let mut body = json!({
            "ScheduleExpression": self.expression,
            "FlexibleTimeWindow": { "Mode": "OFF" },
            "Target": target,
            "State": if self.disabled { "DISABLED" } else { "ENABLED" },
            "ActionAfterCompletion": if self.delete_after_completion { "DELETE" } else { "NONE" },
        });
        if let Some(zone) = &self.timezone {
            body["ScheduleExpressionTimezone"] = json!(zone);
        }
        if let Some(description) = &self.description {
            body["Description"] = json!(description);
        }
        Ok(body)
    }
}

pub fn run(client: &Client, args: ScheduleArgs, json_output: bool) -> anyhow::Result<i32> {
    let call = |method: &str, path: &str, body: &[u8]| {
        client
            .call_for("scheduler", method, path, body, &[])
            .map(|(_, _, body)| body)
    };
    match args.command.unwrap_or(ScheduleCommand::Ls) {
        ScheduleCommand::Ls => {
            let mut schedules = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let path = match &token {
                    Some(t) => format!("/schedules?NextToken={}", segment(t)),
                    None => "/schedules".to_string(),
                };
                let page: Value = serde_json::from_slice(&call("GET", &path, b"")?)?;
                schedules.extend(page["Schedules"].as_array().cloned().unwrap_or_default());
                match page["NextToken"].as_str() {
                    Some(next) => token = Some(next.to_string()),
                    None => break,
                }
            }
            if json_output {
                println!("{}", serde_json::to_string_pretty(&schedules)?);
            } else if schedules.is_empty() {
                println!("no schedules");
            } else {
                let text = |v: &Value, key: &str| v[key].as_str().unwrap_or("").to_string();
                for s in &schedules {
                    println!(
                        "{:<32} {:<9} {}",
                        text(s, "Name"),
                        text(s, "State"),
                        text(&s["Target"], "Arn")
                    );
                }
            }
        }
        ScheduleCommand::Get { name } => {
            let body = call("GET", &format!("/schedules/{}", segment(&name)), b"")?;
            let schedule: Value = serde_json::from_slice(&body)?;
            if json_output {
                println!("{}", serde_json::to_string_pretty(&schedule)?);
            } else {
                let text = |v: &Value, key: &str| v[key].as_str().unwrap_or("").to_string();
                println!(
                    "{}: {}",
                    text(&schedule, "Name"),
                    text(&schedule, "ScheduleExpression")
                );
                println!("  state   {}", text(&schedule, "State"));
                println!("  target  {}", text(&schedule["Target"], "Arn"));
                if let Some(input) = schedule["Target"]["Input"].as_str() {
                    println!("  input   {input}");
                }
            }
        }
        ScheduleCommand::Create(settings) => {
            let body = serde_json::to_vec(&settings.body(client.region())?)?;
            let path = format!("/schedules/{}", segment(&settings.name));
            let answer: Value = serde_json::from_slice(&call("POST", &path, &body)?)?;
            done(json_output, &settings.name, "created", &answer);
        }
        ScheduleCommand::Update(settings) => {
            let body = serde_json::to_vec(&settings.body(client.region())?)?;
            let path = format!("/schedules/{}", segment(&settings.name));
            let answer: Value = serde_json::from_slice(&call("PUT", &path, &body)?)?;
            done(json_output, &settings.name, "updated", &answer);
        }
        ScheduleCommand::Rm { name } => {
            call("DELETE", &format!("/schedules/{}", segment(&name)), b"")?;
            done(json_output, &name, "deleted", &json!({}));
        }
    }
    Ok(0)
}

fn done(json_output: bool, name: &str, what: &str, answer: &Value) {
    if json_output {
        println!(
            "{}",
            json!({ "name": name, "done": what, "scheduleArn": answer["ScheduleArn"] })
        );
    } else {
        println!("{name}: {what}");
    }
}
