//! `kiln up`'s cluster flags, and the validated [`ClusterConfig`] they become.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::etcd::{normalise_endpoint, EtcdError};
use super::gc::GcConfig;

/// The flags of cluster mode, as given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterFlags {
    /// Join the cluster whose etcd members are these client URLs (http://HOST:PORT, comma
    /// separated). Needs --node-id, --advertise, --peer-listen, --credentials-file and
    /// --s3-backend.
    #[arg(
        long = "cluster",
        env = "KILN_CLUSTER",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub endpoints: Vec<String>,
    /// This node's name in the cluster: unique, 1 to 63 letters, digits, `.`, `_` or `-`.
    #[arg(long, env = "KILN_NODE_ID")]
    pub node_id: Option<String>,
    /// The address of this node's API that the other nodes and clients use (HOST:PORT).
    #[arg(long, env = "KILN_ADVERTISE")]
    pub advertise: Option<String>,
    /// The address of this node's peer port (HOST:PORT), recorded in its node record.
    #[arg(long, env = "KILN_PEER_LISTEN")]
    pub peer_listen: Option<SocketAddr>,
    /// The prefix of every key kiln writes in etcd.
    #[arg(long, default_value = "/kiln")]
    pub cluster_prefix: String,
    /// Seconds of the lease this node's record lives on: it disappears this long after the
    /// node dies, and the node reports itself fenced 0.5 s before.
    #[arg(long, default_value_t = 5)]
    pub node_lease_ttl: u64,
    /// The cluster's admin credentials (JSON, as a node's credentials.json): the same file on
    /// every node. A node started with a path that does not exist creates it, if the cluster
    /// has no credentials yet.
    #[arg(long, env = "KILN_CREDENTIALS_FILE")]
    pub credentials_file: Option<PathBuf>,
    /// Seconds between two sweeps of the shared store (by the elected scheduler), which remove
    /// packages no function uses and payloads of Events that are gone.
    #[arg(long, default_value_t = 300)]
    pub gc_interval: u64,
    /// Seconds an unused object of the shared store is kept after it was last written.
    #[arg(long, default_value_t = 600)]
    pub gc_grace: u64,
}

/// Cluster mode's settings, validated.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// etcd's client URLs, normalised to `http://HOST:PORT`.
    pub endpoints: Vec<String>,
    pub node_id: String,
    pub advertise: String,
    pub peer_listen: SocketAddr,
    /// Without a trailing `/`.
    pub prefix: String,
    pub lease_ttl: Duration,
    pub credentials_file: PathBuf,
    /// The shared store's sweep.
    pub gc: GcConfig,
}

/// A cluster flag that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    /// Cluster mode without a shared object store.
    #[error(
        "--cluster needs --s3-backend: every node of a cluster keeps its objects in one shared \
         S3 store (for a test cluster, one `kiln up --store-only`)"
    )]
    NoSharedStore,
    /// A flag cluster mode needs is missing.
    #[error("--cluster needs {0}")]
    Missing(&'static str),
    /// A cluster flag was given without --cluster.
    #[error("{0} is a cluster flag: give --cluster too")]
    WithoutCluster(&'static str),
    /// The node id has characters etcd keys and the CLI would trip on.
    #[error("invalid --node-id `{0}`: use 1 to 63 letters, digits, `.`, `_` or `-`")]
    NodeId(String),
    /// The advertised address is not HOST:PORT.
    #[error("invalid --advertise `{0}`: expected HOST:PORT")]
    Advertise(String),
    /// A lease shorter than the fencing margin.
    #[error("--node-lease-ttl must be 2 to 3600 seconds (a node is fenced 0.5 s before its lease expires)")]
    LeaseTtl,
    /// A sweep interval or grace out of range.
    #[error("{0} must be 1 to 86400 seconds")]
    GcSeconds(&'static str),
    /// The key prefix is not an absolute path.
    #[error("invalid --cluster-prefix `{0}`: expected /NAME[/NAME…]")]
    Prefix(String),
    /// An etcd URL is not one.
    #[error(transparent)]
    Endpoint(#[from] EtcdError),
}

pub fn valid_node_id(id: &str) -> bool {
    (1..=63).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl ClusterFlags {
    /// `None` without `--cluster`; refuses half a cluster configuration.
    pub fn validate(
        self,
        has_shared_store: bool,
    ) -> Result<Option<ClusterConfig>, ClusterConfigError> {
        if self.endpoints.is_empty() {
            let stray = [
                ("--node-id", self.node_id.is_some()),
                ("--advertise", self.advertise.is_some()),
                ("--peer-listen", self.peer_listen.is_some()),
                ("--credentials-file", self.credentials_file.is_some()),
            ];
            return match stray.into_iter().find(|(_, given)| *given) {
                Some((flag, _)) => Err(ClusterConfigError::WithoutCluster(flag)),
                None => Ok(None),
            };
        }
        if !has_shared_store {
            return Err(ClusterConfigError::NoSharedStore);
        }
        let node_id = self
            .node_id
            .ok_or(ClusterConfigError::Missing("--node-id"))?;
        if !valid_node_id(&node_id) {
            return Err(ClusterConfigError::NodeId(node_id));
        }
        let advertise = self
            .advertise
            .ok_or(ClusterConfigError::Missing("--advertise"))?;
        let advertise_ok = advertise
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !advertise_ok {
            return Err(ClusterConfigError::Advertise(advertise));
        }
        let peer_listen = self
            .peer_listen
            .ok_or(ClusterConfigError::Missing("--peer-listen"))?;
        let credentials_file = self
            .credentials_file
            .ok_or(ClusterConfigError::Missing("--credentials-file"))?;
        if !(2..=3600).contains(&self.node_lease_ttl) {
            return Err(ClusterConfigError::LeaseTtl);
        }
        if !(1..=86_400).contains(&self.gc_interval) {
            return Err(ClusterConfigError::GcSeconds("--gc-interval"));
        }
        if !(1..=86_400).contains(&self.gc_grace) {
            return Err(ClusterConfigError::GcSeconds("--gc-grace"));
        }
        let prefix = self.cluster_prefix.trim_end_matches('/').to_string();
        let prefix_ok = prefix.starts_with('/')
            && prefix.len() > 1
            && prefix[1..]
                .split('/')
                .all(|part| !part.is_empty() && valid_node_id(part));
        if !prefix_ok {
            return Err(ClusterConfigError::Prefix(self.cluster_prefix));
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalise_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some(ClusterConfig {
            endpoints,
            node_id,
            advertise,
            peer_listen,
            prefix,
            lease_ttl: Duration::from_secs(self.node_lease_ttl),
            credentials_file,
            gc: GcConfig {
                interval: Duration::from_secs(self.gc_interval),
                grace: Duration::from_secs(self.gc_grace),
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> ClusterFlags {
        ClusterFlags {
            endpoints: vec!["10.0.0.1:2379".into(), "http://10.0.0.2:2379".into()],
            node_id: Some("n1".into()),
            advertise: Some("10.0.0.21:9000".into()),
            peer_listen: Some("10.0.0.21:9100".parse().unwrap()),
            cluster_prefix: "/kiln/".into(),
            node_lease_ttl: 5,
            credentials_file: Some("/etc/kiln/credentials.json".into()),
            gc_interval: 300,
            gc_grace: 600,
        }
    }

    #[test]
    fn without_cluster_nothing_changes() {
        assert!(ClusterFlags {
            cluster_prefix: "/kiln".into(),
            node_lease_ttl: 5,
            ..Default::default()
        }
        .validate(false)
        .unwrap()
        .is_none());
    }

    #[test]
    fn a_complete_configuration_is_normalised() {
        let config = full().validate(true).unwrap().unwrap();
        assert_eq!(
            config.endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(config.prefix, "/kiln");
        assert_eq!(config.lease_ttl, Duration::from_secs(5));
    }

    #[test]
    fn cluster_mode_without_a_shared_store_is_refused() {
        let error = full().validate(false).unwrap_err();
        assert!(matches!(error, ClusterConfigError::NoSharedStore));
        assert!(error.to_string().contains("--s3-backend"));
    }

    #[test]
    fn missing_and_invalid_flags_are_named() {
        let mut flags = full();
        flags.node_id = None;
        assert!(flags
            .validate(true)
            .unwrap_err()
            .to_string()
            .contains("--node-id"));
        let mut flags = full();
        flags.node_id = Some("a/b".into());
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::NodeId(_))
        ));
        let mut flags = full();
        flags.node_lease_ttl = 1;
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::LeaseTtl)
        ));
        let mut flags = full();
        flags.cluster_prefix = "kiln".into();
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::Prefix(_))
        ));
        let mut flags = full();
        flags.advertise = Some("10.0.0.21".into());
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::Advertise(_))
        ));
    }

    #[test]
    fn a_sweep_interval_or_grace_out_of_range_is_refused() {
        for (interval, grace, flag) in [
            (0, 600, "--gc-interval"),
            (300, 0, "--gc-grace"),
            (86_401, 600, "--gc-interval"),
        ] {
            let mut flags = full();
            (flags.gc_interval, flags.gc_grace) = (interval, grace);
            assert!(matches!(
                flags.validate(true),
                Err(ClusterConfigError::GcSeconds(f)) if f == flag
            ));
        }
        let config = full().validate(true).unwrap().unwrap();
        assert_eq!(config.gc.interval, Duration::from_secs(300));
        assert_eq!(config.gc.grace, Duration::from_secs(600));
    }

    #[test]
    fn a_cluster_flag_without_cluster_is_refused() {
        let flags = ClusterFlags {
            node_id: Some("n1".into()),
            cluster_prefix: "/kiln".into(),
            node_lease_ttl: 5,
            ..Default::default()
        };
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::WithoutCluster("--node-id"))
        ));
    }
}
