//! What an invocation learns and decides on a fake node: the object cache's admission, the
//! memory model's features, and a kill under a predicted memory limit run again at MemorySize.

use super::*;

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
    assert_eq!(request.tags.admit, None);
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
    assert_eq!(request.tags.admit, None);
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
    assert_eq!(request.hints.memory_mb, None);
    assert_eq!(request.tags.admit, None);
    assert!(node.controller.models().is_empty());
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
        if last.hints.memory_mb.is_some() {
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
    // The prediction is one field: the routing hint the pool and the cgroup both read.
    assert!(predicted.hints.memory_mb.is_some());
    assert_eq!(retried.hints.memory_mb, None);
    assert_eq!(retried.request_id, predicted.request_id);
    assert!(node
        .controller
        .render_metrics()
        .contains("kiln_prediction_retries_total{function=\"f\"} 1"));
}
