//! The ledger against a real PostgreSQL: a private cluster of the distribution's server, run
//! as the `postgres` user, with `psql` as the client. Skipped (with a message) where
//! PostgreSQL is not installed or the test does not run as root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use kiln_dbproxy::{ClientContext, CurrentContext, Ledger, Proxy, ProxyConfig};
use tokio::net::TcpListener;

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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let proxy = proxy.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = proxy.serve(stream, ctx.clone()).await;
        }
    });
    addr.port().to_string()
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
                current: None,
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

/// A connection kept open across invocations serves each transaction as the invocation in flight
/// when it begins: a real one's commits stay and are in its ledger, a shadow's are rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_transaction_is_the_current_invocations() {
    if skip() {
        return;
    }
    let Some(pg) = Cluster::start() else {
        eprintln!("skipping: a PostgreSQL cluster needs root here");
        return;
    };
    let mut cfg = ProxyConfig::new(format!("127.0.0.1:{}", pg.port), "app", "app", PASSWORD);
    cfg.pool_size = 2;
    let proxy = Proxy::new(cfg).unwrap();
    let real = Arc::new(Ledger::new());
    let shadow_ledger = Arc::new(Ledger::new());
    // Real, shadow, real, then nobody kiln can name.
    let turns = Arc::new(std::sync::Mutex::new(vec![
        None,
        Some((false, real.clone())),
        Some((true, shadow_ledger.clone())),
        Some((false, real.clone())),
    ]));
    let current = CurrentContext(Arc::new(move || turns.lock().unwrap().pop().flatten()));
    let ctx = ClientContext {
        current: Some(current),
        ..ClientContext::default()
    };
    let port = listen(&proxy, ctx).await;
    let ok = client(
        &port,
        &[
            "INSERT INTO t (v) VALUES ('first')",
            "INSERT INTO t (v) VALUES ('second')",
            "INSERT INTO t (v) VALUES ('third')",
            "INSERT INTO t (v) VALUES ('fourth')",
        ],
    )
    .await;
    assert!(!ok, "the fourth transaction, nobody's, is refused");
    assert_eq!(
        pg.psql("SELECT string_agg(v, ',' ORDER BY v) FROM t", "app"),
        "first,third"
    );
    assert_eq!(real.snapshot().committed.len(), 2);
    assert!(shadow_ledger.is_clean());
}
