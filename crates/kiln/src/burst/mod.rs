//! Burst offloading for unmodified web apps (BeeHive): an *app* is a monolith behind a gateway
//! that kiln runs, and a function built from the same code. During a burst the gateway serves
//! part of the monolith's heavy routes from the function, and hands them back when it ends.
//!
//! - [`spec`]: an app's configuration and its checks; kept in `kiln.db` ([`store`]).
//! - [`Apps`]: the apps of this node, each with its running [`gateway`] and its [`database`].
//! - [`routes`]: route patterns; [`profile`]: what each route costs at the monolith and which
//!   are worth offloading; [`shadow`]: the shadow runs that prove a route; [`control`]: the
//!   monolith or a function, per request; [`metrics`]: the apps' series.

pub mod control;
pub mod database;
pub mod gateway;
mod metrics;
pub mod profile;
pub mod routes;
pub mod shadow;
pub mod spec;
pub mod store;
mod table;
mod upstream;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::controller::Controller;
use crate::sync::LockExt;
use gateway::Gateway;
pub use metrics::render_metrics;
pub(crate) use spec::invalid;
pub use spec::{check_function, upstream_authority, AppError, AppInput, AppSpec};
use store::AppStore;

/// The apps of this node, each with its gateway.
pub struct Apps {
    controller: Arc<Controller>,
    databases: Arc<database::Databases>,
    store: AppStore,
    running: Mutex<BTreeMap<String, Arc<Gateway>>>,
}

impl Apps {
    /// Opens the apps table and starts every app's gateway. An app whose address is taken
    /// is kept and shown with the error.
    pub async fn open(
        controller: Arc<Controller>,
        databases: Arc<database::Databases>,
        data_dir: &Path,
    ) -> anyhow::Result<Arc<Self>> {
        let store = AppStore::open(&data_dir.join("kiln.db"))?;
        let apps = Arc::new(Self {
            controller,
            databases,
            store,
            running: Mutex::new(BTreeMap::new()),
        });
        for (spec, password) in apps.store.all()? {
            if let Err(e) = apps.databases.set(&spec, password.as_deref()) {
                eprintln!("kiln: app {}: its database: {e}", spec.name);
            }
            let gateway = Gateway::new(spec.clone(), apps.controller.clone())?;
            match tokio::net::TcpListener::bind(spec.listen).await {
                Ok(listener) => gateway.serve(listener),
                Err(e) => {
                    eprintln!(
                        "kiln: app {}: cannot listen on {}: {e}",
                        spec.name, spec.listen
                    );
                    gateway.set_error(format!("cannot listen on {}: {e}", spec.listen));
                }
            }
            apps.running.locked().insert(spec.name.clone(), gateway);
        }
        Ok(apps)
    }

    fn gateway(&self, name: &str) -> Result<Arc<Gateway>, AppError> {
        self.running
            .locked()
            .get(name)
            .cloned()
            .ok_or_else(|| AppError::NotFound(name.to_string()))
    }

    /// Creates an app or changes one. A changed address moves the listener; anything else
    /// is changed in place, keeping the profile and the controller's state.
    pub async fn put(&self, name: &str, input: AppInput) -> Result<AppSpec, AppError> {
        let current = self.running.locked().get(name).map(|g| g.spec());
        let (spec, password) = AppSpec::merge(name, current.as_ref(), input)?;
        let function = self
            .controller
            .get(&spec.function)
            .map_err(|_| invalid("Function", format!("{} does not exist", spec.function)))?;
        check_function(&function)?;
        if spec.database.is_some() && self.databases.used_by_other(&spec.function, name) {
            return Err(invalid(
                "Function",
                format!("{} already serves another app's database", spec.function),
            ));
        }
        let password = match password {
            Some(p) => Some(p),
            // Kept: the stored one (an update that does not name it).
            None => self
                .store
                .all()?
                .into_iter()
                .find(|(s, _)| s.name == name)
                .and_then(|(_, p)| p),
        };
        let existing = self.running.locked().get(name).cloned();
        match existing {
            Some(gateway) if gateway.spec().listen == spec.listen && gateway.is_listening() => {
                self.databases.set(&spec, password.as_deref())?;
                self.store.put(&spec, password.as_deref())?;
                gateway.update(spec.clone())?;
            }
            existing => {
                let listener = tokio::net::TcpListener::bind(spec.listen)
                    .await
                    .map_err(|e| {
                        invalid("Listen", format!("cannot listen on {}: {e}", spec.listen))
                    })?;
                let gateway = Gateway::new(spec.clone(), self.controller.clone())?;
                self.databases.set(&spec, password.as_deref())?;
                self.store.put(&spec, password.as_deref())?;
                if let Some(old) = existing {
                    old.stop();
                }
                gateway.serve(listener);
                self.running.locked().insert(name.to_string(), gateway);
            }
        }
        Ok(spec)
    }

    pub fn get(&self, name: &str) -> Result<AppSpec, AppError> {
        Ok(self.gateway(name)?.spec())
    }

    pub fn list(&self) -> Vec<AppSpec> {
        self.running.locked().values().map(|g| g.spec()).collect()
    }

    pub fn delete(&self, name: &str) -> Result<(), AppError> {
        let gateway = self.gateway(name)?;
        self.store.delete(name)?;
        self.databases.remove_app(name);
        self.running.locked().remove(name);
        gateway.stop();
        Ok(())
    }

    pub fn routes(&self, name: &str) -> Result<Vec<gateway::RouteView>, AppError> {
        Ok(self.gateway(name)?.routes())
    }

    pub fn status(&self, name: &str) -> Result<gateway::AppStatus, AppError> {
        Ok(self.gateway(name)?.status())
    }

    /// Every app's database proxy counters, for the metrics.
    pub fn database_metrics(&self) -> Vec<(String, kiln_dbproxy::MetricsSnapshot)> {
        self.databases.metrics()
    }

    /// Every app's status, for the metrics.
    pub fn statuses(&self) -> Vec<gateway::AppStatus> {
        let gateways: Vec<_> = self.running.locked().values().cloned().collect();
        gateways.iter().map(|g| g.status()).collect()
    }

    /// Stops every gateway's listener (kiln is shutting down).
    pub fn stop(&self) {
        for gateway in self.running.locked().values() {
            gateway.stop();
        }
    }
}
