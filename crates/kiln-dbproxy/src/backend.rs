//! One connection to PostgreSQL, logged in by the proxy itself (SCRAM-SHA-256, md5 or trust,
//! with `postgres-protocol`'s client side), and what the proxy knows of its session.

use std::collections::{BTreeMap, HashSet};

use bytes::BytesMut;
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::classify::tracked_param;
use crate::config::ProxyConfig;
use crate::wire::{self, Message, MessageReader, WireError};

/// Why logging in to PostgreSQL failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// PostgreSQL could not be reached
    #[error("could not connect to PostgreSQL at {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// the connection to PostgreSQL failed
    #[error("the connection to PostgreSQL failed")]
    Wire(#[from] WireError),
    /// PostgreSQL refused the login
    #[error("PostgreSQL refused the proxy's login: {message} (SQLSTATE {code})")]
    Refused { code: String, message: String },
    /// PostgreSQL asked for an authentication method the proxy does not speak
    #[error("PostgreSQL asked for authentication method {0}; the proxy speaks SCRAM-SHA-256, md5, password and trust")]
    Method(i32),
    /// the SCRAM exchange with PostgreSQL failed
    #[error("SCRAM with PostgreSQL failed")]
    Scram(#[source] std::io::Error),
    /// logging in took longer than the connect timeout
    #[error("logging in to PostgreSQL took longer than {0:?}")]
    Timeout(std::time::Duration),
}

/// A logged-in backend.
pub struct Backend {
    pub(crate) conn: MessageReader<TcpStream>,
    /// PostgreSQL's key for cancelling this backend's query.
    pub(crate) pid: u32,
    pub(crate) secret: u32,
    /// Every parameter PostgreSQL reported at login.
    pub(crate) startup_params: Vec<(String, String)>,
    /// The tracked parameters' current values on this backend.
    pub(crate) params: BTreeMap<&'static str, String>,
    /// Server-side names of the statements prepared on this backend.
    pub(crate) prepared: HashSet<String>,
    /// The last ReadyForQuery status.
    pub(crate) status: u8,
}

impl Backend {
    pub(crate) async fn connect(cfg: &ProxyConfig) -> Result<Backend, BackendError> {
        match tokio::time::timeout(cfg.connect_timeout, Backend::login(cfg)).await {
            Ok(r) => r,
            Err(_) => Err(BackendError::Timeout(cfg.connect_timeout)),
        }
    }

    async fn login(cfg: &ProxyConfig) -> Result<Backend, BackendError> {
        let stream =
            TcpStream::connect(&cfg.upstream)
                .await
                .map_err(|source| BackendError::Connect {
                    addr: cfg.upstream.clone(),
                    source,
                })?;
        let _ = stream.set_nodelay(true);
        let mut conn = MessageReader::new(stream, wire::MAX_MESSAGE_LEN);
        let mut buf = BytesMut::new();
        frontend::startup_message(
            [
                ("user", cfg.upstream_user.as_str()),
                ("database", cfg.database.as_str()),
            ],
            &mut buf,
        )
        .map_err(WireError::Io)?;
        send(&mut conn, &mut buf).await?;
        let password = cfg.upstream_password.as_bytes();
        let mut scram: Option<ScramSha256> = None;
        let mut backend = Backend {
            conn,
            pid: 0,
            secret: 0,
            startup_params: Vec::new(),
            params: BTreeMap::new(),
            prepared: HashSet::new(),
            status: b'I',
        };
        loop {
            let msg = backend.conn.next().await?;
            match msg.tag {
                b'R' => {
                    let mut cur = &msg.body[..];
                    let code = wire::take_i32(&mut cur)?;
                    match code {
                        0 => {}
                        3 => {
                            frontend::password_message(password, &mut buf).map_err(WireError::Io)?
                        }
                        5 => {
                            let salt: [u8; 4] = cur
                                .get(..4)
                                .and_then(|s| s.try_into().ok())
                                .ok_or_else(|| {
                                    WireError::Protocol("md5 request without salt".into())
                                })?;
                            let hash = postgres_protocol::authentication::md5_hash(
                                cfg.upstream_user.as_bytes(),
                                password,
                                salt,
                            );
                            frontend::password_message(hash.as_bytes(), &mut buf)
                                .map_err(WireError::Io)?;
                        }
                        10 => {
                            let offers_scram =
                                cur.split(|b| *b == 0).any(|m| m == b"SCRAM-SHA-256");
                            if !offers_scram {
                                return Err(BackendError::Method(code));
                            }
                            let s = ScramSha256::new(password, ChannelBinding::unsupported());
                            frontend::sasl_initial_response("SCRAM-SHA-256", s.message(), &mut buf)
                                .map_err(WireError::Io)?;
                            scram = Some(s);
                        }
                        11 => {
                            let s = scram.as_mut().ok_or(BackendError::Method(code))?;
                            s.update(cur).map_err(BackendError::Scram)?;
                            frontend::sasl_response(s.message(), &mut buf)
                                .map_err(WireError::Io)?;
                        }
                        12 => {
                            let s = scram.as_mut().ok_or(BackendError::Method(code))?;
                            s.finish(cur).map_err(BackendError::Scram)?;
                        }
                        other => return Err(BackendError::Method(other)),
                    }
                    if !buf.is_empty() {
                        send(&mut backend.conn, &mut buf).await?;
                    }
                }
                b'E' => {
                    let (code, message) = wire::error_fields(&msg.body);
                    return Err(BackendError::Refused { code, message });
                }
                b'S' => {
                    let (name, value) = parameter(&msg)?;
                    backend.note_param(&name, &value);
                    backend.startup_params.push((name, value));
                }
                b'K' => {
                    let b = &msg.body;
                    if b.len() >= 8 {
                        backend.pid = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                        backend.secret = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                    }
                }
                b'Z' => return Ok(backend),
                _ => {}
            }
        }
    }

    /// Records a reported parameter if it is a tracked one.
    pub(crate) fn note_param(&mut self, name: &str, value: &str) {
        if let Some(p) = tracked_param(name) {
            self.params.insert(p, value.to_owned());
        }
    }

    /// Whether the connection still looks usable: PostgreSQL sends nothing to an idle
    /// backend except a FATAL error before it closes it (a restart, an administrator's kill).
    pub(crate) fn is_alive(&mut self) -> bool {
        if matches!(self.conn.buffered(), Ok(Some(_)) | Err(_)) {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.conn.get_mut().try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    pub(crate) async fn write(&mut self, buf: &[u8]) -> Result<(), WireError> {
        self.conn.get_mut().write_all(buf).await?;
        Ok(())
    }
}

async fn send(conn: &mut MessageReader<TcpStream>, buf: &mut BytesMut) -> Result<(), WireError> {
    conn.get_mut().write_all(buf).await?;
    buf.clear();
    Ok(())
}

/// The name and value of a ParameterStatus message.
pub(crate) fn parameter(msg: &Message) -> Result<(String, String), WireError> {
    let mut cur = &msg.body[..];
    Ok((wire::take_cstr(&mut cur)?, wire::take_cstr(&mut cur)?))
}

/// Sends a CancelRequest for a backend.
pub(crate) async fn cancel(upstream: &str, pid: u32, secret: u32) -> std::io::Result<()> {
    let mut s = TcpStream::connect(upstream).await?;
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&16u32.to_be_bytes());
    b.extend_from_slice(&wire::CANCEL_REQUEST.to_be_bytes());
    b.extend_from_slice(&pid.to_be_bytes());
    b.extend_from_slice(&secret.to_be_bytes());
    s.write_all(&b).await?;
    s.shutdown().await
}
