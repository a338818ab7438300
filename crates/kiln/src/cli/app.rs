//! `kiln app`: burst offloading's apps (a monolith behind kiln's gateway, and its function).

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::segment;
use super::client::Client;

#[derive(Args, Debug)]
pub struct AppArgs {
    #[command(subcommand)]
    pub command: AppCommand,
}

#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Create an app: a gateway on --listen in front of the monolith at --upstream, offloading
    /// to --function during bursts.
    Create {
        name: String,
        #[command(flatten)]
        settings: AppSettings,
    },
    /// Change an app's settings; what is not named is kept.
    Set {
        name: String,
        #[command(flatten)]
        settings: AppSettings,
        /// Add a monolith server (e.g. a replica that has booted).
        #[arg(long = "add-upstream", value_name = "URL")]
        add_upstream: Vec<String>,
        /// Remove a monolith server.
        #[arg(long = "remove-upstream", value_name = "URL")]
        remove_upstream: Vec<String>,
    },
    /// Show an app's configuration (no name: list the apps).
    Get { name: Option<String> },
    /// The routes' profile: requests, server time, and whether each may be offloaded.
    Routes { name: String },
    /// The gateway's state: burst, limit, upstreams, who served what.
    Status { name: String },
    /// Delete an app (its function stays).
    Rm { name: String },
}

#[derive(Args, Debug, Default)]
pub struct AppSettings {
    /// The gateway's address, HOST:PORT.
    #[arg(long)]
    listen: Option<String>,
    /// The monolith's server, http://HOST:PORT; repeat for several.
    #[arg(long = "upstream", value_name = "URL")]
    upstreams: Vec<String>,
    /// The web function serving offloaded requests.
    #[arg(long)]
    function: Option<String>,
    /// postgresql://USER@HOST:PORT/DB (the password is read from $PGPASSWORD).
    #[arg(long)]
    database: Option<String>,
    /// spill (default), ratio or slo.
    #[arg(long)]
    policy: Option<String>,
    /// spill: the limit of requests in flight per upstream (default: learned).
    #[arg(long)]
    max_inflight: Option<u32>,
    /// ratio: the share of offloadable requests functions serve during a burst.
    #[arg(long)]
    ratio: Option<f64>,
    /// slo: the monolith's p99 target, in ms.
    #[arg(long = "p99")]
    p99_ms: Option<f64>,
    /// The share of the monolith's server time the offloaded routes make up (default 0.8).
    #[arg(long)]
    cover: Option<f64>,
    /// Seconds without a trigger before a burst ends (default 30).
    #[arg(long)]
    cooldown: Option<f64>,
    /// A route to offload, e.g. 'POST /comment/'; repeat for more.
    #[arg(long = "offload", value_name = "PATTERN")]
    offload: Vec<String>,
    /// A route kept on the monolith; repeat for more.
    #[arg(long = "pin", value_name = "PATTERN")]
    pin: Vec<String>,
    /// Seconds the monolith may take before the gateway answers 504 (default 60).
    #[arg(long)]
    upstream_timeout: Option<f64>,
    /// Instances of the function kept ready at all times (0 to 64).
    #[arg(long)]
    min_warm: Option<u32>,
}

impl AppSettings {
    fn body(&self) -> Map<String, Value> {
        let mut body = Map::new();
        let mut put = |k: &str, v: Value| {
            body.insert(k.to_string(), v);
        };
        if let Some(v) = &self.listen {
            put("Listen", json!(v));
        }
        if !self.upstreams.is_empty() {
            put("Upstreams", json!(self.upstreams));
        }
        if let Some(v) = &self.function {
            put("Function", json!(v));
        }
        if let Some(v) = &self.database {
            put("Database", json!(v));
            if let Ok(password) = std::env::var("PGPASSWORD") {
                put("DatabasePassword", json!(password));
            }
        }
        if let Some(v) = &self.policy {
            put("Policy", json!(v));
        }
        if let Some(v) = self.max_inflight {
            put("MaxInflight", json!(v));
        }
        if let Some(v) = self.ratio {
            put("Ratio", json!(v));
        }
        if let Some(v) = self.p99_ms {
            put("P99Ms", json!(v));
        }
        if let Some(v) = self.cover {
            put("Cover", json!(v));
        }
        if let Some(v) = self.cooldown {
            put("CooldownSeconds", json!(v));
        }
        if !self.offload.is_empty() {
            put("Offload", json!(self.offload));
        }
        if !self.pin.is_empty() {
            put("Pin", json!(self.pin));
        }
        if let Some(v) = self.upstream_timeout {
            put("UpstreamTimeoutSeconds", json!(v));
        }
        if let Some(v) = self.min_warm {
            put("MinWarm", json!(v));
        }
        body
    }
}

pub fn run(client: &Client, args: AppArgs, json_output: bool) -> anyhow::Result<i32> {
    let path = |name: &str| format!("/kiln/v1/apps/{}", segment(name));
    let get = |p: &str| -> anyhow::Result<Value> {
        let (_, _, body) = client.call("GET", p, b"", &[])?;
        serde_json::from_slice(&body).context("kiln's answer is not JSON")
    };
    let put = |name: &str, body: Map<String, Value>| -> anyhow::Result<Value> {
        let bytes = serde_json::to_vec(&Value::Object(body))?;
        let (_, _, out) = client.call(
            "PUT",
            &path(name),
            &bytes,
            &[("content-type", "application/json")],
        )?;
        serde_json::from_slice(&out).context("kiln's answer is not JSON")
    };
    let value = match args.command {
        AppCommand::Create { name, settings } => put(&name, settings.body())?,
        AppCommand::Set {
            name,
            settings,
            add_upstream,
            remove_upstream,
        } => {
            let mut body = settings.body();
            if !add_upstream.is_empty() || !remove_upstream.is_empty() {
                let current = get(&path(&name))?;
                let mut upstreams: Vec<String> = current["Upstreams"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                upstreams.retain(|u| !remove_upstream.contains(u));
                for u in add_upstream {
                    if !upstreams.contains(&u) {
                        upstreams.push(u);
                    }
                }
                body.insert("Upstreams".into(), json!(upstreams));
            }
            put(&name, body)?
        }
        AppCommand::Get { name: Some(name) } => get(&path(&name))?,
        AppCommand::Get { name: None } => get("/kiln/v1/apps")?,
        AppCommand::Routes { name } => {
            let routes = get(&format!("{}/routes", path(&name)))?;
            if !json_output {
                print_routes(&routes);
                return Ok(0);
            }
            routes
        }
        AppCommand::Status { name } => get(&format!("{}/status", path(&name)))?,
        AppCommand::Rm { name } => {
            client.call("DELETE", &path(&name), b"", &[])?;
            if json_output {
                println!("{}", json!({ "deleted": name }));
            } else {
                println!("deleted app {name}");
            }
            return Ok(0);
        }
    };
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(0)
}

fn print_routes(routes: &Value) {
    println!(
        "{:<40} {:>8} {:>9} {:>9} {:>9}  OFFLOAD",
        "ROUTE", "REQUESTS", "MEAN ms", "P99 ms", "TOTAL s"
    );
    for r in routes["Routes"].as_array().cloned().unwrap_or_default() {
        let offload = if r["Eligible"].as_bool() == Some(true) {
            format!("yes ({} offloaded)", r["Offloaded"])
        } else {
            format!("no: {}", r["Reason"].as_str().unwrap_or(""))
        };
        println!(
            "{:<40} {:>8} {:>9.2} {:>9.2} {:>9.2}  {offload}",
            r["Route"].as_str().unwrap_or(""),
            r["Requests"],
            r["MeanMs"].as_f64().unwrap_or(0.0),
            r["P99Ms"].as_f64().unwrap_or(0.0),
            r["TotalMs"].as_f64().unwrap_or(0.0) / 1e3,
        );
    }
}
