//! Lambda layers: PublishLayerVersion, GetLayerVersion(ByArn), ListLayers,
//! ListLayerVersions, DeleteLayerVersion, and the layers a function takes.
//!
//! A layer's zip is kept content-addressed in a store of its own (`<data>/layers/`, the same
//! [`CodeStore`] functions' packages use), its versions in the node's database. A function
//! keeps, with each layer's ARN, the digest and sizes of its content, so a deleted layer
//! version still serves the functions that use it: its content goes only when neither a
//! layer version nor a function refers to it (checked under the mutation lock, under which
//! every reference is committed, and at start).
//!
//! The `/opt` of a function's instances is its layers merged in order, later ones over
//! earlier ones, once per distinct list of layers (`<data>/layers/opt/<key>/`); files are
//! hard links into the store, so a merge costs directories and links, not copies.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::Utc;

use super::code::{CodeStore, MAX_UNZIPPED_BYTES};
use super::registry::Database;
use super::{Controller, ControllerError};
use crate::function::layers::{
    self, merged_key, parse_layer_version_arn, LayerRef, LayerVersion, LAYER_NAME_PATTERN,
    LAYER_VERSION_ARN_PATTERN, MAX_LAYERS, MAX_LAYER_NAME,
};
use crate::function::Function;

/// The most `CompatibleRuntimes` a layer version may list (Lambda's limit).
const MAX_COMPATIBLE_RUNTIMES: usize = 15;
/// The directory of `/opt` where kiln's runtime files are mounted: kept in every merge so
/// that the mount has its mount point in a read-only `/opt`.
const RUNTIME_MOUNT_POINT: &str = "kiln";

/// Where layers are kept on this node; `db` is `None` in cluster mode, which does not serve
/// layers yet.
#[derive(Clone)]
pub struct Layers {
    store: CodeStore,
    root: PathBuf,
    db: Option<Arc<Database>>,
}

/// What PublishLayerVersion takes besides the zip.
#[derive(Debug, Clone, Default)]
pub struct LayerInput {
    pub description: Option<String>,
    pub license_info: Option<String>,
    pub compatible_runtimes: Vec<String>,
    pub compatible_architectures: Vec<String>,
}

impl Layers {
    pub(super) fn open(root: &Path, db: Option<Arc<Database>>) -> io::Result<Self> {
        fs::create_dir_all(root.join("opt"))?;
        fs::create_dir_all(root.join("staging"))?;
        for entry in fs::read_dir(root.join("staging"))?.flatten() {
            let _ = fs::remove_dir_all(entry.path());
        }
        Ok(Self {
            store: CodeStore::open(&root.join("store"))?,
            root: root.to_path_buf(),
            db,
        })
    }

    /// The layers' zips, for their download URLs.
    pub fn store(&self) -> &CodeStore {
        &self.store
    }

    /// Where the merge of `layers` is kept.
    pub fn opt_dir(&self, layers: &[LayerRef]) -> PathBuf {
        self.root.join("opt").join(merged_key(layers))
    }

    /// Merges `layers` into their `/opt` unless it is there already.
    pub fn ensure_opt(&self, layers: &[LayerRef]) -> Result<(), ControllerError> {
        let target = self.opt_dir(layers);
        if layers.is_empty() || target.is_dir() {
            return Ok(());
        }
        let staging = self.root.join("staging").join(format!(
            "{}.{}",
            merged_key(layers),
            uuid::Uuid::new_v4()
        ));
        let result = self.merge_into(layers, &staging).and_then(|()| {
            match fs::rename(&staging, &target) {
                // Another merge of the same layers finished first; its tree is the same.
                Err(_) if target.is_dir() => Ok(()),
                other => other,
            }
        });
        if staging.exists() {
            let _ = fs::remove_dir_all(&staging);
        }
        result.map_err(|e| match e.kind() {
            // A deletion took the layer's content between its lookup and the merge.
            io::ErrorKind::NotFound => ControllerError::InvalidParameter(e.to_string()),
            _ => ControllerError::Internal(format!("merging layers into /opt: {e}")),
        })
    }

    fn merge_into(&self, layers: &[LayerRef], staging: &Path) -> io::Result<()> {
        fs::create_dir_all(staging)?;
        for layer in layers {
            let tree = self.store.code_dir(&layer.code_sha256);
            if !tree.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("Layer version {} does not exist.", layer.arn),
                ));
            }
            overlay(&tree, staging)?;
        }
        let mount_point = staging.join(RUNTIME_MOUNT_POINT);
        if mount_point.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
            fs::remove_file(&mount_point)?;
        }
        fs::create_dir_all(mount_point)
    }

    /// Removes the layer contents that neither a layer version nor one of `functions` refers
    /// to any more.
    fn collect_contents(&self, functions: &[Function]) {
        let Some(db) = &self.db else {
            return;
        };
        let Ok(versions) = db.layer_versions() else {
            return;
        };
        let mut live: Vec<String> = versions.into_iter().map(|v| v.code_sha256).collect();
        live.extend(
            functions
                .iter()
                .flat_map(layer_lists)
                .flat_map(|l| l.iter().map(|r| r.code_sha256.clone())),
        );
        self.store.collect_garbage(&live);
    }

    /// Removes the merges none of `functions` runs with. (At start only: a merge is made
    /// before the function that uses it is committed.)
    fn collect_merges(&self, functions: &[Function]) {
        let merges: Vec<String> = functions
            .iter()
            .flat_map(layer_lists)
            .map(merged_key)
            .collect();
        let Ok(entries) = fs::read_dir(self.root.join("opt")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !merges.contains(&name) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Whether a function or one of its published versions has layers.
pub(super) fn has_layers(f: &Function) -> bool {
    layer_lists(f).next().is_some()
}

/// The lists of layers a function and its published versions run with.
fn layer_lists(f: &Function) -> impl Iterator<Item = &[LayerRef]> {
    std::iter::once(f.config.layers.as_slice())
        .chain(
            f.published
                .versions
                .iter()
                .map(|v| v.config.layers.as_slice()),
        )
        .filter(|l| !l.is_empty())
}

/// Copies `from` over `to` as hard links (a copy where a link cannot be made): what `from`
/// has replaces what `to` had at the same path.
fn overlay(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        let existing = target.symlink_metadata().ok();
        if kind.is_dir() {
            if existing.is_some_and(|m| !m.is_dir()) {
                fs::remove_file(&target)?;
            }
            fs::create_dir_all(&target)?;
            overlay(&source, &target)?;
            continue;
        }
        match existing {
            Some(m) if m.is_dir() => fs::remove_dir_all(&target)?,
            Some(_) => fs::remove_file(&target)?,
            None => {}
        }
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&source)?, &target)?;
        } else if fs::hard_link(&source, &target).is_err() {
            fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// The size of the files under `dir`, as Lambda counts a function's unzipped size.
fn tree_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => tree_size(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

impl Controller {
    fn layer_db(&self) -> Result<&Database, ControllerError> {
        self.layers.db.as_deref().ok_or_else(|| {
            ControllerError::InvalidParameter(
                "kiln does not serve layers in cluster mode yet: run functions with layers on a single node".into(),
            )
        })
    }

    /// The layers' store and merges.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// `arn:aws:lambda:REGION:ACCOUNT:layer:NAME`.
    pub fn layer_arn(&self, name: &str) -> String {
        format!(
            "arn:aws:lambda:{}:{}:layer:{name}",
            self.config.region, self.config.account_id
        )
    }

    pub fn layer_version_arn(&self, name: &str, version: u64) -> String {
        format!("{}:{version}", self.layer_arn(name))
    }

    /// A LayerName parameter (a name or a layer's ARN) as a name of this node's layers; `None`
    /// for a well-formed ARN of another region or account, which names no layer here.
    fn layer_name(&self, raw: &str) -> Result<Option<String>, ControllerError> {
        let invalid = || {
            ControllerError::Validation(format!(
                "1 validation error detected: Value '{raw}' at 'layerName' failed to satisfy constraint: Member must satisfy regular expression pattern: {LAYER_NAME_PATTERN}"
            ))
        };
        if raw.len() > MAX_LAYER_NAME {
            return Err(ControllerError::Validation(format!(
                "1 validation error detected: Value '{raw}' at 'layerName' failed to satisfy constraint: Member must have length less than or equal to {MAX_LAYER_NAME}"
            )));
        }
        if layers::valid_layer_name(raw) {
            return Ok(Some(raw.to_string()));
        }
        let (region, account, name) = layers::parse_layer_arn(raw).ok_or_else(invalid)?;
        Ok((region == self.config.region && account == self.config.account_id).then_some(name))
    }

    fn layer_not_found() -> ControllerError {
        ControllerError::NotFound("The resource you requested does not exist.".into())
    }

    /// PublishLayerVersion.
    pub async fn publish_layer_version(
        &self,
        raw_name: &str,
        input: LayerInput,
        zip: Vec<u8>,
    ) -> Result<LayerVersion, ControllerError> {
        let db = self.layer_db()?;
        let name = self.layer_name(raw_name)?.ok_or_else(|| {
            ControllerError::InvalidParameter(format!(
                "Layer {raw_name} belongs to another region or account: publish it by name"
            ))
        })?;
        check_layer_input(&input)?;
        let store = self.layers.store.clone();
        let zip = Arc::new(zip);
        let bytes = zip.clone();
        let (code, unzipped_size) = tokio::task::spawn_blocking(move || {
            let code = store.put_zip(&bytes)?;
            let unzipped = tree_size(&store.code_dir(&code.sha256_hex));
            Ok::<_, ControllerError>((code, unzipped))
        })
        .await
        .map_err(|e| ControllerError::Internal(e.to_string()))??;
        let _mutation = self.lock_mutations();
        if !self.layers.store.contains(&code.sha256_hex) {
            // A deletion collected these very bytes meanwhile: store them again.
            self.layers.store.put_zip(&zip)?;
        }
        let layer = db.publish_layer_version(&name, |version| LayerVersion {
            name: name.clone(),
            version,
            description: input.description.unwrap_or_default(),
            license_info: input.license_info,
            compatible_runtimes: input.compatible_runtimes,
            compatible_architectures: input.compatible_architectures,
            code_sha256: code.sha256_hex,
            code_size: code.size,
            unzipped_size,
            created: Utc::now(),
        })?;
        Ok(layer)
    }

    /// GetLayerVersion.
    pub fn layer_version(
        &self,
        raw_name: &str,
        version: u64,
    ) -> Result<LayerVersion, ControllerError> {
        let db = self.layer_db()?;
        let Some(name) = self.layer_name(raw_name)? else {
            return Err(Self::layer_not_found());
        };
        db.layer_versions_of(&name)?
            .into_iter()
            .find(|l| l.version == version)
            .ok_or_else(Self::layer_not_found)
    }

    /// GetLayerVersionByArn.
    pub fn layer_version_by_arn(&self, arn: &str) -> Result<LayerVersion, ControllerError> {
        let parsed = parse_layer_version_arn(arn).ok_or_else(|| {
            ControllerError::Validation(format!(
                "1 validation error detected: Value '{arn}' at 'arn' failed to satisfy constraint: Member must satisfy regular expression pattern: {LAYER_VERSION_ARN_PATTERN}"
            ))
        })?;
        if parsed.region != self.config.region || parsed.account != self.config.account_id {
            self.layer_db()?;
            return Err(Self::layer_not_found());
        }
        self.layer_version(&parsed.name, parsed.version)
    }

    /// Every layer version of this node, by name and then version.
    pub fn all_layer_versions(&self) -> Result<Vec<LayerVersion>, ControllerError> {
        Ok(self.layer_db()?.layer_versions()?)
    }

    /// ListLayerVersions: the versions of one layer, by version (none for an unknown layer).
    pub fn layer_versions(&self, raw_name: &str) -> Result<Vec<LayerVersion>, ControllerError> {
        let db = self.layer_db()?;
        let Some(name) = self.layer_name(raw_name)? else {
            return Ok(Vec::new());
        };
        Ok(db.layer_versions_of(&name)?)
    }

    /// DeleteLayerVersion: done whether or not the version exists, as on Lambda. Functions
    /// that use it keep it; its content goes once none does.
    pub fn delete_layer_version(
        &self,
        raw_name: &str,
        version: u64,
    ) -> Result<(), ControllerError> {
        let db = self.layer_db()?;
        if let Some(name) = self.layer_name(raw_name)? {
            let _mutation = self.lock_mutations();
            if db.delete_layer_version(&name, version)? {
                self.release_layer_contents();
            }
        }
        Ok(())
    }

    /// Removes the layer contents no layer version and no function refers to any more. The
    /// caller holds the mutation lock, under which every reference is committed.
    pub(super) fn release_layer_contents(&self) {
        let functions: Vec<Function> = self.table().values().map(|e| e.function.clone()).collect();
        self.layers.collect_contents(&functions);
    }

    /// Checks, under the mutation lock, that the contents of `layers` are still stored: a
    /// layer version deleted since it was looked up may have taken its content with it.
    pub(super) fn check_layer_contents(&self, layers: &[LayerRef]) -> Result<(), ControllerError> {
        match layers
            .iter()
            .find(|l| !self.layers.store.contains(&l.code_sha256))
        {
            Some(gone) => Err(ControllerError::InvalidParameter(format!(
                "Layer version {} does not exist.",
                gone.arn
            ))),
            None => Ok(()),
        }
    }

    /// A function's `Layers` parameter as the layers it runs with: each an existing layer
    /// version of this node (or one the function has already, which may have been deleted
    /// since), at most five, no layer twice.
    pub fn resolve_layers(
        &self,
        arns: &[String],
        current: &[LayerRef],
    ) -> Result<Vec<LayerRef>, ControllerError> {
        if arns.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.layer_db()?;
        if arns.len() > MAX_LAYERS {
            return Err(ControllerError::InvalidParameter(format!(
                "Cannot reference more than {MAX_LAYERS} layers."
            )));
        }
        let stored = db.layer_versions()?;
        let mut out: Vec<LayerRef> = Vec::new();
        let mut names: Vec<(String, &str)> = Vec::new();
        for arn in arns {
            let parsed = parse_layer_version_arn(arn).ok_or_else(|| {
                ControllerError::Validation(format!(
                    "1 validation error detected: Value '[{}]' at 'layers' failed to satisfy constraint: Member must satisfy constraint: [Member must have length less than or equal to 140, Member must have length greater than or equal to 1, Member must satisfy regular expression pattern: {LAYER_VERSION_ARN_PATTERN}, Member must not be null]",
                    arns.join(", ")
                ))
            })?;
            if let Some((_, other)) = names.iter().find(|(n, _)| *n == parsed.name) {
                return Err(ControllerError::InvalidParameter(format!(
                    "Two different versions of the same layer are not allowed to be referenced in the same function. {other} and {arn} are versions of the same layer."
                )));
            }
            names.push((parsed.name.clone(), arn));
            let ours =
                parsed.region == self.config.region && parsed.account == self.config.account_id;
            let published = stored
                .iter()
                .find(|l| ours && l.name == parsed.name && l.version == parsed.version)
                .map(|l| LayerRef {
                    arn: self.layer_version_arn(&l.name, l.version),
                    code_sha256: l.code_sha256.clone(),
                    code_size: l.code_size,
                    unzipped_size: l.unzipped_size,
                });
            let kept = || current.iter().find(|l| l.arn == *arn).cloned();
            let layer = published.or_else(kept).ok_or_else(|| {
                ControllerError::InvalidParameter(format!("Layer version {arn} does not exist."))
            })?;
            out.push(layer);
        }
        Ok(out)
    }

    /// Merges `layers` into their `/opt` (off the async runtime: a merge walks every file).
    pub async fn prepare_layers(&self, layers: &[LayerRef]) -> Result<(), ControllerError> {
        if layers.is_empty() || self.layers.opt_dir(layers).is_dir() {
            return Ok(());
        }
        let layers = layers.to_vec();
        let this = self.layers.clone();
        tokio::task::spawn_blocking(move || this.ensure_opt(&layers))
            .await
            .map_err(|e| ControllerError::Internal(e.to_string()))?
    }

    /// Lambda's limit on a function's code and layers unzipped together.
    pub(super) fn check_unzipped(
        &self,
        code_sha256: &str,
        layers: &[LayerRef],
    ) -> Result<(), ControllerError> {
        if layers.is_empty() {
            return Ok(());
        }
        // From the zip's central directory: the tree may not be extracted yet.
        let total = self.code.unzipped_size(code_sha256)?
            + layers.iter().map(|l| l.unzipped_size).sum::<u64>();
        if total > MAX_UNZIPPED_BYTES {
            return Err(ControllerError::InvalidParameter(format!(
                "Function code combined with layers exceeds the maximum allowed size of {MAX_UNZIPPED_BYTES} bytes. The actual size is {total} bytes."
            )));
        }
        Ok(())
    }

    /// At start: every function's `/opt` merged (a merge lost with its directory is made
    /// again), and what no layer version or function refers to collected.
    pub(super) fn restore_layers(&self, functions: &[Function]) {
        for f in functions {
            for list in layer_lists(f) {
                if let Err(e) = self.layers.ensure_opt(list) {
                    eprintln!("kiln: function {}: {e}", f.name);
                }
            }
        }
        self.layers.collect_contents(functions);
        self.layers.collect_merges(functions);
    }
}

/// PublishLayerVersion's checks of what describes the layer.
fn check_layer_input(input: &LayerInput) -> Result<(), ControllerError> {
    let validation = |field: &str, value: String, constraint: &str| {
        ControllerError::Validation(format!(
            "1 validation error detected: Value '{value}' at '{field}' failed to satisfy constraint: {constraint}"
        ))
    };
    let runtimes = &input.compatible_runtimes;
    if runtimes.len() > MAX_COMPATIBLE_RUNTIMES {
        return Err(validation(
            "compatibleRuntimes",
            format!("[{}]", runtimes.join(", ")),
            &format!("Member must have length less than or equal to {MAX_COMPATIBLE_RUNTIMES}"),
        ));
    }
    if let Some(bad) = runtimes
        .iter()
        .find(|r| !super::validate::LAMBDA_RUNTIMES.contains(&r.as_str()))
    {
        return Err(validation(
            "compatibleRuntimes",
            format!("[{}]", runtimes.join(", ")),
            &format!("Member must satisfy constraint: [Member must satisfy enum value set: [{}]] ({bad} is not a Lambda runtime)", super::validate::LAMBDA_RUNTIMES.join(", ")),
        ));
    }
    let architectures = &input.compatible_architectures;
    if architectures.len() > 2 || architectures.iter().any(|a| a != "x86_64" && a != "arm64") {
        return Err(validation(
            "compatibleArchitectures",
            format!("[{}]", architectures.join(", ")),
            "Member must satisfy constraint: [Member must satisfy enum value set: [x86_64, arm64]], Member must have length less than or equal to 2",
        ));
    }
    if input
        .description
        .as_ref()
        .is_some_and(|d| d.chars().count() > 256)
    {
        return Err(validation(
            "description",
            "…".into(),
            "Member must have length less than or equal to 256",
        ));
    }
    if input
        .license_info
        .as_ref()
        .is_some_and(|d| d.chars().count() > 512)
    {
        return Err(validation(
            "licenseInfo",
            "…".into(),
            "Member must have length less than or equal to 512",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn later_layers_overwrite_earlier_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, to) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("to"),
        );
        write(&a.join("python/shared.py"), "a");
        write(&a.join("python/only_a.py"), "a");
        write(&a.join("bin/tool"), "a");
        write(&b.join("python/shared.py"), "b");
        // A directory where the first layer had a file, and the other way round.
        write(&b.join("bin/tool/inner"), "b");
        write(&a.join("lib"), "file");
        write(&b.join("lib/x.so"), "b");
        fs::create_dir_all(&to).unwrap();
        overlay(&a, &to).unwrap();
        overlay(&b, &to).unwrap();
        let read = |p: &str| fs::read_to_string(to.join(p)).unwrap();
        assert_eq!(read("python/shared.py"), "b");
        assert_eq!(read("python/only_a.py"), "a");
        assert_eq!(read("bin/tool/inner"), "b");
        assert_eq!(read("lib/x.so"), "b");
        // Hard links: the layer's own file is untouched by a later one.
        assert_eq!(fs::read_to_string(a.join("python/shared.py")).unwrap(), "a");
        assert_eq!(tree_size(&to), 4);
    }
}
