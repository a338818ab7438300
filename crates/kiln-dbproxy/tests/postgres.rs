//! The proxy against a real PostgreSQL: a private cluster of the distribution's server, run as
//! the `postgres` user, with `psql` or a raw socket as the client. Skipped (with a message)
//! where PostgreSQL is not installed or the test does not run as root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kiln_dbproxy::{ClientContext, ContextSource, Ledger, Proxy, ProxyConfig};
use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PASSWORD: &str = "ledger-test-password";

struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

fn pg_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("running a PostgreSQL tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Cluster {
    fn start() -> Option<Cluster> {
        let bin = pg_bin()?;
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .ok()?
            .stdout
            .starts_with(b"0\n");
        if !is_root {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("kiln-ledger-pg-")
            .tempdir()
            .ok()?;
        run(Command::new("chown")
            .arg("postgres:postgres")
            .arg(dir.path()));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let data = dir.path().join("data");
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(bin.join("initdb"))
            .args([
                "-D",
                data.to_str()?,
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
            ]));
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nmax_connections = 30\npassword_encryption = 'scram-sha-256'\nfsync = off\n",
            dir.path().display()
        );
        std::fs::write(data.join("postgresql.auto.conf"), conf).ok()?;
        let c = Cluster { dir, bin, port };
        c.pg_ctl("start");
        c.psql(
            &format!("CREATE ROLE app LOGIN PASSWORD '{PASSWORD}'"),
            "postgres",
        );
        c.psql("CREATE DATABASE app OWNER app", "postgres");
        c.psql("CREATE TABLE t (id serial PRIMARY KEY, v text)", "app");
        c.psql("GRANT ALL ON t, t_id_seq TO app", "app");
        // A COMMIT that asks for synchronous replication waits forever for this standby: the
        // test's way to lose a backend in the middle of a COMMIT.
        c.psql("ALTER ROLE app SET synchronous_commit = local", "postgres");
        c.psql(
            "ALTER SYSTEM SET synchronous_standby_names = 'nobody'",
            "postgres",
        );
        c.psql("SELECT pg_reload_conf()", "postgres");
        Some(c)
    }

    fn pg_ctl(&self, action: &str) {
        let data = self.dir.path().join("data");
        let log = self.dir.path().join("log");
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args([
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-m",
                "immediate",
                action,
            ]));
    }

    fn psql(&self, sql: &str, db: &str) -> String {
        let out = run(Command::new("psql")
            .env("PGOPTIONS", "-c synchronous_commit=local")
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "postgres",
                "-d",
                db,
                "-c",
                sql,
            ])
            .arg("-h")
            .arg(self.dir.path())
            .args(["-p", &self.port.to_string()]));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.pg_ctl("stop");
    }
}

/// Serves one client connection through a fresh proxy listener; returns its address.
async fn listen(proxy: &Proxy, ctx: ClientContext) -> String {
    listen_with(proxy, Arc::new(move || ctx.clone())).await
}

async fn listen_with(proxy: &Proxy, source: ContextSource) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = proxy.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (proxy, source) = (proxy.clone(), source.clone());
            tokio::spawn(async move { proxy.serve_with(stream, source).await });
        }
    });
    addr.port().to_string()
}

/// Runs a simple query on a logged-in connection, up to ReadyForQuery.
async fn query(s: &mut TcpStream, sql: &str) {
    let mut buf = BytesMut::new();
    frontend::query(sql, &mut buf).unwrap();
    s.write_all(&buf).await.unwrap();
    while let Some((tag, body)) = read_message(s).await {
        assert_ne!(tag, b'E', "{sql}: {}", String::from_utf8_lossy(&body));
        if tag == b'Z' {
            return;
        }
    }
    panic!("{sql}: the connection ended");
}

/// Runs `psql` with each statement as its own query; true if every one succeeded.
async fn client(port: &str, statements: &[&str]) -> bool {
    let mut cmd = tokio::process::Command::new("psql");
    cmd.env("PGPASSWORD", PASSWORD).args([
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        "127.0.0.1",
        "-p",
        port,
        "-U",
        "app",
        "-d",
        "app",
    ]);
    for s in statements {
        cmd.args(["-c", s]);
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.status().await.unwrap().success()
}

fn skip() -> bool {
    if pg_bin().is_none() || !Path::new("/usr/bin/psql").exists() {
        eprintln!("skipping: PostgreSQL is not installed (scripts/setup-test-env.sh installs it)");
        return true;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_records_what_committed() {
    if skip() {
        return;
    }
    let Some(pg) = Cluster::start() else {
        eprintln!("skipping: a PostgreSQL cluster needs root (to run it as the postgres user)");
        return;
    };
    let mut cfg = ProxyConfig::new(format!("127.0.0.1:{}", pg.port), "app", "app", PASSWORD);
    cfg.pool_size = 2;
    let proxy = Proxy::new(cfg).unwrap();
    let case = |shadow: bool| {
        let ledger = Arc::new(Ledger::new());
        (
            ClientContext {
                shadow,
                ledger: ledger.clone(),
                ..ClientContext::default()
            },
            ledger,
        )
    };

    let (ctx, ledger) = case(false);
    let port = listen(&proxy, ctx).await;
    assert!(
        client(
            &port,
            &[
                "SELECT 1",
                "BEGIN",
                "SELECT count(*) FROM t",
                "COMMIT",
                "BEGIN",
                "INSERT INTO t (v) VALUES ('x')",
                "ROLLBACK"
            ]
        )
        .await
    );
    assert!(
        ledger.is_clean(),
        "reads and rollbacks write nothing: {:?}",
        ledger.snapshot()
    );

    let (ctx, ledger) = case(false);
    let port = listen(&proxy, ctx).await;
    assert!(client(&port, &["INSERT INTO t (v) VALUES ('autocommit')"]).await);
    assert_eq!(
        ledger.snapshot().committed.len(),
        1,
        "{:?}",
        ledger.snapshot()
    );

    let (ctx, ledger) = case(false);
    let port = listen(&proxy, ctx).await;
    assert!(
        client(
            &port,
            &["BEGIN", "INSERT INTO t (v) VALUES ('explicit')", "COMMIT"]
        )
        .await
    );
    let snap = ledger.snapshot();
    assert_eq!(snap.committed.len(), 1, "{snap:?}");
    assert!(!ledger.is_clean());

    let (ctx, ledger) = case(false);
    let port = listen(&proxy, ctx).await;
    assert!(
        client(
            &port,
            &["BEGIN; INSERT INTO t (v) VALUES ('mixed'); COMMIT"]
        )
        .await
    );
    assert_eq!(ledger.snapshot().unchecked, 1, "{:?}", ledger.snapshot());

    let rows = pg.psql("SELECT count(*) FROM t", "app");
    let (ctx, ledger) = case(true);
    let port = listen(&proxy, ctx).await;
    assert!(
        client(
            &port,
            &[
                "INSERT INTO t (v) VALUES ('shadow')",
                "BEGIN",
                "INSERT INTO t (v) VALUES ('shadow')",
                "COMMIT"
            ]
        )
        .await
    );
    assert!(ledger.is_clean(), "{:?}", ledger.snapshot());
    assert_eq!(
        pg.psql("SELECT count(*) FROM t", "app"),
        rows,
        "shadow writes were rolled back"
    );

    // One connection serving one invocation after another: the context is asked for at the
    // start of each transaction, and kept for the whole of it.
    let current = Arc::new(std::sync::Mutex::new(Arc::new(Ledger::new())));
    let source: ContextSource = {
        let current = current.clone();
        Arc::new(move || ClientContext {
            shadow: false,
            ledger: current.lock().unwrap().clone(),
            ..ClientContext::default()
        })
    };
    let port = listen_with(&proxy, source).await;
    let mut conn = login(&port).await;
    let switch = |ledger: &Arc<Ledger>| *current.lock().unwrap() = ledger.clone();
    let (first, second, third) = (
        Arc::new(Ledger::new()),
        Arc::new(Ledger::new()),
        Arc::new(Ledger::new()),
    );
    switch(&first);
    query(&mut conn, "INSERT INTO t (v) VALUES ('first')").await;
    switch(&second);
    query(&mut conn, "BEGIN").await;
    switch(&third);
    query(&mut conn, "INSERT INTO t (v) VALUES ('second')").await;
    query(&mut conn, "COMMIT").await;
    assert_eq!(
        first.snapshot().committed.len(),
        1,
        "{:?}",
        first.snapshot()
    );
    assert_eq!(
        second.snapshot().committed.len(),
        1,
        "{:?}",
        second.snapshot()
    );
    assert!(
        third.is_clean(),
        "a transaction keeps the context it began with"
    );
    drop(conn);

    // A transaction the caller cannot attribute to anyone is refused.
    let nobody = ClientContext {
        unattributed: true,
        ..ClientContext::default()
    };
    let port = listen(&proxy, nobody).await;
    assert!(!client(&port, &["INSERT INTO t (v) VALUES ('nobody')"]).await);
    assert_eq!(
        pg.psql("SELECT count(*) FROM t WHERE v = 'nobody'", "app"),
        "0"
    );

    // A COMMIT whose backend is lost before it answers: uncertain, so a write.
    let (ctx, ledger) = case(false);
    let port = listen(&proxy, ctx).await;
    let waiting = tokio::spawn(async move {
        client(
            &port,
            &[
                "BEGIN",
                "SET LOCAL synchronous_commit = on",
                "INSERT INTO t (v) VALUES ('uncertain')",
                "COMMIT",
            ],
        )
        .await
    });
    let mut terminated = String::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        terminated = pg.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'", "postgres");
        if terminated != "0" {
            break;
        }
    }
    assert_eq!(terminated, "1", "the COMMIT never waited for the standby");
    assert!(
        !waiting.await.unwrap(),
        "the client hears that its COMMIT failed"
    );
    let snap = ledger.snapshot();
    assert_eq!(snap.uncertain, 1, "{snap:?}");
    assert!(!ledger.is_clean());
    assert_eq!(proxy.metrics().backends_lost, 1);
}

/// Reads one message: its tag and body.
async fn read_message(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let tag = s.read_u8().await.ok()?;
    let len = s.read_u32().await.ok()? as usize;
    let mut body = vec![0; len.checked_sub(4)?];
    s.read_exact(&mut body).await.ok()?;
    Some((tag, body))
}

/// Logs in through the proxy with SCRAM-SHA-256, up to ReadyForQuery.
async fn login(port: &str) -> TcpStream {
    match login_with(port, PASSWORD).await {
        Ok(s) => s,
        Err(e) => panic!("login refused: {e:?}"),
    }
}

/// An ErrorResponse's severity, SQLSTATE and message.
fn error_fields(body: &[u8]) -> (String, String, String) {
    let text = String::from_utf8_lossy(body).into_owned();
    let field = |f: char| {
        text.split('\0')
            .find_map(|x| x.strip_prefix(f))
            .unwrap_or_default()
            .to_owned()
    };
    (field('S'), field('C'), field('M'))
}

/// Logs in with a password; the error's fields if the proxy refuses it.
async fn login_with(port: &str, password: &str) -> Result<TcpStream, (String, String, String)> {
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    let mut buf = BytesMut::new();
    frontend::startup_message([("user", "app"), ("database", "app")], &mut buf).unwrap();
    s.write_all(&buf).await.unwrap();
    let mut scram = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
    loop {
        let (tag, body) = read_message(&mut s)
            .await
            .expect("the proxy answers the login");
        buf.clear();
        match (
            tag,
            body.get(..4)
                .map(|c| i32::from_be_bytes(c.try_into().unwrap())),
        ) {
            (b'R', Some(10)) => {
                frontend::sasl_initial_response("SCRAM-SHA-256", scram.message(), &mut buf).unwrap()
            }
            (b'R', Some(11)) => {
                scram.update(&body[4..]).unwrap();
                frontend::sasl_response(scram.message(), &mut buf).unwrap();
            }
            (b'R', Some(12)) => scram.finish(&body[4..]).unwrap(),
            (b'Z', _) => return Ok(s),
            (b'E', _) => return Err(error_fields(&body)),
            _ => {}
        }
        if !buf.is_empty() {
            s.write_all(&buf).await.unwrap();
        }
    }
}

/// A framed message.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Binds statement `stmt` with one text parameter, executes it and syncs; returns the first
/// column of the first row.
async fn bind_execute(s: &mut TcpStream, stmt: &str, param: &str) -> String {
    let mut bind = vec![0];
    bind.extend_from_slice(stmt.as_bytes());
    bind.extend_from_slice(&[0, 0, 0, 0, 1]);
    bind.extend_from_slice(&(param.len() as u32).to_be_bytes());
    bind.extend_from_slice(param.as_bytes());
    bind.extend_from_slice(&[0, 0]);
    let mut out = message(b'B', &bind);
    out.extend(message(b'E', &[0, 0, 0, 0, 0]));
    out.extend(message(b'S', &[]));
    s.write_all(&out).await.unwrap();
    let mut value = None;
    while let Some((tag, body)) = read_message(s).await {
        match tag {
            b'E' => panic!("{}", String::from_utf8_lossy(&body)),
            b'D' if value.is_none() => {
                let len = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
                value = Some(String::from_utf8_lossy(&body[6..6 + len]).into_owned());
            }
            b'Z' => break,
            _ => {}
        }
    }
    value.expect("a row")
}

/// The SQLSTATE and message of the FATAL error that ends the connection.
async fn fatal_error(s: &mut TcpStream) -> (String, String) {
    while let Some((tag, body)) = read_message(s).await {
        if tag == b'E' {
            let (severity, code, message) = error_fields(&body);
            assert_eq!(severity, "FATAL", "{code} {message}");
            assert!(
                read_message(s).await.is_none(),
                "the connection closes after a FATAL error"
            );
            return (code, message);
        }
    }
    panic!("the connection ended without an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_are_28p01_and_malformed_messages_08p01() {
    if skip() {
        return;
    }
    let Some(pg) = Cluster::start() else {
        eprintln!("skipping: a PostgreSQL cluster needs root (to run it as the postgres user)");
        return;
    };
    let proxy = Proxy::new(ProxyConfig::new(
        format!("127.0.0.1:{}", pg.port),
        "app",
        "app",
        PASSWORD,
    ))
    .unwrap();
    let port = listen(&proxy, ClientContext::default()).await;

    // A statement prepared on one backend is parsed again, transparently, on another.
    let mut a = login(&port).await;
    let mut parse = b"s1\0SELECT $1::int + 1\0".to_vec();
    parse.extend_from_slice(&[0, 0]);
    let mut out = message(b'P', &parse);
    out.extend(message(b'S', &[]));
    a.write_all(&out).await.unwrap();
    while read_message(&mut a)
        .await
        .expect("ParseComplete, ReadyForQuery")
        .0
        != b'Z'
    {}
    let mut b = login(&port).await;
    query(&mut b, "BEGIN").await; // holds the backend s1 was prepared on (the last one idle)
    assert_eq!(bind_execute(&mut a, "s1", "41").await, "42");
    assert_eq!(proxy.metrics().reparses, 1);
    query(&mut b, "ROLLBACK").await;
    assert_eq!(bind_execute(&mut a, "s1", "1").await, "2");

    let refused = login_with(&port, "not the password")
        .await
        .expect_err("a wrong password is refused");
    assert_eq!((refused.0.as_str(), refused.1.as_str()), ("FATAL", "28P01"));
    assert_eq!(refused.2, "password authentication failed for user \"app\"");

    let mut s = login(&port).await;
    let mut oversized = vec![b'Q'];
    oversized.extend_from_slice(&0x7fff_0000u32.to_be_bytes());
    s.write_all(&oversized).await.unwrap();
    let (code, message) = fatal_error(&mut s).await;
    assert_eq!(code, "08P01");
    assert!(message.contains("over the proxy's limit"), "{message}");

    let mut s = login(&port).await;
    s.write_all(&[b'z', 0, 0, 0, 4]).await.unwrap();
    let (code, message) = fatal_error(&mut s).await;
    assert_eq!(code, "08P01");
    assert!(message.contains("unexpected message type 'z'"), "{message}");

    let mut s = login(&port).await;
    s.write_all(&[b'Q', 0, 0, 0, 2]).await.unwrap();
    assert_eq!(fatal_error(&mut s).await.0, "08P01");

    let mut s = login(&port).await;
    s.write_all(&[b'D', 0, 0, 0, 6, b'X', 0]).await.unwrap();
    s.write_all(&[b'S', 0, 0, 0, 4]).await.unwrap();
    let (code, message) = fatal_error(&mut s).await;
    assert_eq!(code, "08P01");
    assert!(message.contains("invalid target kind 'X'"), "{message}");

    let mut s = login(&port).await;
    // A Parse whose parameter count promises more types than it carries.
    s.write_all(&[b'P', 0, 0, 0, 9, 0, b'x', 0, 0, 9])
        .await
        .unwrap();
    s.write_all(&[b'S', 0, 0, 0, 4]).await.unwrap();
    assert_eq!(fatal_error(&mut s).await.0, "08P01");

    // The proxy's own login with md5 and trust as well as SCRAM-SHA-256.
    pg.psql(
        "SET password_encryption = 'md5'; CREATE ROLE md5_user LOGIN PASSWORD 'md5-password'",
        "postgres",
    );
    pg.psql("CREATE ROLE trusted_user LOGIN", "postgres");
    pg.psql(
        "GRANT CONNECT ON DATABASE app TO md5_user, trusted_user",
        "postgres",
    );
    let hba = pg.dir.path().join("data").join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    let first = "host all md5_user 127.0.0.1/32 md5\nhost all trusted_user 127.0.0.1/32 trust\n";
    std::fs::write(&hba, format!("{first}{rules}")).unwrap();
    pg.psql("SELECT pg_reload_conf()", "postgres");
    for (user, password) in [("md5_user", "md5-password"), ("trusted_user", "")] {
        let mut cfg = ProxyConfig::new(format!("127.0.0.1:{}", pg.port), "app", user, password);
        cfg.client_user = "app".into();
        cfg.client_password = PASSWORD.into();
        let proxy = Proxy::new(cfg).unwrap();
        let port = listen(&proxy, ClientContext::default()).await;
        let mut s = login(&port).await;
        query(&mut s, "SELECT 1").await;
        assert_eq!(proxy.metrics().backends_open, 1, "{user}");
    }
}
