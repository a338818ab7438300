//! `kiln up`: the whole platform in one process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use axum::serve::ListenerExt;
use kiln_sandbox::CgroupManager;

use crate::agent::{
    wasm_cache_dir, AgentConfig, AgentContext, LocalAgent, MemoryLender, NodeAgent, WasmHost,
};
use crate::api::{self, AppState};
use crate::auth::{StoredCredentials, Verifier};
use crate::cluster::{Cluster, ClusterConfig};
use crate::controller::{Controller, ControllerConfig};
use crate::function::{FunctionConfig, NetworkMode, UrlAuth};
use crate::objects::{self, ObjectsSettings, Scope};
use crate::runtime::Runtimes;
use crate::sync::LockExt;

/// Settings of `kiln up`, validated.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub region: String,
    pub idle_ttl: Duration,
    pub memory_budget_mb: Option<u64>,
    pub queue_depth: usize,
    pub snapshot_memory_mb: u64,
    pub snapshot_disk_mb: u64,
    /// The runtimes' AWS SDKs (`--runtime-sdk`).
    pub runtime_sdk: PathBuf,
    pub warm_standbys: usize,
    /// Turn the kernel's `favordynmods` on, so that moving a process into its cgroup (every
    /// start, every fork) does not wait for an RCU grace period.
    pub favor_dynamic_moves: bool,
    /// Give each sandbox a disk of its own as `/tmp` (else a tmpfs counted against memory).
    pub tmp_disks: bool,
    /// The cgroup kiln and its instances go under (`--cgroup-parent`), relative to the mount.
    pub cgroup_parent: Option<String>,
    /// The most instances made ahead of demand per function (standbys, spare forks).
    pub max_standbys: usize,
    /// How long a function's peak concurrency is remembered whole (then halved every window).
    pub standby_window: Duration,
    /// Per-invocation memory prediction.
    pub prediction: crate::predict::PredictorConfig,
    pub max_instances: Option<u32>,
    pub async_retry_delay: Duration,
    pub shutdown_grace: Duration,
    pub write_aws_profile: bool,
    pub demo: bool,
    /// The S3 object store.
    pub objects: ObjectsSettings,
    /// Serve only the object store: no functions, no sandboxes, no root needed.
    pub store_only: bool,
    /// Cluster mode (`--cluster`); `None`: a single node, as ever.
    pub cluster: Option<ClusterConfig>,
    /// The console at `/ui/`; `None` with `--ui off`.
    pub console: Option<crate::console::ConsoleConfig>,
}

fn host_memory_mb() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .unwrap_or(4096)
}

/// A cgroup parent per data dir, so that two kiln servers on one host never reap each other.
fn cgroup_parent(data_dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    format!("kiln-{}", &hex::encode(digest)[..12])
}

/// `--cgroup-parent`: one or more levels under the cgroup mount, as `a/b` (a leading `/` is
/// allowed); no `.`, `..` or empty level, nothing a cgroup name cannot hold.
pub fn parse_cgroup_parent(raw: &str) -> Result<String, String> {
    let levels: Vec<&str> = raw.trim_start_matches('/').split('/').collect();
    let valid = |level: &&str| {
        !level.is_empty()
            && *level != "."
            && *level != ".."
            && level.len() <= 255
            && !level.contains(['\n', '\0'])
    };
    if levels.iter().all(valid) {
        Ok(levels.join("/"))
    } else {
        Err(format!(
            "`{raw}` is not a cgroup path: give levels under the cgroup mount, as kiln/node-1"
        ))
    }
}

pub async fn run(config: ServerConfig) -> anyhow::Result<()> {
    if config.store_only {
        return run_store_only(config).await;
    }
    // SAFETY-free check of the effective uid via the filesystem: root owns /proc/self when we are root.
    if !running_as_root() {
        bail!(
            "kiln up must run as root: it creates namespaces, cgroups and bind mounts for every sandbox. \
             A rootless mode is not available; kiln never runs a function unsandboxed."
        );
    }
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&config.data_dir)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))?;
    }

    let cluster = match config.cluster.clone() {
        Some(cluster) => Some(
            Cluster::connect(cluster)
                .await
                .context("cannot join the cluster")?,
        ),
        None => None,
    };
    let (stored, created) = match &cluster {
        // The cluster's one set of credentials, written to this node's data dir as a single
        // node's own (the CLI and the profile read them there).
        Some(cluster) => {
            let (stored, created) = cluster.credentials(&config.region).await?;
            stored.save(&data_dir)?;
            (stored, created)
        }
        None => StoredCredentials::load_or_create(&data_dir, &config.region)?,
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let endpoint = format!("http://{addr}");
    let s3 = config.objects.bind(
        Some(config.listen),
        &data_dir,
        &config.region,
        stored.credentials(),
    )?;
    if created {
        println!(
            "kiln: created credentials (stored in {}):",
            StoredCredentials::path(&data_dir).display()
        );
        println!("  aws_access_key_id     = {}", stored.access_key_id);
        println!("  aws_secret_access_key = {}", stored.secret_access_key);
    }
    if config.write_aws_profile {
        match stored.write_aws_profile(&endpoint) {
            Ok((creds, cfg)) => {
                if let Err(e) = objects::profile::write_s3_endpoint(&cfg, &s3.endpoint) {
                    eprintln!("kiln: could not add the object store to the AWS profile: {e}");
                }
                println!(
                    "kiln: AWS profile `kiln` written to {} and {} (use --profile kiln)",
                    creds.display(),
                    cfg.display()
                )
            }
            Err(e) => eprintln!("kiln: could not write the AWS profile: {e}"),
        }
    }

    let own = cgroup_parent(&data_dir);
    let cgroups = match &config.cgroup_parent {
        Some(parent) => {
            let cgroups = CgroupManager::detect(&format!("{parent}/{own}")).context("cgroups")?;
            cgroups
                .enter_sibling(&format!("{own}-node"))
                .with_context(|| format!("cannot move kiln into --cgroup-parent {parent}"))?;
            cgroups
        }
        None => CgroupManager::detect(&own).context("cgroups")?,
    };
    if config.favor_dynamic_moves {
        if let Err(e) = CgroupManager::favor_dynamic_moves(Path::new(DYNMODS_MOUNT)) {
            eprintln!(
                "kiln: moving a process into its cgroup waits for the kernel (several ms): {e}"
            );
        }
    }
    let sandbox_root = data_dir.join("run/rootfs");
    std::fs::create_dir_all(&sandbox_root)?;
    let runtimes = Runtimes::detect(&data_dir.join("runtime"), &config.runtime_sdk)?;
    let memory_budget_mb = config.memory_budget_mb.unwrap_or(host_memory_mb() * 3 / 4);
    let node_max_instances = config
        .max_instances
        .unwrap_or((memory_budget_mb / 128).max(1) as u32);
    let wasm = match WasmHost::open(
        &wasm_cache_dir(&data_dir),
        node_max_instances,
        config.snapshot_disk_mb,
    ) {
        Ok(host) => Some(Arc::new(host)),
        Err(e) => {
            eprintln!("kiln: the wasm runtime is not available: {e}");
            None
        }
    };
    let code_slots = match kiln_sandbox::SlotDir::open(&data_dir.join("run/slots")) {
        Ok(slots) => Some(slots),
        Err(e) => {
            eprintln!("kiln: no warm start path (code slots need mount propagation): {e}");
            None
        }
    };
    let tmp_disks = if config.tmp_disks {
        kiln_sandbox::TmpDisks::open(&data_dir.join("run/tmp"))
    } else {
        Err(std::io::Error::other("--tmp-disks off"))
    };
    if let Err(e) = &tmp_disks {
        eprintln!("kiln: a sandbox's /tmp is a tmpfs counted against its memory (no disks: {e})");
    }
    let tmp_disks = crate::agent::TmpDiskPool::new(tmp_disks);
    // Apps' databases, served inside their functions' sandboxes (burst offloading).
    let databases = crate::burst::database::Databases::new();
    let agent = LocalAgent::new(
        AgentContext {
            cgroups,
            runtimes,
            sandbox_root: sandbox_root.clone(),
            services: vec![
                Arc::new(objects::sandbox::SandboxObjectStore::new(
                    s3.store.clone(),
                    s3.endpoint.clone(),
                )),
                databases.clone(),
            ],
            wasm,
            objects: Some(s3.store.clone()),
            code_slots,
            tmp_disks,
            replays: Default::default(),
        },
        AgentConfig {
            memory_budget_mb,
            idle_ttl: config.idle_ttl,
            queue_depth: config.queue_depth,
            snapshot_memory_mb: config.snapshot_memory_mb,
            warm_standbys: config.warm_standbys,
            max_standbys: config.max_standbys,
            standby_window: config.standby_window,
            session_dir: data_dir.join("sessions"),
            sandbox_root,
        },
    );
    let local: Arc<dyn NodeAgent> = Arc::new(agent);
    // Cluster mode: invocations may run on other nodes (`cluster/router.rs`).
    let router = config.cluster.as_ref().map(|cluster| {
        Arc::new(crate::cluster::router::ClusterAgent::new(
            local.clone(),
            cluster.node_id.clone(),
        ))
    });
    let agent: Arc<dyn NodeAgent> = match &router {
        Some(router) => router.clone(),
        None => local,
    };
    if let (Some(cache), objects::CacheSizing::Lent) =
        (s3.store.cache(), config.objects.cache_sizing)
    {
        let mut sizing = objects::cache::sizing::SizingConfig::new(
            config.objects.cache_config.capacity_bytes,
            config.objects.cache_slack_bytes,
        );
        sizing.window_ticks = (config.objects.cache_slack_window.as_secs_f64()
            / sizing.tick.as_secs_f64())
        .ceil() as usize;
        size_object_cache(cache.clone(), agent.clone(), sizing);
    }
    // Cluster mode: the registry in etcd, packages in the shared store's bucket.
    let shared_registry = match (&cluster, &config.objects.remote) {
        (Some(cluster), Some(remote)) => {
            let code = crate::cluster::code::SharedCode::new(remote);
            code.ensure_bucket()
                .await
                .context("cannot use the shared store for packages")?;
            Some(crate::controller::ClusterRegistry {
                etcd: cluster.etcd().clone(),
                prefix: cluster.prefix().to_string(),
                code,
                gc: cluster.config().gc,
            })
        }
        _ => None,
    };
    let controller = Controller::open(
        ControllerConfig {
            data_dir: data_dir.clone(),
            region: config.region.clone(),
            account_id: "000000000000".into(),
            node_max_instances,
            async_retry_delay: config.async_retry_delay,
            async_concurrency: 16,
            prediction: config.prediction.clone(),
            object_cache: s3
                .store
                .cache()
                .map(|c| c.clone() as Arc<dyn crate::controller::InvocationCache>),
            object_features: s3.store.features(),
            cluster: shared_registry,
        },
        agent.clone(),
    )?;
    s3.store.notify_to(controller.clone());
    let credentials = stored.credentials();
    let lookup = credentials.clone();
    let verifier = Verifier::new(move |key: &str| {
        (key == lookup.access_key_id).then(|| lookup.secret_access_key.clone())
    });
    let apps = crate::burst::Apps::open(controller.clone(), databases, &data_dir).await?;
    let objects = objects::browse::ObjectBrowser::new(
        s3.store.operations(),
        stored.credentials(),
        &config.region,
        s3.listener.local_addr()?,
    );
    // The sandbox side gets `s3.store` to serve inside namespaces (`objects::serve_on`).
    let s3_server = objects::serve_on(s3.listener, &s3.store, Scope::All)?;
    let membership = match cluster {
        Some(cluster) => {
            let (etcd, prefix) = (cluster.etcd().clone(), cluster.prefix().to_string());
            let peer_listen = cluster.config().peer_listen;
            let membership = cluster.join(&s3.endpoint).await?;
            if let Some(router) = &router {
                let listener = tokio::net::TcpListener::bind(peer_listen)
                    .await
                    .with_context(|| format!("cannot listen on {peer_listen} for peers"))?;
                router.start(
                    membership.clone(),
                    etcd,
                    &prefix,
                    crate::cluster::peer::PeerKey::derive(&stored.credentials().secret_access_key),
                    listener,
                    Arc::new(crate::cluster::router::ServeForwarded {
                        controller: controller.clone(),
                        local: router.local(),
                    }),
                );
            }
            let status = membership.status();
            println!(
                "kiln: joined the cluster as node `{}` (lease {}, {} nodes)",
                status.node_id,
                status.lease,
                status.nodes.len()
            );
            controller.attach_membership(membership.clone());
            Some(membership)
        }
        None => None,
    };
    // After the join: in cluster mode a package's upload is recorded on the node's lease.
    if config.demo {
        deploy_demo(&controller).await?;
    }
    // The console's charts; without the console nothing reads the counters.
    let history = config.console.is_some().then(|| {
        let history = Arc::new(crate::history::History::new(crate::history::SAMPLES));
        let counted = controller.clone();
        crate::history::sample(
            &history,
            move || counted.counts(),
            s3.store.cache().cloned(),
        );
        history
    });
    // Schedules fire from one node: in cluster mode they wait for an elected scheduler.
    let schedules = if membership.is_none() {
        let schedules = Arc::new(
            crate::schedules::Schedules::open(&data_dir, &config.region, "000000000000")
                .context("cannot read the schedules")?,
        );
        schedules.run(controller.clone());
        Some(schedules)
    } else {
        None
    };
    let state = Arc::new(AppState {
        controller: controller.clone(),
        apps: apps.clone(),
        verifier,
        credentials,
        cluster: membership.clone(),
        console: config
            .console
            .clone()
            .map(|c| Arc::new(crate::console::Console::new(c))),
        history,
        schedules,
        objects,
        api_address: addr,
    });
    let app = api::MakeApi::new(state.clone());

    std::fs::write(data_dir.join("s3-endpoint"), &s3.endpoint)?;
    println!("kiln: object store on {} ({})", s3.endpoint, s3.backend);
    std::fs::write(data_dir.join("endpoint"), &endpoint)?;
    let console_listener = match &config.console {
        Some(console) => {
            let address = console.address(config.listen);
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address} for the console"))?;
            println!(
                "kiln: console on http://{}/ui/ (sign in with the access key and secret in {})",
                listener.local_addr()?,
                StoredCredentials::path(&data_dir).display()
            );
            Some(listener)
        }
        None => None,
    };
    println!(
        "kiln: listening on {endpoint} (data in {})",
        data_dir.display()
    );
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // On SIGTERM the API stops accepting and, at the same time, the agent starts its grace
    // period: in-flight invocations finish or are killed when it ends, which in turn lets the
    // API's drain of open connections complete.
    let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(false);
    let console_server = console_listener.map(|listener| {
        let app = api::console_router(state.clone());
        let mut stopping = stopping_rx.clone();
        tokio::spawn(async move {
            let served = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = stopping.wait_for(|stopping| *stopping).await;
            })
            .await;
            if let Err(e) = served {
                eprintln!("kiln: the console's listener failed: {e}");
            }
        })
    });
    let draining_agent = agent.clone();
    let grace = config.shutdown_grace;
    let leaving = membership.clone();
    let drain = tokio::spawn(async move {
        shutdown_signal().await;
        println!("kiln: shutting down, finishing in-flight invocations");
        let _ = stopping_tx.send(true);
        if let Some(membership) = &leaving {
            membership.leaving().await;
        }
        // A last resort, so that SIGTERM always ends kiln: nothing in the shutdown may take
        // much longer than the grace period.
        std::thread::spawn(move || {
            std::thread::sleep(grace + Duration::from_secs(10));
            eprintln!("kiln: shutdown did not finish within the grace period; exiting");
            std::process::exit(1);
        });
        draining_agent.shutdown(grace).await;
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stopping_rx.wait_for(|stopping| *stopping).await;
        })
        .await?;
    let _ = drain.await;
    if let Some(console) = console_server {
        let _ = console.await;
    }
    // In-flight work is done: the record goes with the lease.
    if let Some(membership) = &membership {
        membership.leave().await;
    }
    apps.stop();
    controller.save_models();
    // After the functions: they may use the store until their last invocation ends.
    // It kept serving during the agent's grace period; in-flight requests get a little more.
    s3_server.shutdown(Duration::from_secs(2)).await;
    println!("kiln: stopped");
    Ok(())
}

/// Keeps the object cache's capacity at what instances lend it (OFC §4): every tick, the
/// memory their predicted limits leave unused, minus the slack pool; and at once, before an
/// instance takes memory back (the agent asks through [`MemoryLender`]).
fn size_object_cache(
    cache: Arc<objects::cache::ObjectCache>,
    agent: Arc<dyn NodeAgent>,
    config: objects::cache::sizing::SizingConfig,
) {
    use objects::cache::sizing::Sizing;
    let sizing = Arc::new(Mutex::new(Sizing::new(config)));
    cache
        .metrics()
        .lent
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let weak = Arc::downgrade(&cache);
    drop(cache);
    agent.lend_to(Arc::new(CacheLender {
        cache: weak.clone(),
        sizing: sizing.clone(),
    }));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(config.tick);
        loop {
            tick.tick().await;
            let Some(cache) = weak.upgrade() else {
                return;
            };
            let lendable = agent.lendable_memory_mb() * 1024 * 1024;
            let (capacity, slack) = {
                let mut sizing = lock(&sizing);
                (sizing.tick(lendable), sizing.slack())
            };
            let metrics = cache.metrics();
            metrics.lendable_bytes.set(lendable as i64);
            metrics.slack_bytes.set(slack as i64);
            if capacity != cache.usage().capacity {
                cache.set_capacity(capacity);
            }
        }
    });
}

/// The object cache as the borrower of the node's unused bookings.
struct CacheLender {
    cache: std::sync::Weak<objects::cache::ObjectCache>,
    sizing: Arc<Mutex<objects::cache::sizing::Sizing>>,
}

impl MemoryLender for CacheLender {
    fn reclaim(&self, lendable_mb: u64) {
        if let Some(cache) = self.cache.upgrade() {
            let bound = lock(&self.sizing).bound(lendable_mb * 1024 * 1024);
            cache.give_back(bound);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.locked()
}

/// `kiln up --store-only`: the object store alone, e.g. as another kiln's remote store.
async fn run_store_only(config: ServerConfig) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&config.data_dir)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let (stored, created) = StoredCredentials::load_or_create(&data_dir, &config.region)?;
    let s3 = config
        .objects
        .bind(None, &data_dir, &config.region, stored.credentials())?;
    if created {
        println!(
            "kiln: created credentials (stored in {}):",
            StoredCredentials::path(&data_dir).display()
        );
        println!("  aws_access_key_id     = {}", stored.access_key_id);
        println!("  aws_secret_access_key = {}", stored.secret_access_key);
    }
    let server = objects::serve_on(s3.listener, &s3.store, Scope::All)?;
    std::fs::write(data_dir.join("s3-endpoint"), &s3.endpoint)?;
    println!(
        "kiln: object store on {} ({}; store only)",
        s3.endpoint, s3.backend
    );
    shutdown_signal().await;
    println!("kiln: shutting down");
    server.shutdown(config.shutdown_grace).await;
    println!("kiln: stopped");
    Ok(())
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Where kiln mounts the empty cgroup hierarchy that turns the kernel's `favordynmods` on.
const DYNMODS_MOUNT: &str = "/run/kiln-dynmods";

const DEMO_NAME: &str = "hello";
const DEMO_CODE: &str = r#"import json


def handler(event, context):
    # Function URL requests carry the query string; direct invokes pass the event itself.
    params = event.get("queryStringParameters") or event
    name = params.get("name", "world") if isinstance(params, dict) else "world"
    return {"message": f"Hello, {name}!", "requestId": context.aws_request_id}
"#;

/// Deploys the demo function `hello` (Python, with a public function URL) if it is missing.
async fn deploy_demo(controller: &Controller) -> anyhow::Result<()> {
    if controller.get(DEMO_NAME).is_ok() {
        return Ok(());
    }
    let runtime = controller
        .node_status()
        .runtimes
        .into_iter()
        .find(|r| r.starts_with("python"))
        .context("the demo function needs Python")?;
    let zip = crate::zip_util::zip_files(&[("app.py", DEMO_CODE.as_bytes(), false)])?;
    let config = FunctionConfig {
        runtime,
        handler: "app.handler".into(),
        memory_mb: 128,
        timeout_s: 3,
        env: Default::default(),
        description: "kiln's demo function".into(),
        network: NetworkMode::Isolated,
        ephemeral_storage_mb: 512,
        role: "arn:aws:iam::000000000000:role/kiln-function".into(),
        prebake: Default::default(),
        memory_sizing: Default::default(),
        web: None,
        breakout: None,
        sessions: None,
        settings: Default::default(),
        event_invoke: None,
        layers: Vec::new(),
    };
    controller.create(DEMO_NAME, config, zip).await?;
    controller.set_url_auth(DEMO_NAME, Some(UrlAuth::None), true)?;
    println!("kiln: deployed demo function `{DEMO_NAME}` (try: kiln invoke {DEMO_NAME} --payload '{{\"name\":\"kiln\"}}')");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_cgroup_parent;

    #[test]
    fn a_cgroup_parent_is_levels_under_the_mount() {
        assert_eq!(parse_cgroup_parent("kiln/node-1").unwrap(), "kiln/node-1");
        assert_eq!(
            parse_cgroup_parent("/system.slice/kiln").unwrap(),
            "system.slice/kiln"
        );
        for bad in ["", "/", "a//b", "a/../b", "./a", "a/"] {
            assert!(parse_cgroup_parent(bad).is_err(), "{bad:?}");
        }
    }
}
