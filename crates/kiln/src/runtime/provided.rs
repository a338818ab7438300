//! `provided`, `provided.al2` and `provided.al2023`: an executable `bootstrap` in the package that
//! speaks the Lambda Runtime API. kiln serves the API inside the sandbox.
//!
//! The sandbox sees the host's /usr and, when there is one outside it, the Python installation
//! kiln runs (by its own path: PATH is Lambda's, so `python3` in a bootstrap is the host's
//! `/usr/bin/python3`, as a bootstrap on Lambda finds only what /usr and its package hold).

use kiln_sandbox::Mount;

use super::python::Python;
use super::{Protocol, Runtime, RUNTIME_DIR, TASK_ROOT};
use crate::function::InstanceSpec;

pub const NAMES: [&str; 3] = ["provided", "provided.al2", "provided.al2023"];
/// kiln's bootstrap for web functions (`KilnWeb` Command and Port), at
/// `/opt/kiln/web_bootstrap.py`; it runs on the Python kiln runs.
pub const WEB_BOOTSTRAP: &str = include_str!("../../../../runtimes/provided/web_bootstrap.py");

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

    fn argv(&self, spec: &InstanceSpec) -> Vec<String> {
        match spec.web.as_ref().and_then(|web| web.command.as_ref()) {
            // A web app's server, started and fronted by kiln's own bootstrap.
            Some(_) => vec![
                self.python
                    .as_ref()
                    .map_or_else(|| "/usr/bin/python3".into(), Python::executable),
                format!("{RUNTIME_DIR}/web_bootstrap.py"),
            ],
            None => vec![format!("{TASK_ROOT}/bootstrap")],
        }
    }

    fn env(&self, _spec: &InstanceSpec) -> Vec<(String, String)> {
        // Lambda's PATH (`runtime::LAMBDA_DEFAULT_ENV`), as on provided.al2023.
        Vec::new()
    }
}
