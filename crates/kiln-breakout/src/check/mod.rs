//! The support check: every construct of a package's JavaScript outside the subset the fast
//! path supports, as [`Site`]s (`docs/breakout.md` lists the subset).
//!
//! Which files are checked:
//! - every `.js`, `.cjs` and `.mjs` file of the package outside `node_modules`;
//! - every such file of each package under `node_modules` that checked code loads by a bare
//!   name (`require('uuid')`), found as Node finds it (the nearest `node_modules` up to the
//!   checked directory), transitively; packages nothing loads are never read;
//! - never the AWS SDK's packages (`@aws-sdk/*`, `@smithy/*`, `@aws-crypto/*`): its S3 client
//!   is an intrinsic, its other clients are refused where they are loaded.
//!
//! A native addon (`*.node`) in a checked tree is a site of its own. Symbolic links are not
//! followed, and `.git` is skipped.

mod found;
mod modules;
mod source;
#[cfg(test)]
mod tests;
mod visit;

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use found::{FileCheck, PackageUse};
pub use modules::{classify, Target, INTRINSIC_PACKAGES, SDK_SCOPES};
pub(crate) use source::too_deep;
pub use source::{check_source, SourceKind};

use crate::site::{Construct, ModuleRefusal, Site};

/// Files larger than this are one site, unread: no function's own source is this large.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Nesting deeper than this (brackets, and chains of prefix operators, `?`, assignments and
/// arrows within them) makes a file one site, unparsed: the parser and the checker recurse
/// once per level, and a forged file must not exhaust the stack.
pub const MAX_NESTING: usize = 1000;

/// The stack of the thread the check runs on. Deep but legal nesting below [`MAX_NESTING`]
/// recurses further than a default thread's 2 MiB allows; the memory is only touched if used.
pub(crate) const CHECK_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Why a directory could not be checked (unsupported code is not an error: it is the report).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The path given is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A file or directory of the package could not be read.
    #[error("cannot read {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The thread the check runs on could not be started.
    #[error("cannot start the checker's thread")]
    Thread(#[source] io::Error),
}

/// The outcome of checking a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// JavaScript files read: the package's own and those of the packages it loads.
    pub files_checked: usize,
    /// Every unsupported construct, sorted by file and position.
    pub sites: Vec<Site>,
    /// The JavaScript files read, as their sites name them, with how Node loads each (what
    /// the instrumenter rewrites).
    #[serde(skip)]
    pub files: Vec<CheckedFile>,
}

/// A JavaScript file the check read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedFile {
    /// The path relative to the checked directory, with `/` separators.
    pub path: String,
    pub kind: SourceKind,
}

/// Checks the package in `dir` (see the module's documentation for which files).
pub fn check_dir(dir: &Path) -> Result<Report, CheckError> {
    let metadata = std::fs::metadata(dir).map_err(|source| CheckError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(CheckError::NotADirectory(dir.to_path_buf()));
    }
    let root = dir.to_path_buf();
    let worker = std::thread::Builder::new()
        .name("breakout-check".into())
        .stack_size(CHECK_STACK_BYTES)
        .spawn(move || Walker::new(root).run())
        .map_err(CheckError::Thread)?;
    match worker.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// One check of a directory: the trees still to read and what was found.
struct Walker {
    root: PathBuf,
    /// Package directories already queued (the root first).
    queued: BTreeSet<PathBuf>,
    pending: Vec<PathBuf>,
    /// `"type"` of the nearest package.json, per directory.
    module_types: HashMap<PathBuf, bool>,
    files_checked: usize,
    sites: Vec<Site>,
    files: Vec<CheckedFile>,
}

impl Walker {
    fn new(root: PathBuf) -> Self {
        Walker {
            queued: BTreeSet::from([root.clone()]),
            pending: vec![root.clone()],
            root,
            module_types: HashMap::new(),
            files_checked: 0,
            sites: Vec::new(),
            files: Vec::new(),
        }
    }

    fn run(mut self) -> Result<Report, CheckError> {
        while let Some(tree) = self.pending.pop() {
            let mut files = Vec::new();
            collect_files(&tree, &mut files)?;
            for file in files {
                self.check_file(&file)?;
            }
        }
        self.sites.sort();
        self.sites.dedup();
        self.files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Report {
            files_checked: self.files_checked,
            sites: self.sites,
            files: self.files,
        })
    }

    fn relative(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        rel.components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/")
    }

    fn check_file(&mut self, path: &Path) -> Result<(), CheckError> {
        let name = self.relative(path);
        let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if extension == "node" {
            self.sites.push(whole_file(name, Construct::NativeAddon));
            return Ok(());
        }
        let read_error = |source| CheckError::Read {
            path: path.to_path_buf(),
            source,
        };
        let size = std::fs::symlink_metadata(path).map_err(read_error)?.len();
        self.files_checked += 1;
        if size > MAX_FILE_BYTES {
            self.sites.push(whole_file(name, Construct::TooLarge));
            return Ok(());
        }
        let bytes = std::fs::read(path).map_err(read_error)?;
        let Ok(text) = String::from_utf8(bytes) else {
            self.sites.push(whole_file(name, Construct::NotUtf8));
            return Ok(());
        };
        let kind = match extension {
            "mjs" => SourceKind::Module,
            "cjs" => SourceKind::CommonJs,
            _ => {
                let dir = path.parent().unwrap_or(&self.root).to_path_buf();
                if self.package_is_module(&dir) {
                    SourceKind::Module
                } else {
                    SourceKind::CommonJs
                }
            }
        };
        self.files.push(CheckedFile {
            path: name.clone(),
            kind,
        });
        let found = check_source(&name, &text, kind);
        self.sites.extend(found.sites);
        for package in found.packages {
            self.load_package(path, package);
        }
        Ok(())
    }

    /// A bare name loaded from `from`: its directory, as Node finds it, is queued for checking.
    fn load_package(&mut self, from: &Path, package: PackageUse) {
        let scope = package.name.split('/').next().unwrap_or("");
        if SDK_SCOPES.contains(&scope) {
            return;
        }
        let mut dir = from.parent();
        while let Some(d) = dir {
            if !d.starts_with(&self.root) {
                break;
            }
            let candidate = d.join("node_modules").join(&package.name);
            if std::fs::symlink_metadata(&candidate).is_ok_and(|m| m.is_dir()) {
                if self.queued.insert(candidate.clone()) {
                    self.pending.push(candidate);
                }
                return;
            }
            dir = d.parent();
        }
        self.sites.push(Site {
            file: package.file,
            line: package.line,
            col: package.col,
            construct: Construct::Module {
                syntax: package.syntax,
                specifier: package.specifier,
                refusal: ModuleRefusal::Missing,
            },
        });
    }

    /// Whether `.js` files in `dir` are ES modules: the nearest package.json, up to the
    /// checked directory, says `"type": "module"`.
    fn package_is_module(&mut self, dir: &Path) -> bool {
        if let Some(&known) = self.module_types.get(dir) {
            return known;
        }
        let manifest = dir.join("package.json");
        let is_module = match std::fs::read(&manifest) {
            Ok(bytes) => serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|v| v.get("type").and_then(|t| t.as_str()) == Some("module")),
            Err(_) if dir != self.root && dir.starts_with(&self.root) => match dir.parent() {
                Some(parent) => self.package_is_module(parent),
                None => false,
            },
            Err(_) => false,
        };
        self.module_types.insert(dir.to_path_buf(), is_module);
        is_module
    }
}

fn whole_file(file: String, construct: Construct) -> Site {
    Site {
        file,
        line: 1,
        col: 1,
        construct,
    }
}

/// The JavaScript files and native addons under `dir`, sorted, without descending into
/// `node_modules`, `.git` or symbolic links.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CheckError> {
    let read_error = |source| CheckError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let file_type = entry.file_type().map_err(read_error)?;
        let name = entry.file_name();
        if file_type.is_dir() {
            if name != "node_modules" && name != ".git" {
                collect_files(&path, out)?;
            }
        } else if file_type.is_file()
            && matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("js" | "cjs" | "mjs" | "node")
            )
        {
            out.push(path);
        }
    }
    Ok(())
}
