//! Invocations on a fake node: a checked payload, the agent's throttles, Event invocations
//! delivered from the durable queue, DryRun, and a sequence's stages.

use super::*;

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
