//! `loadgen`: the benchmark client of `bench/run.sh`.
//!
//! One keep-alive HTTP/1.1 connection per client (hyper 1's connection-level client, no pool in
//! between), `TCP_NODELAY`, and, for kiln, a SigV4 signature computed per request with
//! `kiln::auth::sigv4::sign` *inside* the timed region: signing is part of what a client pays.
//! The signing time is also recorded on its own so it can be reported separately.
//!
//! Its modes, each printing one JSON document on stdout:
//! - `latency`: sequential requests on one connection; every latency (ns) is printed, and the
//!   server's CPU time (`/proc/PID/stat` utime+stime, and the sum of its threads' schedstat) is
//!   read right before the first and right after the last measured request.
//! - `throughput`: a closed loop of C connections for a fixed time after a warm-up; prints
//!   completions, latency percentiles under load and CPU deltas over the measured window.
//! - `cold`: UpdateFunctionConfiguration with a new environment value (new revision, old
//!   instances retired), then one timed Invoke with `X-Amz-Log-Type: Tail`, N times. With
//!   `--no-update` the invokes alone (e.g. the first request of N new sessions: `{i}` in the
//!   body is the request's number). Each sample has the REPORT's Init Duration, Start Path
//!   and Session Start.
//! - `schedule`: a closed loop against a plain HTTP server (no signing) whose number of clients
//!   follows a schedule (`--clients 8 --double-at 60 --duration 180`, or `--step T:C`), with a
//!   request mix; every request is recorded (arrival, latency, status, `X-Kiln-Served-By`) as
//!   JSON lines in `--out`. See `bench/beehive/`.
//! - `open`: an open loop, Poisson (or evenly spaced) arrivals at `--rate` per second, each sent
//!   on a connection of its own while the earlier ones are in flight (a pool that grows as
//!   needed), signed as in `throughput`; prints counts, the achieved rate, latency percentiles
//!   from each request's scheduled arrival and CPU deltas over the measured window. See
//!   `open.rs` and `bench/breakout/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use http::header::{CONTENT_LENGTH, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use kiln::auth::sigv4::{sign, Credentials};
use serde_json::{json, Value};

mod open;
mod schedule;

#[derive(Parser)]
#[command(name = "loadgen", about = "kiln's benchmark client")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Sequential requests on one keep-alive connection; prints every latency.
    Latency(LatencyArgs),
    /// Closed loop of C keep-alive connections for a fixed duration.
    Throughput(ThroughputArgs),
    /// Cold starts forced by UpdateFunctionConfiguration, each followed by one timed invoke.
    Cold(ColdArgs),
    /// Closed loop whose client count follows a schedule; records every request (plain HTTP).
    Schedule(schedule::ScheduleArgs),
    /// Open loop: Poisson arrivals at a fixed mean rate, each on its own request.
    Open(open::OpenArgs),
}

#[derive(Args, Clone)]
struct Target {
    /// Server base URL, e.g. http://127.0.0.1:9000.
    #[arg(long)]
    url: String,
    /// Path of the POST, e.g. /2015-03-31/functions/noop-node/invocations.
    #[arg(long, default_value = "/")]
    path: String,
    /// kiln's credentials.json: sign every request with SigV4 (service "lambda").
    #[arg(long)]
    creds: Option<PathBuf>,
    /// Request body.
    #[arg(long, default_value = "{}")]
    body: String,
    /// Pids whose CPU time is read around the measured requests (the server first, then
    /// e.g. the function's runtime processes), comma-separated.
    #[arg(long, value_delimiter = ',')]
    server_pid: Vec<u32>,
    /// Worker threads of the client (1 = a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

#[derive(Args)]
struct LatencyArgs {
    #[command(flatten)]
    target: Target,
    /// Measured requests.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Requests sent first and not measured.
    #[arg(long, default_value_t = 1_000)]
    warmup: usize,
}

#[derive(Args)]
struct ThroughputArgs {
    #[command(flatten)]
    target: Target,
    /// Concurrent closed-loop clients, one connection each.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of load before the measured window.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Numeric fields of the JSON answers to collect (from requests inside the window), e.g.
    /// a time the function measured itself; printed as `collected.FIELD`.
    #[arg(long)]
    collect: Vec<String>,
}

#[derive(Args)]
struct ColdArgs {
    #[command(flatten)]
    target: Target,
    /// Function name.
    #[arg(long)]
    function: String,
    /// Measured cold starts.
    #[arg(long, default_value_t = 30)]
    n: usize,
    /// Cold starts done first and not measured.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Pause after each configuration update, so the retired instance is gone before the invoke.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
    /// Invoke without updating the configuration first.
    #[arg(long)]
    no_update: bool,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let threads = match &cli.mode {
        Mode::Latency(a) => a.target.threads,
        Mode::Throughput(a) => a.target.threads,
        Mode::Cold(a) => a.target.threads,
        Mode::Schedule(a) => a.threads,
        Mode::Open(a) => a.target.threads,
    };
    let runtime = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    let out = runtime.block_on(async move {
        match cli.mode {
            Mode::Latency(a) => latency(a).await,
            Mode::Throughput(a) => throughput(a).await,
            Mode::Cold(a) => cold(a).await,
            Mode::Schedule(a) => schedule::run(a).await,
            Mode::Open(a) => open::run(a).await,
        }
    })?;
    println!("{out}");
    Ok(())
}

// ------------------------------------------------------------------------------------ requests

struct Signer {
    creds: Credentials,
    region: String,
}

/// Builds requests for one target: the same headers every time, signed anew when signing.
struct Maker {
    addr: String,
    host: HeaderValue,
    base: String,
    body: Bytes,
    signer: Option<Signer>,
}

impl Maker {
    fn new(target: &Target) -> Result<Self> {
        let base: Uri = target.url.parse().context("--url")?;
        let authority = base
            .authority()
            .context("--url needs host:port")?
            .to_string();
        let signer = match &target.creds {
            Some(path) => Some(load_creds(path)?),
            None => None,
        };
        Ok(Self {
            addr: authority.clone(),
            host: HeaderValue::from_str(&authority)?,
            base: target.url.trim_end_matches('/').to_string(),
            body: Bytes::from(target.body.clone()),
            signer,
        })
    }

    /// A request, and the nanoseconds spent signing it (0 when unsigned).
    fn make(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        extra: &[(&'static str, &str)],
    ) -> (Request<Full<Bytes>>, u64) {
        let mut headers = HeaderMap::with_capacity(8);
        headers.insert(HOST, self.host.clone());
        for (name, value) in extra {
            headers.insert(*name, HeaderValue::from_str(value).expect("valid header"));
        }
        let mut sign_ns = 0;
        if let Some(s) = &self.signer {
            let started = Instant::now();
            // The absolute URI gives `sign` the host it canonicalizes; the wire gets origin-form.
            let uri: Uri = format!("{}{path}", self.base).parse().expect("valid URI");
            sign(
                &method,
                &uri,
                &mut headers,
                &body,
                &s.creds,
                &s.region,
                "lambda",
                chrono::Utc::now(),
            );
            sign_ns = started.elapsed().as_nanos() as u64;
        }
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path.parse().expect("valid path");
        *request.headers_mut() = headers;
        (request, sign_ns)
    }

    fn invoke(&self, path: &str) -> (Request<Full<Bytes>>, u64) {
        self.make(Method::POST, path, self.body.clone(), &[])
    }

    /// An invoke whose body is `--body` with `{client}` replaced by the client's number (a
    /// session id per client, say).
    fn invoke_as(&self, path: &str, body: &Bytes) -> (Request<Full<Bytes>>, u64) {
        self.make(Method::POST, path, body.clone(), &[])
    }

    fn body_of(&self, client: usize) -> Bytes {
        match std::str::from_utf8(&self.body) {
            Ok(text) if text.contains("{client}") => {
                Bytes::from(text.replace("{client}", &client.to_string()))
            }
            _ => self.body.clone(),
        }
    }
}

fn load_creds(path: &Path) -> Result<Signer> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let v: Value = serde_json::from_str(&text)?;
    let field = |name: &str| {
        v[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("{} has no {name}", path.display()))
    };
    Ok(Signer {
        creds: Credentials {
            access_key_id: field("accessKeyId")?,
            secret_access_key: field("secretAccessKey")?,
        },
        region: field("region")?,
    })
}

struct Conn {
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    async fn open(addr: &str) -> Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { sender })
    }

    /// Sends one request and reads the whole response.
    async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, HeaderMap, Bytes)> {
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }
}

// ------------------------------------------------------------------------------------ CPU time

/// CPU time of a process: utime and stime in clock ticks (all its threads, live and exited),
/// and each live thread's schedstat run time in ns (finer, but blind to a thread that exits
/// between two reads).
#[derive(Clone, Default)]
struct Cpu {
    utime: u64,
    stime: u64,
    /// (tid, ns on CPU)
    threads: Vec<(u32, u64)>,
}

fn read_cpu(pid: u32) -> Result<Cpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields 14 and 15 (1-based); the command name (field 2) may hold spaces, so count from ')'.
    let rest = &stat[stat.rfind(')').context("bad /proc stat")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime = fields[11].parse()?;
    let stime = fields[12].parse()?;
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if let Ok(text) = std::fs::read_to_string(entry.path().join("schedstat")) {
            if let Some(ns) = text.split_whitespace().next().and_then(|v| v.parse().ok()) {
                threads.push((tid, ns));
            }
        }
    }
    Ok(Cpu {
        utime,
        stime,
        threads,
    })
}

/// schedstat: threads alive at both reads count their difference, threads born in between all
/// of their time; threads that died in between are lost (counted in `threads_exited`).
fn cpu_delta(before: &Cpu, after: &Cpu) -> Value {
    let earlier = |tid: u32| {
        before
            .threads
            .iter()
            .find(|(t, _)| *t == tid)
            .map(|(_, ns)| *ns)
    };
    let sched_ns: u64 = after
        .threads
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(earlier(*tid).unwrap_or(0)))
        .sum();
    let exited = before
        .threads
        .iter()
        .filter(|(tid, _)| !after.threads.iter().any(|(t, _)| t == tid))
        .count();
    json!({
        "utime_ticks": after.utime - before.utime,
        "stime_ticks": after.stime - before.stime,
        "sched_ns": sched_ns,
        "threads": after.threads.len(),
        "threads_exited": exited,
    })
}

/// Processes that vanish mid-run (an instance retired) read as `None`.
fn snapshot(pids: &[u32]) -> Result<(Vec<Option<Cpu>>, Cpu)> {
    let servers = pids.iter().map(|pid| read_cpu(*pid).ok()).collect();
    Ok((servers, read_cpu(std::process::id())?))
}

fn deltas(before: &(Vec<Option<Cpu>>, Cpu), after: &(Vec<Option<Cpu>>, Cpu)) -> (Value, Value) {
    let servers = before
        .0
        .iter()
        .zip(&after.0)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => cpu_delta(b, a),
            _ => Value::Null,
        })
        .collect();
    (Value::Array(servers), cpu_delta(&before.1, &after.1))
}

fn short(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

// ------------------------------------------------------------------------------------ modes

async fn latency(args: LatencyArgs) -> Result<Value> {
    let maker = Maker::new(&args.target)?;
    let path = args.target.path.clone();
    let mut conn = Conn::open(&maker.addr).await?;
    let mut first_body = String::new();
    for i in 0..args.warmup {
        let (request, _) = maker.invoke(&path);
        let (status, _, body) = conn.send(request).await?;
        if status != StatusCode::OK {
            bail!("warm-up request {i}: HTTP {status}: {}", short(&body));
        }
        if i == 0 {
            first_body = short(&body);
        }
    }
    let mut latency_ns = Vec::with_capacity(args.n);
    let mut sign_ns = Vec::with_capacity(args.n);
    let mut errors = 0u64;
    let mut first_error = None;
    let before = snapshot(&args.target.server_pid)?;
    let wall = Instant::now();
    for _ in 0..args.n {
        let started = Instant::now();
        let (request, signing) = maker.invoke(&path);
        let (status, _, body) = conn.send(request).await?;
        let elapsed = started.elapsed().as_nanos() as u64;
        latency_ns.push(elapsed);
        sign_ns.push(signing);
        if status != StatusCode::OK {
            errors += 1;
            first_error.get_or_insert_with(|| format!("HTTP {status}: {}", short(&body)));
        }
    }
    let wall_ns = wall.elapsed().as_nanos() as u64;
    let after = snapshot(&args.target.server_pid)?;
    let (server_cpu, client_cpu) = deltas(&before, &after);
    Ok(json!({
        "mode": "latency",
        "n": args.n,
        "warmup": args.warmup,
        "signed": maker.signer.is_some(),
        "wall_ns": wall_ns,
        "errors": errors,
        "first_error": first_error,
        "first_body": first_body,
        "latency_ns": latency_ns,
        "sign_ns": if maker.signer.is_some() { json!(sign_ns) } else { Value::Null },
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
    }))
}

#[derive(Default)]
struct Tally {
    /// Requests completed inside the measured window.
    completed: u64,
    /// Latencies of requests that started and ended inside the window.
    latency_ns: Vec<u64>,
    sign_ns: u64,
    errors: u64,
    first_error: Option<String>,
    /// Per `--collect` field, the values the answers carried.
    collected: Vec<Vec<f64>>,
}

async fn throughput(args: ThroughputArgs) -> Result<Value> {
    let maker = Arc::new(Maker::new(&args.target)?);
    let path = Arc::new(args.target.path.clone());
    let mut conns = Vec::new();
    for _ in 0..args.concurrency {
        conns.push(Conn::open(&maker.addr).await?);
    }
    let start = tokio::time::Instant::now();
    let window_start = start + Duration::from_secs_f64(args.warmup);
    let window_end = window_start + Duration::from_secs_f64(args.duration);
    let mut tasks = Vec::new();
    let fields = Arc::new(args.collect.clone());
    for (client, mut conn) in conns.into_iter().enumerate() {
        let (maker, path, fields) = (maker.clone(), path.clone(), fields.clone());
        let body = maker.body_of(client);
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally {
                collected: vec![Vec::new(); fields.len()],
                ..Tally::default()
            };
            loop {
                let started = tokio::time::Instant::now();
                if started >= window_end {
                    break;
                }
                let (request, signing) = maker.invoke_as(&path, &body);
                let (status, headers, answer) = conn.send(request).await?;
                let done = tokio::time::Instant::now();
                if done >= window_start && done <= window_end {
                    tally.completed += 1;
                    tally.sign_ns += signing;
                    if started >= window_start {
                        tally.latency_ns.push((done - started).as_nanos() as u64);
                    }
                    if status != StatusCode::OK || headers.contains_key("x-amz-function-error") {
                        tally.errors += 1;
                        tally
                            .first_error
                            .get_or_insert_with(|| format!("HTTP {status}: {}", short(&answer)));
                    } else if !fields.is_empty() {
                        let doc: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
                        for (values, field) in tally.collected.iter_mut().zip(fields.iter()) {
                            if let Some(v) = doc[field.as_str()].as_f64() {
                                values.push(v);
                            }
                        }
                    }
                }
            }
            anyhow::Ok(tally)
        }));
    }
    // CPU snapshots at the window's edges, from a task of their own.
    let pids = args.target.server_pid.clone();
    let sampler = tokio::spawn(async move {
        tokio::time::sleep_until(window_start).await;
        let (t0, before) = (Instant::now(), snapshot(&pids)?);
        tokio::time::sleep_until(window_end).await;
        let (t1, after) = (Instant::now(), snapshot(&pids)?);
        anyhow::Ok((before, after, (t1 - t0).as_nanos() as u64))
    });
    let mut all = Tally {
        collected: vec![Vec::new(); args.collect.len()],
        ..Tally::default()
    };
    for task in tasks {
        let tally = task.await??;
        for (all, mine) in all.collected.iter_mut().zip(tally.collected) {
            all.extend(mine);
        }
        all.completed += tally.completed;
        all.latency_ns.extend(tally.latency_ns);
        all.sign_ns += tally.sign_ns;
        all.errors += tally.errors;
        if all.first_error.is_none() {
            all.first_error = tally.first_error;
        }
    }
    let (before, after, sampled_ns) = sampler.await??;
    let (server_cpu, client_cpu) = deltas(&before, &after);
    all.latency_ns.sort_unstable();
    let pct = |p: f64| -> u64 {
        if all.latency_ns.is_empty() {
            return 0;
        }
        // Nearest-rank percentile.
        let rank = ((p / 100.0) * all.latency_ns.len() as f64).ceil() as usize;
        all.latency_ns[rank.clamp(1, all.latency_ns.len()) - 1]
    };
    Ok(json!({
        "mode": "throughput",
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "signed": maker.signer.is_some(),
        "completed": all.completed,
        "rps": all.completed as f64 / args.duration,
        "errors": all.errors,
        "first_error": all.first_error,
        "latency_n": all.latency_ns.len(),
        "latency_ns": {
            "p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0), "p999": pct(99.9),
            "max": all.latency_ns.last().copied().unwrap_or(0),
            "mean": if all.latency_ns.is_empty() { 0.0 } else {
                all.latency_ns.iter().sum::<u64>() as f64 / all.latency_ns.len() as f64
            },
        },
        "sign_ns_mean": if all.completed > 0 { all.sign_ns as f64 / all.completed as f64 } else { 0.0 },
        "cpu_window_ns": sampled_ns,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
        "collected": args.collect.iter().zip(&all.collected)
            .map(|(field, values)| (field.clone(), json!(values)))
            .collect::<serde_json::Map<String, Value>>(),
    }))
}

/// `Init Duration: 123.45 ms` and `Duration: 1.23 ms` from a REPORT line.
fn report_field(log: &str, name: &str) -> Option<f64> {
    report_text(log, name)?.strip_suffix(" ms")?.parse().ok()
}

/// The value of the REPORT line's field `name`, as written.
fn report_text<'a>(log: &'a str, name: &str) -> Option<&'a str> {
    let report = log.lines().find(|l| l.starts_with("REPORT "))?;
    report
        .split('\t')
        .find_map(|field| field.trim().strip_prefix(name)?.strip_prefix(": "))
}

async fn cold(args: ColdArgs) -> Result<Value> {
    let maker = Maker::new(&args.target)?;
    if maker.signer.is_none() {
        bail!("cold starts need --creds");
    }
    let invoke_path = format!("/2015-03-31/functions/{}/invocations", args.function);
    let config_path = format!("/2015-03-31/functions/{}/configuration", args.function);
    let mut conn = Conn::open(&maker.addr).await?;
    let mut samples = Vec::new();
    let nonce = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0);
    for i in 0..args.warmup + args.n {
        if !args.no_update {
            update(&maker, &mut conn, &config_path, &format!("{nonce}-{i}")).await?;
            tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
        }
        let body = String::from_utf8_lossy(&maker.body).replace("{i}", &i.to_string());
        let started = Instant::now();
        let (request, _) = maker.make(
            Method::POST,
            &invoke_path,
            Bytes::from(body),
            &[("x-amz-log-type", "Tail")],
        );
        let (status, headers, body) = conn.send(request).await?;
        let elapsed = started.elapsed().as_nanos() as u64;
        if status != StatusCode::OK {
            bail!("cold invoke: HTTP {status}: {}", short(&body));
        }
        let log = headers
            .get("x-amz-log-result")
            .and_then(|v| {
                base64::engine::general_purpose::STANDARD
                    .decode(v.as_bytes())
                    .ok()
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let init_ms = report_field(&log, "Init Duration");
        let duration_ms = report_field(&log, "Duration");
        if i >= args.warmup {
            samples.push(json!({
                "latency_ns": elapsed,
                "init_ms": init_ms,
                "duration_ms": duration_ms,
                "cold": init_ms.is_some(),
                "start_path": report_text(&log, "Start Path"),
                "session_start": report_text(&log, "Session Start"),
            }));
        }
    }
    Ok(json!({
        "mode": "cold",
        "function": args.function,
        "n": args.n,
        "warmup": args.warmup,
        "settle_ms": args.settle_ms,
        "updated": !args.no_update,
        "samples": samples,
    }))
}

/// UpdateFunctionConfiguration with a new value of `BENCH_NONCE`: a new revision.
async fn update(maker: &Maker, conn: &mut Conn, config_path: &str, nonce: &str) -> Result<()> {
    let update = json!({"Environment": {"Variables": {"BENCH_NONCE": nonce}}});
    let (request, _) = maker.make(
        Method::PUT,
        config_path,
        Bytes::from(update.to_string()),
        &[("content-type", "application/json")],
    );
    let (status, _, body) = conn.send(request).await?;
    if status != StatusCode::OK {
        bail!(
            "UpdateFunctionConfiguration: HTTP {status}: {}",
            short(&body)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{report_field, report_text};

    #[test]
    fn reads_report_fields() {
        let log = "START RequestId: x\nEND RequestId: x\nREPORT RequestId: x\tDuration: 1.50 ms\tBilled Duration: 2 ms\tInit Duration: 80.25 ms\tStart Path: coldest\n";
        assert_eq!(report_field(log, "Duration"), Some(1.5));
        assert_eq!(report_field(log, "Init Duration"), Some(80.25));
        assert_eq!(
            report_field("REPORT RequestId: x\tDuration: 1 ms", "Init Duration"),
            None
        );
        assert_eq!(report_text(log, "Start Path"), Some("coldest"));
    }
}
