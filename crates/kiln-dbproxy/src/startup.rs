//! A client's first moments: the startup packet (SSL and GSS encryption declined, cancel
//! requests forwarded), SCRAM-SHA-256 against the configured credentials, and the greeting.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::auth::{self, AuthError};
use crate::backend;
use crate::classify::tracked_param;
use crate::metrics::Metrics;
use crate::wire::{self, Message, MessageReader, Severity, Startup, WireError};
use crate::{CancelTarget, Inner, ServeError};

/// A client that logged in.
pub(crate) struct ClientStart<S> {
    pub conn: MessageReader<S>,
    pub pid: u32,
    pub cancel_target: CancelTarget,
    /// The tracked parameters as the client sees them.
    pub params: BTreeMap<&'static str, String>,
}

/// Startup parameters a client may send without changing session state the proxy cannot
/// carry from backend to backend.
const IGNORED_STARTUP_PARAMS: [&str; 2] = ["extra_float_digits", "options"];

async fn fatal<S: AsyncWrite + Unpin>(
    conn: &mut S,
    code: &str,
    message: &str,
) -> Result<(), ServeError> {
    let mut out = bytes::BytesMut::new();
    wire::error_response(Severity::Fatal, code, message).encode(&mut out);
    conn.write_all(&out).await.map_err(WireError::Io)?;
    let _ = conn.shutdown().await;
    Ok(())
}

async fn send<S: AsyncWrite + Unpin>(conn: &mut S, msgs: &[Message]) -> Result<(), ServeError> {
    conn.write_all(&wire::encode_all(msgs))
        .await
        .map_err(WireError::Io)?;
    Ok(())
}

/// Runs the startup and authentication; `None` when the connection ended there (a cancel
/// request, a refusal, a failed login).
pub(crate) async fn handshake<S>(
    inner: &Inner,
    mut stream: S,
) -> Result<Option<ClientStart<S>>, ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let params = loop {
        match wire::read_startup(&mut stream).await {
            Ok(Startup::Ssl) | Ok(Startup::GssEnc) => {
                stream.write_all(b"N").await.map_err(WireError::Io)?;
            }
            Ok(Startup::Cancel { pid, secret }) => {
                forward_cancel(inner, pid, secret).await;
                return Ok(None);
            }
            Ok(Startup::V3 { minor, params }) => {
                // A newer minor version or protocol options: PostgreSQL's answer is to offer
                // 3.0 without the options, and the client decides whether to go on.
                let options: Vec<&str> = params
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .filter(|k| k.starts_with("_pq_."))
                    .collect();
                if minor > 0 || !options.is_empty() {
                    let m = wire::negotiate_protocol_version(&options);
                    stream
                        .write_all(&wire::encode_all([&m]))
                        .await
                        .map_err(WireError::Io)?;
                }
                break params
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with("_pq_."))
                    .collect::<Vec<_>>();
            }
            Err(WireError::Protocol(m)) => {
                fatal(&mut stream, "08P01", &m).await?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some(user) = get("user").map(str::to_owned) else {
        fatal(
            &mut stream,
            "28000",
            "no PostgreSQL user name specified in startup packet",
        )
        .await?;
        return Ok(None);
    };
    let database = get("database").unwrap_or(&user).to_owned();
    if let Some(r) = get("replication").filter(|v| !matches!(*v, "false" | "off" | "0" | "no")) {
        let _ = r;
        fatal(&mut stream, "0A000", "kiln's database proxy does not serve replication connections: connect to PostgreSQL directly for replication").await?;
        return Ok(None);
    }
    let mut client_params = BTreeMap::new();
    for (name, value) in &params {
        if matches!(name.as_str(), "user" | "database" | "replication") {
            continue;
        }
        if let Some(p) = tracked_param(name) {
            client_params.insert(p, value.clone());
        } else if IGNORED_STARTUP_PARAMS.contains(&name.as_str()) {
            if name == "options" && !value.trim().is_empty() {
                fatal(&mut stream, "0A000", "kiln's database proxy pools connections per transaction, so startup options (-c …) would leak to other clients: set them per transaction with SET LOCAL, or for the role with ALTER ROLE … SET").await?;
                return Ok(None);
            }
        } else {
            let msg = format!("kiln's database proxy pools connections per transaction, so the startup parameter \"{name}\" would leak to other clients: set it per transaction with SET LOCAL, or for the role with ALTER ROLE … SET");
            fatal(&mut stream, "0A000", &msg).await?;
            return Ok(None);
        }
    }

    let mut conn = MessageReader::new(stream, 64 * 1024);
    let login = match authenticate(inner, &mut conn, &user).await {
        Err(ServeError::Client(WireError::Protocol(m))) => {
            fatal(conn.get_mut(), "08P01", &m).await?;
            return Ok(None);
        }
        other => other?,
    };
    match login {
        Ok(()) => {}
        Err(e) => {
            Metrics::inc(&inner.metrics.auth_failures);
            let (code, msg) = match e {
                AuthError::WrongPassword => (
                    "28P01",
                    format!("password authentication failed for user \"{user}\""),
                ),
                other => ("08P01", other.to_string()),
            };
            fatal(conn.get_mut(), code, &msg).await?;
            return Ok(None);
        }
    }
    if database != inner.cfg.database {
        let msg = format!(
            "database \"{database}\" does not exist (kiln's database proxy serves \"{}\")",
            inner.cfg.database
        );
        fatal(conn.get_mut(), "3D000", &msg).await?;
        return Ok(None);
    }
    let server = match inner.pool.server_params().await {
        Ok(p) => p,
        Err(e) => {
            let msg = format!(
                "kiln's database proxy could not log in to PostgreSQL: {}",
                error_chain(&e)
            );
            fatal(conn.get_mut(), "08006", &msg).await?;
            return Ok(None);
        }
    };
    let mut greeting = vec![wire::authentication(0, &[])];
    let mut seen = BTreeMap::new();
    for (name, value) in &server {
        if let Some(p) = tracked_param(name) {
            let v = client_params
                .get(p)
                .cloned()
                .unwrap_or_else(|| value.clone());
            seen.insert(p, v.clone());
            greeting.push(wire::parameter_status(name, &v));
        } else {
            greeting.push(wire::parameter_status(name, value));
        }
    }
    for (p, v) in &client_params {
        if !seen.contains_key(p) {
            greeting.push(wire::parameter_status(p, v));
            seen.insert(p, v.clone());
        }
    }
    let pid = inner.next_pid.fetch_add(1, Ordering::Relaxed);
    let secret = u32::from_be_bytes(auth::random_bytes(4).try_into().unwrap_or([0; 4]));
    let cancel_target: CancelTarget = Arc::new(Mutex::new(None));
    inner
        .cancels
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(pid, (secret, cancel_target.clone()));
    greeting.push(wire::backend_key_data(pid, secret));
    greeting.push(wire::ready_for_query(b'I'));
    send(conn.get_mut(), &greeting).await?;
    Ok(Some(ClientStart {
        conn,
        pid,
        cancel_target,
        params: seen,
    }))
}

/// The SCRAM-SHA-256 exchange; the outer error is the connection's, the inner the login's.
async fn authenticate<S>(
    inner: &Inner,
    conn: &mut MessageReader<S>,
    user: &str,
) -> Result<Result<(), AuthError>, ServeError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mock;
    let verifier = if user == inner.cfg.client_user {
        &inner.verifier
    } else {
        mock = auth::ScramVerifier::mock();
        &mock
    };
    send(
        conn.get_mut(),
        &[wire::authentication(10, b"SCRAM-SHA-256\0\0")],
    )
    .await?;
    let first = conn.next().await?;
    if first.tag != b'p' {
        return Ok(Err(AuthError::Malformed("expected a SASLInitialResponse")));
    }
    let mut cur = &first.body[..];
    let mechanism = wire::take_cstr(&mut cur)?;
    if mechanism != "SCRAM-SHA-256" {
        return Ok(Err(AuthError::Malformed(
            "the client chose a mechanism other than SCRAM-SHA-256",
        )));
    }
    let len = wire::take_i32(&mut cur)?;
    if len < 0 || len as usize != cur.len() {
        return Ok(Err(AuthError::Malformed(
            "SASLInitialResponse length does not match",
        )));
    }
    let nonce = STANDARD.encode(auth::random_bytes(18));
    let (exchange, server_first) = match auth::server_first(verifier, cur, &nonce) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    send(
        conn.get_mut(),
        &[wire::authentication(11, server_first.as_bytes())],
    )
    .await?;
    let last = conn.next().await?;
    if last.tag != b'p' {
        return Ok(Err(AuthError::Malformed("expected a SASLResponse")));
    }
    match exchange.finish(verifier, &last.body) {
        Ok(server_final) => {
            send(
                conn.get_mut(),
                &[wire::authentication(12, server_final.as_bytes())],
            )
            .await?;
            Ok(Ok(()))
        }
        Err(e) => Ok(Err(e)),
    }
}

async fn forward_cancel(inner: &Inner, pid: u32, secret: u32) {
    let target = {
        let cancels = inner.cancels.lock().unwrap_or_else(|e| e.into_inner());
        match cancels.get(&pid) {
            Some((s, t)) if *s == secret => *t.lock().unwrap_or_else(|e| e.into_inner()),
            _ => None,
        }
    };
    if let Some((bpid, bsecret)) = target {
        if let Err(e) = backend::cancel(&inner.cfg.upstream, bpid, bsecret).await {
            tracing::warn!(error = %e, "forwarding a cancel request to PostgreSQL failed");
        }
    }
}

/// An error and its sources, for messages sent to clients.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
