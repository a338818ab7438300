//! `cluster::etcd` against a real single-member etcd on loopback (Debian's etcd-server, installed
//! by scripts/setup-test-env.sh; missing, the test fails rather than skips).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kiln::cluster::etcd::{Etcd, WatchUpdate};

struct EtcdServer {
    child: Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_etcd() -> EtcdServer {
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(dir.path())
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("t={peer_url}")])
        .args(["--logger", "zap", "--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd is needed for cluster mode's tests: run scripts/setup-test-env.sh");
    EtcdServer {
        child,
        endpoint: format!("127.0.0.1:{client}"),
        _dir: dir,
    }
}

async fn next(updates: &mut tokio::sync::mpsc::UnboundedReceiver<WatchUpdate>) -> WatchUpdate {
    tokio::time::timeout(Duration::from_secs(10), updates.recv())
        .await
        .expect("a watch update within 10 s")
        .expect("the watch goes on")
}

#[tokio::test]
async fn reads_writes_watches_and_leases_against_a_real_etcd() {
    let server = start_etcd();
    let etcd = Etcd::connect(std::slice::from_ref(&server.endpoint), "/t/health")
        .await
        .unwrap();
    // The member takes a moment to start: the first get is retried until it answers.
    let mut ready = false;
    for _ in 0..100 {
        if etcd.get("/t/none").await.is_ok() {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "etcd did not answer");

    assert_eq!(
        etcd.put_if_absent("/t/once", b"first".to_vec())
            .await
            .unwrap(),
        b"first"
    );
    assert_eq!(
        etcd.put_if_absent("/t/once", b"second".to_vec())
            .await
            .unwrap(),
        b"first"
    );

    etcd.put("/t/w/a", b"1".to_vec(), 0).await.unwrap();
    let mut updates = etcd.watch_prefix("/t/w/".into());
    match next(&mut updates).await {
        WatchUpdate::Reset(entries) => {
            assert_eq!(entries.len(), 1);
            assert_eq!(
                (entries[0].key.as_str(), &entries[0].value[..]),
                ("/t/w/a", &b"1"[..])
            );
        }
        other => panic!("expected the full list first, got {other:?}"),
    }
    etcd.put("/t/w/b", b"2".to_vec(), 0).await.unwrap();
    etcd.delete("/t/w/a").await.unwrap();
    etcd.put("/t/other", b"x".to_vec(), 0).await.unwrap();
    match next(&mut updates).await {
        WatchUpdate::Put(entry) => assert_eq!(entry.key, "/t/w/b"),
        other => panic!("expected b's put, got {other:?}"),
    }
    match next(&mut updates).await {
        WatchUpdate::Delete { key, .. } => assert_eq!(key, "/t/w/a"),
        other => panic!("expected a's delete, got {other:?}"),
    }

    // A key on a lease lives while the lease is kept alive and goes when it is revoked.
    let lease = etcd.grant(5).await.unwrap();
    etcd.put("/t/w/leased", b"l".to_vec(), lease).await.unwrap();
    assert!(matches!(next(&mut updates).await, WatchUpdate::Put(e) if e.lease == lease));
    assert!(etcd
        .keep_alive(lease, Duration::from_secs(2))
        .await
        .unwrap());
    etcd.revoke(lease).await.unwrap();
    assert!(
        matches!(next(&mut updates).await, WatchUpdate::Delete { key, .. } if key == "/t/w/leased")
    );
    assert!(!etcd
        .keep_alive(lease, Duration::from_secs(2))
        .await
        .unwrap());
    // Revoking a lease that is gone is not an error (a shutdown after an expiry).
    etcd.revoke(lease).await.unwrap();
    assert!(etcd.endpoint_health().iter().all(|(_, healthy)| *healthy));
}
