//! The controller's settings: [`ControllerConfig`], and where a cluster keeps its registry.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::InvocationCache;
use crate::predict;

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub data_dir: PathBuf,
    pub region: String,
    pub account_id: String,
    /// Upper bound on a function's instances on this node when it has no reserved concurrency.
    pub node_max_instances: u32,
    /// Delay before the first retry of a failed async invocation; the second waits twice as long.
    pub async_retry_delay: Duration,
    /// Async invocations delivered at once.
    pub async_concurrency: usize,
    /// Per-invocation memory prediction.
    pub prediction: predict::PredictorConfig,
    /// The object cache, when the store has one: its metrics are exposed with kiln's own, and
    /// each invocation's object-store time teaches the function's cache-benefit model.
    pub object_cache: Option<Arc<dyn InvocationCache>>,
    /// Where input objects' features come from.
    pub object_features: crate::objects::FeatureLookup,
    /// Cluster mode: the registry in etcd and packages in the shared store.
    pub cluster: Option<ClusterRegistry>,
}

/// Where a cluster keeps its registry and its packages.
#[derive(Debug, Clone)]
pub struct ClusterRegistry {
    pub etcd: crate::cluster::etcd::Etcd,
    /// The cluster's key prefix (`/kiln`).
    pub prefix: String,
    pub code: crate::cluster::code::SharedCode,
    /// The shared store's sweep.
    pub gc: crate::cluster::gc::GcConfig,
}
