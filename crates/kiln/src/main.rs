//! The `kiln` binary: `kiln up` runs the platform; every other command is a client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
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
    Up(UpArgs),
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
        Top::Up(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("KILN_LOG")
                        .unwrap_or_else(|_| "kiln=info".into()),
                )
                .with_writer(std::io::stderr)
                .init();
            let config = ServerConfig {
                listen: args.listen,
                data_dir: PathBuf::from(&cli.connection.data_dir),
                region: args.region,
                idle_ttl: Duration::from_secs(args.idle_ttl),
                memory_budget_mb: args.memory_budget_mb,
                queue_depth: args.queue_depth,
                max_instances: args.max_instances,
                async_retry_delay: Duration::from_millis(args.async_retry_delay_ms),
                shutdown_grace: Duration::from_secs(args.shutdown_grace),
                write_aws_profile: !args.no_aws_profile,
                demo: args.demo,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            match runtime.block_on(server::run(config)) {
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
