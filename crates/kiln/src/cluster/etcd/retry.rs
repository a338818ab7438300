//! What a failed etcd request is, and trying idempotent ones again: which failures another
//! try (or another member) may cure, and the bounded tries of [`with_retries`].

use std::future::Future;
use std::time::Duration;

use etcd_client::Error as ClientError;
use tonic::Code;

/// A failed etcd request.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd did not answer in time.
    #[error(
        "etcd did not answer {op} after {tries} tries (is a majority of its members reachable?)"
    )]
    Timeout { op: &'static str, tries: u32 },
    /// etcd could not be reached.
    #[error("etcd could not be reached for {op} after {tries} tries")]
    Unavailable {
        op: &'static str,
        tries: u32,
        #[source]
        source: ClientError,
    },
    /// etcd refused the request.
    #[error("etcd refused {op}")]
    Refused {
        op: &'static str,
        #[source]
        source: ClientError,
    },
    /// An endpoint is not a URL.
    #[error("invalid etcd endpoint `{endpoint}`: expected http://HOST:PORT or https://HOST:PORT")]
    Endpoint { endpoint: String },
}

/// How idempotent requests are retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub tries: u32,
    pub try_timeout: Duration,
    pub delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            tries: 5,
            try_timeout: Duration::from_millis(700),
            delay: Duration::from_millis(50),
        }
    }
}

/// Whether a failed request may be sent again: the transport failed, or the member could not
/// serve it (no leader, leader changed, stopping), or it refused a stale token (which
/// `Etcd::retried` refreshes first). A request etcd judged (bad argument, lease not found, a
/// failed comparison) is not retried.
pub fn retryable(error: &ClientError) -> bool {
    if stale_token(error) {
        return true;
    }
    match error {
        ClientError::TransportError(_) | ClientError::IoError(_) => true,
        ClientError::GRpcStatus(status) => matches!(
            status.code(),
            Code::Cancelled
                | Code::Unknown
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::Internal
                | Code::Unavailable
        ),
        _ => false,
    }
}

/// Whether etcd refused a request's token as older than its last auth change (a user or role
/// added, changed or removed): with `--auth-token jwt` every token issued before the change. A
/// new token cures it; services that etcd runs on its own client (elections) keep only the
/// message.
pub(super) fn stale_token(error: &ClientError) -> bool {
    matches!(error, ClientError::GRpcStatus(status)
        if status.message().contains("revision of auth store is old"))
}

/// Whether etcd refused a request's token: expired, unknown to the member, or stale.
pub(super) fn token_refused(error: &ClientError) -> bool {
    stale_token(error)
        || matches!(error, ClientError::GRpcStatus(status)
            if status.code() == Code::Unauthenticated
                || status.message().contains("invalid auth token"))
}

/// Whether a keep-alive failed because the lease no longer exists (it expired or was revoked).
pub(super) fn lease_gone(error: &ClientError) -> bool {
    match error {
        ClientError::LeaseKeepAliveError(message) => message.contains("not found"),
        ClientError::GRpcStatus(status) => status.code() == Code::NotFound,
        _ => false,
    }
}

/// Runs an idempotent request under `policy`: each try bounded, retryable failures tried again.
pub async fn with_retries<T, F, Fut>(
    policy: RetryPolicy,
    op: &'static str,
    mut attempt: F,
) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut last = None;
    for try_number in 1..=policy.tries {
        match tokio::time::timeout(policy.try_timeout, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) if retryable(&e) => last = Some(e),
            Ok(Err(e)) => return Err(EtcdError::Refused { op, source: e }),
            Err(_) => last = None,
        }
        if try_number < policy.tries {
            tokio::time::sleep(policy.delay).await;
        }
    }
    Err(match last {
        Some(source) => EtcdError::Unavailable {
            op,
            tries: policy.tries,
            source,
        },
        None => EtcdError::Timeout {
            op,
            tries: policy.tries,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn unavailable() -> ClientError {
        ClientError::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ))
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            tries: 5,
            try_timeout: Duration::from_millis(50),
            delay: Duration::from_millis(1),
        }
    }

    #[tokio::test]
    async fn a_transport_failure_is_retried_until_a_try_succeeds() {
        let calls = AtomicU32::new(0);
        let result = with_retries(fast(), "get", || {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 3 {
                    Err(unavailable())
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_refusal_is_not_retried() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = with_retries(fast(), "put", || {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(ClientError::InvalidArgs("bad".into())) }
        })
        .await;
        assert!(matches!(result, Err(EtcdError::Refused { op: "put", .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn tries_that_hang_end_in_a_timeout_after_every_try() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = with_retries(fast(), "get", || {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::pending()
        })
        .await;
        assert!(matches!(result, Err(EtcdError::Timeout { tries: 5, .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test]
    async fn the_last_transport_error_is_kept_as_the_source() {
        let result: Result<(), _> =
            with_retries(fast(), "get", || async { Err(unavailable()) }).await;
        let error = result.unwrap_err();
        assert!(matches!(error, EtcdError::Unavailable { tries: 5, .. }));
        assert!(std::error::Error::source(&error).is_some());
    }

    #[test]
    fn grpc_codes_that_mean_another_member_may_answer_are_retryable() {
        let status = |code| ClientError::GRpcStatus(tonic::Status::new(code, "etcdserver"));
        assert!(retryable(&status(Code::Unavailable)));
        assert!(retryable(&status(Code::DeadlineExceeded)));
        assert!(!retryable(&status(Code::InvalidArgument)));
        let stale = tonic::Status::invalid_argument("etcdserver: revision of auth store is old");
        assert!(token_refused(&ClientError::GRpcStatus(stale.clone())));
        assert!(retryable(&ClientError::GRpcStatus(stale)));
        let expired = tonic::Status::unauthenticated("etcdserver: invalid auth token");
        assert!(token_refused(&ClientError::GRpcStatus(expired)));
        assert!(!token_refused(&status(Code::Unavailable)));
        assert!(!retryable(&status(Code::FailedPrecondition)));
        assert!(lease_gone(&status(Code::NotFound)));
        assert!(!retryable(&ClientError::LeaseKeepAliveError(
            "lease not found".into()
        )));
        assert!(lease_gone(&ClientError::LeaseKeepAliveError(
            "lease not found".into()
        )));
    }
}
