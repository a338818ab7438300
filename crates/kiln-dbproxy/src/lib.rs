//! kiln's PostgreSQL connection proxy.
//!
//! Many short-lived clients (function instances) share a few PostgreSQL backends, one per
//! transaction, as PgBouncer's transaction mode does. On top of that the proxy tracks protocol
//! prepared statements and reported parameters per client, refuses statements that would
//! leave session state behind, rolls back every transaction of a shadow client, and records
//! in a [`Ledger`] which transactions of an invocation committed writes.
//!
//! The caller decides where it listens: [`Proxy::serve`] takes any async stream.

#![forbid(unsafe_code)]

mod auth;
mod backend;
mod classify;
mod config;
mod forward;
mod ledger;
mod metrics;
mod plan;
mod pool;
mod prepared;
mod responses;
mod session;
mod startup;
mod unit;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite};

pub use backend::BackendError;
pub use classify::{classify, Kind, Refusal, TRACKED_PARAMS};
pub use config::{ConfigError, ProxyConfig, SessionStatePolicy};
pub use ledger::{Ledger, LedgerEntries};
pub use metrics::MetricsSnapshot;
pub use pool::PoolError;
pub use wire::WireError;

/// Who a client connection serves.
#[derive(Debug, Clone, Default)]
pub struct ClientContext {
    /// Every transaction of this client is rolled back (a shadow run).
    pub shadow: bool,
    /// Where the client's committed writes are recorded.
    pub ledger: Arc<Ledger>,
    /// The caller cannot tell whose the transaction is (neither committing nor rolling it back
    /// would be right): it is refused with `FATAL 08006` and the connection closed.
    pub unattributed: bool,
}

/// Where a connection's context comes from, asked at the start of each of its transactions:
/// a connection a function instance keeps across invocations serves each invocation with that
/// invocation's shadow flag and ledger.
pub type ContextSource = Arc<dyn Fn() -> ClientContext + Send + Sync>;

/// Why serving a client ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// the client broke the protocol or its connection failed
    #[error("client connection")]
    Client(#[from] WireError),
}

/// The backend a client currently holds, for its CancelRequests: PostgreSQL's pid and key.
pub(crate) type CancelTarget = Arc<Mutex<Option<(u32, u32)>>>;

pub(crate) struct Inner {
    pub cfg: Arc<ProxyConfig>,
    pub pool: pool::Pool,
    pub metrics: Arc<metrics::Metrics>,
    pub verifier: auth::ScramVerifier,
    /// The proxy's own BackendKeyData per client: pid → (secret, the backend it holds).
    pub cancels: Mutex<HashMap<u32, (u32, CancelTarget)>>,
    pub next_pid: AtomicU32,
}

/// A PostgreSQL connection proxy; cheap to clone, shared by all its clients.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

impl Proxy {
    pub fn new(cfg: ProxyConfig) -> Result<Proxy, ConfigError> {
        cfg.validate()?;
        let cfg = Arc::new(cfg);
        let metrics = Arc::new(metrics::Metrics::default());
        Ok(Proxy {
            inner: Arc::new(Inner {
                verifier: auth::ScramVerifier::random(&cfg.client_password),
                pool: pool::Pool::new(cfg.clone(), metrics.clone()),
                cfg,
                metrics,
                cancels: Mutex::new(HashMap::new()),
                next_pid: AtomicU32::new(1),
            }),
        })
    }

    /// Serves one client connection until it ends, with one context for all of it.
    pub async fn serve<S>(&self, stream: S, ctx: ClientContext) -> Result<(), ServeError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        self.serve_with(stream, Arc::new(move || ctx.clone())).await
    }

    /// Serves one client connection until it ends, asking `source` for the context at the
    /// start of each transaction (never within one).
    pub async fn serve_with<S>(&self, stream: S, source: ContextSource) -> Result<(), ServeError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let Some(start) = startup::handshake(&self.inner, stream).await? else {
            return Ok(());
        };
        session::run(&self.inner, start, source).await
    }

    /// The counters now.
    pub fn metrics(&self) -> MetricsSnapshot {
        let (open, idle, waiters) = self.inner.pool.counts();
        self.inner.metrics.snapshot(open, idle, waiters)
    }
}
