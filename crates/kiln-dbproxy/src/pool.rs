//! The pool of backends: at most `pool_size` open, handed out per transaction to FIFO waiters.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::backend::{Backend, BackendError};
use crate::config::ProxyConfig;
use crate::metrics::Metrics;

/// A backend returned with more prepared statements than this is closed instead, which
/// bounds what statements of departed clients cost the server.
const MAX_PREPARED_PER_BACKEND: usize = 1000;

/// Why no backend was handed out.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// every backend stayed busy for the whole queue timeout
    #[error("all {size} connections of kiln's database proxy stayed busy for {timeout:?}: shorten transactions, raise the pool size (PostgreSQL's max_connections permitting) or the queue timeout")]
    Timeout { size: usize, timeout: Duration },
    /// opening a new backend failed
    #[error(transparent)]
    Connect(#[from] BackendError),
}

enum Grant {
    Backend(Backend),
    /// A slot is free: the waiter opens a backend itself.
    Permit,
}

#[derive(Default)]
struct PoolState {
    idle: Vec<Backend>,
    open: usize,
    waiters: VecDeque<oneshot::Sender<Grant>>,
}

pub(crate) struct Pool {
    cfg: Arc<ProxyConfig>,
    state: Mutex<PoolState>,
    metrics: Arc<Metrics>,
    server_params: Mutex<Option<Vec<(String, String)>>>,
}

impl Pool {
    pub fn new(cfg: Arc<ProxyConfig>, metrics: Arc<Metrics>) -> Pool {
        Pool {
            cfg,
            state: Mutex::new(PoolState::default()),
            metrics,
            server_params: Mutex::new(None),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open, idle and waiting counts, for the metrics.
    pub fn counts(&self) -> (u64, u64, u64) {
        let st = self.state();
        let waiters = st.waiters.iter().filter(|w| !w.is_closed()).count();
        (st.open as u64, st.idle.len() as u64, waiters as u64)
    }

    /// A backend for one transaction, waiting in FIFO order up to the queue timeout.
    pub async fn acquire(&self) -> Result<Backend, PoolError> {
        let start = Instant::now();
        let result = self.acquire_inner(start + self.cfg.queue_timeout).await;
        let waited = start.elapsed().as_micros() as u64;
        self.metrics
            .pool_wait_micros_sum
            .fetch_add(waited, std::sync::atomic::Ordering::Relaxed);
        Metrics::inc(&self.metrics.pool_wait_count);
        match &result {
            Ok(_) => Metrics::inc(&self.metrics.checkouts),
            Err(PoolError::Timeout { .. }) => Metrics::inc(&self.metrics.queue_timeouts),
            Err(PoolError::Connect(_)) => Metrics::inc(&self.metrics.connect_failures),
        }
        result
    }

    async fn acquire_inner(&self, deadline: Instant) -> Result<Backend, PoolError> {
        let rx = {
            let mut st = self.state();
            while let Some(mut b) = st.idle.pop() {
                if b.is_alive() {
                    return Ok(b);
                }
                st.open -= 1;
                Metrics::inc(&self.metrics.backends_lost);
            }
            if st.open < self.cfg.pool_size {
                st.open += 1;
                None
            } else {
                let (tx, rx) = oneshot::channel();
                st.waiters.push_back(tx);
                Some(rx)
            }
        };
        let grant = match rx {
            None => Grant::Permit,
            Some(mut rx) => match tokio::time::timeout_at(deadline.into(), &mut rx).await {
                Ok(Ok(g)) => g,
                _ => {
                    // Closing first means a grant sent from now on comes back to its sender;
                    // one sent just before is still ours to take.
                    rx.close();
                    match rx.try_recv() {
                        Ok(g) => g,
                        Err(_) => {
                            return Err(PoolError::Timeout {
                                size: self.cfg.pool_size,
                                timeout: self.cfg.queue_timeout,
                            })
                        }
                    }
                }
            },
        };
        match grant {
            Grant::Backend(b) => Ok(b),
            Grant::Permit => match Backend::connect(&self.cfg).await {
                Ok(b) => {
                    let mut sp = self.server_params.lock().unwrap_or_else(|e| e.into_inner());
                    if sp.is_none() {
                        *sp = Some(b.startup_params.clone());
                    }
                    Ok(b)
                }
                Err(e) => {
                    self.slot_freed();
                    Err(e.into())
                }
            },
        }
    }

    /// Takes back an idle backend (ReadyForQuery 'I', nothing in flight).
    pub fn release(&self, mut b: Backend) {
        if b.prepared.len() > MAX_PREPARED_PER_BACKEND {
            return self.discard(b);
        }
        let mut st = self.state();
        while let Some(tx) = st.waiters.pop_front() {
            match tx.send(Grant::Backend(b)) {
                Ok(()) => return,
                Err(Grant::Backend(back)) => b = back,
                Err(Grant::Permit) => unreachable!("a backend was sent"),
            }
        }
        st.idle.push(b);
    }

    /// Closes a backend whose state is unknown or dirty, freeing its slot.
    pub fn discard(&self, b: Backend) {
        drop(b);
        self.slot_freed();
    }

    fn slot_freed(&self) {
        let mut st = self.state();
        st.open -= 1;
        while let Some(tx) = st.waiters.pop_front() {
            st.open += 1;
            if tx.send(Grant::Permit).is_ok() {
                return;
            }
            st.open -= 1;
        }
    }

    /// The parameters PostgreSQL reports at login, for the proxy's own startup answers;
    /// logs in once if no backend has yet.
    pub async fn server_params(&self) -> Result<Vec<(String, String)>, PoolError> {
        if let Some(p) = self
            .server_params
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(p);
        }
        let b = self.acquire().await?;
        let p = b.startup_params.clone();
        self.release(b);
        Ok(p)
    }
}
