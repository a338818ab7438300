//! Published versions and aliases on a fake node: a version runs on instances of its own with
//! its own code, and goes with its instances and package once nothing refers to it.

use super::*;

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
    node.controller.unpacked_all().await;
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
