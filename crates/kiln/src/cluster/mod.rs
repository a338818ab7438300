//! Cluster mode (`kiln up --cluster`): kiln nodes coordinated through etcd, which kiln only
//! uses as a client. So far: membership (join, drain, leave, death, fencing), one set of
//! credentials, and the shared store's objects (`code`); the registry and the async queue in
//! etcd are the controller's (`controller/registry/`). See docs/cluster.md.
//!
//! Keys, under `--cluster-prefix` (`/kiln`): `nodes/<id>` (a node's record, on its lease),
//! `drain/<id>` (a drain request), `credentials` (the access key id and a fingerprint).

pub mod code;
pub mod config;
pub mod credentials;
pub mod etcd;
pub mod gc;
pub mod members;
pub mod membership;
pub mod peer;
pub mod router;

use std::path::PathBuf;
use std::sync::Arc;

pub use config::{ClusterConfig, ClusterConfigError, ClusterFlags};
pub use members::{NodeRecord, NodeState, NodeView, RecordState};
pub use membership::{ClusterStatus, Membership};

use crate::auth::StoredCredentials;
use etcd::{Etcd, EtcdError};

/// A cluster operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// etcd failed or could not be reached.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// etcd refused the user and password.
    #[error(
        "etcd refused --cluster-user `{0}`: check the user and its password in \
         KILN_CLUSTER_PASSWORD"
    )]
    EtcdAuth(String, #[source] EtcdError),
    /// etcd could not be reached over TLS.
    #[error(
        "cannot talk to etcd over TLS: check that its members serve https:// at the --cluster \
         addresses with certificates --cluster-ca signed for them, and give --cluster-cert and \
         --cluster-key if etcd runs with --client-cert-auth"
    )]
    EtcdTls(#[source] EtcdError),
    /// A live node already uses this node's id.
    #[error(
        "node id `{id}` is in use by a live node at {api}: pick another --node-id (if that node \
         was this one, its record expires within {ttl}s)"
    )]
    NodeIdTaken { id: String, api: String, ttl: u64 },
    /// No node of that id was ever in the cluster.
    #[error("no node `{0}` in the cluster")]
    UnknownNode(String),
    /// The credentials file cannot be read or written.
    #[error("cannot use the credentials file {path}")]
    CredentialsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The credentials file holds other credentials than the cluster's.
    #[error(
        "the credentials in {path} are not this cluster's (it uses access key {access_key_id}): \
         give every node the same --credentials-file"
    )]
    CredentialsMismatch {
        path: PathBuf,
        access_key_id: String,
    },
    /// The cluster has credentials and this node has no copy of them.
    #[error(
        "this cluster's credentials were created by another node (access key {access_key_id}): \
         copy its --credentials-file to {path}"
    )]
    CredentialsElsewhere {
        access_key_id: String,
        path: PathBuf,
    },
    /// The credentials record in etcd is not kiln's.
    #[error("the record at {0} in etcd is not a kiln credentials record")]
    CorruptCredentialsRecord(String),
}

/// What a failure to reach etcd at start most likely means, with the error itself as source.
fn connect_error(error: EtcdError, config: &ClusterConfig) -> ClusterError {
    match &error {
        EtcdError::Refused { source, .. } if auth_failed(source) => {
            let user = config.access.user.as_ref().map(|(name, _)| name.clone());
            ClusterError::EtcdAuth(user.unwrap_or_default(), error)
        }
        EtcdError::Unavailable { .. } | EtcdError::Timeout { .. } if config.access.tls() => {
            ClusterError::EtcdTls(error)
        }
        _ => ClusterError::Etcd(error),
    }
}

/// etcd's answer to a wrong user or password.
fn auth_failed(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("authentication failed"))
}

/// A node's connection to its cluster, before it has joined.
pub struct Cluster {
    etcd: Etcd,
    config: ClusterConfig,
}

impl Cluster {
    pub async fn connect(config: ClusterConfig) -> Result<Self, ClusterError> {
        let health_key = format!("{}/health", config.prefix);
        let unreachable = |error| connect_error(error, &config);
        let etcd = Etcd::connect(&config.endpoints, &health_key, &config.access)
            .await
            .map_err(unreachable)?;
        // A first request (connecting is lazy without a user): a node that cannot talk to etcd
        // says so now, and why, rather than in its first real request.
        etcd.get(&health_key).await.map_err(unreachable)?;
        Ok(Self { etcd, config })
    }

    /// The etcd client (the registry's backend shares it).
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The prefix of every key the cluster writes.
    pub fn prefix(&self) -> &str {
        &self.config.prefix
    }

    /// The cluster's credentials (see [`credentials`]); the flag tells whether this node
    /// created them.
    pub async fn credentials(
        &self,
        region: &str,
    ) -> Result<(StoredCredentials, bool), ClusterError> {
        let key = format!("{}/credentials", self.config.prefix);
        credentials::adopt(&self.etcd, &key, &self.config.credentials_file, region).await
    }

    /// Registers this node, whose object store is `s3`.
    pub async fn join(self, s3: &str) -> Result<Arc<Membership>, ClusterError> {
        let record = NodeRecord {
            id: self.config.node_id.clone(),
            api: self.config.advertise.clone(),
            peer: self.config.peer_listen.to_string(),
            s3: s3.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            state: RecordState::Up,
        };
        Membership::join(self.etcd, self.config, record).await
    }
}
