//! The peer port: invocations one node forwards to another, on persistent TCP connections
//! with a framed protocol (cheaper than HTTP/2 between nodes; see docs/cluster.md).
//!
//! A frame is two big-endian `u32` lengths, a JSON header ([`Header`]) and a raw body (the
//! payload or the answer). A connection starts with a challenge each way: the server sends a
//! random challenge, the client answers it with an HMAC under the cluster's peer key (derived
//! from the admin secret every node has) and sends its own, which the server answers. Then the
//! client sends one [`Header::Invoke`] at a time; the server answers [`Header::Busy`] at once,
//! or [`Header::Accepted`] as soon as an instance is taken or booked and then
//! [`Header::Outcome`] (or [`Header::Failed`]). A forwarded request never waits in the
//! target's queue: what would wait answers `Busy` and the sender tries elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::agent::{AgentError, InvokeOutcome, InvokeRequest, Placement, RouteHints, StartPath};
use crate::sync::LockExt;

/// The largest header kiln reads (a log of the invocation is in it).
const MAX_HEADER_BYTES: usize = 1 << 20;
/// The largest body: a synchronous payload or answer (6 MB) with room.
const MAX_BODY_BYTES: usize = 8 << 20;
/// Connecting and the handshake, together.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);
/// From sending a request to its `Accepted` or `Busy`: the target decides without waiting.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(3);
/// Past the function's own timeout, how long the sender waits for the outcome.
const OUTCOME_MARGIN: Duration = Duration::from_secs(10);
/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The key peers authenticate each other with: derived from the cluster's admin secret, which
/// every node holds, so nothing more is to be distributed.
#[derive(Clone)]
pub struct PeerKey([u8; 32]);

impl PeerKey {
    pub fn derive(admin_secret: &str) -> Self {
        let mut mac = HmacSha256::new_from_slice(admin_secret.as_bytes()).expect("any key length");
        mac.update(b"kiln peer key v1");
        Self(mac.finalize().into_bytes().into())
    }

    fn mac(&self, challenge: &str, node: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("any key length");
        mac.update(b"kiln-peer\n");
        mac.update(challenge.as_bytes());
        mac.update(b"\n");
        mac.update(node.as_bytes());
        mac
    }

    fn sign(&self, challenge: &str, node: &str) -> String {
        hex::encode(self.mac(challenge, node).finalize().into_bytes())
    }

    /// In constant time.
    fn verify(&self, challenge: &str, node: &str, signature: &str) -> bool {
        match hex::decode(signature) {
            Ok(bytes) => self.mac(challenge, node).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }
}

fn challenge() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

/// An invocation as it crosses to another node; the payload is the frame's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Forward {
    pub function: String,
    pub revision: u64,
    pub placement: Placement,
    pub request_id: String,
    pub trace_id: String,
    pub client_context: Option<String>,
    pub hints: RouteHints,
    pub admit_objects: Option<bool>,
    pub shadow: bool,
    pub timeout_s: u32,
}

impl Forward {
    /// What the target's agent runs: the request as the sender's controller made it.
    pub fn request(&self, payload: Bytes) -> InvokeRequest {
        InvokeRequest {
            request_id: self.request_id.clone(),
            payload,
            trace_id: self.trace_id.clone(),
            client_context: self.client_context.clone(),
            hints: self.hints.clone(),
            tags: crate::function::InvocationTags {
                admit: self.admit_objects,
                shadow: if self.shadow {
                    crate::function::Shadow::Yes
                } else {
                    crate::function::Shadow::No
                },
                ..Default::default()
            },
        }
    }
}

/// An outcome as it comes back; the answer is the frame's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub function_error: bool,
    pub log: String,
    pub cold_start: Option<StartPath>,
    pub init_duration_us: Option<u64>,
    pub duration_us: u64,
    pub max_memory_mb: u64,
    pub out_of_memory: bool,
    pub memory_limit_mb: Option<u32>,
    pub limit_write_us: Option<u64>,
}

impl Outcome {
    fn of(outcome: &InvokeOutcome) -> Self {
        let us = |d: Duration| d.as_micros() as u64;
        Self {
            function_error: outcome.function_error,
            log: outcome.log.clone(),
            cold_start: outcome.cold_start,
            init_duration_us: outcome.init_duration.map(us),
            duration_us: us(outcome.duration),
            max_memory_mb: outcome.max_memory_mb,
            out_of_memory: outcome.out_of_memory,
            memory_limit_mb: outcome.memory_limit_mb,
            limit_write_us: outcome.limit_write.map(us),
        }
    }

    fn into_outcome(self, body: Bytes) -> InvokeOutcome {
        InvokeOutcome {
            body,
            function_error: self.function_error,
            log: self.log,
            cold_start: self.cold_start,
            init_duration: self.init_duration_us.map(Duration::from_micros),
            duration: Duration::from_micros(self.duration_us),
            max_memory_mb: self.max_memory_mb,
            out_of_memory: self.out_of_memory,
            memory_limit_mb: self.memory_limit_mb,
            limit_write: self.limit_write_us.map(Duration::from_micros),
        }
    }
}

/// A frame's header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Header {
    Challenge {
        challenge: String,
    },
    Hello {
        node: String,
        mac: String,
        challenge: String,
    },
    Welcome {
        mac: String,
    },
    Invoke(Forward),
    Accepted,
    Busy,
    Outcome(Outcome),
    Failed {
        error: AgentError,
    },
}

async fn write_frame(stream: &mut TcpStream, header: &Header, body: &[u8]) -> std::io::Result<()> {
    let header = serde_json::to_vec(header).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(8 + header.len() + body.len());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(body);
    stream.write_all(&frame).await
}

async fn read_frame(stream: &mut TcpStream) -> std::io::Result<(Header, Bytes)> {
    let mut lengths = [0u8; 8];
    stream.read_exact(&mut lengths).await?;
    let header_len = u32::from_be_bytes(lengths[..4].try_into().expect("4 bytes")) as usize;
    let body_len = u32::from_be_bytes(lengths[4..].try_into().expect("4 bytes")) as usize;
    if header_len > MAX_HEADER_BYTES || body_len > MAX_BODY_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a peer frame of {header_len} + {body_len} bytes is over the limit"),
        ));
    }
    let mut buffer = vec![0u8; header_len + body_len];
    stream.read_exact(&mut buffer).await?;
    let body = Bytes::from(buffer.split_off(header_len));
    let header = serde_json::from_slice(&buffer)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok((header, body))
}

/// What serves forwarded invocations on this node: resolves the function and runs it within
/// the request's placement, firing `accepted` once it has an instance.
pub trait PeerHandler: Send + Sync + 'static {
    fn invoke(
        &self,
        forward: Forward,
        payload: Bytes,
        accepted: oneshot::Sender<()>,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>>;
}

/// Accepts peers' connections on `listener` until the process ends.
pub fn serve(listener: TcpListener, node: String, key: PeerKey, handler: Arc<dyn PeerHandler>) {
    tokio::spawn(async move {
        loop {
            let (stream, from) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("peer port: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (node, key, handler) = (node.clone(), key.clone(), handler.clone());
            tokio::spawn(async move {
                if let Err(e) = connection(stream, &node, &key, &*handler).await {
                    tracing::debug!("peer connection from {from} ended: {e}");
                }
            });
        }
    });
}

async fn connection(
    mut stream: TcpStream,
    node: &str,
    key: &PeerKey,
    handler: &dyn PeerHandler,
) -> std::io::Result<()> {
    let ours = challenge();
    write_frame(
        &mut stream,
        &Header::Challenge {
            challenge: ours.clone(),
        },
        b"",
    )
    .await?;
    let hello = tokio::time::timeout(CONNECT_TIMEOUT, read_frame(&mut stream))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let Header::Hello {
        node: from,
        mac,
        challenge: theirs,
    } = hello.0
    else {
        return Err(std::io::Error::other("the peer did not say hello"));
    };
    if !key.verify(&ours, &from, &mac) {
        tracing::warn!(peer = %from, "peer port: a connection failed authentication");
        return Err(std::io::Error::other("authentication failed"));
    }
    let welcome = Header::Welcome {
        mac: key.sign(&theirs, node),
    };
    write_frame(&mut stream, &welcome, b"").await?;
    loop {
        let (header, payload) = match read_frame(&mut stream).await {
            Ok(frame) => frame,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let Header::Invoke(forward) = header else {
            return Err(std::io::Error::other("expected an invocation"));
        };
        let (accepted_tx, mut accepted_rx) = oneshot::channel();
        let mut invocation = handler.invoke(forward, payload, accepted_tx);
        let mut told = false;
        let result = loop {
            tokio::select! {
                result = &mut invocation => break result,
                fired = &mut accepted_rx, if !told => {
                    told = true;
                    if fired.is_ok() {
                        write_frame(&mut stream, &Header::Accepted, b"").await?;
                    }
                }
            }
        };
        match result {
            Err(AgentError::Busy) if !told => write_frame(&mut stream, &Header::Busy, b"").await?,
            Ok(outcome) => {
                let header = Header::Outcome(Outcome::of(&outcome));
                write_frame(&mut stream, &header, &outcome.body).await?
            }
            Err(error) => write_frame(&mut stream, &Header::Failed { error }, b"").await?,
        }
    }
}

/// Why a forwarded invocation was not sent: nothing ran, so the router tries elsewhere.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("cannot reach {peer} at {address}: {source}")]
    Unreachable {
        peer: String,
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{peer} at {address} did not answer in time")]
    ConnectTimeout { peer: String, address: String },
    #[error("{peer}: {source}")]
    Io {
        peer: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{peer} did not accept in time")]
    AcceptTimeout { peer: String },
}

impl PeerError {
    fn io(peer: &str, source: std::io::Error) -> Self {
        PeerError::Io {
            peer: peer.to_string(),
            source,
        }
    }
}

/// What became of a forwarded invocation.
#[derive(Debug)]
pub enum Forwarded {
    /// It ran there (or failed there after it was accepted).
    Done(Result<InvokeOutcome, AgentError>),
    /// The target would have had to wait: try elsewhere.
    Busy,
    /// It never reached an instance there (no connection, no answer before `Accepted`): safe
    /// to run elsewhere.
    NotSent(PeerError),
}

/// Connections to the other nodes' peer ports, kept open between invocations.
pub struct PeerClient {
    node: String,
    key: PeerKey,
    idle: Mutex<HashMap<String, Vec<TcpStream>>>,
}

impl PeerClient {
    pub fn new(node: String, key: PeerKey) -> Self {
        Self {
            node,
            key,
            idle: Mutex::new(HashMap::new()),
        }
    }

    async fn connect(&self, peer: &str, address: &str) -> std::io::Result<TcpStream> {
        let mut stream = TcpStream::connect(address).await?;
        let _ = stream.set_nodelay(true);
        let (header, _) = read_frame(&mut stream).await?;
        let Header::Challenge { challenge: theirs } = header else {
            return Err(std::io::Error::other("the peer sent no challenge"));
        };
        let ours = challenge();
        let hello = Header::Hello {
            node: self.node.clone(),
            mac: self.key.sign(&theirs, &self.node),
            challenge: ours.clone(),
        };
        write_frame(&mut stream, &hello, b"").await?;
        match read_frame(&mut stream).await? {
            (Header::Welcome { mac }, _) if self.key.verify(&ours, peer, &mac) => Ok(stream),
            _ => Err(std::io::Error::other(format!(
                "{peer} at {address} did not prove it is a node of this cluster"
            ))),
        }
    }

    /// An idle connection to `peer`, or a new one.
    async fn connection(&self, peer: &str, address: &str) -> Result<TcpStream, PeerError> {
        if let Some(stream) = self.idle.locked().get_mut(address).and_then(Vec::pop) {
            return Ok(stream);
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, self.connect(peer, address)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(source)) => Err(PeerError::Unreachable {
                peer: peer.to_string(),
                address: address.to_string(),
                source,
            }),
            Err(_) => Err(PeerError::ConnectTimeout {
                peer: peer.to_string(),
                address: address.to_string(),
            }),
        }
    }

    fn keep(&self, address: &str, stream: TcpStream) {
        let mut idle = self.idle.locked();
        let kept = idle.entry(address.to_string()).or_default();
        if kept.len() < IDLE_PER_PEER {
            kept.push(stream);
        }
    }

    /// Forgets every idle connection to `address` (its node went).
    pub fn forget(&self, address: &str) {
        self.idle.locked().remove(address);
    }

    /// Runs `forward` on `peer`. A kept connection that turns out closed is replaced once.
    pub async fn invoke(
        &self,
        peer: &str,
        address: &str,
        forward: &Forward,
        payload: &Bytes,
    ) -> Forwarded {
        let mut stream = match self.connection(peer, address).await {
            Ok(stream) => stream,
            Err(e) => return Forwarded::NotSent(e),
        };
        let request = Header::Invoke(forward.clone());
        let mut sent = write_frame(&mut stream, &request, payload).await;
        let mut first = match &sent {
            Ok(()) => tokio::time::timeout(ACCEPT_TIMEOUT, read_frame(&mut stream)).await,
            Err(_) => Ok(Err(std::io::ErrorKind::BrokenPipe.into())),
        };
        if matches!(first, Ok(Err(_))) {
            // A kept connection the peer closed meanwhile (it restarted): one new one.
            self.forget(address);
            stream = match self.connection(peer, address).await {
                Ok(stream) => stream,
                Err(e) => return Forwarded::NotSent(e),
            };
            sent = write_frame(&mut stream, &request, payload).await;
            first = match sent {
                Ok(()) => tokio::time::timeout(ACCEPT_TIMEOUT, read_frame(&mut stream)).await,
                Err(e) => return Forwarded::NotSent(PeerError::io(peer, e)),
            };
        }
        let frame = match first {
            Err(_) => {
                return Forwarded::NotSent(PeerError::AcceptTimeout {
                    peer: peer.to_string(),
                })
            }
            Ok(Err(e)) => return Forwarded::NotSent(PeerError::io(peer, e)),
            Ok(Ok(frame)) => frame,
        };
        let frame = match frame {
            (Header::Busy, _) => {
                self.keep(address, stream);
                return Forwarded::Busy;
            }
            (Header::Accepted, _) => {
                let wait = Duration::from_secs(u64::from(forward.timeout_s)) + OUTCOME_MARGIN;
                match tokio::time::timeout(wait, read_frame(&mut stream)).await {
                    Ok(Ok(frame)) => frame,
                    Ok(Err(e)) => {
                        return Forwarded::Done(Err(AgentError::PeerLost(format!("{peer}: {e}"))))
                    }
                    Err(_) => {
                        return Forwarded::Done(Err(AgentError::PeerLost(format!(
                            "{peer} gave no answer within the function's timeout"
                        ))))
                    }
                }
            }
            frame => frame,
        };
        match frame {
            (Header::Outcome(outcome), body) => {
                self.keep(address, stream);
                Forwarded::Done(Ok(outcome.into_outcome(body)))
            }
            (Header::Failed { error }, _) => {
                self.keep(address, stream);
                Forwarded::Done(Err(error))
            }
            (other, _) => Forwarded::Done(Err(AgentError::PeerLost(format!(
                "{peer} answered out of turn: {other:?}"
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl PeerHandler for Echo {
        fn invoke(
            &self,
            forward: Forward,
            payload: Bytes,
            accepted: oneshot::Sender<()>,
        ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
            Box::pin(async move {
                if forward.placement == Placement::Idle {
                    return Err(AgentError::Busy);
                }
                if forward.function == "fails" {
                    return Err(AgentError::Sandbox("no sandbox".into()));
                }
                let _ = accepted.send(());
                Ok(InvokeOutcome {
                    body: payload,
                    function_error: false,
                    log: format!("START RequestId: {}\n", forward.request_id),
                    cold_start: Some(StartPath::Hot),
                    init_duration: Some(Duration::from_micros(1500)),
                    duration: Duration::from_micros(250),
                    max_memory_mb: 42,
                    out_of_memory: false,
                    memory_limit_mb: None,
                    limit_write: None,
                })
            })
        }
    }

    fn forward(function: &str, placement: Placement) -> Forward {
        Forward {
            function: function.into(),
            revision: 3,
            placement,
            request_id: "r-1".into(),
            trace_id: String::new(),
            client_context: None,
            hints: RouteHints::default(),
            admit_objects: None,
            shadow: false,
            timeout_s: 3,
        }
    }

    async fn server(key: PeerKey) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        serve(listener, "b".into(), key, Arc::new(Echo));
        address
    }

    #[tokio::test]
    async fn a_forwarded_invocation_comes_back_whole_and_the_connection_is_reused() {
        let key = PeerKey::derive("secret");
        let address = server(key.clone()).await;
        let client = PeerClient::new("a".into(), key);
        let payload = Bytes::from_static(b"{\"x\":1}");
        for _ in 0..3 {
            match client
                .invoke("b", &address, &forward("f", Placement::NoQueue), &payload)
                .await
            {
                Forwarded::Done(Ok(outcome)) => {
                    assert_eq!(outcome.body, payload);
                    assert_eq!(outcome.cold_start, Some(StartPath::Hot));
                    assert_eq!(outcome.init_duration, Some(Duration::from_micros(1500)));
                    assert_eq!(outcome.max_memory_mb, 42);
                    assert!(outcome.log.contains("r-1"));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(client.idle.locked().get(&address).map(Vec::len), Some(1));
    }

    #[tokio::test]
    async fn busy_and_failures_are_told_apart() {
        let key = PeerKey::derive("secret");
        let address = server(key.clone()).await;
        let client = PeerClient::new("a".into(), key);
        let payload = Bytes::new();
        assert!(matches!(
            client
                .invoke("b", &address, &forward("f", Placement::Idle), &payload)
                .await,
            Forwarded::Busy
        ));
        assert!(matches!(
            client
                .invoke(
                    "b",
                    &address,
                    &forward("fails", Placement::NoQueue),
                    &payload
                )
                .await,
            Forwarded::Done(Err(AgentError::Sandbox(_)))
        ));
    }

    #[tokio::test]
    async fn a_node_without_the_key_is_refused_both_ways() {
        let address = server(PeerKey::derive("secret")).await;
        let stranger = PeerClient::new("a".into(), PeerKey::derive("another secret"));
        let sent = stranger
            .invoke(
                "b",
                &address,
                &forward("f", Placement::NoQueue),
                &Bytes::new(),
            )
            .await;
        assert!(matches!(sent, Forwarded::NotSent(_)), "{sent:?}");
        // A server that does not know the key cannot pass for the node either.
        let impostor = server(PeerKey::derive("another secret")).await;
        let client = PeerClient::new("a".into(), PeerKey::derive("secret"));
        let sent = client
            .invoke(
                "b",
                &impostor,
                &forward("f", Placement::NoQueue),
                &Bytes::new(),
            )
            .await;
        assert!(matches!(sent, Forwarded::NotSent(_)), "{sent:?}");
    }

    #[tokio::test]
    async fn a_dead_peer_is_not_sent_to() {
        let client = PeerClient::new("a".into(), PeerKey::derive("secret"));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let sent = client
            .invoke(
                "b",
                &address,
                &forward("f", Placement::NoQueue),
                &Bytes::new(),
            )
            .await;
        assert!(matches!(sent, Forwarded::NotSent(_)), "{sent:?}");
    }
}
