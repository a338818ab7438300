//! `provided`, `provided.al2` and `provided.al2023`: an executable `bootstrap` in the package that
//! speaks the Lambda Runtime API. kiln serves the API inside the sandbox.
//!
//! The sandbox sees the host's /usr and, when there is one, the Python installation, so that
//! bootstraps written as scripts (e.g. `python3 -m awslambdaric`) run unmodified.

use kiln_sandbox::Mount;

use super::python::Python;
use super::{Protocol, Runtime, TASK_ROOT};
use crate::function::InstanceSpec;

pub const NAMES: [&str; 3] = ["provided", "provided.al2", "provided.al2023"];

pub struct Provided {
    name: &'static str,
    python: Option<Python>,
}

impl Provided {
    pub fn new(name: &'static str, python: Option<&Python>) -> Self {
        Self {
            name,
            python: python.cloned(),
        }
    }
}

impl Runtime for Provided {
    fn name(&self) -> &str {
        self.name
    }

    fn protocol(&self) -> Protocol {
        Protocol::RuntimeApi
    }

    fn mounts(&self) -> Vec<Mount> {
        self.python
            .as_ref()
            .and_then(Python::prefix_mount)
            .into_iter()
            .collect()
    }

    fn argv(&self) -> Vec<String> {
        vec![format!("{TASK_ROOT}/bootstrap")]
    }

    fn env(&self, _spec: &InstanceSpec) -> Vec<(String, String)> {
        let python_bin = self
            .python
            .as_ref()
            .map(|p| format!("{}:", p.bin_dir()))
            .unwrap_or_default();
        vec![(
            "PATH".into(),
            format!("{python_bin}/usr/local/bin:/usr/bin:/bin:/var/task/bin"),
        )]
    }
}
