//! Tests of the cache's table: misses, writes, write-back, runs' intermediates, eviction and the sweep.

use super::*;

fn meta(size: u64) -> Meta {
    Meta {
        etag: "e".into(),
        modified_ms: 0,
        size,
        attrs: ObjectAttrs::default(),
        checksums: Checksums::default(),
    }
}

fn key(k: &str) -> ObjectKey {
    ObjectKey::new("b", k)
}

fn fetched(k: &str, size: usize) -> Option<(ObjectKey, Bytes, Meta)> {
    Some((key(k), Bytes::from(vec![0u8; size]), meta(size as u64)))
}

#[test]
fn a_miss_inserts_unless_the_key_changed_meanwhile() {
    let now = Instant::now();
    let mut t = Entries::new(1000);
    let since = t.begin_miss();
    assert!(t.end_miss(since, fetched("a", 10), now));
    assert!(t.get(&key("a"), now).is_some());

    // A write lands while a miss of the same key reads the old bytes.
    let since = t.begin_miss();
    t.write(key("x"), Bytes::from_static(b"new"), meta(3), 7, false, now);
    assert!(!t.persisted(&key("x"), 7));
    t.set_capacity(0); // evicts the now clean "x" (and "a")
    assert!(t.get(&key("x"), now).is_none());
    assert!(
        !t.end_miss(since, fetched("x", 3), now),
        "a stale read is not cached"
    );

    // With no miss in flight, the record of changes is gone and a new miss inserts.
    t.set_capacity(1000);
    let since = t.begin_miss();
    assert!(t.end_miss(since, fetched("x", 3), now));
}

#[test]
fn dirty_entries_are_pinned_and_clean_ones_evicted_outputs_first() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(1);
    let mut t = Entries::new(100);
    let since = t.begin_miss();
    t.end_miss(since, fetched("input", 40), t0);
    assert!(t.write(
        key("out"),
        Bytes::from(vec![1; 40]),
        meta(40),
        1,
        false,
        later
    ));
    assert!(t.is_dirty(&key("out")));
    assert_eq!(t.set_capacity(10), 40, "only the clean input can go");
    assert!(t.get(&key("out"), later).is_some());
    assert_eq!(t.usage().dirty_bytes, 40);

    t.set_capacity(100);
    assert!(!t.persisted(&key("out"), 1));
    let since = t.begin_miss();
    t.end_miss(since, fetched("input", 40), later);
    // The output was used more recently than the input, but a persisted output goes first.
    t.get(&key("out"), later + Duration::from_secs(5));
    assert_eq!(t.set_capacity(50), 40);
    assert!(t.get(&key("out"), later).is_none());
    assert!(t.get(&key("input"), later).is_some());
}

#[test]
fn write_back_requeues_when_a_newer_version_arrived() {
    let now = Instant::now();
    let mut t = Entries::new(1000);
    assert!(t.write(key("k"), Bytes::from_static(b"1"), meta(1), 1, false, now));
    // Already queued: a second write does not queue it twice.
    assert!(!t.write(key("k"), Bytes::from_static(b"2"), meta(1), 2, false, now));
    let dirty = t.dirty_version(&key("k")).unwrap();
    assert_eq!(dirty.version, 2);
    assert!(!t.persisted(&key("k"), 2));
    assert!(t.settled(&key("k"), 2));

    assert!(t.write(key("k"), Bytes::from_static(b"3"), meta(1), 3, false, now));
    // Version 2's write-back finishing late does not clean version 3.
    assert!(t.persisted(&key("k"), 2));
    assert!(t.is_dirty(&key("k")));
    assert!(!t.settled(&key("k"), 3));
    assert_eq!(t.dirty_in("b"), vec![(key("k"), 3)]);
}

#[test]
fn a_runs_intermediates_stay_until_it_ends_and_final_outputs_go_once_written_back() {
    let now = Instant::now();
    let mut t = Entries::new(100);
    assert!(t.write_ephemeral(key("mid"), Bytes::from(vec![0; 30]), meta(30), "run1", now));
    assert_eq!(t.usage().ephemeral_bytes, 30);
    let listed = |t: &Entries, prefix| -> Vec<String> {
        t.intermediates("b", prefix)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert_eq!(listed(&t, "m"), vec!["mid".to_string()]);
    assert_eq!(t.intermediate(&key("mid")).unwrap().body.len(), 30);
    assert_eq!(t.run_footprint("run1"), (1, 30));
    assert_eq!(t.run_footprint("other"), (0, 0));
    assert!(listed(&t, "n").is_empty() && t.intermediates("c", "").is_empty());
    assert!(!t.could_hold(&key("x"), 80), "intermediates are pinned");
    assert_eq!(t.set_capacity(0), 0);
    assert!(t.get(&key("mid"), now).is_some());
    assert!(!t.is_dirty(&key("mid")), "nothing to write back");
    assert_eq!(t.end_run("other"), 0);
    assert_eq!(t.end_run("run1"), 1);
    assert!(t.get(&key("mid"), now).is_none());
    assert!(listed(&t, "").is_empty());
    assert_eq!(t.usage(), Usage::default());

    t.set_capacity(100);
    t.write(key("out"), Bytes::from_static(b"f"), meta(1), 5, true, now);
    // A dirty key is never overtaken by an intermediate that will not be written back.
    assert!(!t.write_ephemeral(key("out"), Bytes::new(), meta(0), "run2", now));
    assert!(!t.persisted(&key("out"), 5));
    assert!(
        t.get(&key("out"), now).is_none(),
        "a final output goes once written back"
    );
}

impl Entries {
    /// The indexes hold exactly the entries that are not pinned (each at its order), the dirty
    /// ones, and the intermediates.
    fn check_index(&self) {
        let expected: BTreeMap<(u8, u64), ObjectKey> = self
            .map
            .iter()
            .filter(|(_, e)| !e.pinned())
            .map(|(k, e)| (e.order(), k.clone()))
            .collect();
        assert_eq!(self.evictable, expected);
        let dirty: BTreeSet<ObjectKey> = self
            .map
            .iter()
            .filter(|(_, e)| e.dirty())
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(self.dirty, dirty);
        let intermediates: BTreeSet<ObjectKey> = self
            .map
            .iter()
            .filter(|(_, e)| e.run.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(self.intermediates, intermediates);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Miss(u8, u8),
    Get(u8),
    Write(u8, u8, bool),
    Ephemeral(u8, u8),
    Persist(u8),
    EndRun,
    Invalidate(u8),
    Capacity(u16),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        (0..8u8, 1..40u8).prop_map(|(k, n)| Op::Miss(k, n)),
        (0..8u8).prop_map(Op::Get),
        (0..8u8, 1..40u8, any::<bool>()).prop_map(|(k, n, d)| Op::Write(k, n, d)),
        (0..8u8, 1..40u8).prop_map(|(k, n)| Op::Ephemeral(k, n)),
        (0..8u8).prop_map(Op::Persist),
        Just(Op::EndRun),
        (0..8u8).prop_map(Op::Invalidate),
        (0..200u16).prop_map(Op::Capacity),
    ]
}

proptest::proptest! {
    /// Whatever happens to the table, the eviction index stays exact, and a shrink evicts
    /// what sorting the clean entries would: persisted outputs, then inputs, by LRU.
    #[test]
    fn the_eviction_index_follows_every_change(ops in proptest::collection::vec(op(), 1..60)) {
        let now = Instant::now();
        let mut t = Entries::new(150);
        let mut version = 0;
        for op in ops {
            match op {
                Op::Miss(k, n) => {
                    let since = t.begin_miss();
                    t.end_miss(since, fetched(&k.to_string(), n.into()), now);
                }
                Op::Get(k) => {
                    t.get(&key(&k.to_string()), now);
                }
                Op::Write(k, n, discard) => {
                    version += 1;
                    let body = Bytes::from(vec![0; n.into()]);
                    t.write(key(&k.to_string()), body, meta(n.into()), version, discard, now);
                }
                Op::Ephemeral(k, n) => {
                    let body = Bytes::from(vec![0; n.into()]);
                    t.write_ephemeral(key(&k.to_string()), body, meta(n.into()), "run", now);
                }
                Op::Persist(k) => {
                    t.persisted(&key(&k.to_string()), version);
                }
                Op::EndRun => {
                    t.end_run("run");
                }
                Op::Invalidate(k) => t.invalidate(&key(&k.to_string())),
                Op::Capacity(c) => {
                    let mut sorted: Vec<((u8, u64), ObjectKey)> = t
                        .map
                        .iter()
                        .filter(|(_, e)| !e.pinned())
                        .map(|(k, e)| (e.order(), k.clone()))
                        .collect();
                    sorted.sort();
                    let mut left = t.bytes;
                    let mut expected = Vec::new();
                    for (_, k) in sorted {
                        if left <= u64::from(c) {
                            break;
                        }
                        left -= t.map[&k].body.len() as u64;
                        expected.push(k);
                    }
                    t.set_capacity(c.into());
                    for k in &expected {
                        proptest::prop_assert!(!t.map.contains_key(k), "{k:?} was not evicted");
                    }
                    proptest::prop_assert_eq!(t.bytes, left);
                }
            }
            t.check_index();
        }
    }
}

#[test]
fn capacity_counts_dirty_bytes() {
    let now = Instant::now();
    let mut t = Entries::new(10);
    assert!(t.could_hold(&key("a"), 10));
    t.write(key("a"), Bytes::from(vec![0; 8]), meta(8), 1, false, now);
    assert!(!t.could_hold(&key("b"), 3));
    t.persisted(&key("a"), 1);
    assert!(t.could_hold(&key("b"), 3), "clean bytes can be evicted");
}

#[test]
fn the_sweep_keeps_busy_entries() {
    let t0 = Instant::now();
    let rules = SweepRules {
        period: Duration::from_secs(300),
        min_accesses: 5,
        max_idle: Duration::from_secs(1800),
    };
    let mut t = Entries::new(1000);
    for k in ["cold", "busy", "young"] {
        let since = t.begin_miss();
        let at = if k == "young" {
            t0 + Duration::from_secs(200)
        } else {
            t0
        };
        t.end_miss(since, fetched(k, 1), at);
    }
    for _ in 0..5 {
        t.get(&key("busy"), t0 + Duration::from_secs(100));
    }
    assert_eq!(t.sweep(&rules, t0 + Duration::from_secs(301)), 1);
    assert!(t.get(&key("cold"), t0).is_none());
    assert!(t.get(&key("busy"), t0).is_some());
    assert!(
        t.get(&key("young"), t0).is_some(),
        "younger than one period"
    );
    // Idle for over 30 minutes: gone, however often it was read before.
    assert_eq!(t.sweep(&rules, t0 + Duration::from_secs(2000)), 2);
}
