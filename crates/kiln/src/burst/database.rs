//! An app's database inside its function's sandboxes: kiln's PostgreSQL proxy
//! (`kiln-dbproxy`), listening at the very address the app's settings name, so the unmodified
//! app reaches it. Many instances share a few backends, one per transaction; a shadow run's
//! transactions are rolled back; each offloaded invocation's commits go to its ledger.
//!
//! A sandbox service: every instance of an app's function gets the listener in its network
//! namespace, also one that started before the app was created (the service keeps each isolated
//! sandbox's namespace while its instance lives). Each transaction is the invocation's in flight
//! in the connection's process when it begins (its fork's pid where several share the sandbox),
//! also on a connection an app's pool keeps open; one kiln cannot attribute is refused.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use kiln_dbproxy::{ClientContext, Proxy, ProxyConfig};

use super::{invalid, AppError, AppSpec};
use crate::agent::{Attachment, SandboxService, ServiceError};
use crate::function::{InstanceSpec, InvocationSlot, Shadow};
use crate::sync::{LockExt, RwLockExt};

/// The ports kiln's own services hold in every sandbox (the object store, the Runtime API).
const RESERVED_PORTS: [u16; 2] = [9000, 9001];

/// One app's proxy and where its function's instances find it.
pub struct AppDatabase {
    pub app: String,
    pub addr: SocketAddr,
    pub proxy: Proxy,
}

/// The database proxies of this node's apps, by function.
#[derive(Default)]
pub struct Databases {
    by_function: RwLock<HashMap<String, Arc<AppDatabase>>>,
    /// Every isolated sandbox alive, by function.
    sandboxes: std::sync::Mutex<HashMap<String, Vec<std::sync::Weak<Sandbox>>>>,
}

/// The parts of a `postgresql://USER@HOST:PORT/DB` URL (as [`AppSpec`] keeps it).
fn parts(url: &str) -> Option<(&str, &str, u16, &str)> {
    let rest = url.strip_prefix("postgresql://")?;
    let (user, rest) = rest.split_once('@')?;
    let (hostport, db) = rest.split_once('/')?;
    let (host, port) = hostport.rsplit_once(':')?;
    Some((user, host, port.parse().ok()?, db))
}

impl Databases {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Gives `spec`'s function the proxy of its database (or takes it away if it has none).
    /// Its settings change only when the database or the password does.
    pub fn set(&self, spec: &AppSpec, password: Option<&str>) -> Result<(), AppError> {
        let Some(url) = &spec.database else {
            self.remove_app(&spec.name);
            return Ok(());
        };
        let (user, host, port, db) =
            parts(url).ok_or_else(|| invalid("Database", format!("{url} cannot be parsed")))?;
        if RESERVED_PORTS.contains(&port) {
            return Err(invalid(
                "Database",
                format!("port {port} is kiln's own inside every sandbox: use another"),
            ));
        }
        // Inside the sandbox: a loopback literal as is; a name resolves to loopback there.
        let inside: SocketAddr = match host.trim_start_matches('[').trim_end_matches(']').parse() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let config = ProxyConfig::new(
            format!("{host}:{port}"),
            db,
            user,
            password.unwrap_or_default(),
        );
        let proxy = Proxy::new(config).map_err(|e| invalid("Database", e.to_string()))?;
        self.remove_app(&spec.name);
        let db = Arc::new(AppDatabase {
            app: spec.name.clone(),
            addr: inside,
            proxy,
        });
        self.by_function
            .write_locked()
            .insert(spec.function.clone(), db.clone());
        for sandbox in self.live_sandboxes(&spec.function) {
            if let Err(e) = sandbox.serve(&db) {
                eprintln!("kiln: app {} (on {}): {e}", spec.name, db.addr);
            }
        }
        Ok(())
    }

    pub fn remove_app(&self, app: &str) {
        let removed: Vec<String> = {
            let mut map = self.by_function.write_locked();
            let functions = map
                .iter()
                .filter(|(_, d)| d.app == app)
                .map(|(f, _)| f.clone())
                .collect();
            map.retain(|_, d| d.app != app);
            functions
        };
        for function in removed {
            for sandbox in self.live_sandboxes(&function) {
                sandbox.stop();
            }
        }
    }

    /// Whether another app already gives `function` a database.
    pub fn used_by_other(&self, function: &str, app: &str) -> bool {
        self.by_function
            .read_locked()
            .get(function)
            .is_some_and(|d| d.app != app)
    }

    /// Every app's proxy counters.
    pub fn metrics(&self) -> Vec<(String, kiln_dbproxy::MetricsSnapshot)> {
        self.by_function
            .read_locked()
            .values()
            .map(|d| (d.app.clone(), d.proxy.metrics()))
            .collect()
    }
}

/// Stops a sandbox's listener when dropped.
struct Listening(tokio::task::JoinHandle<()>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An isolated sandbox of some function, for as long as its instance lives: an app created
/// (or a database changed) later reaches sandboxes that already exist, the zygote's included.
struct Sandbox {
    netns: kiln_sandbox::NetNs,
    slot: InvocationSlot,
    listening: std::sync::Mutex<Option<Listening>>,
}

impl Sandbox {
    /// Serves `db` inside this sandbox (instead of what it served before).
    fn serve(&self, db: &Arc<AppDatabase>) -> Result<(), ServiceError> {
        // The old listener goes first: the new one binds the same address.
        self.stop();
        let listener = self
            .netns
            .listen_tcp(db.addr)
            .map_err(|e| ServiceError::new("database proxy listener", e))?;
        let local = listener
            .local_addr()
            .map_err(|e| ServiceError::new("database proxy listener", e))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| ServiceError::new("database proxy listener", e))?;
        let slot = self.slot.clone();
        let db = db.clone();
        let task = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!("database proxy: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                // Whose each transaction is, asked when it begins: an app's pool keeps
                // connections open across invocations. The connection's process is looked up
                // once (where invocations in flight disagree).
                let slot = slot.clone();
                let owner = Arc::new(std::sync::Mutex::new(None::<u32>));
                let source = move || {
                    let tags = slot.tags_for(|pids| {
                        let mut known = owner.locked();
                        if known.is_none() {
                            *known = crate::objects::peer::owner(peer, local, pids);
                        }
                        *known
                    });
                    ClientContext {
                        shadow: tags.shadow == Shadow::Yes,
                        ledger: tags.ledger.map(|l| l.0).unwrap_or_default(),
                        unattributed: tags.shadow == Shadow::Unknown,
                    }
                };
                let proxy = db.proxy.clone();
                tokio::spawn(async move {
                    if let Err(e) = proxy.serve_with(tcp, Arc::new(source)).await {
                        tracing::debug!("database proxy client: {e}");
                    }
                });
            }
        });
        *self.listening.locked() = Some(Listening(task));
        Ok(())
    }

    fn stop(&self) {
        self.listening.locked().take();
    }
}

impl Databases {
    fn live_sandboxes(&self, function: &str) -> Vec<Arc<Sandbox>> {
        let mut sandboxes = self.sandboxes.locked();
        let Some(of_function) = sandboxes.get_mut(function) else {
            return Vec::new();
        };
        of_function.retain(|s| s.strong_count() > 0);
        of_function
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect()
    }
}

impl SandboxService for Databases {
    fn attach(
        &self,
        spec: &InstanceSpec,
        netns: Option<&kiln_sandbox::NetNs>,
        slot: &InvocationSlot,
    ) -> Result<Attachment, ServiceError> {
        // Only isolated sandboxes: an app's function uses the isolated network.
        let Some(netns) = netns else {
            return Ok(Attachment {
                env: Vec::new(),
                guard: None,
            });
        };
        let sandbox = Arc::new(Sandbox {
            netns: netns
                .try_clone()
                .map_err(|e| ServiceError::new("database proxy", e))?,
            slot: slot.clone(),
            listening: std::sync::Mutex::new(None),
        });
        let db = self.by_function.read_locked().get(&spec.function).cloned();
        if let Some(db) = db {
            sandbox.serve(&db)?;
        }
        {
            let mut sandboxes = self.sandboxes.locked();
            let of_function = sandboxes.entry(spec.function.clone()).or_default();
            of_function.retain(|s| s.strong_count() > 0);
            of_function.push(Arc::downgrade(&sandbox));
        }
        Ok(Attachment {
            env: Vec::new(),
            guard: Some(Box::new(sandbox)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_taken_apart() {
        assert_eq!(
            parts("postgresql://blog@127.0.0.1:5432/blog"),
            Some(("blog", "127.0.0.1", 5432, "blog"))
        );
        assert_eq!(
            parts("postgresql://u@db.internal:6543/x"),
            Some(("u", "db.internal", 6543, "x"))
        );
        assert_eq!(
            parts("postgresql://u@[::1]:5432/x"),
            Some(("u", "[::1]", 5432, "x"))
        );
    }

    #[test]
    fn a_reserved_port_is_refused() {
        let dbs = Databases::new();
        let mut spec = AppSpec::example();
        spec.database = Some("postgresql://u@127.0.0.1:9000/d".into());
        assert!(matches!(
            dbs.set(&spec, None),
            Err(AppError::Invalid {
                field: "Database",
                ..
            })
        ));
        spec.database = Some("postgresql://u@127.0.0.1:5432/d".into());
        dbs.set(&spec, Some("pw")).unwrap();
        assert!(dbs.used_by_other(&spec.function, "another"));
        assert!(!dbs.used_by_other(&spec.function, &spec.name));
        dbs.remove_app(&spec.name);
        assert!(!dbs.used_by_other(&spec.function, "another"));
    }
}
