//! Starting the controller: its registry and async queue (a node's SQLite database, or etcd in
//! cluster mode), its code and log stores opened, and its tables loaded from the registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::Notify;

use super::code::CodeStore;
use super::registry::{self, Database, EventQueue, Registry};
use super::replica::{self, Versions};
use super::{queue, versions, Controller, ControllerConfig, ControllerError};
use crate::agent::NodeAgent;
use crate::function;
use crate::logs::LogStore;
use crate::metrics::Metrics;
use crate::predict;
use crate::sync::RwLockExt;

impl Controller {
    pub fn open(
        config: ControllerConfig,
        agent: Arc<dyn NodeAgent>,
    ) -> Result<Arc<Self>, ControllerError> {
        let internal = |e: std::io::Error| ControllerError::Internal(e.to_string());
        std::fs::create_dir_all(&config.data_dir).map_err(internal)?;
        let database = Arc::new(Database::open(&config.data_dir.join("kiln.db"))?);
        // Layers are kept in the node's database; cluster mode has none of them yet.
        let layer_db = config.cluster.is_none().then(|| database.clone());
        let (registry, events, cluster_events, shared_code): (
            Arc<dyn Registry>,
            Arc<dyn EventQueue>,
            _,
            _,
        ) = match &config.cluster {
            Some(cluster) => {
                let events = Arc::new(registry::EtcdEvents::new(
                    cluster.etcd.clone(),
                    &cluster.prefix,
                    cluster.code.clone(),
                ));
                (
                    Arc::new(registry::EtcdRegistry::new(
                        cluster.etcd.clone(),
                        &cluster.prefix,
                        events.clone(),
                    )),
                    events.clone(),
                    Some(events),
                    Some(cluster.code.clone()),
                )
            }
            None => (database.clone(), database, None, None),
        };
        let code = CodeStore::open(&config.data_dir.join("store")).map_err(internal)?;
        let layers = super::layers::Layers::open(&config.data_dir.join("layers"), layer_db)
            .map_err(internal)?;
        let logs = LogStore::open(&config.data_dir.join("logs")).map_err(internal)?;
        let runtimes = agent.status().runtimes;
        let predictor =
            predict::Predictor::new(config.prediction.clone(), &config.data_dir.join("models"));
        let mut metrics =
            Metrics::with_object_cache(config.object_cache.as_ref().map(|c| c.metrics()));
        if config.cluster.is_some() {
            metrics = metrics.with_cluster();
        }
        let gc = config.cluster.as_ref().map(|cluster| {
            Arc::new(crate::cluster::gc::Collector::new(
                cluster.etcd.clone(),
                &cluster.prefix,
                cluster.code.clone(),
                cluster.gc,
                |record| {
                    serde_json::from_slice::<function::Function>(record)
                        .ok()
                        .map(|f| versions::packages(&f))
                },
                metrics.gc_removed_objects.clone(),
                metrics.gc_removed_bytes.clone(),
            ))
        });
        let controller = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            unpacks: Default::default(),
            config,
            registry,
            events,
            cluster_events,
            versions: Versions::default(),
            shared_code,
            gc,
            unfetched: replica::Unfetched::default(),
            code,
            layers,
            functions: RwLock::default(),
            url_settings: RwLock::default(),
            mutation: Mutex::new(()),
            sequences: RwLock::default(),
            agent,
            runtimes,
            logs,
            metrics,
            queue_wakeup: Arc::new(Notify::new()),
            predictor,
        });
        let loaded = controller.registry.load()?;
        let functions: Vec<function::Function> =
            loaded.functions.iter().map(|(f, _)| f.clone()).collect();
        controller.restore_layers(&functions);
        let mut table = HashMap::new();
        let mut live_code = Vec::new();
        let mut unpacking = Vec::new();
        {
            let mut sequences = controller.sequences_mut();
            for (sequence, version) in loaded.sequences {
                controller
                    .versions
                    .set(replica::Record::Sequence, &sequence.name, version);
                sequences.insert(sequence.name.clone(), Arc::new(sequence));
            }
        }
        for (function, version) in loaded.functions {
            let function = controller.previous_code_loaded(function);
            if let Err(e) = versions::packages(&function)
                .iter()
                .try_for_each(|digest| controller.ensure_code_blocking(digest))
            {
                // Left out until its package can be fetched (tried again every few seconds).
                eprintln!(
                    "kiln: function {} is not available on this node yet: {e}",
                    function.name
                );
                controller.unfetched.insert(Box::new(function), version);
                continue;
            }
            controller
                .versions
                .set(replica::Record::Function, &function.name, version);
            for digest in versions::packages(&function) {
                // Stored before its CreateFunction or UpdateFunctionCode answered, and not
                // extracted when kiln stopped: extracted now, as it would have been.
                if !controller.code.is_extracted(&digest) && controller.unpacks.begin(&digest) {
                    unpacking.push(digest);
                }
            }
            live_code.extend(versions::packages(&function));
            let warm = versions::kept_warm(&function);
            let (entry, prepare, _) = controller.build_entry(function, versions::Before::Loaded);
            let prepare = controller.defer_unpacking(&entry, prepare);
            if let Some(previous) = entry.fallback.as_ref().filter(|_| entry.is_deferred()) {
                controller.agent.prepare(previous.spec.clone());
            }
            for spec in prepare {
                if spec.version == function::versions::LATEST || warm.contains(&spec.version) {
                    controller.agent.prepare(spec);
                } else {
                    // Its snapshot is built after its first cold start; until then the node
                    // only knows its revision.
                    controller.agent.retire(&spec.function, Some(spec.revision));
                }
            }
            controller.provision_versions(&entry);
            table.insert(entry.function.name.clone(), Arc::new(entry));
        }
        *controller.functions.write_locked() = table;
        for digest in unpacking {
            controller.spawn_unpack(digest);
        }
        let mut urls = HashMap::new();
        for (name, settings, version) in loaded.urls {
            controller
                .versions
                .set(replica::Record::Url, &name, version);
            urls.insert(name, settings);
        }
        *controller.url_settings.write_locked() = urls;
        controller.code.collect_garbage(&live_code);
        if let Some(changes) = controller.registry.changes() {
            replica::follow(controller.clone(), changes);
        }
        queue::start(controller.clone());
        Ok(controller)
    }

    /// A loaded function keeps the code from before its last update only while that update's
    /// package is not extracted (it failed, or kiln stopped first), and only if the code's own
    /// package is: else nothing would run it.
    fn previous_code_loaded(&self, mut f: function::Function) -> function::Function {
        let needed = !self.code.is_extracted(&f.code_sha256);
        if let Some(previous) = &f.previous_code {
            if !needed || !self.code.is_extracted(&previous.code_sha256) {
                f.previous_code = None;
            }
        }
        f
    }

    /// Cluster mode: this node has joined; its lease lets it take part in the election of the
    /// async queue's scheduler, which also sweeps the shared store.
    pub fn attach_membership(&self, membership: Arc<crate::cluster::Membership>) {
        if let Some(events) = &self.cluster_events {
            events.attach(membership);
            if let Some(gc) = &self.gc {
                let events = Arc::downgrade(events);
                gc.start(move || events.upgrade()?.scheduling());
            }
        }
    }
}
