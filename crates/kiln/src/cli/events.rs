//! `kiln async [ls] | retry ID | rm ID`: the async queue's queued events and kept failures.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::segment;
use super::client::Client;

#[derive(Args, Debug)]
pub struct AsyncArgs {
    #[command(subcommand)]
    command: Option<AsyncCommand>,
}

#[derive(Subcommand, Debug)]
enum AsyncCommand {
    /// Queued events and the events that failed every attempt (the default).
    Ls,
    /// Queue a failed event again, its attempts reset.
    Retry { request_id: String },
    /// Forget a failed event.
    Rm { request_id: String },
}

pub fn run(client: &Client, args: AsyncArgs, json_output: bool) -> anyhow::Result<i32> {
    let (request_id, retry) = match args.command.unwrap_or(AsyncCommand::Ls) {
        AsyncCommand::Ls => return list(client, json_output),
        AsyncCommand::Retry { request_id } => (request_id, true),
        AsyncCommand::Rm { request_id } => (request_id, false),
    };
    let path = format!("/kiln/v1/async/failures/{}", segment(&request_id));
    if retry {
        client.call("POST", &format!("{path}/retry"), b"", &[])?;
    } else {
        client.call("DELETE", &path, b"", &[])?;
    }
    let done = if retry { "queued again" } else { "deleted" };
    if json_output {
        println!("{}", json!({ "requestId": request_id, "done": done }));
    } else {
        println!("{request_id}: {done}");
    }
    Ok(0)
}

fn list(client: &Client, json_output: bool) -> anyhow::Result<i32> {
    let (_, _, body) = client.call("GET", "/kiln/v1/async", b"", &[])?;
    let events: Value = serde_json::from_slice(&body)?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&events)?);
        return Ok(0);
    }
    let rows = |key: &str| events[key].as_array().cloned().unwrap_or_default();
    let text = |v: &Value, key: &str| v[key].as_str().unwrap_or("").to_string();
    println!("queued: {}", events["Depth"]);
    for e in rows("Pending") {
        println!(
            "  {:<36}  {:<24} attempts {}  next {}",
            text(&e, "RequestId"),
            text(&e, "Function"),
            e["Attempts"],
            text(&e, "NotBefore")
        );
    }
    let failures = rows("Failures");
    println!("failed every attempt: {}", failures.len());
    for f in failures {
        // The error is the function's JSON; its first line says enough here.
        let error = text(&f, "Error");
        println!(
            "  {:<36}  {:<24} {}  {}",
            text(&f, "RequestId"),
            text(&f, "Function"),
            text(&f, "FailedAt"),
            error.lines().next().unwrap_or("")
        );
    }
    Ok(0)
}
