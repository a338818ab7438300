//! kiln's extension `KilnWeb`: a function that is an unmodified web app (docs/web-adapter.md).
//! Requests reach it as function URL events (payload 2.0) and the runtime's adapter turns each
//! one into a request of the app's own framework: a WSGI or ASGI call in the Python shim, a
//! real HTTP request to the app inside the sandbox for Node and `provided`. The function's
//! Handler is not used.

use serde::{Deserialize, Serialize};

use super::NetworkMode;

/// `KilnWeb` as CreateFunction and UpdateFunctionConfiguration take it and kiln stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct WebConfig {
    /// Python: `MODULE:CALLABLE` (a WSGI or ASGI app; `CALLABLE()` calls a factory once).
    /// Node: `FILE#EXPORT` (an exported app or `(req, res)` handler; `FILE` alone: the
    /// module itself or its default export).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Node: the entry script that starts the server itself (it calls `listen` on `Port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// `provided`: the command that starts the server (run by `/bin/sh -c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The port the app listens on in the sandbox (`Start`, `Command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
}

/// How the runtime's adapter reaches the app, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebMode<'a> {
    /// A WSGI or ASGI callable, called in the Python shim's own process.
    Python { module: &'a str, callable: &'a str },
    /// A Node module whose export kiln makes listen on a Unix socket.
    NodeApp { file: &'a str, export: &'a str },
    /// A Node entry script that listens on `port` itself.
    NodeStart { script: &'a str, port: u16 },
    /// Any server started by a command, listening on `port` (`provided`).
    Command { command: &'a str, port: u16 },
}

/// The Handler a web function gets when it is created without one: it is not used.
pub const UNUSED_HANDLER: &str = "kiln.web";

/// Ports the sandbox's own services hold on its loopback (the object store and the Runtime
/// API, README "Sandboxes").
pub const RESERVED_PORTS: [u16; 2] = [9000, 9001];
const MAX_APP_CHARS: usize = 256;
const MAX_COMMAND_BYTES: usize = 4096;

/// Where a runtime's adapter is documented, for messages.
fn family(runtime: &str) -> Option<&'static str> {
    if runtime.starts_with("python") {
        Some("python")
    } else if runtime.starts_with("nodejs") {
        Some("nodejs")
    } else if runtime.starts_with("provided") {
        Some("provided")
    } else {
        None
    }
}

impl WebConfig {
    /// True when nothing is set (the tags' way of turning `KilnWeb` off).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the configuration against the function's runtime and network, and says how the
    /// adapter runs the app. The error is a ValidationException's message.
    pub fn mode(&self, runtime: &str, network: NetworkMode) -> Result<WebMode<'_>, String> {
        let given: Vec<&str> = [
            ("App", self.app.is_some()),
            ("Start", self.start.is_some()),
            ("Command", self.command.is_some()),
            ("Port", self.port.is_some()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect();
        let given = if given.is_empty() {
            "nothing".to_string()
        } else {
            given.join(", ")
        };
        let Some(family) = family(runtime) else {
            return Err(format!(
                "KilnWeb is not available for the {runtime} runtime: web apps run on python, nodejs and provided runtimes"
            ));
        };
        let mode = match (family, self) {
            (
                "python",
                WebConfig {
                    app: Some(app),
                    start: None,
                    command: None,
                    port: None,
                },
            ) => {
                let (module, callable) = python_app(app)?;
                WebMode::Python { module, callable }
            }
            ("python", _) => {
                return Err(format!(
                    "KilnWeb for {runtime} takes App alone (MODULE:CALLABLE, a WSGI or ASGI app); it was given {given}"
                ))
            }
            (
                "nodejs",
                WebConfig {
                    app: Some(app),
                    start: None,
                    command: None,
                    port: None,
                },
            ) => {
                let (file, export) = node_app(app)?;
                WebMode::NodeApp { file, export }
            }
            (
                "nodejs",
                WebConfig {
                    app: None,
                    start: Some(script),
                    command: None,
                    port: Some(port),
                },
            ) => {
                relative_file("KilnWeb.Start", script)?;
                WebMode::NodeStart {
                    script,
                    port: check_port(*port, network)?,
                }
            }
            ("nodejs", _) => {
                return Err(format!(
                    "KilnWeb for {runtime} takes either App (FILE#EXPORT) or Start (an entry script) with Port; it was given {given}"
                ))
            }
            (
                _,
                WebConfig {
                    app: None,
                    start: None,
                    command: Some(command),
                    port: Some(port),
                },
            ) => {
                if command.trim().is_empty() || command.len() > MAX_COMMAND_BYTES {
                    return Err(format!(
                        "KilnWeb.Command must be a command of 1 to {MAX_COMMAND_BYTES} bytes"
                    ));
                }
                WebMode::Command {
                    command,
                    port: check_port(*port, network)?,
                }
            }
            _ => {
                return Err(format!(
                    "KilnWeb for {runtime} takes Command with Port (a server listening on that port); it was given {given}"
                ))
            }
        };
        Ok(mode)
    }
}

fn check_port(port: u32, network: NetworkMode) -> Result<u16, String> {
    let Some(port) = u16::try_from(port).ok().filter(|p| *p > 0) else {
        return Err(format!(
            "Value {port} at 'kilnWeb.port' failed to satisfy constraint: Member must have value between 1 and 65535"
        ));
    };
    if RESERVED_PORTS.contains(&port) {
        return Err(format!(
            "KilnWeb.Port {port} is taken in every sandbox by kiln's own services (9000: the object store, 9001: the Runtime API): choose another port"
        ));
    }
    if network == NetworkMode::Host {
        return Err(
            "KilnWeb.Port needs the isolated network: on the host network every instance of the function would listen on the same port"
                .into(),
        );
    }
    Ok(port)
}

fn identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

fn dotted(s: &str) -> bool {
    s.split('.').all(identifier)
}

/// `MODULE:CALLABLE`: dotted identifiers each, the callable optionally a factory call `f()`.
fn python_app(app: &str) -> Result<(&str, &str), String> {
    let bad = || {
        format!(
            "KilnWeb.App '{app}' must be MODULE:CALLABLE, e.g. mysite.wsgi:application or app:create_app() (a dotted module path, a colon, a dotted attribute path)"
        )
    };
    if app.chars().count() > MAX_APP_CHARS {
        return Err(bad());
    }
    let (module, callable) = app.split_once(':').ok_or_else(bad)?;
    let attribute = callable.strip_suffix("()").unwrap_or(callable);
    if !dotted(module) || !dotted(attribute) {
        return Err(bad());
    }
    Ok((module, callable))
}

/// `FILE#EXPORT` or `FILE`: a path inside the package and a dotted export path.
fn node_app(app: &str) -> Result<(&str, &str), String> {
    let (file, export) = app.split_once('#').unwrap_or((app, ""));
    relative_file("KilnWeb.App", file)?;
    if !export.is_empty() && !dotted(export) {
        return Err(format!(
            "KilnWeb.App '{app}' must be FILE#EXPORT, e.g. app.js#app: the export '{export}' is not a name"
        ));
    }
    Ok((file, export))
}

/// A file of the package: relative, inside it, no spaces.
fn relative_file(field: &str, file: &str) -> Result<(), String> {
    let inside = !file.is_empty()
        && file.chars().count() <= MAX_APP_CHARS
        && !file.starts_with('/')
        && !file.chars().any(char::is_whitespace)
        && file.split('/').all(|part| part != "..");
    if inside {
        Ok(())
    } else {
        Err(format!(
            "{field} '{file}' must be a file of the package: a relative path without '..' or spaces"
        ))
    }
}

/// The variables that tell the runtime's adapter what to run (read by the shims and kiln's
/// port-mode bootstrap); `runtime::RESERVED_ENV` keeps functions from setting them.
pub fn env(web: &WebConfig) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (key, value) in [
        ("KILN_WEB_APP", web.app.clone()),
        ("KILN_WEB_START", web.start.clone()),
        ("KILN_WEB_COMMAND", web.command.clone()),
        ("KILN_WEB_PORT", web.port.map(|p| p.to_string())),
    ] {
        if let Some(value) = value {
            env.push((key.to_string(), value));
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn web(
        app: Option<&str>,
        start: Option<&str>,
        command: Option<&str>,
        port: Option<u32>,
    ) -> WebConfig {
        WebConfig {
            app: app.map(Into::into),
            start: start.map(Into::into),
            command: command.map(Into::into),
            port,
        }
    }

    const ISOLATED: NetworkMode = NetworkMode::Isolated;

    #[test]
    fn each_runtime_takes_its_own_forms() {
        let app = web(Some("mysite.wsgi:application"), None, None, None);
        assert_eq!(
            app.mode("python3.11", ISOLATED),
            Ok(WebMode::Python {
                module: "mysite.wsgi",
                callable: "application"
            })
        );
        let factory = web(Some("app:create_app()"), None, None, None);
        assert!(factory.mode("python3.11", ISOLATED).is_ok());
        let node = web(Some("src/app.js#app"), None, None, None);
        assert_eq!(
            node.mode("nodejs20.x", ISOLATED),
            Ok(WebMode::NodeApp {
                file: "src/app.js",
                export: "app"
            })
        );
        let start = web(None, Some("server.js"), None, Some(3000));
        assert_eq!(
            start.mode("nodejs20.x", ISOLATED),
            Ok(WebMode::NodeStart {
                script: "server.js",
                port: 3000
            })
        );
        let command = web(None, None, Some("./server --port 8080"), Some(8080));
        assert!(command.mode("provided.al2023", ISOLATED).is_ok());
    }

    #[test]
    fn wrong_runtimes_combinations_and_ports_are_refused_clearly() {
        let refused = |w: WebConfig, runtime: &str| w.mode(runtime, ISOLATED).unwrap_err();
        let app = web(Some("app:app"), None, None, None);
        assert!(refused(app.clone(), "wasm").contains("not available for the wasm runtime"));
        assert!(refused(app, "provided").contains("Command with Port"));
        let start = web(None, Some("server.js"), None, Some(3000));
        assert!(refused(start, "python3.11").contains("App alone"));
        assert!(refused(web(None, Some("server.js"), None, None), "nodejs20.x").contains("Start"));
        assert!(
            refused(web(Some("app"), None, None, None), "python3.11").contains("MODULE:CALLABLE")
        );
        assert!(
            refused(web(Some("my-app:app"), None, None, None), "python3.11")
                .contains("MODULE:CALLABLE")
        );
        assert!(
            refused(web(Some("app:1app"), None, None, None), "python3.11")
                .contains("MODULE:CALLABLE")
        );
        assert!(
            refused(web(Some("../app.js#app"), None, None, None), "nodejs20.x")
                .contains("relative")
        );
        assert!(
            refused(web(Some("app.js#a-b"), None, None, None), "nodejs20.x").contains("not a name")
        );
        for port in [0, 65536, 70000] {
            let w = web(None, Some("server.js"), None, Some(port));
            assert!(refused(w, "nodejs20.x").contains("between 1 and 65535"));
        }
        let w = web(None, None, Some("./server"), Some(9001));
        assert!(refused(w, "provided").contains("kiln's own services"));
        let w = web(None, Some("server.js"), None, Some(3000));
        assert!(w
            .mode("nodejs20.x", NetworkMode::Host)
            .unwrap_err()
            .contains("isolated network"));
        let w = web(None, None, Some("  "), Some(8080));
        assert!(refused(w, "provided").contains("Command"));
        let empty = refused(WebConfig::default(), "python3.11");
        assert!(empty.contains("App alone") && empty.ends_with("it was given nothing"));
    }

    #[test]
    fn the_adapters_variables_name_what_is_set() {
        let w = web(None, Some("server.js"), None, Some(3000));
        assert_eq!(
            env(&w),
            vec![
                ("KILN_WEB_START".to_string(), "server.js".to_string()),
                ("KILN_WEB_PORT".to_string(), "3000".to_string())
            ]
        );
    }

    proptest! {
        #[test]
        fn checking_never_panics(app in ".{0,40}", port in 0u32..70000) {
            for runtime in ["python3.11", "nodejs20.x", "provided"] {
                let _ = web(Some(&app), None, None, None).mode(runtime, ISOLATED);
                let _ = web(None, Some(&app), None, Some(port)).mode(runtime, ISOLATED);
                let _ = web(None, None, Some(&app), Some(port)).mode(runtime, ISOLATED);
            }
        }
    }
}
