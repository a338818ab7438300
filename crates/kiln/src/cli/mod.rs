//! The `kiln` command line: talks to a running kiln over its signed HTTP API.

mod app;
pub mod breakout;
mod client;
mod cluster;
mod deploy;
mod events;
mod layers;
pub mod s3;
mod schedules;
mod table;

use std::io::Read;
use std::path::PathBuf;

use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use client::{segment, Client};
pub use deploy::DeployArgs;
use deploy::{deploy, read_inline_or_file};

/// Where the CLI finds kiln and its credentials.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// kiln's API endpoint.
    #[arg(
        long,
        global = true,
        env = "KILN_ENDPOINT",
        default_value = "http://127.0.0.1:9000"
    )]
    pub endpoint: String,
    /// The data dir of the kiln server, where its credentials are (unless AWS_ACCESS_KEY_ID is set).
    #[arg(long, global = true, env = "KILN_DATA_DIR", default_value = ".kiln")]
    pub data_dir: PathBuf,
    /// Print machine-readable JSON instead of human output.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a function, or update its code and configuration.
    Deploy(Box<DeployArgs>),
    /// Invoke a function.
    Invoke(InvokeArgs),
    /// List functions; with --search, --sort or --limit kiln searches and sorts them, and
    /// each comes with its last hour (invocations, error rate, last invocation).
    Ls(table::TableArgs),
    /// Show a function's configuration.
    Get { name: String },
    /// Delete a function.
    Rm { name: String },
    /// Show a function's logs.
    Logs {
        name: String,
        /// Keep streaming new log lines.
        #[arg(short, long)]
        follow: bool,
    },
    /// Show every instance with its state, age and memory.
    Status,
    /// List a function's sessions, or end one (`--end ID`).
    Sessions {
        name: String,
        /// End this session.
        #[arg(long, value_name = "ID")]
        end: Option<String>,
    },
    /// Sequences: `kiln sequence NAME F1 F2 …` creates or replaces one (each function's
    /// answer is the next one's event), `--rm` deletes it, no functions shows it (no name:
    /// lists them). Invoke it like a function.
    Sequence {
        name: Option<String>,
        functions: Vec<String>,
        /// Delete the sequence (its functions stay).
        #[arg(long)]
        rm: bool,
    },
    /// Use the object store: ls, cp, mb, rb, rm, presign, credentials.
    S3(s3::S3Args),
    /// The BREAKOUT fast path: `check DIR` lists a package's unsupported constructs.
    Breakout(breakout::BreakoutArgs),
    /// Burst offloading: a web app's gateway, which serves part of its heavy routes from a
    /// function during bursts (create, set, get, routes, status, rm).
    App(Box<app::AppArgs>),
    /// Cluster mode: `status` lists the nodes, `drain NODE` / `undrain NODE` stop and restart
    /// new placements on a node (`--self` instead of NODE: the node at --endpoint).
    Cluster(cluster::ClusterArgs),
    /// The async queue: `ls` (default) lists queued events and the events that failed every
    /// attempt, `retry ID` queues a failed one again, `rm ID` forgets it.
    Async(events::AsyncArgs),
    /// Lambda layers: `publish NAME --zip FILE`, `ls [NAME]`, `rm NAME VERSION`.
    Layer(layers::LayerArgs),
    /// Schedules that invoke a function (EventBridge Scheduler's API): `create NAME
    /// --expression EXPR --function FN`, `update NAME …`, `ls`, `get NAME`, `rm NAME`.
    Schedule(schedules::ScheduleArgs),
}

#[derive(Args, Debug)]
pub struct InvokeArgs {
    pub name: String,
    /// The event: inline JSON, or @file.
    #[arg(long)]
    pub payload: Option<String>,
    /// Queue the invocation (InvocationType Event) and return at once.
    #[arg(long = "async")]
    pub is_async: bool,
    /// Print the invocation's log (the last 4 KB).
    #[arg(long)]
    pub tail: bool,
}

pub fn run(connection: Connection, command: Command) -> anyhow::Result<i32> {
    let command = match command {
        Command::S3(args) => return s3::run(connection, args),
        // Local: no server, no credentials.
        Command::Breakout(args) => return breakout::run(args, connection.json),
        other => other,
    };
    let client = Client::connect(&connection)?;
    let json_output = connection.json;
    match command {
        Command::Deploy(args) => deploy(&client, *args, json_output),
        Command::Invoke(args) => invoke(&client, args, json_output),
        Command::Ls(args) if args.is_plain() => ls(&client, json_output),
        Command::Ls(args) => table::run(&client, &args, json_output),
        Command::Get { name } => {
            let (_, _, body) = client.call(
                "GET",
                &format!("/2015-03-31/functions/{}", segment(&name)),
                b"",
                &[],
            )?;
            let value: Value = serde_json::from_slice(&body)?;
            if json_output {
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print_config(&value["Configuration"]);
            }
            Ok(0)
        }
        Command::Rm { name } => {
            client.call(
                "DELETE",
                &format!("/2015-03-31/functions/{}", segment(&name)),
                b"",
                &[],
            )?;
            if json_output {
                println!("{}", json!({ "deleted": name }));
            } else {
                println!("deleted {name}");
            }
            Ok(0)
        }
        Command::Logs { name, follow } => logs(&client, &name, follow, json_output),
        Command::Status => status(&client, json_output),
        Command::Sessions { name, end } => sessions(&client, &name, end.as_deref(), json_output),
        Command::Sequence {
            name,
            functions,
            rm,
        } => sequence(&client, name.as_deref(), functions, rm, json_output),
        Command::App(args) => app::run(&client, *args, json_output),
        Command::Cluster(args) => cluster::run(&client, args, json_output),
        Command::Async(args) => events::run(&client, args, json_output),
        Command::Schedule(args) => schedules::run(&client, args, json_output),
        Command::Layer(args) => layers::run(&client, args, json_output),
        Command::S3(_) | Command::Breakout(_) => unreachable!("handled above"),
    }
}

/// Prints a function's log; with `--json`, one JSON object (or, following, one per line).
fn logs(client: &Client, name: &str, follow: bool, json_output: bool) -> anyhow::Result<i32> {
    use std::io::{BufRead, Write};
    let path = format!(
        "/kiln/v1/functions/{}/logs{}",
        segment(name),
        if follow { "?follow=true" } else { "" }
    );
    let reader = client.stream("GET", &path)?;
    let mut stdout = std::io::stdout();
    if !json_output {
        let mut reader = reader;
        let mut buf = [0u8; 8192];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            stdout.write_all(&buf[..n])?;
            stdout.flush()?;
        }
        return Ok(0);
    }
    let mut lines = Vec::new();
    let mut reader = std::io::BufReader::new(reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']).to_string();
        if follow {
            writeln!(stdout, "{}", json!({ "function": name, "line": text }))?;
            stdout.flush()?;
        } else {
            lines.push(text);
        }
    }
    if !follow {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "function": name, "lines": lines }))?
        );
    }
    Ok(0)
}

fn invoke(client: &Client, args: InvokeArgs, json_output: bool) -> anyhow::Result<i32> {
    let payload = match args.payload.as_deref() {
        None => b"{}".to_vec(),
        Some(p) => read_inline_or_file(p)?,
    };
    let kind = if args.is_async {
        "Event"
    } else {
        "RequestResponse"
    };
    let log_type = if args.tail { "Tail" } else { "None" };
    let headers = [
        ("x-amz-invocation-type", kind),
        ("x-amz-log-type", log_type),
    ];
    let (status, response_headers, body) = client.call(
        "POST",
        &format!("/2015-03-31/functions/{}/invocations", segment(&args.name)),
        &payload,
        &headers,
    )?;
    let function_error = response_headers
        .iter()
        .find(|(k, _)| k == "x-amz-function-error")
        .map(|(_, v)| v.clone());
    let log = response_headers
        .iter()
        .find(|(k, _)| k == "x-amz-log-result")
        .and_then(|(_, v)| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let request_id = response_headers
        .iter()
        .find(|(k, _)| k == "x-amzn-requestid")
        .map(|(_, v)| v.clone());
    if json_output {
        let payload: Value =
            serde_json::from_slice(&body).unwrap_or_else(|_| String::from_utf8_lossy(&body).into());
        println!(
            "{}",
            json!({ "StatusCode": status, "FunctionError": function_error, "Payload": payload, "LogResult": log, "RequestId": request_id })
        );
    } else if args.is_async {
        println!("queued (request id {})", request_id.unwrap_or_default());
    } else {
        if let Some(log) = &log {
            eprint!("{log}");
        }
        println!("{}", String::from_utf8_lossy(&body));
    }
    Ok(if function_error.is_some() { 1 } else { 0 })
}

fn ls(client: &Client, json_output: bool) -> anyhow::Result<i32> {
    let mut functions = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let path = match &marker {
            Some(m) => format!("/2015-03-31/functions/?Marker={}", segment(m)),
            None => "/2015-03-31/functions/".to_string(),
        };
        let (_, _, body) = client.call("GET", &path, b"", &[])?;
        let page: Value = serde_json::from_slice(&body)?;
        functions.extend(page["Functions"].as_array().cloned().unwrap_or_default());
        match page["NextMarker"].as_str() {
            Some(m) => marker = Some(m.to_string()),
            None => break,
        }
    }
    if json_output {
        println!("{}", serde_json::to_string_pretty(&functions)?);
        return Ok(0);
    }
    println!(
        "{:<32} {:<14} {:>7} {:>8}  LAST MODIFIED",
        "NAME", "RUNTIME", "MEMORY", "TIMEOUT"
    );
    for f in functions {
        println!(
            "{:<32} {:<14} {:>4} MB {:>6} s  {}",
            f["FunctionName"].as_str().unwrap_or(""),
            f["Runtime"].as_str().unwrap_or(""),
            f["MemorySize"],
            f["Timeout"],
            f["LastModified"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

fn print_config(c: &Value) {
    for key in [
        "FunctionName",
        "FunctionArn",
        "Runtime",
        "Handler",
        "MemorySize",
        "Timeout",
        "CodeSize",
        "CodeSha256",
        "LastModified",
        "State",
    ] {
        println!(
            "{key:<14} {}",
            match &c[key] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            }
        );
    }
    if let Some(vars) = c["Environment"]["Variables"].as_object() {
        for (k, v) in vars {
            println!("{:<14} {k}={}", "Environment", v.as_str().unwrap_or(""));
        }
    }
    for layer in c["Layers"].as_array().into_iter().flatten() {
        println!("{:<14} {}", "Layer", layer["Arn"].as_str().unwrap_or(""));
    }
    if let Some(web) = c["KilnWeb"].as_object() {
        // The Handler printed above is not used: the app is.
        for (field, value) in web {
            println!("{:<14} {field}={value}", "Web");
        }
    }
    if let Some(status) = c["KilnBreakoutStatus"].as_object() {
        let mode = status.get("Mode").and_then(Value::as_str).unwrap_or("");
        match status.get("Reason").and_then(Value::as_str) {
            Some(reason) => println!("{:<14} {mode} ({reason})", "Breakout"),
            None => println!("{:<14} {mode}", "Breakout"),
        }
    }
}

fn sessions(
    client: &Client,
    name: &str,
    end: Option<&str>,
    json_output: bool,
) -> anyhow::Result<i32> {
    let path = format!("/kiln/v1/functions/{}/sessions", segment(name));
    if let Some(session) = end {
        client.call("DELETE", &format!("{path}/{}", segment(session)), b"", &[])?;
        if json_output {
            println!("{}", json!({ "ended": session }));
        } else {
            println!("ended session {session} of {name}");
        }
        return Ok(0);
    }
    let (_, _, body) = client.call("GET", &path, b"", &[])?;
    let listing: Value = serde_json::from_slice(&body)?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&listing)?);
        return Ok(0);
    }
    println!(
        "{:<40} {:>8} {:>9} {:>9} {:>9}",
        "SESSION", "INSTANCE", "REQUESTS", "AGE", "IDLE"
    );
    for s in listing["Sessions"].as_array().cloned().unwrap_or_default() {
        println!(
            "{:<40} {:>8} {:>9} {:>8.1}s {:>8.1}s",
            s["session"].as_str().unwrap_or(""),
            s["instance"].as_u64().map_or("-".into(), |i| i.to_string()),
            s["requests"],
            s["age_s"].as_f64().unwrap_or(0.0),
            s["idle_s"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(0)
}

fn sequence(
    client: &Client,
    name: Option<&str>,
    functions: Vec<String>,
    rm: bool,
    json_output: bool,
) -> anyhow::Result<i32> {
    let Some(name) = name else {
        let (_, _, body) = client.call("GET", "/kiln/v1/sequences", b"", &[])?;
        let listing: Value = serde_json::from_slice(&body)?;
        if json_output {
            println!("{}", serde_json::to_string_pretty(&listing)?);
        } else {
            for s in listing["Sequences"].as_array().cloned().unwrap_or_default() {
                print_sequence(&s);
            }
        }
        return Ok(0);
    };
    let path = format!("/kiln/v1/sequences/{}", segment(name));
    let body = if rm {
        client.call("DELETE", &path, b"", &[])?;
        if !json_output {
            println!("deleted sequence {name}");
        }
        return Ok(0);
    } else if functions.is_empty() {
        client.call("GET", &path, b"", &[])?.2
    } else {
        let body = serde_json::to_vec(&json!({ "Functions": functions }))?;
        client
            .call("PUT", &path, &body, &[("content-type", "application/json")])?
            .2
    };
    let sequence: Value = serde_json::from_slice(&body)?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&sequence)?);
    } else {
        print_sequence(&sequence);
    }
    Ok(0)
}

fn print_sequence(s: &Value) {
    let functions: Vec<&str> = s["Functions"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    println!(
        "{}: {}",
        s["Name"].as_str().unwrap_or(""),
        functions.join(" → ")
    );
}

fn status(client: &Client, json_output: bool) -> anyhow::Result<i32> {
    let (_, _, body) = client.call("GET", "/kiln/v1/status", b"", &[])?;
    let status: Value = serde_json::from_slice(&body)?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(0);
    }
    let node = &status["node"];
    println!(
        "memory booked {} of {} MB, cgroups {}, /tmp {}, async queue {}",
        node["memory_reserved_mb"],
        node["memory_budget_mb"],
        node["cgroup_version"].as_str().unwrap_or(""),
        node["tmp"].as_str().unwrap_or(""),
        status["asyncQueueDepth"]
    );
    println!(
        "{:<24} {:>6} {:<9} {:<8} {:>9} {:>12} {:>8}",
        "FUNCTION", "ID", "STATE", "PATH", "AGE", "MEMORY", "SESSIONS"
    );
    for i in node["instances"].as_array().cloned().unwrap_or_default() {
        println!(
            "{:<24} {:>6} {:<9} {:<8} {:>8.1}s {:>6.1}/{} MB {:>8}",
            i["function"].as_str().unwrap_or(""),
            i["id"],
            i["state"].as_str().unwrap_or(""),
            i["start_path"].as_str().unwrap_or(""),
            i["age_s"].as_f64().unwrap_or(0.0),
            i["memory_used_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            i["memory_limit_mb"],
            i["sessions"].as_u64().unwrap_or(0)
        );
    }
    let snapshots = node["snapshots"].as_array().cloned().unwrap_or_default();
    if !snapshots.is_empty() {
        println!(
            "\n{:<24} {:>8} {:<12} {:<9} {:>6} {:>10} {:>10}",
            "SNAPSHOT", "REVISION", "KIND", "STATE", "FORKS", "BUILD", "MEMORY"
        );
    }
    let disk = node["snapshot_disk_bytes"].as_f64().unwrap_or(0.0);
    for s in snapshots {
        println!(
            "{:<24} {:>8} {:<12} {:<9} {:>6} {:>8.1}ms {:>7.1} MB{}",
            s["function"].as_str().unwrap_or(""),
            s["revision"],
            s["kind"].as_str().unwrap_or(""),
            s["state"].as_str().unwrap_or(""),
            s["forks"],
            s["build_ms"].as_f64().unwrap_or(0.0),
            s["memory_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            s["error"]
                .as_str()
                .map(|e| format!("  ({e})"))
                .unwrap_or_default()
        );
    }
    if disk > 0.0 {
        println!("\nsnapshots on disk: {:.1} MB", disk / 1048576.0);
    }
    let cache = &status["objectCache"];
    if cache.is_object() {
        let failing = cache["failing"].as_array().cloned().unwrap_or_default();
        println!(
            "\nobject cache: {:.1} MB to write back, {} write-backs failing",
            cache["dirty_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            failing.len()
        );
        let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
        for f in failing {
            let since = f["since_ms"].as_u64().unwrap_or(now_ms);
            println!(
                "  {}/{:?}: failing for {:.0}s, {} attempts: {}",
                f["bucket"].as_str().unwrap_or(""),
                f["key"].as_str().unwrap_or(""),
                now_ms.saturating_sub(since) as f64 / 1000.0,
                f["attempts"],
                f["error"].as_str().unwrap_or("")
            );
        }
    }
    Ok(0)
}
