//! Runtimes: what a language needs inside a sandbox, and how kiln talks to it.
//!
//! Adding a runtime means adding one file here that implements [`Runtime`] and registering it
//! in [`Runtimes::detect`]. The agent only sees the trait.

mod nodejs;
mod provided;
mod python;
mod wasm;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_sandbox::Mount;

use crate::function::InstanceSpec;

/// How the agent exchanges invocations with the runtime process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// kiln's framed protocol over a Unix socket on fd 3 (docs/shim-protocol.md).
    Shim,
    /// The AWS Lambda Runtime API over HTTP.
    RuntimeApi,
    /// No process: the agent runs each request in a fresh WebAssembly instance (`kiln-wasm`).
    Wasm,
}

/// Where a sandbox's `/var/task` comes from.
#[derive(Clone, Copy)]
pub enum Code<'a> {
    /// The function's extracted code.
    Dir(&'a Path),
    /// A code slot's host directory: empty until a function is assigned (the warm path).
    Slot(&'a Path),
}

/// Where the runtime's files live inside every sandbox.
pub const RUNTIME_DIR: &str = "/opt/kiln";
/// Where a function's layers are extracted, in order.
pub const OPT_DIR: &str = "/opt";
pub const TASK_ROOT: &str = "/var/task";
/// Where `scripts/install-runtime-sdk.sh` puts the runtimes' AWS SDKs by default.
pub const DEFAULT_SDK_DIR: &str = "/usr/local/lib/kiln/runtime-sdk";
/// Where Lambda's runtimes keep their own libraries, the AWS SDK among them.
pub const LAMBDA_RUNTIME_LIB: &str = "/var/runtime";

pub trait Runtime: Send + Sync {
    /// The Lambda runtime identifier, e.g. `nodejs20.x`.
    fn name(&self) -> &str;
    fn protocol(&self) -> Protocol;
    /// Host paths this runtime needs beyond the base system (/usr, /lib, /etc basics).
    fn mounts(&self) -> Vec<Mount>;
    /// The command that starts the runtime process for `spec`, with absolute paths inside the
    /// sandbox.
    fn argv(&self, spec: &InstanceSpec) -> Vec<String>;
    /// Environment variables of this runtime, on top of Lambda's common ones.
    fn env(&self, spec: &InstanceSpec) -> Vec<(String, String)>;
    /// Whether an initialised instance can become a fork server (the hot start path).
    fn can_fork(&self) -> bool {
        false
    }
    /// How this runtime's instances see the AWS SDK installed under `sdk`, as Lambda's
    /// runtimes provide it; none by default (`provided` and wasm functions bundle their own).
    fn sdk_mounts(&self, _sdk: &Path) -> Vec<Mount> {
        Vec::new()
    }
}

/// The runtimes available on this host.
pub struct Runtimes {
    by_name: HashMap<String, Arc<dyn Runtime>>,
    base_mounts: Vec<Mount>,
    shim_dir: PathBuf,
    /// The runtimes' AWS SDKs, when installed.
    sdk_dir: Option<PathBuf>,
}

impl Runtimes {
    /// Probes the host for Node.js and Python and writes the shims to `shim_dir`. `wasm` is
    /// always listed; the agent runs it with its own engine. The AWS SDKs under `sdk_dir` are
    /// mounted into instances when they are installed there.
    pub fn detect(shim_dir: &Path, sdk_dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(shim_dir)?;
        std::fs::write(shim_dir.join("shim.js"), nodejs::SHIM)?;
        std::fs::write(shim_dir.join("web.js"), nodejs::WEB_ADAPTER)?;
        std::fs::write(shim_dir.join("breakout.js"), nodejs::BREAKOUT)?;
        std::fs::write(shim_dir.join("shim.py"), python::SHIM)?;
        std::fs::write(shim_dir.join("kiln_web.py"), python::WEB_ADAPTER)?;
        std::fs::write(shim_dir.join("web_bootstrap.py"), provided::WEB_BOOTSTRAP)?;
        std::fs::create_dir_all(shim_dir.join("python"))?;
        std::fs::write(
            shim_dir.join("python/snapshot_restore_py.py"),
            python::SNAPSHOT_HOOKS,
        )?;
        let mut by_name: HashMap<String, Arc<dyn Runtime>> = HashMap::new();
        let python = python::Python::detect();
        match &python {
            Ok(p) => {
                by_name.insert(p.name().to_string(), Arc::new(p.clone()));
            }
            Err(e) => tracing::warn!("no Python runtime: {e}"),
        }
        match nodejs::Node::detect() {
            Ok(node) => {
                by_name.insert(node.name().to_string(), Arc::new(node));
            }
            Err(e) => tracing::warn!("no Node.js runtime: {e}"),
        }
        for name in provided::NAMES {
            by_name.insert(
                name.to_string(),
                Arc::new(provided::Provided::new(name, python.as_ref().ok())),
            );
        }
        by_name.insert(wasm::NAME.to_string(), Arc::new(wasm::Wasm));
        let sdk_dir = if sdk_dir.is_dir() {
            Some(sdk_dir.to_path_buf())
        } else {
            tracing::warn!(
                "no AWS SDK for the runtimes at {} (scripts/install-runtime-sdk.sh installs it): \
                 functions get only the SDKs they bundle",
                sdk_dir.display()
            );
            None
        };
        Ok(Self {
            by_name,
            base_mounts: base_mounts(),
            shim_dir: shim_dir.to_path_buf(),
            sdk_dir,
        })
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Runtime>> {
        self.by_name.get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.by_name.keys().cloned().collect();
        names.sort();
        names
    }

    /// Every mount of a sandbox running `runtime`, with the function's code from `code_dir`, or
    /// from a code slot filled later (the warm path), and its merged layers at `/opt`.
    pub fn mounts(
        &self,
        runtime: &dyn Runtime,
        code: Code<'_>,
        layers: Option<&Path>,
    ) -> Vec<Mount> {
        let mut mounts = self.base_mounts.clone();
        // First, so that what kiln mounts under /opt (its runtime files, an interpreter
        // installed there) is mounted over the layers.
        let layers_at = mounts.len();
        if let Some(dir) = layers {
            mounts.push(bind(dir, Path::new(OPT_DIR), false));
        }
        mounts.extend(runtime.mounts());
        if let Some(sdk) = &self.sdk_dir {
            mounts.extend(runtime.sdk_mounts(sdk));
        }
        mounts.push(bind(&self.shim_dir, Path::new(RUNTIME_DIR), false));
        mounts.push(match code {
            Code::Dir(dir) => bind(dir, Path::new(TASK_ROOT), false),
            Code::Slot(slot) => Mount::Slot {
                source: slot.to_path_buf(),
                target: PathBuf::from(TASK_ROOT),
            },
        });
        if let Some(dir) = layers {
            mount_points_in_layers(dir, &mounts[layers_at + 1..]);
        }
        mounts
    }
}

/// The mount points, in a function's merged layers, of the mounts made over them: `/opt` is
/// read-only in the sandbox, so they must exist before. (The merge has `kiln/` already; this
/// covers e.g. an interpreter installed under /opt on the host.)
fn mount_points_in_layers(dir: &Path, later: &[Mount]) {
    for mount in later {
        let (Mount::Bind { source, target, .. } | Mount::Slot { source, target }) = mount else {
            continue;
        };
        let Ok(inside) = target.strip_prefix(OPT_DIR) else {
            continue;
        };
        let point = dir.join(inside);
        if point.symlink_metadata().is_ok() {
            continue;
        }
        let made = if source.is_dir() {
            std::fs::create_dir_all(&point)
        } else {
            point
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&point, b""))
        };
        if let Err(e) = made {
            tracing::warn!("no mount point for {} in the layers: {e}", target.display());
        }
    }
}

pub(crate) fn bind(source: &Path, target: &Path, optional: bool) -> Mount {
    Mount::Bind {
        source: source.to_path_buf(),
        target: target.to_path_buf(),
        writable: false,
        optional,
    }
}

/// What every runtime needs: the system's programs and libraries and a few files of /etc.
/// Merged-/usr hosts have /bin, /lib… as symbolic links; those are recreated as links.
fn base_mounts() -> Vec<Mount> {
    let mut mounts = vec![bind(Path::new("/usr"), Path::new("/usr"), false)];
    for dir in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
        let path = Path::new(dir);
        match std::fs::read_link(path) {
            Ok(points_to) => mounts.push(Mount::Symlink {
                target: path.to_path_buf(),
                points_to,
            }),
            Err(_) if path.is_dir() => mounts.push(bind(path, path, true)),
            Err(_) => {}
        }
    }
    for file in [
        "/etc/ssl",
        "/etc/ca-certificates",
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/nsswitch.conf",
        "/etc/hosts",
        "/etc/resolv.conf",
        "/etc/alternatives",
        "/etc/mime.types",
        "/etc/protocols",
        "/etc/services",
    ] {
        mounts.push(bind(Path::new(file), Path::new(file), true));
    }
    mounts
}

/// Lambda's log stream name of an instance: the date and the instance's id.
pub fn log_stream_name(version: &str, instance_id: u64) -> String {
    let date = chrono::Utc::now().format("%Y/%m/%d");
    format!("{date}/[{version}]{instance_id:016x}")
}

/// Variables every Lambda runtime has and a function may set itself (Lambda's own values).
pub const LAMBDA_DEFAULT_ENV: [(&str, &str); 3] = [
    ("PATH", "/usr/local/bin:/usr/bin/:/bin:/opt/bin"),
    ("LANG", "en_US.UTF-8"),
    (
        "LD_LIBRARY_PATH",
        "/var/task/lib:/opt/lib:/usr/local/lib:/usr/lib",
    ),
];

/// Lambda's reserved environment variables for one instance.
pub fn lambda_env(
    spec: &InstanceSpec,
    instance_id: u64,
    runtime: &dyn Runtime,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let reserved = [
        ("_HANDLER", spec.handler.clone()),
        ("LAMBDA_TASK_ROOT", TASK_ROOT.to_string()),
        ("LAMBDA_RUNTIME_DIR", RUNTIME_DIR.to_string()),
        ("AWS_EXECUTION_ENV", format!("AWS_Lambda_{}", spec.runtime)),
        ("AWS_LAMBDA_FUNCTION_NAME", spec.name().to_string()),
        ("AWS_LAMBDA_FUNCTION_VERSION", spec.version.clone()),
        (
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
            spec.memory_mb.to_string(),
        ),
        (
            "AWS_LAMBDA_LOG_GROUP_NAME",
            format!("/aws/lambda/{}", spec.name()),
        ),
        (
            "AWS_LAMBDA_LOG_STREAM_NAME",
            log_stream_name(&spec.version, instance_id),
        ),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_string()),
        ("AWS_REGION", spec.region.clone()),
        ("AWS_DEFAULT_REGION", spec.region.clone()),
        ("TZ", ":UTC".to_string()),
    ];
    for (key, value) in reserved {
        env.retain(|(k, _)| k != key);
        env.push((key.to_string(), value));
    }
    // Lambda's, never those of the process that started kiln; a function may set its own.
    for (key, value) in LAMBDA_DEFAULT_ENV {
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.to_string(), value.to_string()));
        }
    }
    if let Some(web) = &spec.web {
        env.extend(crate::function::web::env(web));
    }
    for (key, value) in runtime.env(spec) {
        env.retain(|(k, _)| *k != key);
        env.push((key, value));
    }
    env
}

/// The environment a Node function's handler reads in `process.env`, for BREAKOUT's fast path:
/// the function's own variables, where `lambda_env` keeps them, and the platform's names
/// (per instance, per request, or kiln's) as unknown, so reading one misses.
pub fn breakout_environment(spec: &InstanceSpec) -> kiln_breakout::package::Environment {
    let overridden = |name: &str| {
        RESERVED_ENV.contains(&name) || name == "NODE_PATH" || name.starts_with("KILN_")
    };
    let vars = spec
        .env
        .iter()
        .filter(|(k, _)| !overridden(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut platform: Vec<String> = RESERVED_ENV.iter().map(|n| n.to_string()).collect();
    platform.extend(LAMBDA_DEFAULT_ENV.iter().map(|(n, _)| n.to_string()));
    platform.extend(
        ["NODE_PATH", "TZ", "AWS_*", "LAMBDA_*", "KILN_*", "_*"]
            .iter()
            .map(|n| n.to_string()),
    );
    kiln_breakout::package::Environment { vars, platform }
}

/// Environment variable names a user may not set: kiln owns them.
pub const RESERVED_ENV: &[&str] = &[
    "_HANDLER",
    "LAMBDA_TASK_ROOT",
    "LAMBDA_RUNTIME_DIR",
    "AWS_EXECUTION_ENV",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_LOG_STREAM_NAME",
    "AWS_LAMBDA_RUNTIME_API",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "KILN_SHIM_FD",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "KILN_WEB_APP",
    "KILN_WEB_START",
    "KILN_WEB_COMMAND",
    "KILN_WEB_PORT",
];

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_breakout::package::EnvRead;

    #[test]
    fn the_fast_paths_environment_is_the_functions_own_and_misses_the_platforms() {
        let env = [
            ("USERS_BUCKET", "users"),
            ("NODE_PATH", "/mine"),
            ("AWS_REGION", "mars-1"),
            ("PATH", "/bin"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let spec = InstanceSpec {
            arn: "arn".into(),
            runtime: "nodejs20.x".into(),
            handler: "index.handler".into(),
            env,
            ..InstanceSpec::example("f", 256)
        };
        let env = breakout_environment(&spec);
        assert_eq!(env.read("USERS_BUCKET"), EnvRead::Value("users".into()));
        // A variable Lambda keeps the function's (PATH) is the function's; one the runtime
        // overrides (NODE_PATH) or kiln owns (AWS_REGION) is the platform's.
        assert_eq!(env.read("PATH"), EnvRead::Value("/bin".into()));
        assert_eq!(env.read("NODE_PATH"), EnvRead::Unknown);
        assert_eq!(env.read("AWS_REGION"), EnvRead::Unknown);
        assert_eq!(env.read("AWS_ACCESS_KEY_ID"), EnvRead::Unknown);
        assert_eq!(env.read("LANG"), EnvRead::Unknown);
        assert_eq!(env.read("_X_AMZN_TRACE_ID"), EnvRead::Unknown);
        assert_eq!(env.read("KILN_BREAKOUT_TRACE"), EnvRead::Unknown);
        assert_eq!(env.read("NOT_SET"), EnvRead::Absent);
    }
}
