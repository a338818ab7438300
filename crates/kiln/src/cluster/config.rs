//! `kiln up`'s cluster flags, and the validated [`ClusterConfig`] they become.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::etcd::{normalise_endpoint, EtcdAccess, EtcdError, Password};
use super::gc::GcConfig;
use crate::error_chain;

/// The flags of cluster mode, as given.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterFlags {
    /// Join the cluster whose etcd members are these client URLs (http://HOST:PORT, or
    /// https://HOST:PORT with --cluster-ca; comma separated). Needs --node-id, --advertise,
    /// --peer-listen, --credentials-file and --s3-backend.
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
    /// The CA (PEM) that signed etcd's server certificates: talk to etcd over TLS (https://
    /// endpoints).
    #[arg(long, env = "KILN_CLUSTER_CA", value_name = "FILE")]
    pub cluster_ca: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's --client-cert-auth; with --cluster-key.
    #[arg(long, env = "KILN_CLUSTER_CERT", value_name = "FILE")]
    pub cluster_cert: Option<PathBuf>,
    /// The private key (PEM) of --cluster-cert.
    #[arg(long, env = "KILN_CLUSTER_KEY", value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,
    /// The etcd user kiln authenticates as; its password is read from the environment
    /// variable KILN_CLUSTER_PASSWORD (never from a flag).
    #[arg(long, env = "KILN_CLUSTER_USER", value_name = "NAME")]
    pub cluster_user: Option<String>,
    /// KILN_CLUSTER_PASSWORD, which `main` takes out of the environment.
    #[arg(skip)]
    pub cluster_password: Option<Password>,
}

/// The environment variable that holds `--cluster-user`'s password.
pub const PASSWORD_ENV: &str = "KILN_CLUSTER_PASSWORD";

/// Cluster mode's settings, validated.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// etcd's client URLs, normalised to `http://HOST:PORT` or `https://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// TLS and the etcd user.
    pub access: EtcdAccess,
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
    /// Some endpoints are `http://`, others `https://`.
    #[error(
        "--cluster mixes http:// and https:// etcd endpoints: every member is reached the same \
         way (https:// with --cluster-ca)"
    )]
    MixedSchemes,
    /// `https://` endpoints and no CA to check etcd's certificates with.
    #[error(
        "--cluster has https:// endpoints: give --cluster-ca FILE, the CA (PEM) that signed \
         etcd's server certificates"
    )]
    HttpsWithoutCa,
    /// A TLS flag with `http://` endpoints.
    #[error("{0} is for TLS to etcd: its --cluster endpoints must be https://")]
    TlsWithoutHttps(&'static str),
    /// One of a certificate and its key.
    #[error("--cluster-cert and --cluster-key go together: give both or neither")]
    CertWithoutKey,
    /// A TLS file cannot be read or holds no usable PEM.
    #[error("{flag} {path}: {reason}")]
    TlsFile {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// The certificate and key do not make a TLS client identity.
    #[error("--cluster-cert and --cluster-key cannot be used together: {0}")]
    Identity(String),
    /// A user without a password, or a password without a user.
    #[error("--cluster-user needs its password in the environment variable {PASSWORD_ENV}")]
    NoPassword,
    #[error("{PASSWORD_ENV} is set but --cluster-user is not: give the etcd user too")]
    PasswordWithoutUser,
    #[error("invalid --cluster-user: empty")]
    EmptyUser,
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
                ("--cluster-ca", self.cluster_ca.is_some()),
                ("--cluster-cert", self.cluster_cert.is_some()),
                ("--cluster-key", self.cluster_key.is_some()),
                ("--cluster-user", self.cluster_user.is_some()),
            ];
            return match stray.into_iter().find(|(_, given)| *given) {
                Some((flag, _)) => Err(ClusterConfigError::WithoutCluster(flag)),
                None => Ok(None),
            };
        }
        if !has_shared_store {
            return Err(ClusterConfigError::NoSharedStore);
        }
        let access = self.access()?;
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
            .map(|e| normalise_endpoint(e, access.tls()))
            .collect::<Result<Vec<_>, _>>()?;
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https != 0 && https != endpoints.len() {
            return Err(ClusterConfigError::MixedSchemes);
        }
        match (https != 0, &self.cluster_ca, &self.cluster_cert) {
            (true, None, _) => return Err(ClusterConfigError::HttpsWithoutCa),
            (false, Some(_), _) => return Err(ClusterConfigError::TlsWithoutHttps("--cluster-ca")),
            (false, None, Some(_)) => {
                return Err(ClusterConfigError::TlsWithoutHttps("--cluster-cert"))
            }
            _ => {}
        }
        Ok(Some(ClusterConfig {
            endpoints,
            access,
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

impl ClusterFlags {
    /// The TLS files, read and checked, and the etcd user: everything that can be wrong with
    /// them is found here, before the node starts.
    fn access(&self) -> Result<EtcdAccess, ClusterConfigError> {
        let user = match (&self.cluster_user, &self.cluster_password) {
            (Some(name), _) if name.is_empty() => return Err(ClusterConfigError::EmptyUser),
            (Some(name), Some(password)) => Some((name.clone(), password.clone())),
            (Some(_), None) => return Err(ClusterConfigError::NoPassword),
            (None, Some(_)) => return Err(ClusterConfigError::PasswordWithoutUser),
            (None, None) => None,
        };
        let ca = match &self.cluster_ca {
            Some(path) => Some(read_certificates("--cluster-ca", path)?),
            None => None,
        };
        let identity = match (&self.cluster_cert, &self.cluster_key) {
            (Some(cert), Some(key)) => {
                let cert = read_certificates("--cluster-cert", cert)?;
                let key_pem = read_tls_file("--cluster-key", key)?;
                if let Err(e) = PrivateKeyDer::from_pem_slice(&key_pem) {
                    return Err(ClusterConfigError::TlsFile {
                        flag: "--cluster-key",
                        path: key.clone(),
                        reason: format!("no PEM private key in it ({e})"),
                    });
                }
                Some((cert, key_pem))
            }
            (None, None) => None,
            _ => return Err(ClusterConfigError::CertWithoutKey),
        };
        let access = EtcdAccess { ca, identity, user };
        if let Some(tls) = access.tls_options() {
            // What connecting would do with them (rustls parses the key and pairs it with the
            // certificate), now rather than at the first request to etcd.
            tonic::transport::Endpoint::from_static("https://etcd.invalid")
                .tls_config(tls)
                .map_err(|e| ClusterConfigError::Identity(error_chain(&e)))?;
        }
        Ok(access)
    }
}

fn read_tls_file(flag: &'static str, path: &PathBuf) -> Result<Vec<u8>, ClusterConfigError> {
    std::fs::read(path).map_err(|e| ClusterConfigError::TlsFile {
        flag,
        path: path.clone(),
        reason: format!("cannot read it: {e}"),
    })
}

/// A file of one or more PEM certificates, as read.
fn read_certificates(flag: &'static str, path: &PathBuf) -> Result<Vec<u8>, ClusterConfigError> {
    let pem = read_tls_file(flag, path)?;
    let certificates = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>();
    match certificates {
        Ok(certificates) if !certificates.is_empty() => Ok(pem),
        Ok(_) => Err(ClusterConfigError::TlsFile {
            flag,
            path: path.clone(),
            reason: "no PEM certificate in it".into(),
        }),
        Err(e) => Err(ClusterConfigError::TlsFile {
            flag,
            path: path.clone(),
            reason: format!("not a PEM certificate ({e})"),
        }),
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
            ..Default::default()
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

    /// Test-only PEM files: a CA, a client certificate it signed and its key, and a key of
    /// another pair.
    fn testdata(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/cluster/testdata")
            .join(name)
    }

    fn tls() -> ClusterFlags {
        ClusterFlags {
            endpoints: vec!["10.0.0.1:2379".into(), "https://10.0.0.2:2379".into()],
            cluster_ca: Some(testdata("ca.pem")),
            cluster_cert: Some(testdata("client.pem")),
            cluster_key: Some(testdata("client.key")),
            cluster_user: Some("kiln".into()),
            cluster_password: Some(Password::new("s3cret".into())),
            ..full()
        }
    }

    fn refusal(flags: ClusterFlags) -> String {
        flags.validate(true).unwrap_err().to_string()
    }

    #[test]
    fn tls_and_a_user_make_https_endpoints() {
        let config = tls().validate(true).unwrap().unwrap();
        assert_eq!(
            config.endpoints,
            ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
        );
        assert!(config.access.tls() && config.access.identity.is_some());
        assert_eq!(config.access.user.as_ref().unwrap().0, "kiln");
        assert!(!format!("{config:?}").contains("s3cret"));
        // TLS without a client certificate, and a user over plain http.
        let mut flags = tls();
        (flags.cluster_cert, flags.cluster_key) = (None, None);
        assert!(flags
            .validate(true)
            .unwrap()
            .unwrap()
            .access
            .identity
            .is_none());
        let mut flags = full();
        flags.cluster_user = Some("kiln".into());
        flags.cluster_password = Some(Password::new("s3cret".into()));
        assert!(flags.validate(true).unwrap().is_some());
    }

    #[test]
    fn endpoints_and_tls_flags_must_agree() {
        let mut flags = tls();
        flags.endpoints = vec![
            "https://10.0.0.1:2379".into(),
            "http://10.0.0.2:2379".into(),
        ];
        assert!(refusal(flags).contains("mixes http:// and https://"));
        // Without --cluster-ca a bare HOST:PORT is http://, and an https:// one needs the CA.
        let mut flags = tls();
        flags.cluster_ca = None;
        (flags.cluster_cert, flags.cluster_key) = (None, None);
        assert!(refusal(flags).contains("mixes"));
        let mut flags = tls();
        flags.endpoints = vec!["https://10.0.0.1:2379".into()];
        flags.cluster_ca = None;
        (flags.cluster_cert, flags.cluster_key) = (None, None);
        assert!(refusal(flags).contains("--cluster-ca FILE"));
        let mut flags = tls();
        flags.endpoints = vec!["http://10.0.0.1:2379".into()];
        assert!(refusal(flags).starts_with("--cluster-ca is for TLS"));
        let mut flags = tls();
        flags.endpoints = vec!["http://10.0.0.1:2379".into()];
        flags.cluster_ca = None;
        assert!(refusal(flags).starts_with("--cluster-cert is for TLS"));
    }

    #[test]
    fn a_certificate_needs_its_key() {
        let mut flags = tls();
        flags.cluster_key = None;
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::CertWithoutKey)
        ));
        let mut flags = tls();
        flags.cluster_cert = None;
        assert!(refusal(flags).contains("give both or neither"));
    }

    #[test]
    fn unusable_tls_files_are_named_with_their_flag() {
        let mut flags = tls();
        flags.cluster_ca = Some(testdata("missing.pem"));
        let message = refusal(flags);
        assert!(message.starts_with("--cluster-ca ") && message.contains("missing.pem"));
        assert!(message.contains("cannot read it"), "{message}");
        // A key where a certificate should be, and a certificate where the key should be.
        let mut flags = tls();
        flags.cluster_cert = Some(testdata("client.key"));
        let message = refusal(flags);
        assert!(message.starts_with("--cluster-cert ") && message.contains("no PEM certificate"));
        let mut flags = tls();
        flags.cluster_key = Some(testdata("client.pem"));
        let message = refusal(flags);
        assert!(message.starts_with("--cluster-key ") && message.contains("no PEM private key"));
        // A key that is not the certificate's.
        let mut flags = tls();
        flags.cluster_key = Some(testdata("other.key"));
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::Identity(_))
        ));
    }

    #[test]
    fn the_user_and_its_password_go_together() {
        let mut flags = tls();
        flags.cluster_password = None;
        assert!(refusal(flags).contains("KILN_CLUSTER_PASSWORD"));
        let mut flags = tls();
        flags.cluster_user = None;
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::PasswordWithoutUser)
        ));
        let mut flags = tls();
        flags.cluster_user = Some(String::new());
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::EmptyUser)
        ));
    }

    #[test]
    fn a_tls_flag_without_cluster_is_refused() {
        let flags = ClusterFlags {
            cluster_ca: Some(testdata("ca.pem")),
            cluster_prefix: "/kiln".into(),
            node_lease_ttl: 5,
            ..Default::default()
        };
        assert!(matches!(
            flags.validate(true),
            Err(ClusterConfigError::WithoutCluster("--cluster-ca"))
        ));
    }
}
