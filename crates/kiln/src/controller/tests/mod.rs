//! The controller's decisions, tested without a node: a fake [`NodeAgent`] that answers what a
//! test scripts and records what it was asked, and a fake [`InvocationCache`].
//!
//! This file holds the fakes and the fixtures; the tests are in one file a topic.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::*;
use crate::agent::{AgentError, InvokeOutcome, InvokeRequest, NodeStatus, SessionStatus};
use crate::function::{FunctionConfig, NetworkMode};
use crate::objects::cache::{CacheMetrics, IoTimes, WritebackStatus};

mod functions;
mod invoke;
mod layers;
mod memory;
mod table;
mod unpack;
mod versions;

const RUNTIME: &str = "python3.11";

type Answer = Box<dyn Fn(&str, &Bytes) -> Result<InvokeOutcome, AgentError> + Send + Sync>;

/// A node that runs nothing: each invocation gets the scripted answer (by default the payload
/// back), and every call is recorded.
#[derive(Default)]
struct FakeAgent {
    invoked: Mutex<Vec<(String, InvokeRequest)>>,
    /// The package each invocation ran.
    invoked_code: Mutex<Vec<String>>,
    queued: Mutex<VecDeque<Result<InvokeOutcome, AgentError>>>,
    answer: Mutex<Option<Answer>>,
    prepared: Mutex<Vec<(String, u64)>>,
    retired: Mutex<Vec<(String, Option<u64>)>>,
}

fn outcome(body: Bytes) -> InvokeOutcome {
    InvokeOutcome {
        body,
        function_error: false,
        log: "START\nEND\nREPORT\n".into(),
        cold_start: None,
        init_duration: None,
        duration: Duration::from_millis(2),
        max_memory_mb: 40,
        out_of_memory: false,
        memory_limit_mb: None,
        limit_write: None,
    }
}

impl FakeAgent {
    fn invoked(&self) -> Vec<(String, InvokeRequest)> {
        self.invoked.lock().unwrap().clone()
    }

    fn answer_next(&self, answer: Result<InvokeOutcome, AgentError>) {
        self.queued.lock().unwrap().push_back(answer);
    }

    fn answer_with(&self, answer: Answer) {
        *self.answer.lock().unwrap() = Some(answer);
    }
}

impl NodeAgent for FakeAgent {
    fn invoke(
        &self,
        spec: SharedSpec,
        request: InvokeRequest,
    ) -> BoxFuture<'static, Result<InvokeOutcome, AgentError>> {
        self.invoked
            .lock()
            .unwrap()
            .push((spec.function.clone(), request.clone()));
        self.invoked_code
            .lock()
            .unwrap()
            .push(spec.code_sha256.clone());
        let answer = match self.queued.lock().unwrap().pop_front() {
            Some(answer) => answer,
            None => match &*self.answer.lock().unwrap() {
                Some(answer) => answer(&spec.function, &request.payload),
                None => Ok(outcome(request.payload.clone())),
            },
        };
        Box::pin(async move { answer })
    }

    fn retire(&self, function: &str, keep_revision: Option<u64>) {
        self.retired
            .lock()
            .unwrap()
            .push((function.to_string(), keep_revision));
    }

    fn prepare(&self, spec: SharedSpec) {
        self.prepared
            .lock()
            .unwrap()
            .push((spec.function.clone(), spec.revision));
    }

    fn status(&self) -> NodeStatus {
        NodeStatus {
            instances: Vec::new(),
            snapshots: Vec::new(),
            memory_budget_mb: 1024,
            memory_reserved_mb: 0,
            snapshot_disk_bytes: 0,
            cgroup_version: "none".into(),
            runtimes: vec![RUNTIME.into()],
            tmp: "disk".into(),
            tmp_disks: Default::default(),
            breakout: Vec::new(),
        }
    }

    fn sessions(&self, _function: &str) -> Vec<SessionStatus> {
        Vec::new()
    }

    fn end_session(&self, _function: &str, _session: &str) -> bool {
        false
    }

    fn shutdown(&self, _grace: Duration) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// A cache that records the admission decisions it is told, with a fixed configuration and
/// object-store times that grow by a set step on every read.
#[derive(Debug, Default)]
struct FakeCache {
    metrics: CacheMetrics,
    configured: Option<bool>,
    admissions: Mutex<HashMap<String, bool>>,
    io_reads: Mutex<u64>,
    kept: Mutex<Vec<String>>,
}

impl InvocationCache for FakeCache {
    fn metrics(&self) -> &CacheMetrics {
        &self.metrics
    }

    fn configured_admission(&self) -> Option<bool> {
        self.configured
    }

    fn set_admission(&self, function: &str, admit: bool) {
        self.admissions
            .lock()
            .unwrap()
            .insert(function.to_string(), admit);
    }

    fn io_times(&self, _function: &str) -> IoTimes {
        let mut reads = self.io_reads.lock().unwrap();
        *reads += 1;
        IoTimes {
            served_ns: *reads * 1_000_000,
            backend_ns: *reads * 5_000_000,
        }
    }

    fn keep_run(&self, run: &str, _until: Instant) -> bool {
        self.kept.lock().unwrap().push(run.to_string());
        true
    }

    fn claim_run(&self, _run: &str) -> bool {
        true
    }

    fn end_run(&self, _run: &str) -> usize {
        0
    }

    fn writeback_status(&self) -> WritebackStatus {
        WritebackStatus::default()
    }
}

struct Node {
    controller: Arc<Controller>,
    agent: Arc<FakeAgent>,
    _dir: tempfile::TempDir,
}

fn node_with(cache: Option<Arc<FakeCache>>, prediction: bool) -> Node {
    node_predicting(
        cache,
        prediction,
        predict::PredictorConfig::default().min_samples,
    )
}

fn node_predicting(cache: Option<Arc<FakeCache>>, prediction: bool, min_samples: usize) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(FakeAgent::default());
    let controller = Controller::open(
        ControllerConfig {
            data_dir: dir.path().to_path_buf(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            node_max_instances: 8,
            async_retry_delay: Duration::from_millis(10),
            async_concurrency: 2,
            prediction: predict::PredictorConfig {
                enabled: prediction,
                min_samples,
                ..Default::default()
            },
            object_cache: cache.map(|c| c as Arc<dyn InvocationCache>),
            object_features: Default::default(),
            cluster: None,
        },
        agent.clone(),
    )
    .unwrap();
    Node {
        controller,
        agent,
        _dir: dir,
    }
}

fn node() -> Node {
    node_with(None, true)
}

fn config() -> FunctionConfig {
    FunctionConfig {
        runtime: RUNTIME.into(),
        handler: "app.handler".into(),
        memory_mb: 128,
        timeout_s: 3,
        env: BTreeMap::new(),
        description: String::new(),
        network: NetworkMode::default(),
        ephemeral_storage_mb: 512,
        role: "arn:aws:iam::000000000000:role/test".into(),
        prebake: Default::default(),
        sessions: None,
        memory_sizing: Default::default(),
        web: None,
        breakout: None,
        settings: Default::default(),
        event_invoke: None,
        layers: Vec::new(),
    }
}

fn package() -> Vec<u8> {
    crate::zip_util::zip_files(&[("app.py", b"def handler(e, c):\n    return e\n", false)]).unwrap()
}

/// Creates a function and waits for its package to be extracted.
async fn deploy(node: &Node, name: &str) -> Function {
    let created = node
        .controller
        .create(name, config(), package())
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    created
}

async fn invoke(node: &Node, name: &str, payload: &str) -> Result<Invoked, ControllerError> {
    node.controller
        .invoke(
            name,
            Bytes::from(payload.to_string()),
            InvocationType::RequestResponse,
            None,
            Default::default(),
        )
        .await
}

fn body(invoked: Invoked) -> String {
    match invoked {
        Invoked::Done { outcome, .. } => String::from_utf8(outcome.body.to_vec()).unwrap(),
        _ => panic!("not run"),
    }
}
