//! `kiln deploy`: a function from a directory or zip and its flags, created or updated (code
//! and configuration) through the Lambda API, with its URL when one is asked for.

use std::path::PathBuf;

use anyhow::{bail, Context};
use base64::Engine;
use clap::Args;
use serde_json::{json, Value};

use super::client::{segment, ApiFailure, Client};

#[derive(Args, Debug)]
pub struct DeployArgs {
    pub name: String,
    #[arg(long)]
    pub runtime: String,
    /// The handler; not used by a web function (`--web-*`), which may leave it out.
    #[arg(long, required_unless_present_any = ["web_app", "web_start", "web_command"])]
    pub handler: Option<String>,
    /// A directory (zipped for you) or a .zip file.
    #[arg(long)]
    pub code: PathBuf,
    #[arg(long)]
    pub memory: Option<u32>,
    #[arg(long)]
    pub timeout: Option<u32>,
    /// Environment variable, KEY=VALUE; repeat for more.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    #[arg(long)]
    pub description: Option<String>,
    /// `isolated` (default: loopback only) or `host` (the host's network).
    #[arg(long)]
    pub network: Option<String>,
    /// Give the function a URL: `public` (no auth) or `iam` (SigV4 signed).
    #[arg(long)]
    pub url: Option<String>,
    /// When to build the function's snapshot for hot starts: `deploy` (default), `lazy` (after
    /// the first start) or `off`.
    #[arg(long)]
    pub prebake: Option<String>,
    /// Warm-up invocations before the snapshot is taken (default 3; 0 for functions with side
    /// effects).
    #[arg(long)]
    pub warmup: Option<u32>,
    /// The warm-up event: inline JSON, or @file (default `{}`).
    #[arg(long)]
    pub warmup_event: Option<String>,
    /// Instances kept made ahead of demand at least, whatever the function's recent demand
    /// sizes them at (like provisioned concurrency; default 0: by demand alone).
    #[arg(long)]
    pub standbys: Option<u32>,
    /// Each invocation's memory limit: `predicted` (default: what the function's memory model
    /// predicts once it is mature; an invocation killed under it runs again at --memory) or
    /// `booked` (always --memory: for handlers that must not run twice).
    #[arg(long, value_parser = ["predicted", "booked"])]
    pub memory_sizing: Option<String>,
    /// Turn sessions on: where a request's session id comes from, `header:NAME`,
    /// `cookie:NAME`, `query:NAME` or `json:PATH` (e.g. `json:$.user.id`); `off` turns them off.
    #[arg(long, value_name = "SOURCE")]
    pub session_hint: Option<String>,
    /// Where new sessions go: `binpack` (default) or `spread`.
    #[arg(long)]
    pub session_placement: Option<String>,
    /// Sessions one instance holds at most (default 16).
    #[arg(long)]
    pub sessions_per_instance: Option<u32>,
    /// Seconds an unused session lives (default 900); its state goes with it.
    #[arg(long)]
    pub session_ttl: Option<u32>,
    /// The largest value of a session's state, in bytes (default 1 MiB).
    #[arg(long, value_name = "BYTES")]
    pub session_max_value: Option<u32>,
    /// The largest state of one session, keys and values, in bytes (default 8 MiB).
    #[arg(long, value_name = "BYTES")]
    pub session_max_bytes: Option<u32>,
    /// Sync each session write to disk before answering: it then survives a power loss, not
    /// only a crash of kiln.
    #[arg(long)]
    pub session_fsync: bool,
    /// Run an unmodified web app: Python `MODULE:CALLABLE` (WSGI or ASGI), Node `FILE#EXPORT`
    /// (an app or request handler kiln makes listen); `off` makes the function a plain one.
    #[arg(long, value_name = "APP", conflicts_with_all = ["web_start", "web_command"])]
    pub web_app: Option<String>,
    /// Node: the app's entry script, which listens on --web-port itself.
    #[arg(
        long,
        value_name = "SCRIPT",
        requires = "web_port",
        conflicts_with = "web_command"
    )]
    pub web_start: Option<String>,
    /// `provided`: the command that starts the app's server, listening on --web-port.
    #[arg(long, value_name = "CMD", requires = "web_port")]
    pub web_command: Option<String>,
    /// The port the app listens on in the sandbox (with --web-start or --web-command).
    #[arg(long, value_name = "PORT")]
    pub web_port: Option<u32>,
    /// BREAKOUT's trace-compiled fast path for a Node function: `auto` traces it, compiles the
    /// trace and serves traced paths without an instance; `off` turns it off.
    #[arg(long, value_name = "MODE", value_parser = ["auto", "off"])]
    pub breakout: Option<String>,
    /// With --breakout auto: requests traced before the trace is compiled (100).
    #[arg(long, value_name = "N", requires = "breakout")]
    pub trace_requests: Option<u32>,
    /// A layer version's ARN, extracted to /opt; repeat for more (in order, later ones over
    /// earlier ones). A redeploy without --layer keeps the function's layers.
    #[arg(long = "layer", value_name = "ARN")]
    pub layers: Vec<String>,
}

pub(super) fn deploy(client: &Client, args: DeployArgs, json_output: bool) -> anyhow::Result<i32> {
    let zip = if args.code.is_dir() {
        crate::zip_util::zip_dir(&args.code)
            .with_context(|| format!("cannot zip {}", args.code.display()))?
    } else {
        std::fs::read(&args.code).with_context(|| format!("cannot read {}", args.code.display()))?
    };
    let mut env = serde_json::Map::new();
    for pair in &args.env {
        let (k, v) = pair
            .split_once('=')
            .with_context(|| format!("--env {pair}: expected KEY=VALUE"))?;
        env.insert(k.to_string(), Value::String(v.to_string()));
    }
    let zip_b64 = base64::engine::general_purpose::STANDARD.encode(&zip);
    let mut config = json!({
        "Runtime": args.runtime,
        "Environment": { "Variables": env },
    });
    if let Some(handler) = &args.handler {
        config["Handler"] = handler.clone().into();
    }
    match (&args.web_app, &args.web_start, &args.web_command) {
        (Some(off), None, None) if off == "off" => config["KilnWeb"] = Value::Null,
        (None, None, None) if args.web_port.is_some() => {
            bail!("--web-port goes with --web-start or --web-command")
        }
        (None, None, None) => {}
        (app, start, command) => {
            let mut web = json!({});
            for (field, value) in [("App", app), ("Start", start), ("Command", command)] {
                if let Some(value) = value {
                    web[field] = value.clone().into();
                }
            }
            if let Some(port) = args.web_port {
                web["Port"] = port.into();
            }
            config["KilnWeb"] = web;
            if args.handler.is_none() {
                config["Handler"] = crate::function::web::UNUSED_HANDLER.into();
            }
        }
    }
    match args.breakout.as_deref() {
        Some("off") => config["KilnBreakout"] = Value::Null,
        Some(mode) => {
            let mut breakout = json!({ "Mode": mode });
            if let Some(n) = args.trace_requests {
                breakout["TraceRequests"] = n.into();
            }
            config["KilnBreakout"] = breakout;
        }
        None => {}
    }
    if !args.layers.is_empty() {
        config["Layers"] = args.layers.clone().into();
    }
    if let Some(m) = args.memory {
        config["MemorySize"] = m.into();
    }
    if let Some(t) = args.timeout {
        config["Timeout"] = t.into();
    }
    if let Some(d) = &args.description {
        config["Description"] = d.clone().into();
    }
    if let Some(n) = &args.network {
        if n != "isolated" && n != "host" {
            bail!("--network must be `isolated` or `host`");
        }
        config["KilnNetwork"] = n.clone().into();
    }
    if args.prebake.is_some()
        || args.warmup.is_some()
        || args.warmup_event.is_some()
        || args.standbys.is_some()
    {
        let mut prebake = json!({});
        if let Some(mode) = &args.prebake {
            if !["deploy", "lazy", "off"].contains(&mode.as_str()) {
                bail!("--prebake must be `deploy`, `lazy` or `off`");
            }
            prebake["Mode"] = mode.clone().into();
        }
        if let Some(n) = args.warmup {
            prebake["WarmupInvocations"] = n.into();
        }
        if let Some(n) = args.standbys {
            prebake["Standbys"] = n.into();
        }
        if let Some(event) = &args.warmup_event {
            let text = read_inline_or_file(event)?;
            let event: Value =
                serde_json::from_slice(&text).context("--warmup-event must be a JSON document")?;
            prebake["WarmupEvent"] = event;
        }
        config["KilnPrebake"] = prebake;
    }
    if let Some(sizing) = &args.memory_sizing {
        config["KilnMemorySizing"] = sizing.clone().into();
    }
    match args.session_hint.as_deref() {
        Some("off") => config["KilnSessions"] = Value::Null,
        Some(hint) => {
            let mut sessions = json!({ "Hint": hint });
            if let Some(p) = &args.session_placement {
                sessions["Placement"] = p.clone().into();
            }
            if let Some(n) = args.sessions_per_instance {
                sessions["MaxSessionsPerInstance"] = n.into();
            }
            if let Some(t) = args.session_ttl {
                sessions["IdleTtlSeconds"] = t.into();
            }
            if let Some(n) = args.session_max_value {
                sessions["MaxValueBytes"] = n.into();
            }
            if let Some(n) = args.session_max_bytes {
                sessions["MaxSessionBytes"] = n.into();
            }
            if args.session_fsync {
                sessions["Fsync"] = true.into();
            }
            config["KilnSessions"] = sessions;
        }
        None if args.session_placement.is_some()
            || args.sessions_per_instance.is_some()
            || args.session_ttl.is_some()
            || args.session_max_value.is_some()
            || args.session_max_bytes.is_some()
            || args.session_fsync =>
        {
            bail!("--session-placement, --sessions-per-instance, --session-ttl, --session-max-value, --session-max-bytes and --session-fsync need --session-hint")
        }
        None => {}
    }
    let url_auth = match args.url.as_deref() {
        None => None,
        Some("public") => Some("NONE"),
        Some("iam") => Some("AWS_IAM"),
        Some(other) => bail!("--url must be `public` or `iam`, not `{other}`"),
    };
    let name = &args.name;
    let configuration = format!("/2015-03-31/functions/{}/configuration", segment(name));
    let exists = match client.call("GET", &configuration, b"", &[]) {
        Ok(_) => true,
        Err(e)
            if e.downcast_ref::<ApiFailure>()
                .is_some_and(|f| f.status == 404) =>
        {
            false
        }
        Err(e) => return Err(e),
    };
    let result: Value = if exists {
        // Configuration first: it is what a redeploy most often gets wrong, and a refused
        // configuration then leaves the function's code untouched too. Each change waits for
        // the one before it, as Lambda asks.
        wait_settled(client, &configuration)?;
        client.call("PUT", &configuration, config.to_string().as_bytes(), &[])?;
        wait_settled(client, &configuration)?;
        let (_, _, body) = client.call(
            "PUT",
            &format!("/2015-03-31/functions/{}/code", segment(name)),
            json!({ "ZipFile": zip_b64 }).to_string().as_bytes(),
            &[],
        )?;
        serde_json::from_slice(&body)?
    } else {
        config["FunctionName"] = name.clone().into();
        config["Code"] = json!({ "ZipFile": zip_b64 });
        let (_, _, body) = client.call(
            "POST",
            "/2015-03-31/functions",
            config.to_string().as_bytes(),
            &[],
        )?;
        serde_json::from_slice(&body)?
    };
    let mut url = None;
    if let Some(auth) = url_auth {
        let path = format!("/2021-10-31/functions/{}/url", segment(name));
        let body = json!({ "AuthType": auth }).to_string();
        let response = match client.call("POST", &path, body.as_bytes(), &[]) {
            Ok(r) => r,
            Err(e)
                if e.downcast_ref::<ApiFailure>()
                    .is_some_and(|f| f.status == 409) =>
            {
                client.call("PUT", &path, body.as_bytes(), &[])?
            }
            Err(e) => return Err(e),
        };
        let value: Value = serde_json::from_slice(&response.2)?;
        url = value["FunctionUrl"].as_str().map(str::to_string);
    }
    if json_output {
        let mut out = result.clone();
        if let Some(u) = &url {
            out["FunctionUrl"] = u.clone().into();
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let web = &result["KilnWeb"];
        let entry = match ["App", "Start", "Command"]
            .iter()
            .find_map(|field| web[field].as_str())
        {
            Some(app) => format!("web app {app}"),
            None => format!("handler {}", result["Handler"].as_str().unwrap_or("")),
        };
        println!(
            "{} {name} ({}, {entry}, {} MB, {} s timeout, code {})",
            if exists { "updated" } else { "deployed" },
            result["Runtime"].as_str().unwrap_or(""),
            result["MemorySize"],
            result["Timeout"],
            result["CodeSha256"].as_str().unwrap_or(""),
        );
        if let Some(u) = url {
            println!("url: {u}");
        }
    }
    Ok(0)
}

/// An argument given inline, or as `@path` to a file holding it.
pub(super) fn read_inline_or_file(arg: &str) -> anyhow::Result<Vec<u8>> {
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read(path).with_context(|| format!("cannot read {path}")),
        None => Ok(arg.as_bytes().to_vec()),
    }
}

/// Waits until the function at `configuration` is neither being created nor updated (Lambda
/// refuses a change meanwhile with 409), as `aws lambda wait function-updated-v2` does.
fn wait_settled(client: &Client, configuration: &str) -> anyhow::Result<()> {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
    let begin = std::time::Instant::now();
    loop {
        let (_, _, body) = client.call("GET", configuration, b"", &[])?;
        let config: Value = serde_json::from_slice(&body)?;
        if config["State"] != "Pending" && config["LastUpdateStatus"] != "InProgress" {
            return Ok(());
        }
        if begin.elapsed() > LIMIT {
            bail!(
                "the function's last change is still in progress after {} s",
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
