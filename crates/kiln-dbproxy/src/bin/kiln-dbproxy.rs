//! The proxy on its own, for tests and benchmarks: kiln itself mounts the library in each
//! sandbox. Passwords come from the environment, never the command line:
//! `KILN_DBPROXY_UPSTREAM_PASSWORD` (the proxy's login) and `KILN_DBPROXY_CLIENT_PASSWORD`
//! (what clients present; the upstream one if unset).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use kiln_dbproxy::{ClientContext, Ledger, Proxy, ProxyConfig, SessionStatePolicy};
use tokio::net::TcpListener;

#[derive(Parser, Debug)]
#[command(about = "kiln's PostgreSQL connection proxy, standalone")]
struct Args {
    /// Address to listen on for clients.
    #[arg(long)]
    listen: String,
    /// Address to listen on for shadow clients (every transaction rolled back).
    #[arg(long)]
    listen_shadow: Option<String>,
    /// PostgreSQL's HOST:PORT.
    #[arg(long)]
    upstream: String,
    #[arg(long)]
    database: String,
    /// The role the proxy logs in as.
    #[arg(long)]
    user: String,
    /// The user clients log in as (the proxy's own if unset).
    #[arg(long)]
    client_user: Option<String>,
    #[arg(long, default_value_t = 16)]
    pool_size: usize,
    /// Seconds a transaction waits for a backend.
    #[arg(long, default_value_t = 5.0)]
    queue_timeout: f64,
    /// refuse or pin.
    #[arg(long, default_value = "refuse")]
    session_state: SessionStatePolicy,
    #[arg(long, default_value_t = 4)]
    max_pinned: usize,
    /// Serve every client of --listen as a shadow client.
    #[arg(long)]
    shadow: bool,
    /// Worker threads (1: one thread serves every client, as PgBouncer does).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print the metrics on standard error every this many seconds (0: never).
    #[arg(long, default_value_t = 0.0)]
    metrics_every: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> Result<()> {
    let upstream_password = std::env::var("KILN_DBPROXY_UPSTREAM_PASSWORD").unwrap_or_default();
    let client_password =
        std::env::var("KILN_DBPROXY_CLIENT_PASSWORD").unwrap_or_else(|_| upstream_password.clone());
    let mut cfg = ProxyConfig::new(
        &args.upstream,
        &args.database,
        &args.user,
        upstream_password,
    );
    cfg.client_user = args.client_user.unwrap_or_else(|| args.user.clone());
    cfg.client_password = client_password;
    cfg.pool_size = args.pool_size;
    cfg.queue_timeout = Duration::from_secs_f64(args.queue_timeout);
    cfg.session_state = args.session_state;
    cfg.max_pinned = args.max_pinned;
    let proxy = Proxy::new(cfg).context("invalid configuration")?;
    let main = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let shadow_listener = match &args.listen_shadow {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("listening on {a}"))?,
        ),
        None => None,
    };
    if args.metrics_every > 0.0 {
        let p = proxy.clone();
        let every = Duration::from_secs_f64(args.metrics_every);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                eprintln!("{:?}", p.metrics());
            }
        });
    }
    eprintln!(
        "kiln-dbproxy: listening on {} for {}",
        args.listen, args.upstream
    );
    if let Some(l) = shadow_listener {
        tokio::spawn(accept(l, proxy.clone(), true));
    }
    accept(main, proxy, args.shadow).await;
    Ok(())
}

async fn accept(listener: TcpListener, proxy: Proxy, shadow: bool) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("kiln-dbproxy: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let ctx = ClientContext {
                shadow,
                ledger: Arc::new(Ledger::new()),
                ..ClientContext::default()
            };
            if let Err(e) = proxy.serve(stream, ctx).await {
                tracing::debug!(error = %e, "client ended with an error");
            }
        });
    }
}
