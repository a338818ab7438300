//! `nodejs20.x` (named after the major version of the `node` on PATH).

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_sandbox::Mount;

use super::{Protocol, Runtime, RUNTIME_DIR};
use crate::function::InstanceSpec;

pub const SHIM: &str = include_str!("../../../../runtimes/nodejs/shim.js");
/// BREAKOUT's tracing runtime, at `/opt/kiln/breakout.js`, required by the shim of a tracing
/// instance.
pub const BREAKOUT: &str = include_str!("../../../../runtimes/nodejs/breakout.js");
/// The web adapter (`KilnWeb`), at `/opt/kiln/web.js`, required by the shim.
pub const WEB_ADAPTER: &str = include_str!("../../../../runtimes/nodejs/web.js");

pub struct Node {
    name: String,
    binary: PathBuf,
}

impl Node {
    pub fn detect() -> Result<Self, String> {
        let binary = which("node").ok_or("`node` is not on PATH")?;
        let binary = std::fs::canonicalize(&binary).map_err(|e| e.to_string())?;
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .map_err(|e| e.to_string())?;
        let version = String::from_utf8_lossy(&out.stdout);
        let major = version
            .trim()
            .trim_start_matches('v')
            .split('.')
            .next()
            .unwrap_or("")
            .to_string();
        if major.is_empty() {
            return Err(format!("unexpected `node --version` output: {version}"));
        }
        Ok(Self {
            name: format!("nodejs{major}.x"),
            binary,
        })
    }
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

impl Runtime for Node {
    fn name(&self) -> &str {
        &self.name
    }

    fn protocol(&self) -> Protocol {
        Protocol::Shim
    }

    fn mounts(&self) -> Vec<Mount> {
        // A node outside /usr (e.g. under /opt) brings its whole installation prefix.
        match self.binary.parent().and_then(Path::parent) {
            Some(prefix) if !self.binary.starts_with("/usr") => {
                vec![super::bind(prefix, prefix, false)]
            }
            _ => Vec::new(),
        }
    }

    /// The SDK's `node_modules` at /var/runtime/node_modules, as Lambda's nodejs runtimes have
    /// it (on `NODE_PATH` for `require`), and `/node_modules` pointing there: ES modules do not
    /// read `NODE_PATH`, and both kinds of resolution end at the root's `node_modules` after
    /// the function's own.
    fn sdk_mounts(&self, sdk: &Path) -> Vec<Mount> {
        let modules = Path::new(super::LAMBDA_RUNTIME_LIB).join("node_modules");
        vec![
            super::bind(&sdk.join("nodejs/node_modules"), &modules, true),
            Mount::Symlink {
                target: PathBuf::from("/node_modules"),
                points_to: modules,
            },
        ]
    }

    fn argv(&self, _spec: &InstanceSpec) -> Vec<String> {
        vec![
            self.binary.display().to_string(),
            format!("{RUNTIME_DIR}/shim.js"),
        ]
    }

    /// `NODE_PATH` as on Lambda: the layers' modules for this Node version, then for any, then
    /// the SDK's.
    fn env(&self, _spec: &InstanceSpec) -> Vec<(String, String)> {
        let major = self
            .name
            .trim_start_matches("nodejs")
            .trim_end_matches(".x");
        vec![
            (
                "NODE_PATH".into(),
                format!("/opt/nodejs/node{major}/node_modules:/opt/nodejs/node_modules:/var/runtime/node_modules:/var/task/node_modules"),
            ),
            ("KILN_SHIM_FD".into(), "3".into()),
        ]
    }
}
