//! etcd as kiln uses it: the `etcd-client` crate behind the few operations cluster mode needs,
//! with what that crate leaves to its users.
//!
//! - **Endpoint health.** The crate's balancer keeps sending a share of requests to a dead
//!   member (measured: 135 of 861 puts failed after a member was killed). A task per endpoint
//!   does a *linearizable* get every 250 ms through a client of its own, and the shared client's
//!   balancer holds only the endpoints whose last check passed (all of them if none did). A
//!   linearizable read needs the member's leader, so a member that is cut off, or has no
//!   leader yet, is taken out; `status()` would have answered.
//! - **Retries.** Idempotent requests (gets, puts of a whole value, deletes) are tried up to
//!   five times, 50 ms apart, each try bounded by 700 ms: an election takes about a second.
//! - **Watches** resume from the last event's `mod_revision + 1`, so no event is lost when a
//!   stream breaks; a watch whose start was compacted away starts over with a full list.
//! - **gRPC keep-alive pings every 6 s, and only while a stream is open.** etcd answers pings
//!   closer than its `--grpc-keepalive-min-time` (5 s), or pings on an idle connection, with
//!   GOAWAY, which broke watches every few seconds at 500 ms.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, PutOptions, TlsOptions,
};
use tokio::sync::mpsc;

use crate::sync::LockExt;

mod retry;
mod watch;

use retry::{lease_gone, stale_token, token_refused};
pub use retry::{retryable, with_retries, EtcdError, RetryPolicy};
pub use watch::{Entry, WatchCursor, WatchStep, WatchUpdate};

/// How often each endpoint's health is checked, and how long a check may take.
const HEALTH_PERIOD: Duration = Duration::from_millis(250);
const HEALTH_TIMEOUT: Duration = Duration::from_millis(300);
/// Not below etcd's `--grpc-keepalive-min-time` (5 s by default).
const GRPC_KEEPALIVE: Duration = Duration::from_secs(6);
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Connecting with a user authenticates (a bcrypt check on the member: tens of milliseconds),
/// through any member that answers; a node that cannot within these tries does not start.
const CONNECT_POLICY: RetryPolicy = RetryPolicy {
    tries: 5,
    try_timeout: Duration::from_secs(2),
    delay: Duration::from_millis(200),
};
/// A health check's client is connected again on the next check.
const PROBE_CONNECT_POLICY: RetryPolicy = RetryPolicy {
    tries: 1,
    try_timeout: CONNECT_TIMEOUT,
    delay: Duration::ZERO,
};
/// Pause before a broken watch is opened again.
const WATCH_RETRY: Duration = Duration::from_millis(100);

/// Which endpoints the balancer should hold: the healthy ones; all of them when none is (a
/// check that fails everywhere says more about the checks than the members, and an empty
/// balancer would only make every request wait for its timeout).
pub fn balancer_set(health: &[bool]) -> Vec<bool> {
    if health.iter().any(|&h| h) {
        health.to_vec()
    } else {
        vec![true; health.len()]
    }
}

/// The etcd cluster, through the shared client and its endpoints' health checks.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    endpoints: Arc<Vec<String>>,
    health: Arc<Mutex<Vec<bool>>>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

/// The password of `--cluster-user`: kept out of `Debug` output, so no log line or error
/// can show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(password: String) -> Self {
        Self(password)
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// How kiln proves itself to etcd besides its URLs: TLS (the CA of etcd's server certificates,
/// and a client certificate for `--client-cert-auth`) and etcd's user/password auth. Every
/// client kiln opens to etcd takes its options from [`EtcdAccess::connect_options`].
#[derive(Clone, Default)]
pub struct EtcdAccess {
    /// PEM certificates to trust for etcd's server certificates; `Some` means `https://`.
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate (chain) and private key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// etcd user and password.
    pub user: Option<(String, Password)>,
}

impl std::fmt::Debug for EtcdAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Which parts are set, never the key or the password.
        f.debug_struct("EtcdAccess")
            .field("tls", &self.ca.is_some())
            .field("client_certificate", &self.identity.is_some())
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl EtcdAccess {
    /// Whether the endpoints are `https://`.
    pub fn tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The TLS options, `None` for plain `http://`.
    pub fn tls_options(&self) -> Option<TlsOptions> {
        let ca = self.ca.as_ref()?;
        let tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        Some(match &self.identity {
            Some((cert, key)) => tls.identity(Identity::from_pem(cert, key)),
            None => tls,
        })
    }

    /// `refresh`: whether requests authenticate again, themselves, when etcd says their token is
    /// invalid (a health check does it outside its timeout instead).
    fn connect_options(&self, refresh: bool) -> ConnectOptions {
        let mut options = ConnectOptions::new()
            .with_keep_alive(GRPC_KEEPALIVE, GRPC_KEEPALIVE_TIMEOUT)
            .with_keep_alive_while_idle(false)
            .with_connect_timeout(CONNECT_TIMEOUT)
            // A member without a leader answers at once rather than holding requests, and it
            // cancels its watches, which then resume on another member.
            .with_require_leader(true);
        if let Some(tls) = self.tls_options() {
            options = options.with_tls(tls);
        }
        if let Some((name, Password(password))) = &self.user {
            // etcd's tokens expire (simple ones `--auth-token-ttl`, 300 s by default, after their
            // last use on a member; JWTs that long after they were issued).
            options = options
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(refresh);
        }
        options
    }

    /// A client of `endpoints`. With a user, connecting authenticates, which needs a member to
    /// answer: bounded by `policy`.
    async fn client(
        &self,
        endpoints: &[String],
        policy: RetryPolicy,
        refresh: bool,
    ) -> Result<Client, EtcdError> {
        let options = self.connect_options(refresh);
        with_retries(policy, "connect", || {
            Client::connect(endpoints, Some(options.clone()))
        })
        .await
    }
}

/// `host:port` or `http(s)://host:port` as the balancer keys it: a bare `host:port` takes
/// `https://` when `tls`, `http://` otherwise.
pub fn normalise_endpoint(raw: &str, tls: bool) -> Result<String, EtcdError> {
    let raw = raw.trim().trim_end_matches('/');
    let url = if raw.contains("://") {
        raw.to_string()
    } else if tls {
        format!("https://{raw}")
    } else {
        format!("http://{raw}")
    };
    let ok = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .is_some_and(|rest| {
            rest.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
            })
        })
        && url.parse::<http::Uri>().is_ok();
    if ok {
        Ok(url)
    } else {
        Err(EtcdError::Endpoint {
            endpoint: raw.to_string(),
        })
    }
}

impl Etcd {
    /// Connects and starts the endpoints' health checks, which read `health_key`. Lazily
    /// without a user (no member has to answer yet); with one, authenticating needs a member.
    pub async fn connect(
        endpoints: &[String],
        health_key: &str,
        access: &EtcdAccess,
    ) -> Result<Self, EtcdError> {
        let endpoints = endpoints
            .iter()
            .map(|e| normalise_endpoint(e, access.tls()))
            .collect::<Result<Vec<_>, _>>()?;
        let client = access.client(&endpoints, CONNECT_POLICY, true).await?;
        let etcd = Self {
            client,
            health: Arc::new(Mutex::new(vec![true; endpoints.len()])),
            endpoints: Arc::new(endpoints),
            retry: RetryPolicy::default(),
        };
        etcd.check_endpoints(health_key.as_bytes().to_vec(), access.clone());
        Ok(etcd)
    }

    /// Each endpoint and whether its last health check passed.
    pub fn endpoint_health(&self) -> Vec<(String, bool)> {
        let health = self.health.locked().clone();
        self.endpoints.iter().cloned().zip(health).collect()
    }

    fn check_endpoints(&self, key: Vec<u8>, access: EtcdAccess) {
        let (reports, mut report_rx) = mpsc::channel::<(usize, bool)>(64);
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            let endpoint = [endpoint.clone()];
            let reports = reports.clone();
            let key = key.clone();
            let access = access.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(HEALTH_PERIOD);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                // Connected on the first check that can: with a user, connecting authenticates
                // against this very member, which may be down when the node starts.
                let mut probe = None;
                loop {
                    tick.tick().await;
                    if probe.is_none() {
                        probe = access
                            .client(&endpoint, PROBE_CONNECT_POLICY, false)
                            .await
                            .ok();
                    }
                    let healthy = match &probe {
                        Some(probe) => {
                            let mut probe: Client = probe.clone();
                            match tokio::time::timeout(HEALTH_TIMEOUT, probe.get(key.clone(), None))
                                .await
                            {
                                Ok(Ok(_)) => true,
                                Ok(Err(e)) => {
                                    if token_refused(&e) {
                                        // Outside the check's timeout: authenticating goes
                                        // through etcd's log and a bcrypt check, which can
                                        // take longer than a get. Healthy again on the next
                                        // check, with the new token.
                                        let refreshed = probe.refresh_token();
                                        let _ =
                                            tokio::time::timeout(CONNECT_TIMEOUT, refreshed).await;
                                    }
                                    false
                                }
                                Err(_) => false,
                            }
                        }
                        None => false,
                    };
                    if reports.send((index, healthy)).await.is_err() {
                        return;
                    }
                }
            });
        }
        drop(reports);
        let client = self.client.clone();
        let endpoints = self.endpoints.clone();
        let health = Arc::downgrade(&self.health);
        tokio::spawn(async move {
            let mut in_balancer = vec![true; endpoints.len()];
            while let Some((index, healthy)) = report_rx.recv().await {
                let Some(health) = health.upgrade() else {
                    return;
                };
                let target = {
                    let mut health = health.locked();
                    if health[index] == healthy {
                        continue;
                    }
                    health[index] = healthy;
                    balancer_set(&health)
                };
                for (i, (&want, have)) in target.iter().zip(in_balancer.iter_mut()).enumerate() {
                    if want == *have {
                        continue;
                    }
                    let endpoint = &endpoints[i];
                    let changed = if want {
                        client.add_endpoint(endpoint).await
                    } else {
                        client.remove_endpoint(endpoint).await
                    };
                    match changed {
                        Ok(()) => {
                            *have = want;
                            tracing::info!(
                                "etcd endpoint {endpoint} {}",
                                if want {
                                    "back in use"
                                } else {
                                    "taken out of use"
                                }
                            );
                        }
                        Err(e) => tracing::warn!("etcd endpoint {endpoint}: {e}"),
                    }
                }
            }
        });
    }

    /// [`with_retries`] through the shared client, which authenticates again when etcd refuses
    /// its token as older than the last change to etcd's users and roles (etcd-client refreshes
    /// only tokens etcd calls invalid): the next try goes with the new token.
    async fn retried<T, F, Fut>(
        &self,
        policy: RetryPolicy,
        op: &'static str,
        mut attempt: F,
    ) -> Result<T, EtcdError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        with_retries(policy, op, || {
            let sent = attempt();
            async move {
                let result = sent.await;
                if let Err(e) = &result {
                    if stale_token(e) {
                        self.client.refresh_token().await?;
                    }
                }
                result
            }
        })
        .await
    }

    /// One key, read linearizably.
    pub async fn get(&self, key: &str) -> Result<Option<Entry>, EtcdError> {
        let response = self
            .retried(self.retry, "get", || {
                let mut client = self.client.clone();
                async move { client.get(key, None).await }
            })
            .await?;
        Ok(response.kvs().first().map(Entry::from_kv))
    }

    /// Every key under `prefix`, and the revision they were read at.
    pub async fn list(&self, prefix: &str) -> Result<(Vec<Entry>, i64), EtcdError> {
        let response = self
            .retried(self.retry, "list", || {
                let mut client = self.client.clone();
                async move {
                    client
                        .get(prefix, Some(GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((
            response.kvs().iter().map(Entry::from_kv).collect(),
            revision,
        ))
    }

    /// Writes a whole value (idempotent, so retried), bound to `lease` if not 0.
    pub async fn put(&self, key: &str, value: Vec<u8>, lease: i64) -> Result<(), EtcdError> {
        self.retried(self.retry, "put", || {
            let mut client = self.client.clone();
            let value = value.clone();
            async move {
                let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
                client.put(key, value, options).await
            }
        })
        .await?;
        Ok(())
    }

    /// Writes `value` only if `key` does not exist; returns the value that is there now.
    pub async fn put_if_absent(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>, EtcdError> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
        // Idempotent as a whole: a retry after a lost answer finds the value it wrote.
        let response = self
            .retried(self.retry, "create", || {
                let mut client = self.client.clone();
                let value = value.clone();
                async move {
                    let txn = Txn::new()
                        .when([Compare::version(key, CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key, value, None)])
                        .or_else([TxnOp::get(key, None)]);
                    client.txn(txn).await
                }
            })
            .await?;
        if response.succeeded() {
            return Ok(value);
        }
        let existing = response.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        Ok(existing.unwrap_or_default())
    }

    /// Runs a transaction, retried like an idempotent request: the caller makes it safe to send
    /// twice (a retry after a lost answer finds its own write and must recognise it).
    pub async fn txn(
        &self,
        op: &'static str,
        txn: etcd_client::Txn,
    ) -> Result<etcd_client::TxnResponse, EtcdError> {
        self.retried(self.retry, op, || {
            let mut client = self.client.clone();
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
        .await
    }

    /// Deletes every key under `prefix`.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), EtcdError> {
        self.retried(self.retry, "delete", || {
            let mut client = self.client.clone();
            async move {
                client
                    .delete(
                        prefix,
                        Some(etcd_client::DeleteOptions::new().with_prefix()),
                    )
                    .await
            }
        })
        .await?;
        Ok(())
    }

    /// Campaigns in election `name` with `value` on `lease`: returns once this node leads (which
    /// may be never: the caller bounds the wait). Not retried.
    pub async fn campaign(
        &self,
        name: &str,
        value: &str,
        lease: i64,
    ) -> Result<etcd_client::LeaderKey, EtcdError> {
        let mut client = self.client.clone();
        let mut response = client
            .campaign(name, value, lease)
            .await
            .map_err(|source| EtcdError::Refused {
                op: "campaign",
                source,
            })?;
        response.take_leader().ok_or(EtcdError::Timeout {
            op: "campaign",
            tries: 1,
        })
    }

    /// Gives up the leadership `leader` holds.
    pub async fn resign(&self, leader: etcd_client::LeaderKey) -> Result<(), EtcdError> {
        let mut client = self.client.clone();
        let options = etcd_client::ResignOptions::new().with_leader(leader);
        tokio::time::timeout(self.retry.try_timeout, client.resign(Some(options)))
            .await
            .map_err(|_| EtcdError::Timeout {
                op: "resign",
                tries: 1,
            })?
            .map_err(|source| EtcdError::Refused {
                op: "resign",
                source,
            })?;
        Ok(())
    }

    pub async fn delete(&self, key: &str) -> Result<(), EtcdError> {
        self.retried(self.retry, "delete", || {
            let mut client = self.client.clone();
            async move { client.delete(key, None).await }
        })
        .await?;
        Ok(())
    }

    /// Grants a lease of `ttl` seconds. Tried once: a retry after a lost answer would leave a
    /// second lease behind (it would expire unused, but the caller retries anyway).
    pub async fn grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let policy = RetryPolicy {
            tries: 1,
            ..self.retry
        };
        let response = self
            .retried(policy, "lease grant", || {
                let mut client = self.client.clone();
                async move { client.lease_grant(ttl, None).await }
            })
            .await?;
        Ok(response.id())
    }

    /// Sends one keep-alive for `lease` and waits for its answer: `Ok(true)` when etcd renewed
    /// it, `Ok(false)` when the lease no longer exists. Each keep-alive has a stream of its own:
    /// a long-lived stream that a partition ended does not recover by itself.
    pub async fn keep_alive(&self, lease: i64, timeout: Duration) -> Result<bool, EtcdError> {
        let mut client = self.client.clone();
        match tokio::time::timeout(timeout, client.lease_keep_alive(lease)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if lease_gone(&e) => Ok(false),
            Ok(Err(source)) => Err(EtcdError::Unavailable {
                op: "lease keep-alive",
                tries: 1,
                source,
            }),
            Err(_) => Err(EtcdError::Timeout {
                op: "lease keep-alive",
                tries: 1,
            }),
        }
    }

    /// Revokes `lease`, deleting the keys bound to it.
    pub async fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        let result = self
            .retried(self.retry, "lease revoke", || {
                let mut client = self.client.clone();
                async move { client.lease_revoke(lease).await }
            })
            .await;
        match result {
            Err(EtcdError::Refused { source, .. }) if lease_gone(&source) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Watches every key under `prefix`: first a [`WatchUpdate::Reset`] with all of them, then
    /// each change, resumed after broken streams without a gap. Ends when the receiver goes.
    pub fn watch_prefix(&self, prefix: String) -> mpsc::UnboundedReceiver<WatchUpdate> {
        self.watch_prefix_from(prefix, WatchCursor::default())
    }

    /// Watches every key under `prefix` from `cursor` on: for a caller that listed the prefix
    /// itself ([`WatchCursor::listed`]), no first [`WatchUpdate::Reset`].
    pub fn watch_prefix_from(
        &self,
        prefix: String,
        cursor: WatchCursor,
    ) -> mpsc::UnboundedReceiver<WatchUpdate> {
        let (updates, receiver) = mpsc::unbounded_channel();
        let etcd = self.clone();
        tokio::spawn(async move { etcd.run_watch(prefix, cursor, updates).await });
        receiver
    }

    async fn run_watch(
        &self,
        prefix: String,
        mut cursor: WatchCursor,
        updates: mpsc::UnboundedSender<WatchUpdate>,
    ) {
        use etcd_client::{EventType, WatchOptions};
        loop {
            if updates.is_closed() {
                return;
            }
            let from = match cursor.step() {
                WatchStep::List => match self.list(&prefix).await {
                    Ok((entries, revision)) => {
                        let reset = WatchUpdate::Reset { entries, revision };
                        if updates.send(reset).is_err() {
                            return;
                        }
                        cursor.listed(revision);
                        revision + 1
                    }
                    Err(e) => {
                        tracing::debug!("etcd watch of {prefix}: {e}");
                        tokio::time::sleep(WATCH_RETRY).await;
                        continue;
                    }
                },
                WatchStep::WatchFrom(revision) => revision,
            };
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(from)
                .with_progress_notify();
            let mut client = self.client.clone();
            let opened = tokio::time::timeout(
                self.retry.try_timeout,
                client.watch(prefix.as_str(), Some(options)),
            )
            .await;
            let mut stream = match opened {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!("etcd watch of {prefix}: {e}");
                    tokio::time::sleep(WATCH_RETRY).await;
                    continue;
                }
                Err(_) => continue,
            };
            loop {
                let response = match stream.message().await {
                    Ok(Some(response)) => response,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!("etcd watch of {prefix} broke: {e}");
                        break;
                    }
                };
                if response.canceled() {
                    if response.compact_revision() > 0 {
                        cursor.compacted();
                    } else if response.cancel_reason().contains("permission denied") {
                        // A member checks a new watch's token itself and cancels the watch
                        // rather than failing the request, so etcd-client does not notice an
                        // expired token here: authenticate again before the next try.
                        tracing::debug!("etcd watch of {prefix}: permission denied");
                        if let Err(e) = client.refresh_token().await {
                            tracing::debug!("etcd authentication: {e}");
                        }
                    }
                    break;
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let entry = Entry::from_kv(kv);
                    cursor.event(entry.mod_revision);
                    let update = match event.event_type() {
                        EventType::Put => WatchUpdate::Put(entry),
                        EventType::Delete => WatchUpdate::Delete {
                            key: entry.key,
                            mod_revision: entry.mod_revision,
                        },
                    };
                    if updates.send(update).is_err() {
                        return;
                    }
                }
            }
            tokio::time::sleep(WATCH_RETRY).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_balancer_keeps_the_healthy_endpoints_or_all_when_none_is() {
        assert_eq!(balancer_set(&[true, false, true]), vec![true, false, true]);
        assert_eq!(balancer_set(&[false, false, false]), vec![true; 3]);
        assert_eq!(
            balancer_set(&[false, true, false]),
            vec![false, true, false]
        );
    }

    #[test]
    fn endpoints_are_normalised_to_urls_that_keep_their_scheme() {
        assert_eq!(
            normalise_endpoint("10.0.0.1:2379", false).unwrap(),
            "http://10.0.0.1:2379"
        );
        assert_eq!(
            normalise_endpoint("10.0.0.1:2379", true).unwrap(),
            "https://10.0.0.1:2379"
        );
        assert_eq!(
            normalise_endpoint("http://etcd-1:2379/", true).unwrap(),
            "http://etcd-1:2379"
        );
        assert_eq!(
            normalise_endpoint("https://etcd-1:2379", false).unwrap(),
            "https://etcd-1:2379"
        );
        assert!(normalise_endpoint("unix://etcd-1:2379", false).is_err());
        assert!(normalise_endpoint("http://", false).is_err());
        assert!(normalise_endpoint("https://a:1/path", true).is_err());
        assert!(normalise_endpoint("etcd-1", false).is_err());
    }

    #[test]
    fn debug_output_shows_neither_the_password_nor_the_key() {
        let access = EtcdAccess {
            ca: Some(b"CA PEM".to_vec()),
            identity: Some((b"CERT PEM".to_vec(), b"KEY PEM".to_vec())),
            user: Some(("kiln".into(), Password::new("s3cret".into()))),
        };
        let shown = format!("{access:?}");
        assert!(shown.contains("kiln"), "{shown}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("KEY"),
            "{shown}"
        );
    }
}
