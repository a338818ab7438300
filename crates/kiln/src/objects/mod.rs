//! kiln's S3-compatible object store.
//!
//! ```text
//! S3 client ──HTTP──▶ serve.rs (hyper, per-listener Scope)
//!                       │
//!                  s3s::S3Service: routing, XML, SigV4 (headers, presigned, aws-chunked)
//!                       │  keys.rs: Auth (key lookup), Access (SigV4 for s3, listener Scope),
//!                       │           Hosts (virtual-host style)
//!                       ▼
//!                  dyn s3s::S3 ──▶ local/  files under DATA_DIR/objects + SQLite objects.db
//!                              └─▶ remote.rs  another S3 store, through aws-sdk-s3
//! ```
//!
//! The [`s3s::S3`] trait is the seam between protocol and storage: each operation arrives as a
//! typed input (the HTTP layer has parsed and authenticated it), so a cache can later wrap any
//! backend by implementing the same trait: [`cache::CachedStore`] (OFC's opportunistic cache)
//! does, around either backend.

pub mod acl;
pub mod browse;
pub mod cache;
pub mod checksum;
pub mod conditions;
pub mod cors;
pub mod keys;
pub mod listing;
mod local;
pub mod media;
pub mod notify;
pub(crate) mod peer;
mod post_form;
pub mod profile;
mod remote;
pub mod sandbox;
pub mod sdk_keys;
mod serve;
pub use serve::{traffic, Traffic};
mod shadow;
pub(crate) mod shared;
pub mod spans;
pub mod upload_list;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::S3;

use crate::auth::Credentials;

pub use cache::ObjectFeatures;
pub use keys::{Principal, Scope};
pub use serve::{serve_on, ServeHandle};

/// S3's limit on one object (5 TiB); a single PUT is further limited to 5 GiB.
pub const S3_MAX_OBJECT_BYTES: u64 = 5 * 1024 * 1024 * 1024 * 1024;

/// Why the object store could not start.
#[derive(Debug, thiserror::Error)]
pub enum ObjectStoreError {
    /// the object store's address cannot be bound
    #[error("cannot listen on {0} for the object store (choose another with --s3-listen): {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
    /// the object store's directory could not be prepared
    #[error("object store directory {0}: {1}")]
    Io(PathBuf, #[source] std::io::Error),
    /// the object metadata database could not be opened
    #[error("object store metadata ({0}): {1}")]
    Database(PathBuf, String),
    /// the buckets' notification configurations could not be read
    #[error("{0}")]
    Notifications(#[from] notify::saved::SaveError),
    /// the remote store's URL is not usable
    #[error("remote object store {0}: {1}")]
    BadBackend(String, String),
}

/// One write of a batch the store commits all or none ([`AtomicWrites`]).
pub enum ObjectWrite {
    /// A PutObject as the store would receive it (its body in the request).
    Put(Box<s3s::S3Request<s3s::dto::PutObjectInput>>),
    Delete {
        bucket: String,
        key: String,
    },
}

/// Several writes committed together: every one of them, or, when any fails, none.
#[async_trait::async_trait]
pub trait AtomicWrites: Send + Sync {
    async fn commit_writes(&self, writes: Vec<ObjectWrite>) -> s3s::S3Result<()>;
}

/// Where objects live.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Files and SQLite in this data dir.
    Local { data_dir: PathBuf },
    /// Another S3-compatible store.
    Remote(RemoteConfig),
}

#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// `http(s)://HOST[:PORT]`.
    pub endpoint: String,
    pub credentials: Credentials,
    pub region: String,
}

/// Limits applied to uploads.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_object_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct ObjectStoreConfig {
    pub backend: Backend,
    /// The region kiln reports (`AWS_REGION` for functions).
    pub region: String,
    pub limits: Limits,
    /// Domains under which `BUCKET.<domain>` is virtual-host addressing (`localhost` always is).
    pub domains: Vec<String>,
    /// The object cache in front of the backend, if any.
    pub cache: Option<CacheSetup>,
    /// Where a remote backend's bucket notification configurations are kept (the local store
    /// keeps them with its buckets).
    pub notifications: PathBuf,
}

/// Where the object cache keeps its journal, and its settings.
#[derive(Debug, Clone)]
pub struct CacheSetup {
    pub dir: PathBuf,
    pub config: cache::CacheConfig,
}

/// Whether `kiln up` puts the object cache in front of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheMode {
    /// In front of a remote store (--s3-backend), where it saves a round trip per access.
    Auto,
    On,
    Off,
}

/// How the object cache's capacity is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheSizing {
    /// Memory booked by live instances and left unused by their predicted limits, minus a
    /// slack pool, up to --object-cache-mb (OFC).
    Lent,
    /// --object-cache-mb.
    Fixed,
}

/// The object store: one S3 service, served on any number of listeners.
#[derive(Clone)]
pub struct ObjectStore {
    service: S3Service,
    keys: Arc<keys::KeyRing>,
    region: String,
    cache: Option<Arc<cache::ObjectCache>>,
    features: FeatureLookup,
    /// The store's own `s3s::S3`, for kiln's calls that need no HTTP (the fast path's
    /// intrinsics): the object cache when there is one, else the local store; `None` for a
    /// remote store without the cache.
    direct: Option<Arc<dyn S3>>,
    /// Several writes at once, all or none: the local store without the cache (the cache
    /// would need them as one journal batch, not built).
    atomic: Option<Arc<dyn AtomicWrites>>,
    cors: Arc<CorsLookup>,
    /// Buckets' notification configurations, and where their events go.
    notifier: Arc<notify::Notifier>,
    /// Every operation as the listener's service runs it once it has parsed and authenticated
    /// a request (the cache, or the backend), for kiln's own API.
    operations: Arc<dyn S3>,
}

/// Where `serve.rs` finds a request's bucket and that bucket's CORS rules: the `S3` the service
/// serves (the cache, or the backend), asked without HTTP, as a preflight is unsigned.
pub(crate) struct CorsLookup {
    store: Arc<dyn S3>,
    hosts: keys::Hosts,
}

impl CorsLookup {
    /// The bucket a request names, by its host (virtual-host style) or its path.
    pub(crate) fn bucket_of<B>(&self, req: &http::Request<B>) -> Option<String> {
        use s3s::host::S3Host as _;
        let host = req
            .headers()
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok());
        if let Some(bucket) = host
            .and_then(|h| self.hosts.parse_host_header(h).ok())
            .and_then(|v| v.bucket().map(str::to_string))
        {
            return Some(bucket);
        }
        let path = req.uri().path().trim_start_matches('/');
        let bucket = path.split('/').next().filter(|b| !b.is_empty())?;
        Some(
            percent_encoding::percent_decode_str(bucket)
                .decode_utf8()
                .ok()?
                .into_owned(),
        )
    }

    /// A bucket's CORS rules: none when it has no configuration; an error for a bucket that
    /// does not exist or a store that failed.
    pub(crate) async fn rules(&self, bucket: &str) -> s3s::S3Result<Vec<cors::CorsRule>> {
        let input = s3s::dto::GetBucketCorsInput {
            bucket: bucket.to_string(),
            expected_bucket_owner: None,
        };
        match self
            .store
            .get_bucket_cors(cache::internal_request(input))
            .await
        {
            Ok(found) => cors::rules_of(s3s::dto::CORSConfiguration {
                cors_rules: found.output.cors_rules.unwrap_or_default(),
            })
            .or(Ok(Vec::new())),
            Err(e) if *e.code() == s3s::S3ErrorCode::NoSuchCORSConfiguration => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// Where an invocation's input object's features come from (OFC §5.1), without asking a
/// remote store: what the object cache knows, else the local store's metadata (its size, and
/// the media metadata extracted after it was written).
#[derive(Clone, Default)]
pub struct FeatureLookup {
    cache: Option<Arc<cache::ObjectCache>>,
    local: Option<Arc<local::meta::Meta>>,
}

impl std::fmt::Debug for FeatureLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeatureLookup")
            .field("cache", &self.cache.is_some())
            .field("local", &self.local.is_some())
            .finish()
    }
}

impl FeatureLookup {
    /// What the cache knows of the object (it may hold a version the store does not have
    /// yet), else the local store's row: one point query on a read-only connection.
    pub fn object(&self, bucket: &str, key: &str) -> Option<ObjectFeatures> {
        if let Some(known) = self
            .cache
            .as_ref()
            .and_then(|c| c.object_features(bucket, key))
        {
            return Some(known);
        }
        let meta = self.local.as_ref()?;
        match meta.features(bucket, key) {
            Ok(found) => found.map(|(size, media)| ObjectFeatures {
                size,
                media: media.as_deref().and_then(media::Media::decode),
            }),
            Err(e) => {
                tracing::warn!(%bucket, %key, "object features: {e}");
                None
            }
        }
    }
}

/// The cache, if there is one, and the `S3` in front of the backend (the cache, or the backend).
type Front = (Option<Arc<cache::ObjectCache>>, Arc<dyn S3>);

/// `backend` behind the cache if there is one.
fn front_of(
    backend: impl S3 + Clone,
    setup: Option<&CacheSetup>,
    limits: Limits,
) -> Result<Front, ObjectStoreError> {
    match setup {
        Some(setup) => {
            let mut config = setup.config.clone();
            // What the store refuses, the cache does not take: it goes to the store to be refused.
            config.max_object_bytes = config.max_object_bytes.min(limits.max_object_bytes);
            let cache = cache::ObjectCache::open(setup.dir.clone(), config, Box::new(backend))?;
            Ok((
                Some(cache.clone()),
                Arc::new(cache::CachedStore::new(cache)),
            ))
        }
        None => Ok((None, Arc::new(backend))),
    }
}

impl ObjectStore {
    /// Opens the backend (for the local one: creates its directory and database, and deletes
    /// what a crash left half-written). `admin` is kiln's own key pair.
    pub fn open(config: ObjectStoreConfig, admin: Credentials) -> Result<Self, ObjectStoreError> {
        let keys = Arc::new(keys::KeyRing::new(admin));
        let cache = config.cache.as_ref();
        let mut local_meta = None;
        let mut direct: Option<Arc<dyn S3>> = None;
        let mut atomic: Option<Arc<dyn AtomicWrites>> = None;
        let saved: Arc<dyn notify::saved::SavedConfigs>;
        let (cache, front) = match &config.backend {
            Backend::Local { data_dir } => {
                let store = local::LocalStore::open(data_dir, config.limits, &config.region)?;
                local_meta = Some(store.meta());
                saved = Arc::new(notify::saved::InDatabase(store.meta()));
                direct = Some(Arc::new(store.clone()));
                atomic = Some(Arc::new(store.clone()));
                front_of(store, cache, config.limits)?
            }
            Backend::Remote(remote) => {
                saved = Arc::new(notify::saved::InFile::new(config.notifications.clone()));
                front_of(
                    remote::RemoteStore::new(remote, config.limits)?,
                    cache,
                    config.limits,
                )?
            }
        };
        if let Some(cache) = &cache {
            direct = Some(Arc::new(cache::CachedStore::new(cache.clone())));
            atomic = None;
        }
        // Every write, through HTTP or kiln's own calls, passes the notifications.
        let notifier = Arc::new(notify::Notifier::open(
            saved,
            &config.region,
            serve::host_id(),
        )?);
        let front = notify::NotifyingStore::new(front, notifier.clone());
        let direct = direct
            .map(|d| Arc::new(notify::NotifyingStore::new(d, notifier.clone())) as Arc<dyn S3>);
        let atomic = atomic.map(|inner| {
            Arc::new(notify::NotifyingWrites {
                inner,
                store: front.clone(),
            }) as Arc<dyn AtomicWrites>
        });
        let mut builder = S3ServiceBuilder::new(front.clone());
        let front: Arc<dyn S3> = Arc::new(front);
        builder.set_auth(keys::Auth(keys.clone()));
        builder.set_access(keys::Access {
            keys: keys.clone(),
            owns_buckets: matches!(config.backend, Backend::Local { .. }),
        });
        builder.set_host(keys::Hosts::new(&config.domains));
        Ok(Self {
            service: builder.build(),
            cors: Arc::new(CorsLookup {
                store: front.clone(),
                hosts: keys::Hosts::new(&config.domains),
            }),
            keys,
            region: config.region,
            features: FeatureLookup {
                cache: cache.clone(),
                local: local_meta,
            },
            cache,
            direct,
            atomic,
            notifier,
            operations: front,
        })
    }

    /// Sends the buckets' event notifications to `sink` (kiln's functions) from now on.
    pub fn notify_to(&self, sink: Arc<dyn notify::EventSink>) {
        self.notifier.deliver_to(sink);
    }

    /// Input objects' features, for the memory and cache-benefit models.
    pub fn features(&self) -> FeatureLookup {
        self.features.clone()
    }

    /// The store without HTTP in front (see the field), for kiln's own calls.
    pub fn direct(&self) -> Option<Arc<dyn S3>> {
        self.direct.clone()
    }

    /// Every operation of the store without HTTP or signatures in front (see the field).
    pub fn operations(&self) -> Arc<dyn S3> {
        self.operations.clone()
    }

    /// Writes committed together, when the store can (see the field).
    pub fn atomic(&self) -> Option<Arc<dyn AtomicWrites>> {
        self.atomic.clone()
    }

    /// The object cache, when the store has one.
    pub fn cache(&self) -> Option<&Arc<cache::ObjectCache>> {
        self.cache.as_ref()
    }

    /// Credentials that open this store, and only this store, as `function`: what a sandbox
    /// gets as `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`. Stable for a given function name.
    pub fn function_credentials(&self, function: &str) -> Credentials {
        self.keys.function_credentials(function)
    }

    /// Whose key this is, if the store accepts it.
    pub fn principal(&self, access_key_id: &str) -> Option<Principal> {
        self.keys.lookup(access_key_id).map(|(p, _)| p)
    }

    /// The region to give clients (`AWS_REGION`).
    pub fn region(&self) -> &str {
        &self.region
    }

    pub(crate) fn service(&self) -> &S3Service {
        &self.service
    }

    pub(crate) fn cors(&self) -> Arc<CorsLookup> {
        self.cors.clone()
    }
}

/// The key pair a function gets, computed from kiln's admin credentials alone (the CLI uses this
/// with the data dir's credentials; the server uses [`ObjectStore::function_credentials`]).
pub fn function_credentials(admin: &Credentials, function: &str) -> Credentials {
    keys::KeyRing::new(admin.clone()).function_credentials(function)
}

/// The object store settings of `kiln up`.
#[derive(Debug, Clone)]
pub struct ObjectsSettings {
    /// Where to serve S3; None: the API's port + 1 (an ephemeral port when the API's is 0).
    pub listen: Option<SocketAddr>,
    /// Front this store instead of keeping objects in the data dir.
    pub remote: Option<RemoteConfig>,
    pub limits: Limits,
    pub domains: Vec<String>,
    pub cache: CacheMode,
    pub cache_config: cache::CacheConfig,
    pub cache_sizing: CacheSizing,
    /// The slack pool the lent sizing starts with, in bytes.
    pub cache_slack_bytes: u64,
    /// The churn window of the slack's estimate; zero keeps the slack as configured.
    pub cache_slack_window: std::time::Duration,
}

/// An opened store and its bound (not yet served) listener.
pub struct BoundStore {
    pub store: ObjectStore,
    pub listener: TcpListener,
    /// `http://ADDR` of the listener.
    pub endpoint: String,
    /// Where objects live, for the start-up message.
    pub backend: String,
}

impl ObjectsSettings {
    fn address(&self, api: Option<SocketAddr>) -> SocketAddr {
        if let Some(addr) = self.listen {
            return addr;
        }
        match api {
            Some(api) if api.port() != 0 => {
                SocketAddr::new(api.ip(), api.port().checked_add(1).unwrap_or(0))
            }
            Some(api) => SocketAddr::new(api.ip(), 0),
            None => SocketAddr::from(([127, 0, 0, 1], 9001)),
        }
    }

    /// Binds the S3 address (next to `api`, the control API's configured address, by default)
    /// and opens the backend.
    pub fn bind(
        &self,
        api: Option<SocketAddr>,
        data_dir: &Path,
        region: &str,
        admin: Credentials,
    ) -> Result<BoundStore, ObjectStoreError> {
        let addr = self.address(api);
        let listener = TcpListener::bind(addr).map_err(|e| ObjectStoreError::Bind(addr, e))?;
        let local = listener
            .local_addr()
            .map_err(|e| ObjectStoreError::Bind(addr, e))?;
        let (backend, description) = match &self.remote {
            Some(remote) => (
                Backend::Remote(remote.clone()),
                format!("fronting {}", remote.endpoint),
            ),
            None => (
                Backend::Local {
                    data_dir: data_dir.to_path_buf(),
                },
                format!("objects in {}", data_dir.join("objects").display()),
            ),
        };
        let cached = match self.cache {
            CacheMode::On => true,
            CacheMode::Off => false,
            CacheMode::Auto => self.remote.is_some(),
        };
        let cache_dir = data_dir.join("cache");
        // Writes a cache acknowledged before it was turned off are still written back: the
        // cache is opened empty and admitting nothing until its journal has drained.
        let draining = !cached && cache::journal_holds_writes(&cache_dir.join("journal"));
        let description = if draining {
            format!("{description}; object cache off, draining its journal")
        } else if cached {
            let mib = self.cache_config.capacity_bytes >> 20;
            match self.cache_sizing {
                CacheSizing::Fixed => format!("{description}; object cache of {mib} MiB"),
                CacheSizing::Lent => {
                    format!("{description}; object cache of up to {mib} MiB, lent by instances")
                }
            }
        } else {
            description
        };
        let store = ObjectStore::open(
            ObjectStoreConfig {
                backend,
                region: region.to_string(),
                limits: self.limits,
                domains: self.domains.clone(),
                cache: if cached {
                    Some(CacheSetup {
                        dir: cache_dir,
                        config: self.cache_config.clone(),
                    })
                } else if draining {
                    Some(CacheSetup {
                        dir: cache_dir,
                        config: cache::CacheConfig::draining(),
                    })
                } else {
                    None
                },
                notifications: data_dir.join("notifications.json"),
            },
            admin,
        )?;
        Ok(BoundStore {
            store,
            listener,
            endpoint: format!("http://{local}"),
            backend: description,
        })
    }
}
