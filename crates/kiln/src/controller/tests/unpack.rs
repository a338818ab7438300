//! Packages extracted after CreateFunction and UpdateFunctionCode answered: what waits for
//! them (the function's state, its invocations, the node's preparation), what a package that
//! does not inflate leaves, and what a restart extracts.

use sha2::{Digest, Sha256};

use super::*;

fn digest(zip: &[u8]) -> String {
    hex::encode(Sha256::digest(zip))
}

/// A package whose central directory is sound but whose second entry's bytes do not match
/// its CRC.
fn corrupt_package(version: u8) -> Vec<u8> {
    let handler = format!("def handler(e, c):\n    return {version}\n");
    let data = [b"kiln-corrupt-entry-".as_slice(), &[version; 64]].concat();
    let mut out = std::io::Cursor::new(Vec::new());
    let mut writer = zip::ZipWriter::new(&mut out);
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    writer.start_file("app.py", stored).unwrap();
    std::io::Write::write_all(&mut writer, handler.as_bytes()).unwrap();
    writer.start_file("data.bin", stored).unwrap();
    std::io::Write::write_all(&mut writer, &data).unwrap();
    writer.finish().unwrap();
    let mut zip = out.into_inner();
    let at = zip
        .windows(data.len())
        .position(|w| w == data)
        .expect("stored as is");
    zip[at + 3] ^= 0xff;
    zip
}

async fn invoke_arc(controller: Arc<Controller>, name: &str) -> Result<Invoked, ControllerError> {
    controller
        .invoke(
            name,
            Bytes::from_static(b"{}"),
            InvocationType::RequestResponse,
            None,
            Default::default(),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_is_pending_until_its_package_is_extracted_and_invocations_wait() {
    let node = node();
    let held = digest(&package());
    // As if a slow extraction of these bytes were running: nothing extracts them meanwhile.
    assert!(node.controller.unpacks.begin(&held));
    let f = node
        .controller
        .create("f", config(), package())
        .await
        .unwrap();
    assert_eq!(node.controller.lifecycle(&f), Lifecycle::Creating);
    // No change meanwhile, as on Lambda: a deploy tool waits for `Active`.
    assert!(matches!(
        node.controller
            .update_config("f", ConfigPatch::default(), None),
        Err(ControllerError::Conflict(_))
    ));
    assert!(matches!(
        node.controller.check_settled("f"),
        Err(ControllerError::Conflict(_))
    ));
    assert!(
        node.controller.code.has_zip(&held),
        "stored before answering"
    );
    assert!(node.controller.current_spec("f").is_none(), "not extracted");
    assert!(
        node.agent.prepared.lock().unwrap().is_empty(),
        "nothing to prepare from yet"
    );
    let invocation = tokio::spawn(invoke_arc(node.controller.clone(), "f"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!invocation.is_finished(), "it waits for the package");
    node.controller.spawn_unpack(held);
    assert_eq!(body(invocation.await.unwrap().unwrap()), "{}");
    assert_eq!(
        *node.agent.prepared.lock().unwrap(),
        [("f".to_string(), f.revision)]
    );
    assert_eq!(node.controller.lifecycle(&f), Lifecycle::Ready);
    assert!(node.controller.current_spec("f").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_code_runs_while_an_update_is_extracted() {
    let node = node();
    let f = node
        .controller
        .create("f", config(), package())
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    invoke(&node, "f", "{}").await.unwrap();
    let new_code = corrupt_package(3);
    let held = digest(&new_code);
    // As if a slow extraction of the new bytes were running.
    assert!(node.controller.unpacks.begin(&held));
    let updated = node
        .controller
        .update_code("f", new_code, None)
        .await
        .unwrap();
    assert_eq!(node.controller.lifecycle(&updated), Lifecycle::Updating);
    // No wait: the code from before the update answers.
    tokio::time::timeout(Duration::from_secs(1), invoke(&node, "f", "{}"))
        .await
        .expect("no wait for the new package")
        .unwrap();
    assert_eq!(
        node.agent.invoked_code.lock().unwrap().last(),
        Some(&f.code_sha256)
    );
    // A configuration change meanwhile is refused, as on Lambda. A concurrency change is no
    // update: it leaves the update in progress, with the same fallback.
    let patch = ConfigPatch {
        timeout_s: Some(9),
        ..Default::default()
    };
    assert!(matches!(
        node.controller.update_config("f", patch, None),
        Err(ControllerError::Conflict(_))
    ));
    // So is a `kiln:` tag that changes the configuration; other tags are no update.
    let arn = node.controller.arn("f");
    let sizing = BTreeMap::from([("kiln:memory-sizing".to_string(), "booked".to_string())]);
    assert!(matches!(
        node.controller.tag(&arn, sizing),
        Err(ControllerError::Conflict(_))
    ));
    let team = BTreeMap::from([("team".to_string(), "a".to_string())]);
    let tagged = node.controller.tag(&arn, team).unwrap();
    assert_eq!(tagged.revision, updated.revision);
    let reserved = node.controller.set_concurrency("f", Some(2)).unwrap();
    assert_eq!(node.controller.lifecycle(&reserved), Lifecycle::Updating);
    invoke(&node, "f", "{}").await.unwrap();
    assert_eq!(
        node.agent.invoked_code.lock().unwrap().last(),
        Some(&f.code_sha256)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_that_does_not_inflate_fails_the_function_or_its_update() {
    let node = node();
    let f = node
        .controller
        .create("f", config(), corrupt_package(1))
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    let Lifecycle::Failed(failure) = node.controller.lifecycle(&f) else {
        panic!("{:?}", node.controller.lifecycle(&f))
    };
    assert_eq!(failure.code, "InvalidZipFileException");
    assert!(failure.reason.starts_with("Could not unzip uploaded file"));
    assert!(node.agent.prepared.lock().unwrap().is_empty());
    let Err(refused) = invoke(&node, "f", "{}").await else {
        panic!("a failed function ran")
    };
    assert!(
        matches!(&refused, ControllerError::Conflict(m) if m.contains("in the following state: Failed")),
        "{refused:?}"
    );
    assert!(node.agent.invoked().is_empty());

    // A sound package replaces it.
    let fixed = node
        .controller
        .update_code("f", package(), None)
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    assert_eq!(node.controller.lifecycle(&fixed), Lifecycle::Ready);
    invoke(&node, "f", "{}").await.unwrap();

    // An update that does not inflate: the update failed, the function is still there.
    let updated = node
        .controller
        .update_code("f", corrupt_package(2), None)
        .await
        .unwrap();
    node.controller.unpacked_all().await;
    let Lifecycle::UpdateFailed(failure) = node.controller.lifecycle(&updated) else {
        panic!("{:?}", node.controller.lifecycle(&updated))
    };
    assert_eq!(failure.code, "InvalidZipFileException");
    // As on Lambda, the code from before the update still runs.
    invoke(&node, "f", "{}").await.unwrap();
    assert_eq!(
        node.agent.invoked_code.lock().unwrap().last(),
        Some(&fixed.code_sha256)
    );
    // Deleted, it takes its failure with it.
    node.controller.delete("f").unwrap();
    assert!(node
        .controller
        .unpacks
        .state(&digest(&corrupt_package(2)))
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_extracts_what_was_stored_but_not_extracted() {
    let node = node();
    let held = digest(&package());
    assert!(node.controller.unpacks.begin(&held));
    let f = node
        .controller
        .create("f", config(), package())
        .await
        .unwrap();
    // kiln stops before the extraction ends.
    let reopened = Controller::open(node.controller.config().clone(), node.agent.clone()).unwrap();
    assert_eq!(reopened.get("f").unwrap().code_sha256, held);
    reopened.unpacked_all().await;
    assert!(reopened.current_spec("f").is_some());
    assert_eq!(reopened.lifecycle(&f), Lifecycle::Ready);
    assert!(node
        .agent
        .prepared
        .lock()
        .unwrap()
        .contains(&("f".to_string(), f.revision)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_published_while_the_package_is_extracted_is_prepared_after() {
    let node = node();
    let held = digest(&package());
    assert!(node.controller.unpacks.begin(&held));
    let f = node
        .controller
        .create("f", config(), package())
        .await
        .unwrap();
    let version = node
        .controller
        .publish_version("f", None, None, None)
        .unwrap();
    assert_eq!(version.lifecycle, Lifecycle::Creating);
    assert!(node.agent.prepared.lock().unwrap().is_empty());
    node.controller.spawn_unpack(held);
    node.controller.unpacked_all().await;
    let mut prepared = node.agent.prepared.lock().unwrap().clone();
    prepared.sort();
    assert_eq!(
        prepared,
        [
            ("f".to_string(), f.revision),
            ("f:1".to_string(), f.revision)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_update_keeps_the_previous_code_across_a_restart() {
    let node = node();
    let f = deploy(&node, "f").await;
    assert!(f.previous_code.is_none());
    let updated = node
        .controller
        .update_code("f", corrupt_package(2), None)
        .await
        .unwrap();
    let kept = updated
        .previous_code
        .as_deref()
        .expect("kept in the record");
    assert_eq!(
        (kept.code_sha256.as_str(), kept.revision),
        (f.code_sha256.as_str(), f.revision)
    );
    node.controller.unpacked_all().await;

    // kiln stops and starts again: the update's package fails again, and the code from before
    // it still runs.
    let reopened = Controller::open(node.controller.config().clone(), node.agent.clone()).unwrap();
    reopened.unpacked_all().await;
    let loaded = reopened.get("f").unwrap();
    assert_eq!(loaded.previous_code, updated.previous_code);
    let Lifecycle::UpdateFailed(failure) = reopened.lifecycle(&loaded) else {
        panic!("{:?}", reopened.lifecycle(&loaded))
    };
    assert_eq!(failure.code, "InvalidZipFileException");
    assert!(
        node.agent
            .prepared
            .lock()
            .unwrap()
            .contains(&("f".to_string(), f.revision)),
        "what runs is prepared"
    );
    invoke_arc(reopened.clone(), "f").await.unwrap();
    assert_eq!(
        node.agent.invoked_code.lock().unwrap().last(),
        Some(&f.code_sha256)
    );
    assert!(
        reopened.code.is_extracted(&f.code_sha256),
        "its package survives the start's collection"
    );

    // A second failed update keeps the same code; a configuration change keeps it too.
    let again = reopened
        .update_code("f", corrupt_package(3), None)
        .await
        .unwrap();
    reopened.unpacked_all().await;
    assert_eq!(again.previous_code, updated.previous_code);
    let patch = ConfigPatch {
        timeout_s: Some(9),
        ..Default::default()
    };
    let configured = reopened.update_config("f", patch, None).unwrap();
    assert_eq!(configured.previous_code, updated.previous_code);
    invoke_arc(reopened.clone(), "f").await.unwrap();
    assert_eq!(
        node.agent.invoked_code.lock().unwrap().last(),
        Some(&f.code_sha256)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_code_goes_once_the_update_is_extracted() {
    let node = node();
    let f = deploy(&node, "f").await;
    let new_code =
        crate::zip_util::zip_files(&[("app.py", b"def handler(e, c):\n    return 2\n", false)])
            .unwrap();
    let held = digest(&new_code);
    // As if a slow extraction of the new bytes were running.
    assert!(node.controller.unpacks.begin(&held));
    let updated = node
        .controller
        .update_code("f", new_code, None)
        .await
        .unwrap();
    assert!(updated.previous_code.is_some());
    // Stopped before the extraction ended: the code from before the update runs meanwhile.
    let reopened = Controller::open(node.controller.config().clone(), node.agent.clone()).unwrap();
    reopened.unpacked_all().await;
    // Let go of once the package is extracted (just after the extraction's end is told).
    let since = Instant::now();
    let loaded = loop {
        let loaded = reopened.get("f").unwrap();
        if loaded.previous_code.is_none() || since.elapsed() > Duration::from_secs(5) {
            break loaded;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(loaded.previous_code.is_none(), "extracted, so let go of");
    assert_eq!(revision_id(&loaded), revision_id(&updated));
    assert_eq!(reopened.lifecycle(&loaded), Lifecycle::Ready);
    invoke_arc(reopened.clone(), "f").await.unwrap();
    assert_eq!(node.agent.invoked_code.lock().unwrap().last(), Some(&held));
    // An update to a package already extracted keeps nothing.
    let back = reopened.update_code("f", package(), None).await.unwrap();
    assert!(back.previous_code.is_none());
    assert_ne!(back.code_sha256, held);
    assert_eq!(back.code_sha256, f.code_sha256);
}
