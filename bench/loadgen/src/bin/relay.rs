//! `relay`: the relay floor on kiln's own stack. A tokio + hyper HTTP/1.1 server (the same
//! crates, runtime flavour and worker count as `kiln up` on this machine) that hands each
//! request's body, length-prefixed, over a Unix socket to one Node process running the NoOp
//! handler (`bench/floors/node_relay.js --runtime`), and answers with what comes back. No
//! auth, routing, bookkeeping, logs or metrics: one HTTP exchange and one IPC round trip per
//! request, which is the least a platform with the function in another process pays.
//!
//! Usage: relay NODE_RELAY_JS — prints "listening on http://127.0.0.1:PORT".

use std::convert::Infallible;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::Mutex;

fn main() -> Result<()> {
    let script = std::env::args()
        .nth(1)
        .context("usage: relay NODE_RELAY_JS")?;
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads((cpus / 2).max(1))
        .enable_all()
        .build()?
        .block_on(serve(script))
}

async fn serve(script: String) -> Result<()> {
    let sock = std::env::temp_dir().join(format!("kiln-relay-rs-{}.sock", std::process::id()));
    let ipc = UnixListener::bind(&sock)?;
    let mut child = tokio::process::Command::new("node")
        .arg(&script)
        .arg("--runtime")
        .arg(&sock)
        .kill_on_drop(true)
        .spawn()
        .context("starting node")?;
    let (runtime, _) = ipc.accept().await?;
    let _ = std::fs::remove_file(&sock);
    let runtime = Arc::new(Mutex::new(runtime));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = term.recv() => break,
        };
        stream.set_nodelay(true)?;
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request| relay(runtime.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
    let _ = child.kill().await;
    Ok(())
}

async fn relay(
    runtime: Arc<Mutex<UnixStream>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let answer = round_trip(&mut *runtime.lock().await, &body)
        .await
        .unwrap_or_else(|e| Bytes::from(format!("{{\"errorMessage\":\"relay: {e}\"}}")));
    let mut response = Response::new(Full::new(answer));
    response.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

async fn round_trip(runtime: &mut UnixStream, body: &[u8]) -> std::io::Result<Bytes> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(body);
    runtime.write_all(&frame).await?;
    let len = runtime.read_u32().await? as usize;
    let mut answer = vec![0; len];
    runtime.read_exact(&mut answer).await?;
    Ok(Bytes::from(answer))
}
