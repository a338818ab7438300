//! The memory model's prediction latency (OFC §7.1.2: J48 3.19 µs p50, 12.54 µs p99 at 16 MB).
//!
//! `cargo run --release -p kiln --example predict_latency`
//!
//! Trains a model the way the controller does (every invocation observed, retrained every ten
//! samples) on a function whose memory depends on two numeric and one nominal argument, until
//! it is mature; then times, one prediction at a time, (a) the prediction alone and (b) the
//! whole per-invocation cost: features from the event's bytes, then the prediction.

use std::time::Instant;

use kiln::predict::{Features, Predictor, PredictorConfig};

fn event(i: u64) -> Vec<u8> {
    let width = 64 + (i % 12) * 160;
    let radius = i % 5;
    let mode = ["blur", "sepia", "resize"][(i % 3) as usize];
    format!(r#"{{"bucket": "images", "key": "img-{i}.jpg", "width": {width}, "radius": {radius}, "mode": "{mode}"}}"#)
        .into_bytes()
}

fn peak_mb(i: u64) -> u64 {
    let width = 64 + (i % 12) * 160;
    let factor = [3, 1, 2][(i % 3) as usize];
    30 + width * width * 4 * factor / (1 << 20) + (i % 5) * 2
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("kiln-predict-latency-{}", std::process::id()));
    let predictor = Predictor::new(PredictorConfig::default(), &dir);
    let booked = 2048;
    let mut i = 0u64;
    while !predictor.status().first().is_some_and(|m| m.mature) && i < 5_000 {
        let (features, _) = Features::of_event(&event(i));
        if let Some(training) = predictor.observe("f", booked, features, peak_mb(i), false) {
            training.run();
        }
        i += 1;
    }
    let status = predictor.status();
    println!(
        "model: mature after {i} invocations, {} samples, exact-or-over {:.1}%",
        status[0].samples,
        status[0].exact_or_over.unwrap_or(0.0) * 100.0
    );
    let n = 100_000;
    let events: Vec<Vec<u8>> = (0..1000).map(event).collect();
    let features: Vec<Features> = events.iter().map(|e| Features::of_event(e).0).collect();
    let mut alone = Vec::with_capacity(n);
    let mut whole = Vec::with_capacity(n);
    let mut sized = 0;
    for k in 0..n {
        let t = Instant::now();
        let limit = predictor.predict("f", booked, &features[k % 1000]);
        alone.push(t.elapsed().as_secs_f64() * 1e6);
        sized += usize::from(limit.is_some());
        let t = Instant::now();
        let (f, _) = Features::of_event(&events[k % 1000]);
        std::hint::black_box(predictor.predict("f", booked, &f));
        whole.push(t.elapsed().as_secs_f64() * 1e6);
    }
    alone.sort_by(f64::total_cmp);
    whole.sort_by(f64::total_cmp);
    println!("predictions: {n}, sized {sized}");
    for (name, v) in [("prediction", &alone), ("features + prediction", &whole)] {
        println!(
            "{name}: p50 {:.2} µs, p99 {:.2} µs",
            percentile(v, 0.5),
            percentile(v, 0.99)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
