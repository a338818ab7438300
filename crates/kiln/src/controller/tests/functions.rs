//! Function CRUD on a fake node: what CreateFunction checks and prepares, what an update
//! retires, and which names reach the function (qualifiers, other regions' and accounts' ARNs).

use super::*;

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
