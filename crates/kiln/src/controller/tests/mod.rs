//! The controller's decisions, tested without a node: a fake [`NodeAgent`] that answers what a
//! test scripts and records what it was asked, and a fake [`InvocationCache`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;

use super::*;
use crate::agent::{AgentError, InvokeOutcome, InvokeRequest, NodeStatus, SessionStatus};
use crate::function::{FunctionConfig, NetworkMode};
use crate::objects::cache::{CacheMetrics, IoTimes, WritebackStatus};

mod table;

const RUNTIME: &str = "python3.11";

type Answer = Box<dyn Fn(&str, &Bytes) -> Result<InvokeOutcome, AgentError> + Send + Sync>;

/// A node that runs nothing: each invocation gets the scripted answer (by default the payload
/// back), and every call is recorded.
#[derive(Default)]
struct FakeAgent {
    invoked: Mutex<Vec<(String, InvokeRequest)>>,
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
    }
}

fn package() -> Vec<u8> {
    crate::zip_util::zip_files(&[("app.py", b"def handler(e, c):\n    return e\n", false)]).unwrap()
}

async fn deploy(node: &Node, name: &str) -> Function {
    node.controller
        .create(name, config(), package())
        .await
        .unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_validates_and_prepares_the_function() {
    let node = node();
    let bad = [
        FunctionConfig {
            runtime: "cobol".into(),
            ..config()
        },
        FunctionConfig {
            memory_mb: 64,
            ..config()
        },
        FunctionConfig {
            handler: "has space".into(),
            ..config()
        },
    ];
    for config in bad {
        let refused = node.controller.create("f", config, package()).await;
        assert!(matches!(
            refused,
            Err(ControllerError::InvalidParameter(_) | ControllerError::Validation(_))
        ));
    }
    assert!(matches!(
        node.controller
            .create("bad name", config(), package())
            .await,
        Err(ControllerError::Validation(_))
    ));
    assert!(node.agent.prepared.lock().unwrap().is_empty());
    let f = deploy(&node, "f").await;
    assert_eq!(
        *node.agent.prepared.lock().unwrap(),
        [("f".to_string(), f.revision)]
    );
    assert!(matches!(
        node.controller.create("f", config(), package()).await,
        Err(ControllerError::Conflict(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_retires_the_old_revision_and_prepares_the_new() {
    let node = node();
    let f = deploy(&node, "f").await;
    let patch = ConfigPatch {
        timeout_s: Some(9),
        ..Default::default()
    };
    let updated = node.controller.update_config("f", patch, None).unwrap();
    assert!(updated.revision > f.revision);
    assert!(node
        .agent
        .retired
        .lock()
        .unwrap()
        .contains(&("f".to_string(), Some(updated.revision))));
    let spec_timeout = {
        invoke(&node, "f", "{}").await.unwrap();
        node.controller.table()["f"].spec.timeout_s
    };
    assert_eq!(spec_timeout, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoke_runs_on_the_agent_with_a_checked_payload() {
    let node = node();
    deploy(&node, "f").await;
    assert_eq!(
        body(invoke(&node, "f", r#"{"a":1}"#).await.unwrap()),
        r#"{"a":1}"#
    );
    // An empty payload is `{}`; one that is not JSON never reaches the agent.
    assert_eq!(body(invoke(&node, "f", "  ").await.unwrap()), "{}");
    assert!(matches!(
        invoke(&node, "f", "not json").await,
        Err(ControllerError::InvalidRequestContent(_))
    ));
    let big = format!("\"{}\"", "x".repeat(MAX_SYNC_PAYLOAD));
    assert!(matches!(
        invoke(&node, "f", &big).await,
        Err(ControllerError::TooLarge(_))
    ));
    assert_eq!(node.agent.invoked().len(), 2);
    let (function, request) = &node.agent.invoked()[0];
    assert_eq!(function, "f");
    assert!(request.trace_id.starts_with("Root=1-"));
    assert!(matches!(
        invoke(&node, "missing", "{}").await,
        Err(ControllerError::NotFound(_))
    ));
    assert!(node
        .controller
        .render_metrics()
        .contains("kiln_invocations_total{function=\"f\"} 2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_throttles_become_lambdas_and_are_counted() {
    let node = node();
    deploy(&node, "f").await;
    node.agent.answer_next(Err(AgentError::ThrottledReserved));
    assert!(matches!(
        invoke(&node, "f", "{}").await,
        Err(ControllerError::Throttled { reserved: true })
    ));
    node.agent.answer_next(Err(AgentError::ThrottledNode));
    assert!(matches!(
        invoke(&node, "f", "{}").await,
        Err(ControllerError::Throttled { reserved: false })
    ));
    assert!(node
        .controller
        .render_metrics()
        .contains("kiln_throttles_total{function=\"f\"} 2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_queued_durably_then_delivered_and_dry_runs_do_nothing() {
    let node = node();
    deploy(&node, "f").await;
    let dry = node
        .controller
        .invoke(
            "f",
            Bytes::new(),
            InvocationType::DryRun,
            None,
            Default::default(),
        )
        .await
        .unwrap();
    assert!(matches!(dry, Invoked::DryRun));
    let too_big = Bytes::from(format!("\"{}\"", "x".repeat(MAX_ASYNC_PAYLOAD)));
    assert!(matches!(
        node.controller
            .invoke(
                "f",
                too_big,
                InvocationType::Event,
                None,
                Default::default()
            )
            .await,
        Err(ControllerError::TooLarge(_))
    ));
    let queued = node
        .controller
        .invoke(
            "f",
            Bytes::from_static(br#"{"later":true}"#),
            InvocationType::Event,
            None,
            Default::default(),
        )
        .await
        .unwrap();
    let Invoked::Queued { request_id } = queued else {
        panic!("not queued");
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.agent.invoked().is_empty() {
        assert!(Instant::now() < deadline, "the event was not delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (function, request) = &node.agent.invoked()[0];
    assert_eq!(
        (function.as_str(), &request.payload[..]),
        ("f", &br#"{"later":true}"#[..])
    );
    assert!(!request_id.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_feeds_each_stage_the_answer_before_and_stops_at_an_error() {
    let node = node();
    for name in ["one", "two"] {
        deploy(&node, name).await;
    }
    node.controller
        .put_sequence("both", vec!["one".into(), "two".into()])
        .unwrap();
    node.agent.answer_with(Box::new(|function, payload| {
        let text = String::from_utf8_lossy(payload);
        Ok(outcome(Bytes::from(format!("{{\"{function}\":{text}}}"))))
    }));
    assert_eq!(
        body(invoke(&node, "both", "{}").await.unwrap()),
        r#"{"two":{"one":{}}}"#
    );
    // A function error stops the run, and is its answer.
    node.agent.answer_next(Ok(InvokeOutcome {
        function_error: true,
        ..outcome(Bytes::from_static(br#"{"errorMessage":"no"}"#))
    }));
    let stages_before = node.agent.invoked().len();
    let Invoked::Done {
        outcome: failed, ..
    } = invoke(&node, "both", "{}").await.unwrap()
    else {
        panic!("not run");
    };
    assert!(failed.function_error);
    assert_eq!(node.agent.invoked().len(), stages_before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_decides_admission_when_it_fixes_one() {
    let cache = Arc::new(FakeCache {
        configured: Some(false),
        ..Default::default()
    });
    let node = node_with(Some(cache.clone()), true);
    deploy(&node, "f").await;
    invoke(&node, "f", "{}").await.unwrap();
    let (_, request) = &node.agent.invoked()[0];
    assert_eq!(request.admit_objects, None);
    assert!(cache.admissions.lock().unwrap().is_empty());
    assert!(node
        .controller
        .render_metrics()
        .contains("decision=\"none\""));
    // Before and after the invocation: the benefit model learns from the difference.
    assert_eq!(*cache.io_reads.lock().unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_without_a_model_is_admitted_while_it_learns() {
    let cache = Arc::new(FakeCache::default());
    let node = node_with(Some(cache.clone()), true);
    deploy(&node, "f").await;
    invoke(&node, "f", "{}").await.unwrap();
    let (_, request) = &node.agent.invoked()[0];
    assert_eq!(request.admit_objects, None);
    assert_eq!(cache.admissions.lock().unwrap().get("f"), Some(&true));
    assert!(node
        .controller
        .render_metrics()
        .contains("decision=\"learning\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cache_or_a_model_an_invoke_computes_no_features() {
    let node = node_with(None, false);
    deploy(&node, "f").await;
    invoke(&node, "f", r#"{"bucket":"b","key":"k"}"#)
        .await
        .unwrap();
    let (_, request) = &node.agent.invoked()[0];
    assert_eq!(request.memory_limit_mb, None);
    assert_eq!(request.hints.memory_mb, None);
    assert_eq!(request.admit_objects, None);
    assert!(node.controller.models().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qualifiers_and_foreign_arns_never_reach_the_live_function() {
    let node = node();
    deploy(&node, "f").await;
    for qualified in ["f:$LATEST", "f:prod"] {
        assert!(matches!(
            node.controller.delete(qualified),
            Err(ControllerError::InvalidParameter(_))
        ));
    }
    node.controller.delete("f:7").unwrap();
    for foreign in [
        "arn:aws:lambda:eu-west-1:000000000000:function:f",
        "arn:aws:lambda:us-east-1:123456789012:function:f",
        "123456789012:function:f",
    ] {
        assert!(matches!(
            node.controller.delete(foreign),
            Err(ControllerError::NotFound(_))
        ));
        assert!(matches!(
            invoke(&node, foreign, "{}").await,
            Err(ControllerError::NotFound(_))
        ));
    }
    assert!(node
        .controller
        .get("arn:aws:lambda:us-east-1:000000000000:function:f")
        .is_ok());
    node.controller.delete("000000000000:function:f").unwrap();
    assert!(node.controller.get("f").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_under_a_prediction_runs_again_at_memory_size_and_is_booked_so() {
    let node = node_predicting(None, true, 5);
    let f = deploy(&node, "f").await;
    assert_eq!(f.config.memory_mb, 128);
    // Invocations that peak at 40 MB teach the model until it predicts below 128 MB.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        invoke(&node, "f", "{}").await.unwrap();
        let (_, last) = node.agent.invoked().pop().unwrap();
        if last.memory_limit_mb.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the model never matured");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = node.agent.invoked().len();
    node.agent.answer_next(Ok(InvokeOutcome {
        out_of_memory: true,
        function_error: true,
        ..outcome(Bytes::from_static(b"{}"))
    }));
    let answer = body(invoke(&node, "f", r#"{"again":1}"#).await.unwrap());
    assert_eq!(answer, r#"{"again":1}"#);
    let invoked = node.agent.invoked();
    assert_eq!(invoked.len(), before + 2);
    let (predicted, retried) = (&invoked[before].1, &invoked[before + 1].1);
    assert!(predicted.memory_limit_mb.is_some());
    assert_eq!(predicted.hints.memory_mb, predicted.memory_limit_mb);
    assert_eq!(
        (retried.memory_limit_mb, retried.hints.memory_mb),
        (None, None)
    );
    assert_eq!(retried.request_id, predicted.request_id);
    assert!(node
        .controller
        .render_metrics()
        .contains("kiln_prediction_retries_total{function=\"f\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_runs_on_instances_of_its_own_with_its_own_code() {
    let node = node();
    let first = deploy(&node, "f").await;
    let published = node
        .controller
        .publish_version("f", None, Some("one".into()), None)
        .unwrap();
    assert_eq!(published.version, "1");
    assert_eq!(published.function.config.description, "one");
    assert_eq!(
        node.controller
            .publish_version("f", None, None, None)
            .unwrap()
            .version,
        "1",
        "nothing changed since version 1"
    );
    let other =
        crate::zip_util::zip_files(&[("app.py", b"def handler(e, c):\n    return 2\n", false)])
            .unwrap();
    node.controller.update_code("f", other, None).await.unwrap();
    // Version 1 is prepared under its own key, at the revision it was published from.
    assert!(node
        .agent
        .prepared
        .lock()
        .unwrap()
        .contains(&("f:1".to_string(), first.revision)));
    let Invoked::Done { version, .. } = invoke(&node, "f:1", "{}").await.unwrap() else {
        panic!("not run")
    };
    assert_eq!(version, "1");
    let Invoked::Done { version, .. } = invoke(&node, "f", "{}").await.unwrap() else {
        panic!("not run")
    };
    assert_eq!(version, "$LATEST");
    let keys: Vec<String> = node.agent.invoked().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["f:1", "f"]);
    let v1 = node.controller.get_qualified("f:1").unwrap();
    assert_eq!(v1.function.code_sha256, first.code_sha256);
    // What another node forwards names the version by its key.
    let forwarded = node.controller.current_spec("f:1").unwrap();
    assert_eq!((forwarded.version.as_str(), forwarded.name()), ("1", "f"));
    assert_eq!(forwarded.code_sha256, first.code_sha256);
    assert!(node.controller.current_spec("f:9").is_none());
    assert!(node.controller.current_spec("f:live").is_none());
    assert_ne!(
        node.controller.get("f").unwrap().code_sha256,
        first.code_sha256
    );
    assert!(node.controller.code.contains(&first.code_sha256));

    // An alias to it keeps it; without the alias it goes, and its instances and package with it.
    node.controller
        .create_alias(
            "f",
            "live",
            AliasInput {
                function_version: Some("1".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(matches!(
        node.controller.delete("f:1"),
        Err(ControllerError::Conflict(_))
    ));
    node.controller.delete_alias("f", "live").unwrap();
    node.controller.delete("f:1").unwrap();
    assert!(node
        .agent
        .retired
        .lock()
        .unwrap()
        .contains(&("f:1".to_string(), None)));
    assert!(matches!(
        invoke(&node, "f:1", "{}").await,
        Err(ControllerError::NotFound(_))
    ));
    assert!(!node.controller.code.contains(&first.code_sha256));
    assert_eq!(
        node.controller
            .publish_version("f", None, None, None)
            .unwrap()
            .version,
        "2",
        "a number is never given twice"
    );
}
