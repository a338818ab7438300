//! Layers: a function's spec mounts its layers merged in order, a deleted layer version keeps
//! serving the functions that use it, and a restart rebuilds a lost merge and collects what
//! nothing refers to.

use super::*;
use crate::controller::layers::LayerInput;
use crate::function::layers::LayerVersion;

fn layer_zip(files: &[(&str, &[u8])]) -> Vec<u8> {
    let entries: Vec<(&str, &[u8], bool)> = files.iter().map(|(n, d)| (*n, *d, false)).collect();
    crate::zip_util::zip_files(&entries).unwrap()
}

async fn publish(node: &Node, name: &str, files: &[(&str, &[u8])]) -> LayerVersion {
    node.controller
        .publish_layer_version(name, LayerInput::default(), layer_zip(files))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_layers_are_merged_in_order_and_outlive_their_deletion_and_a_restart() {
    let node = node();
    let first = publish(
        &node,
        "first",
        &[("python/shared.py", b"a"), ("python/only_first.py", b"a")],
    )
    .await;
    let second = publish(&node, "second", &[("python/shared.py", b"b")]).await;
    let unused = publish(&node, "unused", &[("python/unused.py", b"u")]).await;
    let arns: Vec<String> = [&first, &second]
        .iter()
        .map(|l| node.controller.layer_version_arn(&l.name, l.version))
        .collect();
    let mut with_layers = config();
    with_layers.layers = node.controller.resolve_layers(&arns, &[]).unwrap();
    node.controller
        .create("f", with_layers, package())
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    let opt = node
        .controller
        .current_spec("f")
        .unwrap()
        .opt_dir
        .clone()
        .unwrap();
    let read = |opt: &std::path::Path, path: &str| std::fs::read_to_string(opt.join(path)).unwrap();
    assert_eq!(read(&opt, "python/shared.py"), "b");
    assert_eq!(read(&opt, "python/only_first.py"), "a");
    assert!(opt.join("kiln").is_dir(), "the runtime's mount point");
    // A function without layers has no /opt of its own.
    deploy(&node, "plain").await;
    assert!(node
        .controller
        .current_spec("plain")
        .unwrap()
        .opt_dir
        .is_none());

    node.controller.delete_layer_version("first", 1).unwrap();
    node.controller.delete_layer_version("unused", 1).unwrap();
    assert!(matches!(
        node.controller.resolve_layers(&arns[..1], &[]),
        Err(ControllerError::InvalidParameter(_))
    ));
    std::fs::remove_dir_all(&opt).unwrap();

    let reopened = Controller::open(node.controller.config().clone(), node.agent.clone()).unwrap();
    let spec = reopened.current_spec("f").unwrap();
    let opt = spec.opt_dir.clone().unwrap();
    assert_eq!(read(&opt, "python/shared.py"), "b");
    assert_eq!(read(&opt, "python/only_first.py"), "a");
    let store = reopened.layers().store();
    assert!(
        store.contains(&first.code_sha256),
        "a function still uses it"
    );
    assert!(!store.contains(&unused.code_sha256), "nothing refers to it");
    assert!(matches!(
        reopened.layer_version("first", 1),
        Err(ControllerError::NotFound(_))
    ));
    let again = reopened
        .publish_layer_version("first", LayerInput::default(), layer_zip(&[("x", b"x")]))
        .await
        .unwrap();
    assert_eq!(again.version, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_are_refused_past_lambdas_limits() {
    let node = node();
    let mut arns = Vec::new();
    for i in 0..6 {
        let layer = publish(&node, &format!("l{i}"), &[("x", b"x")]).await;
        arns.push(
            node.controller
                .layer_version_arn(&layer.name, layer.version),
        );
    }
    assert!(node.controller.resolve_layers(&arns[..5], &[]).is_ok());
    let too_many = node.controller.resolve_layers(&arns, &[]).unwrap_err();
    assert!(
        too_many.to_string().contains("more than 5 layers"),
        "{too_many}"
    );
    assert!(matches!(
        node.controller.resolve_layers(&["l0:1".into()], &[]),
        Err(ControllerError::Validation(_))
    ));
    let foreign = "arn:aws:lambda:eu-west-1:000000000000:layer:l0:1".to_string();
    assert!(matches!(
        node.controller.resolve_layers(&[foreign], &[]),
        Err(ControllerError::InvalidParameter(_))
    ));
    let twice = [arns[0].clone(), arns[0].clone()];
    assert!(matches!(
        node.controller.resolve_layers(&twice, &[]),
        Err(ControllerError::InvalidParameter(_))
    ));
    assert!(matches!(
        node.controller
            .publish_layer_version("bad", LayerInput::default(), b"not a zip".to_vec())
            .await,
        Err(ControllerError::InvalidParameter(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_layers_content_goes_once_no_function_uses_it() {
    let node = node();
    let kept = publish(&node, "kept", &[("python/kept.py", b"k")]).await;
    let unused = publish(&node, "unused", &[("python/unused.py", b"u")]).await;
    let arn = node.controller.layer_version_arn("kept", 1);
    let mut with_layers = config();
    with_layers.layers = node
        .controller
        .resolve_layers(std::slice::from_ref(&arn), &[])
        .unwrap();
    node.controller
        .create("f", with_layers.clone(), package())
        .await
        .unwrap();
    node.controller
        .create("g", with_layers, package())
        .await
        .unwrap();
    let store = node.controller.layers().store();
    node.controller.delete_layer_version("unused", 1).unwrap();
    assert!(!store.contains(&unused.code_sha256), "nothing refers to it");
    node.controller.delete_layer_version("kept", 1).unwrap();
    assert!(store.contains(&kept.code_sha256), "f and g use it");
    node.controller.delete("f").unwrap();
    assert!(store.contains(&kept.code_sha256), "g uses it");
    let patch = ConfigPatch {
        layers: Some(Vec::new()),
        ..Default::default()
    };
    node.controller.update_config("g", patch, None).unwrap();
    assert!(
        !store.contains(&kept.code_sha256),
        "no function uses it any more"
    );
    // A function that names it now is refused, as its version is gone.
    assert!(matches!(
        node.controller.resolve_layers(&[arn], &[]),
        Err(ControllerError::InvalidParameter(_))
    ));
}
