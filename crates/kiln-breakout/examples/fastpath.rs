//! Times the fast path without kiln around it: traces a package in Node on a training set,
//! compiles the trace, loads it and serves one event many times, on `THREADS` threads
//! sharing the loaded module (as kiln's agent does).
//!
//! `cargo run --release -p kiln-breakout --example fastpath PACKAGE TRAINING EVENT [RUNS] [THREADS]`
//!
//! e.g. `... fastpath crates/kiln-breakout/tests/fixtures/maze '[{"x1":0,"y1":0,"x2":29,"y2":29}]'
//! '{"x1":0,"y1":0,"x2":29,"y2":29}' 2000 2`. Prints the answer and the mean time of a run.
//! With `FASTPATH_LOADS=N`, also loads the module N more times and prints what each loaded
//! copy keeps resident: loaded, after one run, and once its idle instance is released.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_breakout::compile::{compile, CompileOptions};
use kiln_breakout::exec::{FastPathEngine, Limits, Outcome};
use kiln_breakout::runtime::NoIntrinsics;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [package, training, event, ..] = args.as_slice() else {
        panic!("usage: fastpath PACKAGE TRAINING EVENT [RUNS] [THREADS]");
    };
    let runs: u32 = args.get(3).map_or(1000, |n| n.parse().expect("RUNS"));
    let threads: u32 = args.get(4).map_or(1, |n| n.parse().expect("THREADS"));
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().expect("a temporary directory");
    let traced = work.path().join("traced");
    kiln_breakout::instrument::instrument_dir(Path::new(package), &traced)
        .expect("an instrumentable package");
    let inputs = work.path().join("inputs.json");
    std::fs::write(&inputs, training).expect("inputs written");
    let dump = work.path().join("trace.json");
    let status = Command::new("node")
        .arg("--require")
        .arg(crate_dir.join("../../runtimes/nodejs/breakout.js"))
        .arg(crate_dir.join("tests/common/drive.mjs"))
        .arg(traced.join("index.js"))
        .arg(&inputs)
        .env("KILN_BREAKOUT_DUMP", &dump)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("node runs");
    assert!(status.success(), "node failed");
    let trace = kiln_breakout::trace::parse(&std::fs::read(&dump).expect("a trace"))
        .expect("a valid trace");
    let bytes = compile(&trace, &CompileOptions::default()).expect("a compiled trace");
    let engine = FastPathEngine::new(Limits::default()).expect("an engine");
    let loaded = Arc::new(engine.load(&bytes).expect("a loaded module"));
    println!(
        "module: {} bytes; image: {} bytes",
        bytes.len(),
        loaded.image_bytes()
    );
    if let Some(loads) = std::env::var("FASTPATH_LOADS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        // What each loaded copy keeps resident (as kiln keeps one per decontainerized function).
        let before = resident_bytes();
        let copies: Vec<_> = (0..loads)
            .map(|_| engine.load(&bytes).expect("a loaded module"))
            .collect();
        let after = resident_bytes();
        println!(
            "{loads} more loads: {:.1} KB resident each",
            (after - before) as f64 / 1024.0 / loads as f64
        );
        for copy in &copies {
            copy.run(
                &event_of(event),
                Box::new(NoIntrinsics),
                Duration::from_secs(10),
            );
        }
        println!(
            "after one run each: {:.1} KB resident each",
            (resident_bytes() - before) as f64 / 1024.0 / loads as f64
        );
        for copy in &copies {
            copy.release_idle(Duration::ZERO);
        }
        println!(
            "idle instances released: {:.1} KB resident each",
            (resident_bytes() - before) as f64 / 1024.0 / loads as f64
        );
    }
    let event = event.as_bytes().to_vec();
    match loaded.run(&event, Box::new(NoIntrinsics), Duration::from_secs(10)) {
        Outcome::Answer(answer) => println!("answer: {}", String::from_utf8_lossy(&answer)),
        Outcome::Error(error) => println!("error: {}", error.body),
        miss => println!("{miss:?}"),
    }
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (loaded, event) = (loaded.clone(), event.clone());
            std::thread::spawn(move || {
                for _ in 0..runs {
                    let outcome =
                        loaded.run(&event, Box::new(NoIntrinsics), Duration::from_secs(10));
                    assert!(matches!(outcome, Outcome::Answer(_)), "{outcome:?}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker");
    }
    let elapsed = start.elapsed();
    println!(
        "{runs} runs x {threads} threads: {:.1} µs per run (wall / runs per thread)",
        elapsed.as_secs_f64() * 1e6 / f64::from(runs)
    );
}

fn event_of(event: &str) -> Vec<u8> {
    event.as_bytes().to_vec()
}

/// This process's resident memory (`/proc/self/statm`), in bytes.
fn resident_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
