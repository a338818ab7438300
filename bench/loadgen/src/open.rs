//! `loadgen open`: an open loop, requests arriving at a mean rate whether or not the earlier
//! ones have been answered.
//!
//! Arrivals are a Poisson process of `--rate` per second (exponential gaps from a seeded
//! splitmix64, the same schedule for the same `--seed`), or with `--fixed` one every 1/rate
//! seconds. Each arrival is a task of its own: it takes an idle keep-alive connection from a
//! pool, or opens a new one when all are busy (the pool grows as needed), signs its request
//! (SigV4, as `throughput` does, with `--creds`) and sends it. A connection that failed is
//! dropped, not returned. Latency is counted from the arrival's scheduled time, so a client that
//! falls behind its schedule (or a connection being opened) is part of it: no coordinated
//! omission.
//!
//! Arrivals in the first `--warmup` seconds are sent and not measured; those of the next
//! `--duration` seconds are. The summary: `sent` (every arrival), `measured` (the window's),
//! `completed` and `errors` of the measured ones (HTTP status not 200, a function error, a
//! transport error, no answer within `--timeout`), `unfinished` (measured, still open
//! `--drain` seconds after the last arrival), `offered_rps` and `achieved_rps` (answers of
//! measured arrivals over the window's seconds), latency percentiles of the completed ones,
//! the connections opened and the most requests in flight, how late the client was on its own
//! schedule, and, with `--server-pid`, the CPU time of those processes over the window.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use http::StatusCode;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::schedule::splitmix;
use crate::{deltas, short, snapshot, Conn, Maker, Target};

#[derive(Args)]
pub(crate) struct OpenArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Mean arrivals per second.
    #[arg(long)]
    rate: f64,
    /// Seconds whose arrivals are measured.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds of arrivals before the measured ones.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Seed of the Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One arrival every 1/rate seconds instead of Poisson arrivals.
    #[arg(long)]
    fixed: bool,
    /// Seconds a request may take before it counts as an error.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Seconds the requests in flight after the last arrival are waited for.
    #[arg(long, default_value_t = 30.0)]
    drain: f64,
}

/// What became of one arrival.
struct Outcome {
    measured: bool,
    /// Answered in time with 200 and no function error.
    ok: bool,
    latency_ns: u64,
    error: Option<String>,
}

/// The arrival times (seconds from the start) of the whole run.
fn arrivals(args: &OpenArgs) -> Vec<f64> {
    let end = args.warmup + args.duration;
    let mut rng = args.seed;
    let mut t = 0.0;
    let mut out = Vec::with_capacity((end * args.rate * 1.1) as usize + 16);
    loop {
        t = if args.fixed {
            (out.len() + 1) as f64 / args.rate
        } else {
            // Uniform in (0, 1]: an exponential gap never infinite.
            let u = ((splitmix(&mut rng) >> 11) + 1) as f64 / (1u64 << 53) as f64;
            t - u.ln() / args.rate
        };
        if t >= end {
            return out;
        }
        out.push(t);
    }
}

pub(crate) async fn run(args: OpenArgs) -> Result<Value> {
    anyhow::ensure!(args.rate > 0.0, "--rate must be positive");
    let maker = Arc::new(Maker::new(&args.target)?);
    let path = Arc::new(args.target.path.clone());
    // One connection first, so that a wrong URL fails here rather than as 100% errors.
    let pool = Arc::new(Mutex::new(vec![Conn::open(&maker.addr).await?]));
    let opened = Arc::new(AtomicUsize::new(1));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let timeout = Duration::from_secs_f64(args.timeout);
    let times = arrivals(&args);

    let start = Instant::now() + Duration::from_millis(20);
    let window_start = start + Duration::from_secs_f64(args.warmup);
    let window_end = window_start + Duration::from_secs_f64(args.duration);
    let pids = args.target.server_pid.clone();
    let sampler = tokio::spawn(async move {
        tokio::time::sleep_until(window_start).await;
        let (t0, before) = (std::time::Instant::now(), snapshot(&pids)?);
        tokio::time::sleep_until(window_end).await;
        let (t1, after) = (std::time::Instant::now(), snapshot(&pids)?);
        anyhow::Ok((before, after, (t1 - t0).as_nanos() as u64))
    });

    let mut tasks = Vec::with_capacity(times.len());
    let mut late_ns = Vec::with_capacity(times.len());
    for t in &times {
        let at = start + Duration::from_secs_f64(*t);
        tokio::time::sleep_until(at).await;
        late_ns.push((Instant::now() - at).as_nanos() as u64);
        let (maker, path, pool) = (maker.clone(), path.clone(), pool.clone());
        let (opened, in_flight, most) = (opened.clone(), in_flight.clone(), most_in_flight.clone());
        tasks.push(tokio::spawn(async move {
            let now = in_flight.fetch_add(1, Ordering::Relaxed) + 1;
            most.fetch_max(now, Ordering::Relaxed);
            let idle = pool.lock().expect("pool").pop();
            let attempt = async {
                let mut conn = match idle {
                    Some(conn) => conn,
                    None => {
                        opened.fetch_add(1, Ordering::Relaxed);
                        Conn::open(&maker.addr).await?
                    }
                };
                let (request, _) = maker.invoke(&path);
                let (status, headers, body) = conn.send(request).await?;
                anyhow::Ok((conn, status, headers, body))
            };
            let result = tokio::time::timeout(timeout, attempt).await;
            let latency_ns = (Instant::now() - at).as_nanos() as u64;
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let error = match result {
                Ok(Ok((conn, status, headers, body))) => {
                    pool.lock().expect("pool").push(conn);
                    if status != StatusCode::OK || headers.contains_key("x-amz-function-error") {
                        Some(format!("HTTP {status}: {}", short(&body)))
                    } else {
                        None
                    }
                }
                Ok(Err(e)) => Some(format!("{e:#}")),
                Err(_) => Some("timeout".to_string()),
            };
            Outcome {
                measured: at >= window_start && at < window_end,
                ok: error.is_none(),
                latency_ns,
                error,
            }
        }));
    }
    let last_arrival = Instant::now();
    let deadline = last_arrival + Duration::from_secs_f64(args.drain);

    let (mut completed, mut errors, mut unfinished) = (0u64, 0u64, 0u64);
    let mut first_error = None;
    let mut latency_ns = Vec::new();
    for (task, t) in tasks.into_iter().zip(&times) {
        let at = start + Duration::from_secs_f64(*t);
        let measured = at >= window_start && at < window_end;
        match tokio::time::timeout_at(deadline, task).await {
            Ok(outcome) => {
                let outcome = outcome?;
                if !outcome.measured {
                    continue;
                }
                if outcome.ok {
                    completed += 1;
                    latency_ns.push(outcome.latency_ns);
                } else {
                    errors += 1;
                    if first_error.is_none() {
                        first_error = outcome.error;
                    }
                }
            }
            Err(_) if measured => unfinished += 1,
            Err(_) => {}
        }
    }
    let (before, after, sampled_ns) = sampler.await??;
    let (server_cpu, client_cpu) = deltas(&before, &after);
    let measured = times
        .iter()
        .filter(|t| **t >= args.warmup && **t < args.warmup + args.duration)
        .count();
    latency_ns.sort_unstable();
    late_ns.sort_unstable();
    let pct = |a: &[u64], p: f64| -> u64 {
        if a.is_empty() {
            return 0;
        }
        // Nearest-rank percentile.
        let rank = ((p / 100.0) * a.len() as f64).ceil() as usize;
        a[rank.clamp(1, a.len()) - 1]
    };
    Ok(json!({
        "mode": "open",
        "arrivals": if args.fixed { "fixed" } else { "poisson" },
        "seed": args.seed,
        "rate": args.rate,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "signed": maker.signer.is_some(),
        "sent": times.len(),
        "measured": measured,
        "completed": completed,
        "errors": errors,
        "unfinished": unfinished,
        "first_error": first_error,
        "offered_rps": measured as f64 / args.duration,
        "achieved_rps": completed as f64 / args.duration,
        "connections_opened": opened.load(Ordering::Relaxed),
        "max_in_flight": most_in_flight.load(Ordering::Relaxed),
        "late_ns": {"p50": pct(&late_ns, 50.0), "p99": pct(&late_ns, 99.0),
                    "max": late_ns.last().copied().unwrap_or(0)},
        "latency_n": latency_ns.len(),
        "latency_ns": {
            "p50": pct(&latency_ns, 50.0), "p90": pct(&latency_ns, 90.0),
            "p99": pct(&latency_ns, 99.0), "p999": pct(&latency_ns, 99.9),
            "max": latency_ns.last().copied().unwrap_or(0),
            "mean": if latency_ns.is_empty() { 0.0 } else {
                latency_ns.iter().sum::<u64>() as f64 / latency_ns.len() as f64
            },
        },
        "cpu_window_ns": sampled_ns,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu,
    }))
}

#[cfg(test)]
mod tests {
    use super::{arrivals, OpenArgs};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        open: OpenArgs,
    }

    fn args(extra: &[&str]) -> OpenArgs {
        let mut argv = vec!["open", "--url", "http://127.0.0.1:1"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).open
    }

    #[test]
    fn poisson_arrivals_have_the_rate_and_repeat_with_the_seed() {
        let poisson = ["--rate", "200", "--duration", "50", "--warmup", "0"];
        let a = arrivals(&args(&poisson));
        // 10 000 expected; a Poisson count's standard deviation is 100.
        assert!((9_600..10_400).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a, arrivals(&args(&poisson)));
        let c = arrivals(&args(&["--rate", "200", "--duration", "50", "--seed", "2"]));
        assert_ne!(a[..10], c[..10]);
    }

    #[test]
    fn fixed_arrivals_are_evenly_spaced() {
        let a = arrivals(&args(&[
            "--rate",
            "100",
            "--duration",
            "2",
            "--warmup",
            "1",
            "--fixed",
        ]));
        assert_eq!(a.len(), 299);
        assert!((a[1] - a[0] - 0.01).abs() < 1e-9);
    }
}
