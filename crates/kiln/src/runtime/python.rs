//! `python3.X`, named after the `python3` on PATH.

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_sandbox::Mount;

use super::{Protocol, Runtime, RUNTIME_DIR};
use crate::function::InstanceSpec;

pub const SHIM: &str = include_str!("../../../../runtimes/python/shim.py");
/// The web adapter (`KilnWeb`), at `/opt/kiln/kiln_web.py`, loaded by the shim by its path.
pub const WEB_ADAPTER: &str = include_str!("../../../../runtimes/python/kiln_web.py");
/// Lambda SnapStart's hook module, at `/opt/kiln/python/snapshot_restore_py.py`.
pub const SNAPSHOT_HOOKS: &str =
    include_str!("../../../../runtimes/python/lib/snapshot_restore_py.py");

#[derive(Clone)]
pub struct Python {
    name: String,
    executable: PathBuf,
    prefix: PathBuf,
}

impl Python {
    pub fn detect() -> Result<Self, String> {
        // `python3` may be a wrapper script (pyenv); ask the interpreter for its real location.
        let out = Command::new("python3")
            .args(["-c", "import sys,os; print(os.path.realpath(sys.executable)); print(sys.base_prefix); print('%d.%d' % sys.version_info[:2])"])
            .output()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        let [executable, prefix, version] = lines.as_slice() else {
            return Err(format!("unexpected python3 output: {text}"));
        };
        Ok(Self {
            name: format!("python{version}"),
            executable: executable.into(),
            prefix: prefix.into(),
        })
    }

    /// The interpreter, by its path on the host (and so in sandboxes).
    pub fn executable(&self) -> String {
        self.executable.display().to_string()
    }

    /// The interpreter's installation, which sandboxes that run Python need.
    pub fn prefix_mount(&self) -> Option<Mount> {
        (!self.prefix.starts_with("/usr")).then(|| super::bind(&self.prefix, &self.prefix, false))
    }
}

impl Runtime for Python {
    fn name(&self) -> &str {
        &self.name
    }

    fn protocol(&self) -> Protocol {
        Protocol::Shim
    }

    fn mounts(&self) -> Vec<Mount> {
        self.prefix_mount().into_iter().collect()
    }

    fn argv(&self, _spec: &InstanceSpec) -> Vec<String> {
        vec![
            self.executable.display().to_string(),
            format!("{RUNTIME_DIR}/shim.py"),
        ]
    }

    fn can_fork(&self) -> bool {
        true
    }

    /// boto3 at /var/runtime, which the shim puts on `sys.path` right after the function's
    /// own directory, as Lambda's python runtimes do.
    fn sdk_mounts(&self, sdk: &Path) -> Vec<Mount> {
        vec![super::bind(
            &sdk.join("python"),
            Path::new(super::LAMBDA_RUNTIME_LIB),
            true,
        )]
    }

    fn env(&self, _spec: &InstanceSpec) -> Vec<(String, String)> {
        // PATH is Lambda's (`runtime::LAMBDA_DEFAULT_ENV`): the shim is started by the
        // interpreter's own path, so the interpreter's directory need not be on it.
        vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("KILN_SHIM_FD".into(), "3".into()),
        ]
    }
}
