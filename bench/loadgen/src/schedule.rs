//! `loadgen schedule`: a closed loop whose number of clients follows a schedule, against a plain
//! HTTP/1.1 server (a web app, kiln's app gateway), recording every request.
//!
//! Each client is one task with one keep-alive connection (`TCP_NODELAY`), sending its next
//! request as soon as the last one's body has been read (no think time). Client `i` runs while
//! the schedule's count at the current second is greater than `i`: `--clients 8 --double-at 60`
//! is 8 clients from 0 s and 16 from 60 s (the burst of BeeHive's §5.2); `--step T:C` sets the
//! count to C from second T on, up or down (a client above the count finishes its request and
//! waits). A connection the server closed (gunicorn's sync workers close every one; keep-alive
//! timeouts) is opened again, inside the next request's timed region, as any client pays it; a
//! request that fails on a reused connection before any answer is sent once more on a new one
//! (counted in `retried`; its latency includes both tries).
//!
//! Every request is one JSON line of `--out`, sorted by arrival:
//! `{"t": arrival ns since the start, "lat": ns until the whole body was read, "status": HTTP
//! status or 0 for a transport error or timeout, "by": X-Kiln-Served-By or null, "c": client,
//! "r": index of the mix entry, "bytes": body length, "new_conn": the request opened a
//! connection, "err": the error (only when status is 0)}`. The summary on stdout has counts
//! only; the analysis reads the records.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Args;
use http::header::{HeaderName, CONTENT_LENGTH, HOST};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::time::Instant;

#[derive(Args)]
pub struct ScheduleArgs {
    /// The server, http://HOST:PORT (plain HTTP, no signing).
    #[arg(long)]
    url: String,
    /// Clients from the start.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Double the clients from this second to the end (the paper's burst: 60 of 180 s).
    #[arg(long)]
    double_at: Option<f64>,
    /// From second T on, C clients (T:C); repeat for more. Applied after --double-at.
    #[arg(long = "step", value_name = "T:C")]
    steps: Vec<String>,
    /// Seconds of load; requests in flight at the end are waited for (--drain).
    #[arg(long, default_value_t = 180.0)]
    duration: f64,
    /// A request of the mix: 'METHOD PATH', 'METHOD PATH @FILE' (the body from FILE), with an
    /// optional weight 'W*METHOD PATH …' (default 1); repeat for a mix. Default: 'GET /'.
    #[arg(long = "request", value_name = "SPEC")]
    requests: Vec<String>,
    /// The mix as a JSON file: [{"method", "path", "body" or "body_file" (relative to the
    /// file), "headers": {NAME: VALUE}, "weight"}]; added to --request.
    #[arg(long)]
    mix: Option<PathBuf>,
    /// A header sent with every request, 'Name: value'; repeat for more.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,
    /// Where the per-request records go (JSON lines).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds a request may take before it is recorded as a timeout (status 0).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Seconds the requests in flight at the end are waited for.
    #[arg(long, default_value_t = 30.0)]
    drain: f64,
    /// Seed of each client's choice in the mix (client i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A new connection for every request (no keep-alive).
    #[arg(long)]
    no_keepalive: bool,
    /// Worker threads of the client (1 = a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

struct Entry {
    method: Method,
    path: String,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
    weight: f64,
    label: String,
}

struct Plan {
    addr: String,
    host: HeaderValue,
    entries: Vec<Entry>,
    /// Cumulative weights.
    cumulative: Vec<f64>,
    /// (from second, clients), sorted; the first is at 0.
    steps: Vec<(f64, usize)>,
    duration: f64,
    timeout: Duration,
    keepalive: bool,
}

impl Plan {
    fn clients_at(&self, t: f64) -> usize {
        self.steps
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .map_or(0, |(_, c)| *c)
    }

    /// The next second, after `t`, at which client `i` runs.
    fn next_start(&self, i: usize, t: f64) -> Option<f64> {
        self.steps
            .iter()
            .find(|(from, c)| *from > t && *c > i)
            .map(|(from, _)| *from)
    }

    fn max_clients(&self) -> usize {
        self.steps.iter().map(|(_, c)| *c).max().unwrap_or(0)
    }

    fn pick(&self, rng: &mut u64) -> usize {
        if self.entries.len() == 1 {
            return 0;
        }
        let total = *self.cumulative.last().expect("a mix has entries");
        let x = (splitmix(rng) >> 11) as f64 / (1u64 << 53) as f64 * total;
        self.cumulative
            .iter()
            .position(|c| x < *c)
            .unwrap_or(self.entries.len() - 1)
    }
}

pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn parse_header(spec: &str) -> Result<(HeaderName, HeaderValue)> {
    let (name, value) = spec
        .split_once(':')
        .with_context(|| format!("header {spec:?} is not 'Name: value'"))?;
    Ok((
        HeaderName::from_bytes(name.trim().as_bytes())?,
        HeaderValue::from_str(value.trim())?,
    ))
}

fn parse_request(spec: &str) -> Result<Entry> {
    let (weight, rest) = match spec.split_once('*') {
        Some((w, rest)) if w.trim().parse::<f64>().is_ok() => (w.trim().parse()?, rest),
        _ => (1.0, spec),
    };
    let parts: Vec<&str> = rest.split_whitespace().collect();
    let (method, path, body) = match parts.as_slice() {
        [m, p] => (*m, *p, Bytes::new()),
        [m, p, file] if file.starts_with('@') => {
            let data =
                std::fs::read(&file[1..]).with_context(|| format!("--request body {file}"))?;
            (*m, *p, Bytes::from(data))
        }
        _ => bail!("--request {spec:?} is not 'METHOD PATH' or 'METHOD PATH @FILE'"),
    };
    Ok(Entry {
        method: Method::from_bytes(method.as_bytes())?,
        path: path.to_string(),
        body,
        headers: Vec::new(),
        weight,
        label: format!("{method} {path}"),
    })
}

fn parse_mix(file: &Path) -> Result<Vec<Entry>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    let doc: Value = serde_json::from_str(&text).with_context(|| format!("{}", file.display()))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for item in doc.as_array().context("--mix: a JSON array")? {
        let method = item["method"].as_str().unwrap_or("GET");
        let path = item["path"]
            .as_str()
            .context("--mix: an entry without a path")?;
        let body = match (item["body"].as_str(), item["body_file"].as_str()) {
            (Some(b), _) => Bytes::from(b.to_string()),
            (None, Some(f)) => Bytes::from(
                std::fs::read(dir.join(f)).with_context(|| format!("--mix body_file {f}"))?,
            ),
            (None, None) => Bytes::new(),
        };
        let mut headers = Vec::new();
        if let Some(map) = item["headers"].as_object() {
            for (name, value) in map {
                headers.push((
                    HeaderName::from_bytes(name.as_bytes())?,
                    HeaderValue::from_str(value.as_str().unwrap_or_default())?,
                ));
            }
        }
        out.push(Entry {
            method: Method::from_bytes(method.as_bytes())?,
            path: path.to_string(),
            body,
            headers,
            weight: item["weight"].as_f64().unwrap_or(1.0),
            label: format!("{method} {path}"),
        });
    }
    Ok(out)
}

fn plan(args: &ScheduleArgs) -> Result<Plan> {
    let base: Uri = args.url.parse().context("--url")?;
    if base.scheme_str() != Some("http") {
        bail!("--url: plain http:// only");
    }
    let authority = base
        .authority()
        .context("--url needs host:port")?
        .to_string();
    let mut entries = Vec::new();
    for spec in &args.requests {
        entries.push(parse_request(spec)?);
    }
    if let Some(file) = &args.mix {
        entries.extend(parse_mix(file)?);
    }
    if entries.is_empty() {
        entries.push(parse_request("GET /")?);
    }
    let common: Vec<(HeaderName, HeaderValue)> = args
        .headers
        .iter()
        .map(|h| parse_header(h))
        .collect::<Result<_>>()?;
    for entry in &mut entries {
        for (name, value) in &common {
            if !entry.headers.iter().any(|(n, _)| n == name) {
                entry.headers.push((name.clone(), value.clone()));
            }
        }
    }
    let mut cumulative = Vec::new();
    let mut sum = 0.0;
    for e in &entries {
        if e.weight.is_nan() || e.weight < 0.0 {
            bail!("{}: a weight must be ≥ 0", e.label);
        }
        sum += e.weight;
        cumulative.push(sum);
    }
    if sum <= 0.0 {
        bail!("the mix's weights sum to 0");
    }
    let mut steps = vec![(0.0, args.clients)];
    if let Some(at) = args.double_at {
        steps.push((at, args.clients * 2));
    }
    for spec in &args.steps {
        let (t, c) = spec
            .split_once(':')
            .with_context(|| format!("--step {spec:?} is not T:C"))?;
        steps.push((
            t.parse().context("--step T")?,
            c.parse().context("--step C")?,
        ));
    }
    // Stable: a later flag wins at the same second.
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut deduped: Vec<(f64, usize)> = Vec::new();
    for s in steps {
        match deduped.last_mut() {
            Some(last) if last.0 == s.0 => *last = s,
            _ => deduped.push(s),
        }
    }
    Ok(Plan {
        host: HeaderValue::from_str(&authority)?,
        addr: authority,
        entries,
        cumulative,
        steps: deduped,
        duration: args.duration,
        timeout: Duration::from_secs_f64(args.timeout),
        keepalive: !args.no_keepalive,
    })
}

struct Record {
    t: u64,
    lat: u64,
    status: u16,
    by: Option<String>,
    client: usize,
    entry: usize,
    bytes: usize,
    new_conn: bool,
    retried: bool,
    err: Option<String>,
}

async fn connect(addr: &str) -> Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connect {addr}"))?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn request(plan: &Plan, entry: &Entry) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(entry.body.clone()));
    *request.method_mut() = entry.method.clone();
    *request.uri_mut() = entry.path.parse().expect("a valid path");
    let headers = request.headers_mut();
    headers.insert(HOST, plan.host.clone());
    for (name, value) in &entry.headers {
        headers.insert(name.clone(), value.clone());
    }
    if !entry.body.is_empty() || !matches!(entry.method, Method::GET | Method::HEAD) {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(entry.body.len()));
    }
    if !plan.keepalive {
        headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    request
}

/// One try: (status, served-by, body length). `Err((error, answered))`: whether the server had
/// sent a response head (then it is not tried again).
async fn once(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(u16, Option<String>, usize), (anyhow::Error, bool)> {
    sender.ready().await.map_err(|e| (e.into(), false))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| (e.into(), false))?;
    let (parts, body) = response.into_parts();
    let by = parts
        .headers
        .get("x-kiln-served-by")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = body
        .collect()
        .await
        .map_err(|e| (anyhow::Error::from(e), true))?
        .to_bytes();
    Ok((parts.status.as_u16(), by, body.len()))
}

async fn client(i: usize, plan: Arc<Plan>, start: Instant, seed: u64) -> Vec<Record> {
    let mut records = Vec::new();
    let mut rng = seed
        .wrapping_add(i as u64)
        .wrapping_mul(0x2545_F491_4F6C_DD1D);
    let mut conn: Option<SendRequest<Full<Bytes>>> = None;
    let end = start + Duration::from_secs_f64(plan.duration);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let t = (now - start).as_secs_f64();
        if plan.clients_at(t) <= i {
            conn = None;
            match plan.next_start(i, t) {
                Some(next) if next < plan.duration => {
                    tokio::time::sleep_until(start + Duration::from_secs_f64(next)).await;
                    continue;
                }
                _ => break,
            }
        }
        let index = plan.pick(&mut rng);
        let entry = &plan.entries[index];
        let mut record = Record {
            t: (now - start).as_nanos() as u64,
            lat: 0,
            status: 0,
            by: None,
            client: i,
            entry: index,
            bytes: 0,
            new_conn: false,
            retried: false,
            err: None,
        };
        let attempt = async {
            for try_number in 0..2 {
                // A closed connection, or a retry after a reused one failed: a new one.
                if try_number == 1 || conn.as_ref().is_none_or(|c| c.is_closed()) {
                    conn = Some(connect(&plan.addr).await?);
                    record.new_conn = true;
                }
                let reused = try_number == 0 && !record.new_conn;
                let sender = conn.as_mut().expect("connected");
                match once(sender, request(&plan, entry)).await {
                    Ok(answer) => return anyhow::Ok(answer),
                    Err((e, answered)) => {
                        conn = None;
                        if answered || !reused {
                            return Err(e);
                        }
                        record.retried = true;
                    }
                }
            }
            bail!("no answer after a retry")
        };
        match tokio::time::timeout(plan.timeout, attempt).await {
            Ok(Ok((status, by, bytes))) => {
                record.status = status;
                record.by = by;
                record.bytes = bytes;
            }
            Ok(Err(e)) => {
                conn = None;
                record.err = Some(format!("{e:#}"));
            }
            Err(_) => {
                conn = None;
                record.err = Some("timeout".into());
            }
        }
        if !plan.keepalive {
            conn = None;
        }
        record.lat = (Instant::now() - now).as_nanos() as u64;
        records.push(record);
    }
    records
}

pub async fn run(args: ScheduleArgs) -> Result<Value> {
    let plan = Arc::new(plan(&args)?);
    // One connection first, so that a wrong URL fails here rather than as 100% errors.
    connect(&plan.addr).await?;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..plan.max_clients() {
        tasks.push(tokio::spawn(client(i, plan.clone(), start, args.seed)));
    }
    let deadline = start + Duration::from_secs_f64(plan.duration + args.drain);
    let mut records = Vec::new();
    let mut unfinished = 0;
    for task in tasks {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(done) => records.extend(done?),
            Err(_) => unfinished += 1,
        }
    }
    let wall = (Instant::now() - start).as_secs_f64();
    records.sort_by_key(|r| r.t);

    let mut by_status = serde_json::Map::new();
    let mut by_served = serde_json::Map::new();
    let mut errors = 0u64;
    let mut first_error = None;
    let mut retried = 0u64;
    let mut new_conns = 0u64;
    for r in &records {
        let s = by_status.entry(r.status.to_string()).or_insert(json!(0));
        *s = json!(s.as_u64().unwrap_or(0) + 1);
        let key = r.by.clone().unwrap_or_else(|| "(none)".into());
        let b = by_served.entry(key).or_insert(json!(0));
        *b = json!(b.as_u64().unwrap_or(0) + 1);
        if r.status == 0 || r.status >= 500 {
            errors += 1;
            if first_error.is_none() {
                first_error = Some(
                    r.err
                        .clone()
                        .unwrap_or_else(|| format!("HTTP {}", r.status)),
                );
            }
        }
        retried += r.retried as u64;
        new_conns += r.new_conn as u64;
    }
    if let Some(path) = &args.out {
        use std::io::Write;
        let file = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        for r in &records {
            let mut line = json!({
                "t": r.t, "lat": r.lat, "status": r.status, "by": r.by, "c": r.client,
                "r": r.entry, "bytes": r.bytes, "new_conn": r.new_conn,
            });
            if r.retried {
                line["retried"] = json!(true);
            }
            if let Some(e) = &r.err {
                line["err"] = json!(e);
            }
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    Ok(json!({
        "mode": "schedule",
        "url": args.url,
        "steps": plan.steps.iter().map(|(t, c)| json!({"from_s": t, "clients": c})).collect::<Vec<_>>(),
        "duration_s": plan.duration,
        "keepalive": plan.keepalive,
        "mix": plan.entries.iter().map(|e| json!({
            "request": e.label, "weight": e.weight, "body_bytes": e.body.len(),
        })).collect::<Vec<_>>(),
        "requests": records.len(),
        "rps": records.len() as f64 / plan.duration,
        "errors": errors,
        "first_error": first_error,
        "retried": retried,
        "new_connections": new_conns,
        "by_status": by_status,
        "served_by": by_served,
        "unfinished_clients": unfinished,
        "wall_s": wall,
        "records": args.out.as_ref().map(|p| p.display().to_string()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(argv: &[&str]) -> Plan {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: ScheduleArgs,
        }
        let mut full = vec!["x", "--url", "http://127.0.0.1:1"];
        full.extend_from_slice(argv);
        plan(&P::parse_from(full).a).unwrap()
    }

    #[test]
    fn doubles_and_steps() {
        let p = plan_of(&["--clients", "4", "--double-at", "60", "--duration", "180"]);
        assert_eq!(p.clients_at(0.0), 4);
        assert_eq!(p.clients_at(59.9), 4);
        assert_eq!(p.clients_at(60.0), 8);
        assert_eq!(p.next_start(5, 1.0), Some(60.0));
        assert_eq!(p.next_start(9, 1.0), None);
        let p = plan_of(&["--clients", "2", "--step", "10:6", "--step", "20:1"]);
        assert_eq!(p.clients_at(15.0), 6);
        assert_eq!(p.clients_at(25.0), 1);
        assert_eq!(p.max_clients(), 6);
    }

    #[test]
    fn picks_by_weight() {
        let p = plan_of(&["--request", "3*GET /a", "--request", "GET /b"]);
        let mut rng = 7;
        let a = (0..10_000).filter(|_| p.pick(&mut rng) == 0).count();
        assert!((7_000..8_000).contains(&a), "{a}");
        assert_eq!(p.entries[0].label, "GET /a");
    }
}
