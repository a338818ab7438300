//! The module cache on disk and pre-initialisation.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{request, small_engine, wat};
use kiln_wasm::{ModuleCache, PreInit};

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    found.sort();
    found
}

#[test]
fn a_second_cache_over_the_same_directory_hits() {
    let dir = tempfile::tempdir().unwrap();
    let engine = small_engine();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();
    cache.load(&wat("echo")).unwrap();
    let artifacts = files(&dir.path().join("compiled"), "cwasm");
    assert_eq!(artifacts.len(), 1);
    let before = fs::metadata(&artifacts[0]).unwrap();
    assert!(cache.disk_usage_bytes().unwrap() >= before.len());
    drop(cache);
    drop(engine);

    // A restart: a new engine with the same configuration, a new cache over the directory.
    let engine = small_engine();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();
    let module = cache.load(&wat("echo")).unwrap();
    let after = fs::metadata(&artifacts[0]).unwrap();
    // A rebuilt artifact is a new inode (written aside, then renamed); a reused one is touched.
    assert_eq!(before.ino(), after.ino(), "recompiled");
    assert!(after.modified().unwrap() >= before.modified().unwrap());
    assert_eq!(files(&dir.path().join("compiled"), "cwasm").len(), 1);
    assert_eq!(
        engine.invoke(&module, request(b"hit")).unwrap().body,
        b"hit"
    );
}

#[test]
fn a_corrupt_artifact_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let engine = small_engine();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();
    cache.load(&wat("echo")).unwrap();
    let artifact = files(&dir.path().join("compiled"), "cwasm").remove(0);
    let good = fs::read(&artifact).unwrap();

    // Bits flipped in the middle: the recorded digest no longer matches.
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0xff;
    replace(&artifact, &flipped);
    let module = ModuleCache::open(&engine, dir.path())
        .unwrap()
        .load(&wat("echo"))
        .unwrap();
    assert_eq!(
        engine.invoke(&module, request(b"again")).unwrap().body,
        b"again"
    );
    assert_eq!(
        fs::read(&artifact).unwrap(),
        good,
        "the artifact was not rewritten"
    );

    // Garbage with a matching digest (written by something else): wasmtime refuses it.
    replace(&artifact, b"not an artifact");
    let digest = format!("{}.sha256", artifact.display());
    replace(
        Path::new(&digest),
        sha256_hex(b"not an artifact").as_bytes(),
    );
    let module = ModuleCache::open(&engine, dir.path())
        .unwrap()
        .load(&wat("echo"))
        .unwrap();
    assert_eq!(
        engine.invoke(&module, request(b"third")).unwrap().body,
        b"third"
    );
    assert_eq!(fs::read(&artifact).unwrap(), good);

    // A truncated file.
    replace(&artifact, &good[..100]);
    let module = ModuleCache::open(&engine, dir.path())
        .unwrap()
        .load(&wat("echo"))
        .unwrap();
    assert_eq!(
        engine.invoke(&module, request(b"fourth")).unwrap().body,
        b"fourth"
    );
}

/// Replaces a file the way a disk error or another program would leave it, but as a new inode:
/// rewriting a mapped artifact in place would pull the pages from under a live module (the
/// cache itself only ever renames new files in and unlinks old ones).
fn replace(path: &Path, contents: &[u8]) {
    let tmp = path.with_extension("corrupt");
    fs::write(&tmp, contents).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn a_preinitialised_module_starts_with_the_inits_state() {
    let dir = tempfile::tempdir().unwrap();
    let engine = small_engine();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();

    let snapshot = cache.load(&wat("init")).unwrap();
    assert_eq!(
        snapshot.preinit(),
        &PreInit::Snapshot {
            init_export: "wizer.initialize".into()
        }
    );
    let response = engine.invoke(&snapshot, request(b"{}")).unwrap();
    assert_eq!(
        response.body, b"initialised ran_init=0",
        "the init ran again"
    );

    let plain = cache.load_plain(&wat("init")).unwrap();
    assert_eq!(plain.preinit(), &PreInit::NotRequested);
    let response = engine.invoke(&plain, request(b"{}")).unwrap();
    assert_eq!(response.body, b"initialised ran_init=1");

    // The snapshot is cached: a new cache loads it without running the init again.
    assert_eq!(files(&dir.path().join("preinit"), "wasm").len(), 1);
    let again = ModuleCache::open(&engine, dir.path())
        .unwrap()
        .load(&wat("init"))
        .unwrap();
    assert!(matches!(again.preinit(), PreInit::Snapshot { .. }));
    assert_eq!(
        engine.invoke(&again, request(b"{}")).unwrap().body,
        b"initialised ran_init=0"
    );
}

#[test]
fn a_failing_init_falls_back_to_the_plain_module() {
    let engine = small_engine();
    let dir = tempfile::tempdir().unwrap();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();
    let module = cache
        .load(
            br#"(module
                 (memory (export "memory") 1)
                 (func (export "kiln_init") unreachable)
                 (func (export "_start")))"#,
        )
        .unwrap();
    match module.preinit() {
        PreInit::Failed {
            init_export,
            reason,
        } => {
            assert_eq!(init_export, "kiln_init");
            assert!(reason.contains("kiln_init"), "{reason}");
        }
        other => panic!("expected a failed pre-initialisation, got {other:?}"),
    }
    let response = engine.invoke(&module, request(b"{}")).unwrap();
    assert_eq!(response.error, None);
}

#[test]
fn eviction_removes_the_least_recently_used_files_but_not_loaded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let engine = small_engine();
    let cache = ModuleCache::open(&engine, dir.path()).unwrap();
    let old = cache.load(&wat("echo")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let newer = cache.load(&wat("counter")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let kept = cache.load(&wat("init")).unwrap();
    assert_eq!(
        kept.files().len(),
        3,
        "plain artifact, snapshot, compiled snapshot"
    );
    let total = cache.disk_usage_bytes().unwrap();

    // Under no pressure nothing goes.
    let none = cache.evict(total, &Default::default()).unwrap();
    assert_eq!((none.files, none.remaining_bytes), (0, total));

    // A limit of zero, keeping the pre-initialised module's files: every other file goes,
    // least recently used first, and the kept module still loads from its files.
    let keep = kept.files().iter().cloned().collect();
    let done = cache.evict(0, &keep).unwrap();
    assert_eq!(done.files, 2, "{done:?}");
    for file in old.files().iter().chain(newer.files()) {
        assert!(!file.exists(), "{} survived", file.display());
        assert!(!PathBuf::from(format!("{}.sha256", file.display())).exists());
    }
    for file in kept.files() {
        assert!(file.exists(), "{} was evicted", file.display());
    }
    assert_eq!(done.remaining_bytes, cache.disk_usage_bytes().unwrap());

    // A limit between: only the least recently used file goes. Reloading the two evicted
    // modules makes `echo` the older of the two; `init`'s files are touched by its load.
    let _ = cache.load(&wat("echo")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let newer = cache.load(&wat("counter")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let _ = cache.load(&wat("init")).unwrap();
    let total = cache.disk_usage_bytes().unwrap();
    let done = cache.evict(total - 1, &Default::default()).unwrap();
    assert_eq!(done.files, 1);
    assert!(!old.files()[0].exists() && newer.files()[0].exists());
    // The evicted module compiles again on its next load.
    let again = cache.load(&wat("echo")).unwrap();
    assert_eq!(
        engine.invoke(&again, request(b"back")).unwrap().body,
        b"back"
    );
}
