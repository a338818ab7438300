//! The `kiln` binary: `kiln up` runs the platform; every other command is a client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

// mimalloc: the invoke path allocates many small, short-lived buffers (headers, JSON, log
// lines); with glibc's malloc, allocation was a tenth of kiln's CPU per invocation.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use kiln::cli::{self, Connection};
use kiln::server::{self, ServerConfig};

#[derive(Parser, Debug)]
#[command(
    name = "kiln",
    version,
    about = "A self-hosted, Lambda-compatible serverless platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Top,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Subcommand, Debug)]
enum Top {
    /// Start kiln: API, registry, scheduler and node agent in one process.
    Up(Box<UpArgs>),
    #[command(flatten)]
    Client(cli::Command),
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    /// Address of the API.
    #[arg(long, env = "KILN_LISTEN", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// AWS region kiln reports in ARNs and expects in signatures' scope.
    #[arg(long, env = "KILN_REGION", default_value = "us-east-1")]
    region: String,
    /// Seconds an idle instance is kept warm.
    #[arg(long, default_value_t = 600)]
    idle_ttl: u64,
    /// Memory all instances may book together, in MB (default: 3/4 of the host's memory).
    #[arg(long)]
    memory_budget_mb: Option<u64>,
    /// Requests that may wait per function when all its instances are busy.
    #[arg(long, default_value_t = 64)]
    queue_depth: usize,
    /// Memory the node's function snapshots (fork servers) may hold together, in MB; the least
    /// recently used are evicted beyond it.
    #[arg(long, default_value_t = 2048)]
    snapshot_memory_mb: u64,
    /// Disk the node's snapshots on disk (compiled and pre-initialised wasm modules) may take,
    /// in MB; the least recently used are evicted beyond it.
    #[arg(long, default_value_t = 2048)]
    snapshot_disk_mb: u64,
    /// The AWS SDKs the runtimes provide, as Lambda's do (boto3 for python, the SDK for
    /// JavaScript v3 for nodejs), installed by `scripts/install-runtime-sdk.sh`; without it
    /// functions get only the SDKs they bundle.
    #[arg(long, env = "KILN_RUNTIME_SDK", default_value = kiln::runtime::DEFAULT_SDK_DIR)]
    runtime_sdk: PathBuf,
    /// Runtime-generic standby instances kept booted per runtime (the warm start path); 0 turns
    /// the warm path off.
    #[arg(long, default_value_t = 1)]
    warm_standbys: usize,
    /// Turn the kernel's cgroup `favordynmods` on (an empty named cgroup hierarchy mounted with
    /// it at /run/kiln-dynmods), so that moving a sandbox or a fork into its cgroup does not wait
    /// for an RCU grace period (several ms), for a few atomic operations more per fork and exit
    /// on the host: `on` or `off`.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    cgroup_favordynmods: String,
    /// Give each sandbox a `/tmp` of its function's EphemeralStorage size on the data disk (an
    /// ext4 image on a loop device, made ahead), so that files in /tmp are not memory: `on` or
    /// `off` (a tmpfs counted against the instance's memory, as where loop devices are missing).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    tmp_disks: String,
    /// A cgroup, as a path under the cgroup mount (e.g. `kiln/node-1`), to put kiln itself and
    /// all its instances under: the limits an operator sets on it (a CPU quota, memory) cover
    /// the node as a whole. Created if missing.
    #[arg(long, env = "KILN_CGROUP_PARENT", value_parser = kiln::server::parse_cgroup_parent)]
    cgroup_parent: Option<String>,
    /// The most instances made ahead of demand per function (standbys of runtimes that cannot
    /// fork, spare forks of those that can), however high its demand.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    max_standbys: u32,
    /// Seconds a function's peak concurrency is remembered whole; it then halves every further
    /// window. Its standbys are sized by it.
    #[arg(long, default_value_t = 600)]
    standby_window: u64,
    /// Size each invocation's memory limit by its function's memory model, once mature (OFC):
    /// `on` or `off`.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    memory_prediction: String,
    /// Invocations of a function before its memory model's maturity is judged.
    #[arg(long, default_value_t = 100)]
    prediction_min_samples: usize,
    /// Most instances per function without reserved concurrency (default: budget / 128 MB).
    #[arg(long)]
    max_instances: Option<u32>,
    /// Delay before retrying a failed async invocation, in ms (Lambda waits about a minute).
    #[arg(long, default_value_t = 60_000)]
    async_retry_delay_ms: u64,
    /// Seconds in-flight invocations get to finish on shutdown.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,
    /// Do not write the `kiln` profile to the AWS CLI's files.
    #[arg(long)]
    no_aws_profile: bool,
    /// Deploy the demo function `hello` if it does not exist.
    #[arg(long)]
    demo: bool,
    /// Threads of kiln's own event loop (default: half the CPUs, at least one). The other
    /// half is left to the functions' runtimes; one thread also avoids cross-thread wake-ups
    /// on every invocation.
    #[arg(long, env = "KILN_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// The console, a web UI at http://LISTEN/ui/: `on` or `off`.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    ui: String,
    /// Address of the console, an origin of its own (function URLs are served on the API's)
    /// [default: the API's port + 2, 127.0.0.1:9002; an ephemeral port when the API's is 0].
    #[arg(long, env = "KILN_UI_LISTEN")]
    ui_listen: Option<SocketAddr>,
    /// How long a console sign-in lasts: a number with s, m, h or d.
    #[arg(long, default_value = "12h", value_parser = kiln::console::parse_ttl)]
    ui_session_ttl: Duration,
    #[command(flatten)]
    s3: S3Args,
    #[command(flatten)]
    cluster: kiln::cluster::ClusterFlags,
}

/// The object cache's admission policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Admission {
    Benefit,
    All,
}

/// The object store's flags.
#[derive(clap::Args, Debug)]
struct S3Args {
    /// Address of the S3 object store [default: the API's port + 1, 127.0.0.1:9001; an ephemeral port when the API's is 0].
    #[arg(long, env = "KILN_S3_LISTEN")]
    s3_listen: Option<SocketAddr>,
    /// Serve only the object store: no functions, no sandboxes, no root needed.
    #[arg(long)]
    store_only: bool,
    /// Keep objects in this S3-compatible store (http(s)://HOST[:PORT]) instead of the data dir.
    #[arg(long, env = "KILN_S3_BACKEND", requires_all = ["s3_backend_access_key", "s3_backend_secret_key"])]
    s3_backend: Option<String>,
    /// Access key for --s3-backend.
    #[arg(long, env = "KILN_S3_BACKEND_ACCESS_KEY", requires = "s3_backend")]
    s3_backend_access_key: Option<String>,
    /// Secret key for --s3-backend (prefer the environment variable: flags show in `ps`).
    #[arg(
        long,
        env = "KILN_S3_BACKEND_SECRET_KEY",
        requires = "s3_backend",
        hide_env_values = true
    )]
    s3_backend_secret_key: Option<String>,
    /// Region to sign --s3-backend requests for [default: --region].
    #[arg(long, env = "KILN_S3_BACKEND_REGION")]
    s3_backend_region: Option<String>,
    /// Largest object accepted, in MiB [default: S3's 5 TiB; one PUT is also capped at 5 GiB].
    #[arg(long)]
    s3_max_object_mb: Option<u64>,
    /// Domain for virtual-host addressing (BUCKET.DOMAIN); BUCKET.localhost always works.
    #[arg(long, env = "KILN_S3_DOMAIN")]
    s3_domain: Vec<String>,
    /// The object cache in memory, with write-back (auto: in front of --s3-backend).
    #[arg(long, value_enum, default_value = "auto", env = "KILN_OBJECT_CACHE")]
    object_cache: kiln::objects::CacheMode,
    /// The object cache's capacity, in MiB (with --object-cache-sizing lent, its maximum).
    #[arg(long, default_value_t = 512)]
    object_cache_mb: u64,
    /// lent: the memory that instances booked and their predicted limits leave unused, minus a
    /// slack pool (OFC); fixed: --object-cache-mb. A --store-only kiln is always fixed.
    #[arg(long, value_enum, default_value = "lent")]
    object_cache_sizing: kiln::objects::CacheSizing,
    /// The slack pool the lent sizing starts with, in MiB; it then follows the churn.
    #[arg(long, default_value_t = 100)]
    object_cache_slack_mb: u64,
    /// The window over which the lent sizing measures the churn of lendable memory; every two
    /// windows the slack pool becomes the larger churn. 0 keeps --object-cache-slack-mb.
    #[arg(long, default_value_t = 60)]
    object_cache_slack_window_secs: u64,
    /// Which objects are cached: those of functions whose cache-benefit model says it pays
    /// (benefit), or every one (all).
    #[arg(long, value_enum, default_value = "benefit")]
    object_cache_admission: Admission,
    /// A bucket whose cached writes put a shadow placeholder (an empty object marked
    /// `kiln-shadow`, with the new version) in the backing store before they are acknowledged,
    /// so that its outside readers see at once that a new version exists (repeatable).
    #[arg(long, value_name = "BUCKET")]
    object_cache_shadow: Vec<String>,
    /// Objects larger than this (in KiB) are not cached.
    #[arg(long, default_value_t = 10 * 1024)]
    object_cache_max_object_kb: u64,
    /// How often the cache's sweep runs, in seconds; it evicts objects read fewer than
    /// --object-cache-min-reads times in their first period.
    #[arg(long, default_value_t = 300)]
    object_cache_sweep_secs: u64,
    /// See --object-cache-sweep.
    #[arg(long, default_value_t = 5)]
    object_cache_min_reads: u32,
    /// The sweep evicts objects not read for this long, in seconds.
    #[arg(long, default_value_t = 1800)]
    object_cache_max_idle_secs: u64,
    /// The longest, in seconds, that a listing, delete or copy waits for a cached write to
    /// reach the backing store before it answers ServiceUnavailable (the write is kept).
    #[arg(long, default_value_t = 10)]
    object_cache_writeback_wait_secs: u64,
}

impl S3Args {
    fn settings(self, region: &str) -> kiln::objects::ObjectsSettings {
        use kiln::auth::Credentials;
        use kiln::objects::{Limits, ObjectsSettings, RemoteConfig, S3_MAX_OBJECT_BYTES};
        let remote = self.s3_backend.map(|endpoint| RemoteConfig {
            endpoint,
            credentials: Credentials {
                access_key_id: self.s3_backend_access_key.unwrap_or_default(),
                secret_access_key: self.s3_backend_secret_key.unwrap_or_default(),
            },
            region: self.s3_backend_region.unwrap_or_else(|| region.to_string()),
        });
        ObjectsSettings {
            listen: self.s3_listen,
            remote,
            limits: Limits {
                max_object_bytes: self
                    .s3_max_object_mb
                    .map_or(S3_MAX_OBJECT_BYTES, |mb| mb.saturating_mul(1024 * 1024)),
            },
            domains: self.s3_domain,
            cache: self.object_cache,
            cache_sizing: if self.store_only {
                kiln::objects::CacheSizing::Fixed
            } else {
                self.object_cache_sizing
            },
            cache_slack_bytes: self.object_cache_slack_mb.saturating_mul(1024 * 1024),
            cache_slack_window: Duration::from_secs(self.object_cache_slack_window_secs),
            cache_config: kiln::objects::cache::CacheConfig {
                capacity_bytes: self.object_cache_mb.saturating_mul(1024 * 1024),
                max_object_bytes: self.object_cache_max_object_kb.saturating_mul(1024),
                sweep: kiln::objects::cache::SweepRules {
                    period: Duration::from_secs(self.object_cache_sweep_secs.max(1)),
                    min_accesses: self.object_cache_min_reads,
                    max_idle: Duration::from_secs(self.object_cache_max_idle_secs),
                },
                writeback_wait: Duration::from_secs(self.object_cache_writeback_wait_secs.max(1)),
                admit_all: self.object_cache_admission == Admission::All,
                shadow_buckets: self.object_cache_shadow.into_iter().collect(),
                ..Default::default()
            },
        }
    }
}

fn main() {
    // The sandbox helper must run before anything else, threads included.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == kiln_sandbox::HELPER_ARG)
    {
        kiln_sandbox::helper_main();
    }
    let cli = Cli::parse();
    let code = match cli.command {
        Top::Up(mut args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("KILN_LOG")
                        .unwrap_or_else(|_| "kiln=info".into()),
                )
                .with_writer(std::io::stderr)
                .init();
            let store_only = args.s3.store_only;
            let password_env = kiln::cluster::config::PASSWORD_ENV;
            args.cluster.cluster_password = std::env::var(password_env)
                .ok()
                .map(kiln::cluster::etcd::Password::new);
            // No process kiln starts inherits the password. Still one thread here, so changing
            // the environment races with nothing.
            std::env::remove_var(password_env);
            let cluster = match args.cluster.validate(args.s3.s3_backend.is_some()) {
                Ok(cluster) => cluster,
                Err(e) => {
                    eprintln!("kiln: {e}");
                    std::process::exit(2);
                }
            };
            let objects = args.s3.settings(&args.region);
            let config = ServerConfig {
                listen: args.listen,
                data_dir: PathBuf::from(&cli.connection.data_dir),
                region: args.region,
                idle_ttl: Duration::from_secs(args.idle_ttl),
                memory_budget_mb: args.memory_budget_mb,
                queue_depth: args.queue_depth,
                snapshot_memory_mb: args.snapshot_memory_mb,
                snapshot_disk_mb: args.snapshot_disk_mb,
                runtime_sdk: args.runtime_sdk,
                warm_standbys: args.warm_standbys,
                max_standbys: args.max_standbys as usize,
                favor_dynamic_moves: args.cgroup_favordynmods == "on",
                tmp_disks: args.tmp_disks == "on",
                cgroup_parent: args.cgroup_parent,
                standby_window: Duration::from_secs(args.standby_window),
                prediction: kiln::predict::PredictorConfig {
                    enabled: args.memory_prediction == "on",
                    min_samples: args.prediction_min_samples.max(1),
                    ..Default::default()
                },
                max_instances: args.max_instances,
                async_retry_delay: Duration::from_millis(args.async_retry_delay_ms),
                shutdown_grace: Duration::from_secs(args.shutdown_grace),
                write_aws_profile: !args.no_aws_profile,
                demo: args.demo,
                store_only,
                objects,
                cluster,
                console: (args.ui == "on").then(|| kiln::console::ConsoleConfig {
                    listen: args.ui_listen,
                    session_ttl: args.ui_session_ttl,
                    ..Default::default()
                }),
            };
            let cpus = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.worker_threads.unwrap_or(cpus / 2).max(1))
                .enable_all()
                .build()
                .expect("tokio runtime");
            let result = runtime.block_on(server::run(config));
            // Everything kiln owns is stopped by now; a blocking task still running (a stray
            // disk operation) must not hold the exit.
            runtime.shutdown_timeout(Duration::from_secs(2));
            match result {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("kiln: {e:#}");
                    1
                }
            }
        }
        Top::Client(command) => match cli::run(cli.connection, command) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("kiln: {e:#}");
                1
            }
        },
    };
    std::process::exit(code);
}
