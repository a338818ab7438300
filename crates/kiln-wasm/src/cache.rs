//! The module cache: compiled artifacts and pre-initialised snapshots on disk.
//!
//! ```text
//! DIR/compiled/<sha256 of the wasm>-<engine compatibility hash>.cwasm   wasmtime's artifact
//! DIR/compiled/….cwasm.sha256                                          the artifact's digest
//! DIR/preinit/<sha256 of (wasm digest, init export, Wizer id)>.wasm    a snapshot module
//! DIR/preinit/….wasm.sha256
//! DIR/tmp/                                                             files being written
//! ```
//!
//! Every file is written to `tmp/`, fsynced and renamed, then its digest beside it the same
//! way; a file is used only if its digest matches. Anything missing, stale or corrupt is
//! rebuilt (and the reason logged): the cache can slow a load down, never fail it.
//!
//! A file's modification time is its last use: every load that finds it sets it.
//! [`ModuleCache::evict`] removes the least recently used files beyond a size, sparing those
//! of the modules still loaded. Removing a file that is mapped is safe: the mapping keeps the
//! inode alive; the next load of that module compiles again.

use std::collections::HashSet;
use std::fs;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::{InstancePre, Module};

use crate::invoke::HostState;
use crate::preinit::{self, INIT_EXPORTS, WIZER_ID};
use crate::{Engine, WasmError};

/// What became of a module's pre-initialisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreInit {
    /// The module exports no init function; it runs as deployed.
    NotRequested,
    /// Instances start from the snapshot taken after this init export ran.
    Snapshot { init_export: String },
    /// The init export exists but pre-initialisation failed; instances run the plain module.
    Failed { init_export: String, reason: String },
}

/// A module ready to instantiate: compiled, linked against WASI, maybe pre-initialised.
/// Cheap to clone; keep one per function revision.
#[derive(Clone)]
pub struct FunctionModule {
    pub(crate) pre: InstancePre<HostState>,
    digest: String,
    preinit: PreInit,
    files: Vec<PathBuf>,
}

impl FunctionModule {
    /// sha256 (hex) of the module as deployed (after converting text to binary).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether instances start from a pre-initialised snapshot, and if not, why.
    pub fn preinit(&self) -> &PreInit {
        &self.preinit
    }

    /// The cache files this module was loaded from (to keep them through an eviction).
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// What [`ModuleCache::evict`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    pub files: usize,
    pub bytes: u64,
    /// What the cache takes on disk afterwards.
    pub remaining_bytes: u64,
}

impl std::fmt::Debug for FunctionModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionModule")
            .field("digest", &self.digest)
            .field("preinit", &self.preinit)
            .finish()
    }
}

/// Precompiled modules on disk, for one [`Engine`] configuration.
pub struct ModuleCache {
    engine: Engine,
    dir: PathBuf,
    compat: String,
    temp_counter: AtomicU64,
}

impl ModuleCache {
    /// Opens (creating) the cache in `dir` and empties its `tmp/` of interrupted writes.
    pub fn open(engine: &Engine, dir: impl Into<PathBuf>) -> Result<ModuleCache, WasmError> {
        let dir = dir.into();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| WasmError::CacheIo { path, source }
        };
        for sub in ["compiled", "preinit", "tmp"] {
            let path = dir.join(sub);
            fs::create_dir_all(&path).map_err(io(&path))?;
        }
        let tmp = dir.join("tmp");
        for entry in fs::read_dir(&tmp).map_err(io(&tmp))?.flatten() {
            let _ = fs::remove_file(entry.path());
        }
        let mut hasher = Sha256Hasher::default();
        std::hash::Hash::hash(
            &engine.inner.engine.precompile_compatibility_hash(),
            &mut hasher,
        );
        let compat = hex::encode(&hasher.0.finalize()[..8]);
        Ok(ModuleCache {
            engine: engine.clone(),
            dir,
            compat,
            temp_counter: AtomicU64::new(0),
        })
    }

    /// Prepares a function's module: compiles it (or loads the cached artifact) and, if it
    /// exports `wizer.initialize` or `kiln_init`, pre-initialises it (or loads the cached
    /// snapshot). Blocking, and slow on a miss (compilation): call it at deploy time, from
    /// `spawn_blocking`. A failed pre-initialisation falls back to the plain module; the
    /// reason is in [`FunctionModule::preinit`].
    pub fn load(&self, wasm: &[u8]) -> Result<FunctionModule, WasmError> {
        self.load_with(wasm, true)
    }

    /// [`ModuleCache::load`] without pre-initialisation, even if the module exports an init
    /// function (for comparisons, and for modules whose init must see the real environment).
    pub fn load_plain(&self, wasm: &[u8]) -> Result<FunctionModule, WasmError> {
        self.load_with(wasm, false)
    }

    /// Bytes the cache's files take on disk.
    pub fn disk_usage_bytes(&self) -> Result<u64, WasmError> {
        let mut total = 0;
        for sub in ["compiled", "preinit", "tmp"] {
            let path = self.dir.join(sub);
            let entries =
                fs::read_dir(&path).map_err(|source| WasmError::CacheIo { path, source })?;
            for entry in entries.flatten() {
                total += entry.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
        Ok(total)
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the least recently used files (each with its digest) until the cache takes at
    /// most `limit_bytes`, never one listed in `keep` (the files of loaded modules).
    pub fn evict(&self, limit_bytes: u64, keep: &HashSet<PathBuf>) -> Result<Eviction, WasmError> {
        let mut files = Vec::new();
        let mut total = 0;
        for sub in ["compiled", "preinit"] {
            let path = self.dir.join(sub);
            let entries =
                fs::read_dir(&path).map_err(|source| WasmError::CacheIo { path, source })?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "sha256") {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                let size = meta.len()
                    + fs::metadata(digest_path(&path))
                        .map(|m| m.len())
                        .unwrap_or(0);
                total += size;
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                files.push((used, size, path));
            }
        }
        let mut done = Eviction {
            remaining_bytes: total,
            ..Eviction::default()
        };
        files.sort();
        for (_, size, path) in files {
            if done.remaining_bytes <= limit_bytes {
                break;
            }
            if keep.contains(&path) {
                continue;
            }
            remove_pair(&path);
            done.files += 1;
            done.bytes += size;
            done.remaining_bytes -= size;
        }
        Ok(done)
    }

    fn load_with(&self, wasm: &[u8], preinit: bool) -> Result<FunctionModule, WasmError> {
        let wasm = wat::parse_bytes(wasm).map_err(|e| WasmError::InvalidModule(e.to_string()))?;
        let digest = sha256_hex(&wasm);
        let plain_path = self.compiled_path(&digest);
        let plain = self.compiled(&wasm, &digest)?;
        let mut files = vec![plain_path];
        let init_export = INIT_EXPORTS
            .into_iter()
            .find(|name| matches!(plain.get_export(name), Some(wasmtime::ExternType::Func(_))));
        let (module, preinit) = match init_export {
            Some(init_export) if preinit => {
                match self.preinitialised(&wasm, &digest, init_export) {
                    Ok((snapshot, snapshot_files)) => {
                        files.extend(snapshot_files);
                        (
                            snapshot,
                            PreInit::Snapshot {
                                init_export: init_export.into(),
                            },
                        )
                    }
                    Err(reason) => {
                        tracing::warn!(module = %digest, %reason, "pre-initialisation failed; using the plain module");
                        let failed = PreInit::Failed {
                            init_export: init_export.into(),
                            reason,
                        };
                        (plain, failed)
                    }
                }
            }
            _ => (plain, PreInit::NotRequested),
        };
        let pre = self
            .engine
            .inner
            .linker
            .instantiate_pre(&module)
            .map_err(|e| WasmError::Link(format!("{e:#}")))?;
        for file in &files {
            touch(file);
        }
        Ok(FunctionModule {
            pre,
            digest,
            preinit,
            files,
        })
    }

    /// The snapshot of `wasm` after `init_export`, from the cache or made now, and its files.
    fn preinitialised(
        &self,
        wasm: &[u8],
        digest: &str,
        init_export: &str,
    ) -> Result<(Module, [PathBuf; 2]), String> {
        let key = sha256_hex(format!("{digest}\0{init_export}\0{WIZER_ID}").as_bytes());
        let path = self.dir.join("preinit").join(format!("{key}.wasm"));
        let snapshot = match self.read_verified(&path) {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => self.take_snapshot(wasm, init_export, &path)?,
            Err(reason) => {
                tracing::warn!(path = %path.display(), %reason, "discarding a cached snapshot");
                self.take_snapshot(wasm, init_export, &path)?
            }
        };
        let snapshot_digest = sha256_hex(&snapshot);
        let module = self
            .compiled(&snapshot, &snapshot_digest)
            .map_err(|e| format!("compiling the snapshot: {e}"))?;
        Ok((module, [path, self.compiled_path(&snapshot_digest)]))
    }

    fn compiled_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("compiled")
            .join(format!("{digest}-{}.cwasm", self.compat))
    }

    fn take_snapshot(
        &self,
        wasm: &[u8],
        init_export: &str,
        path: &Path,
    ) -> Result<Vec<u8>, String> {
        let snapshot = preinit::snapshot(&self.engine, wasm, init_export)?;
        if let Err(e) = self.write_verified(path, &snapshot) {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the snapshot");
        }
        Ok(snapshot)
    }

    /// The compiled module for `wasm`: the cached artifact, mapped from disk, or compiled now.
    fn compiled(&self, wasm: &[u8], digest: &str) -> Result<Module, WasmError> {
        let path = self.compiled_path(digest);
        match self.deserialize(&path) {
            Ok(Some(module)) => return Ok(module),
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(path = %path.display(), %reason, "recompiling over a bad cached artifact")
            }
        }
        let engine = &self.engine.inner.engine;
        wasmtime::Module::validate(engine, wasm)
            .map_err(|e| WasmError::InvalidModule(format!("{e:#}")))?;
        let artifact = engine
            .precompile_module(wasm)
            .map_err(|e| WasmError::Compile(format!("{e:#}")))?;
        if let Err(e) = self.write_verified(&path, &artifact) {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled module; compiling in memory");
            return Module::new(engine, wasm).map_err(|e| WasmError::Compile(format!("{e:#}")));
        }
        match self.deserialize(&path) {
            Ok(Some(module)) => Ok(module),
            Ok(None) => Err(WasmError::Compile(
                "the artifact vanished right after writing".into(),
            )),
            Err(reason) => Err(WasmError::Compile(reason)),
        }
    }

    /// `Ok(None)` when there is no artifact; `Err(reason)` (after removing it) when it is bad.
    fn deserialize(&self, path: &Path) -> Result<Option<Module>, String> {
        if self.read_verified(path)?.is_none() {
            return Ok(None);
        }
        // SAFETY: wasmtime trusts a serialized artifact's machine code. This file is one this
        // cache wrote from `Engine::precompile_module` of an engine with the same compatibility
        // hash (it is in the name, and wasmtime checks its own header too), and its sha256
        // matched the digest recorded when it was written, just above. The directory belongs
        // to kiln; whoever could swap the file between the check and the map could replace
        // kiln's binary as well.
        #[allow(unsafe_code)]
        let loaded = unsafe { Module::deserialize_file(&self.engine.inner.engine, path) };
        loaded.map(Some).map_err(|e| {
            remove_pair(path);
            format!("wasmtime refused it: {e:#}")
        })
    }

    /// The file's contents if it exists and matches its recorded digest.
    fn read_verified(&self, path: &Path) -> Result<Option<Vec<u8>>, String> {
        let recorded = match fs::read_to_string(digest_path(path)) {
            Ok(recorded) => recorded,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read its digest: {e}")),
        };
        let contents = match fs::read(path) {
            Ok(contents) => contents,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read it: {e}")),
        };
        if sha256_hex(&contents) != recorded.trim() {
            remove_pair(path);
            return Err("its contents do not match their recorded sha256".into());
        }
        Ok(Some(contents))
    }

    /// Writes `contents` then its digest, each atomically (temporary file, fsync, rename).
    fn write_verified(&self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        self.write_atomically(path, contents)?;
        self.write_atomically(&digest_path(path), sha256_hex(contents).as_bytes())
    }

    fn write_atomically(&self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join("tmp")
            .join(format!("{}-{n}", std::process::id()));
        let mut file = fs::File::create(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        if let Some(parent) = path.parent() {
            fs::File::open(parent)?.sync_all()?;
        }
        Ok(())
    }
}

fn digest_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// Marks a file as just used (its modification time is its last use).
fn touch(path: &Path) {
    if let Ok(file) = fs::File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

fn remove_pair(path: &Path) {
    let _ = fs::remove_file(digest_path(path));
    let _ = fs::remove_file(path);
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Feeds `Hash` into sha256, so the engine's compatibility hash gives a name that is stable
/// across processes and Rust releases (std's `DefaultHasher` promises neither).
#[derive(Default)]
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("sha256 is 32 bytes"))
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
