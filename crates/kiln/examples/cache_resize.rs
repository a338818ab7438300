//! How long a change of the object cache's capacity takes (OFC §6.4: resizing must stay off the
//! critical path; kiln's target is ≤ 1 ms when nothing must move).
//!
//! `cargo run --release -p kiln --example cache_resize`
//!
//! Fills the cache's table with N clean objects, then times `set_capacity` one call at a time:
//! (a) growing or shrinking while everything still fits, (b) shrinking by one object's size,
//! which evicts the least recently used one, (c) shrinking by 100 objects' size at once. Beside
//! them, as the reference, the time to sort N (rank, time, key) tuples: what choosing victims
//! cost when every shrink sorted the clean entries.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kiln::objects::cache::entries::{Entries, Meta, ObjectKey};
use kiln::objects::checksum::Checksums;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let object = 64 * 1024;
    let body = Bytes::from(vec![0u8; object]);
    for n in [1_000usize, 10_000, 100_000] {
        let mut table = Entries::new(u64::MAX);
        let t0 = Instant::now();
        for i in 0..n {
            let since = table.begin_miss();
            let meta = Meta {
                etag: format!("{i}"),
                modified_ms: 0,
                size: object as u64,
                attrs: Default::default(),
                checksums: Checksums::default(),
            };
            table.end_miss(
                since,
                Some((ObjectKey::new("b", format!("k{i}")), body.clone(), meta)),
                t0 + Duration::from_micros(i as u64),
            );
        }
        let used = table.usage().bytes;
        let mut fits = Vec::new();
        for k in 0..1_000u64 {
            let t = Instant::now();
            table.set_capacity(used + (k % 2) * 1024 * 1024);
            fits.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut evicting = Vec::new();
        let mut capacity = used;
        for _ in 0..200 {
            capacity -= object as u64;
            let t = Instant::now();
            table.set_capacity(capacity);
            evicting.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut batches = Vec::new();
        while batches.len() < 50 && table.usage().entries >= 100 {
            capacity -= 100 * object as u64;
            let t = Instant::now();
            table.set_capacity(capacity);
            batches.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut sorting = Vec::new();
        for _ in 0..20 {
            let mut victims: Vec<(u8, Instant, ObjectKey)> = (0..n)
                .map(|i| {
                    let at = t0 + Duration::from_micros((i * 7919 % n) as u64);
                    (1, at, ObjectKey::new("b", format!("k{i}")))
                })
                .collect();
            let t = Instant::now();
            victims.sort();
            sorting.push(t.elapsed().as_secs_f64() * 1e6);
        }
        for samples in [&mut fits, &mut evicting, &mut batches, &mut sorting] {
            samples.sort_by(f64::total_cmp);
        }
        println!(
            "{n} objects: nothing to move p50 {:.2} µs, p99 {:.2} µs; evicting one p50 {:.1} µs, \
             p99 {:.1} µs; evicting 100 p50 {:.1} µs, p99 {:.1} µs; reference, sorting {n} \
             entries p50 {:.1} µs",
            percentile(&fits, 0.5),
            percentile(&fits, 0.99),
            percentile(&evicting, 0.5),
            percentile(&evicting, 0.99),
            percentile(&batches, 0.5),
            percentile(&batches, 0.99),
            percentile(&sorting, 0.5),
        );
    }
}
