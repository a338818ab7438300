//! `cluster::etcd` against a real single-member etcd on loopback (Debian's etcd-server, installed
//! by scripts/setup-test-env.sh; missing, the test fails rather than skips).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kiln::cluster::etcd::{Etcd, EtcdAccess, WatchUpdate};

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
    let etcd = Etcd::connect(
        std::slice::from_ref(&server.endpoint),
        "/t/health",
        &EtcdAccess::default(),
    )
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
        WatchUpdate::Reset { entries, revision } => {
            assert!(revision > 0);
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
    // The health checks began before the member listened, so the first ones failed; the
    // endpoint is reported healthy again within a few check periods of its answering.
    let mut healthy = false;
    for _ in 0..50 {
        if etcd.endpoint_health().iter().all(|(_, healthy)| *healthy) {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy, "{:?}", etcd.endpoint_health());
}

fn function(name: &str, description: &str) -> kiln::function::Function {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "config": {"runtime": "python3.11", "handler": "app.handler", "memory_mb": 128,
                   "timeout_s": 3, "description": description},
        "code_sha256": "ab", "code_size": 1, "revision": 1,
        "last_modified": "2024-01-01T00:00:00Z",
        "reserved_concurrency": null, "url_auth": null
    }))
    .unwrap()
}

async fn ready(etcd: &Etcd) {
    for _ in 0..100 {
        if etcd.get("/kiln/none").await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("etcd did not start");
}

/// The registry's rules, as etcd transactions carry them: a name is taken once, by a function
/// or a sequence; an update applies only to the version it was made from (and a stale one gets
/// the record as it now is); a write retried after its answer was lost is recognised; what is
/// committed reaches a watcher; a deleted function's queued events go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_in_etcd_compares_versions_and_names() {
    use kiln::controller::registry::{Change, Database, EtcdRegistry, Registry, UrlWrite, Written};
    use kiln::controller::UrlSettings;
    use std::sync::Arc;

    let server = start_etcd();
    let etcd = Etcd::connect(
        std::slice::from_ref(&server.endpoint),
        "/kiln/health",
        &EtcdAccess::default(),
    )
    .await
    .unwrap();
    ready(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(Database::open(&dir.path().join("kiln.db")).unwrap());
    let registry = EtcdRegistry::new(etcd.clone(), "/kiln", database.clone());
    assert!(registry.load().unwrap().functions.is_empty());

    let f = function("f", "one");
    let v1 = registry.insert(&f).unwrap().expect("a new name");
    assert_eq!(registry.insert(&function("f", "other")).unwrap(), None);
    assert_eq!(
        registry.insert(&f).unwrap(),
        Some(v1),
        "the same write again is recognised as done"
    );

    let sequence = kiln::controller::sequences::Sequence {
        name: "f".into(),
        functions: vec!["f".into()],
        last_modified: chrono::Utc::now(),
    };
    assert_eq!(registry.put_sequence(&sequence).unwrap(), None);
    let s = kiln::controller::sequences::Sequence {
        name: "s".into(),
        ..sequence
    };
    assert!(registry.put_sequence(&s).unwrap().is_some());
    assert_eq!(registry.insert(&function("s", "")).unwrap(), None);

    let v2 = match registry
        .update(&function("f", "two"), UrlWrite::Keep, v1)
        .unwrap()
    {
        Written::Done(v) => v,
        other => panic!("expected the update to apply, got {other:?}"),
    };
    assert!(v2 > v1);
    match registry
        .update(&function("f", "three"), UrlWrite::Keep, v1)
        .unwrap()
    {
        Written::Stale(now) => {
            assert!(
                matches!(&now[0], Change::Function { function: Some(f), version, .. }
                    if f.config.description == "two" && *version == v2)
            );
            assert!(matches!(&now[1], Change::Url { settings: None, .. }));
        }
        other => panic!("expected a stale update, got {other:?}"),
    }

    let settings = UrlSettings {
        created: chrono::Utc::now(),
        modified: chrono::Utc::now(),
        cors: None,
    };
    let v3 = match registry
        .update(&f, UrlWrite::Set(Some(&settings)), v2)
        .unwrap()
    {
        Written::Done(v) => v,
        other => panic!("expected the URL to be set, got {other:?}"),
    };
    let loaded = registry.load().unwrap();
    assert_eq!(loaded.functions, vec![(f.clone(), v3)]);
    assert_eq!(loaded.urls, vec![("f".to_string(), settings, v3)]);
    assert_eq!(loaded.sequences.len(), 1);

    // Shareable test events: kept while the function exists, by name.
    let event = |name: &str, json: &str| kiln::controller::registry::TestEvent {
        name: name.into(),
        event: json.into(),
        last_modified: chrono::Utc::now(),
    };
    assert!(registry.put_test_event("f", &event("b", "[1]")).unwrap());
    assert!(registry.put_test_event("f", &event("a", "{}")).unwrap());
    assert!(registry.put_test_event("f", &event("b", "[2]")).unwrap());
    assert!(
        !registry.put_test_event("gone", &event("a", "{}")).unwrap(),
        "no function, no event"
    );
    let events = registry.test_events("f").unwrap();
    assert_eq!(
        events
            .iter()
            .map(|e| (e.name.as_str(), e.event.as_str()))
            .collect::<Vec<_>>(),
        vec![("a", "{}"), ("b", "[2]")]
    );
    assert!(registry.test_events("gone").unwrap().is_empty());
    assert!(registry.delete_test_event("f", "a").unwrap());
    assert!(!registry.delete_test_event("f", "a").unwrap());
    // A function whose name the other's starts with keeps its own.
    registry
        .insert(&function("f2", ""))
        .unwrap()
        .expect("a new name");
    assert!(registry.put_test_event("f2", &event("a", "{}")).unwrap());

    // Another node's view: the deletion of the function and its URL, at one version.
    let other = EtcdRegistry::new(etcd, "/kiln", database.clone());
    other.load().unwrap();
    let mut changes = other.changes().unwrap();
    database.enqueue("r1", "f", b"{}").unwrap();
    let deleted = registry.delete("f").unwrap().expect("it existed");
    assert_eq!(database.queue_depth().unwrap(), 0);
    assert_eq!(registry.delete("f").unwrap(), None);
    assert!(
        registry.test_events("f").unwrap().is_empty(),
        "its test events went with it"
    );
    assert_eq!(registry.test_events("f2").unwrap().len(), 1);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let change = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("a change within 10 s")
            .expect("the watch goes on");
        seen.push(change);
    }
    assert!(seen.iter().any(|c| matches!(c,
        Change::Function { name, function: None, version } if name == "f" && *version == deleted)));
    assert!(seen.iter().any(|c| matches!(c,
        Change::Url { name, settings: None, version } if name == "f" && *version == deleted)));
}
