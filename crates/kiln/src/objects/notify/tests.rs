//! [`NotifyingStore`] over a fake store and a fake queue: which writes queue which events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};
use serde_json::Value;

use super::saved::{SaveError, SavedConfigs};
use super::{EventSink, Notifier, NotifyingStore};
use crate::controller::ControllerError;
use crate::objects::cache::internal_request;
use crate::sync::LockExt;

const FUNCTION: &str = "arn:aws:lambda:us-east-1:000000000000:function:known";

/// A store whose every bucket exists, whose writes succeed, and whose bucket `versioned`
/// answers version ids and delete markers.
struct FakeStore;

#[async_trait::async_trait]
impl S3 for FakeStore {
    async fn head_bucket(
        &self,
        _req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong("0123".into())),
            version_id: (req.input.bucket == "versioned").then(|| "v1".to_string()),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let versioned = req.input.bucket == "versioned";
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: (versioned && req.input.version_id.is_none()).then_some(true),
            version_id: versioned.then(|| "marker".to_string()),
            ..Default::default()
        }))
    }
}

/// The queue: what was queued, for whom.
#[derive(Default)]
struct FakeQueue(Mutex<Vec<(String, Value)>>);

impl EventSink for FakeQueue {
    fn target(&self, function_arn: &str) -> Option<String> {
        (function_arn == FUNCTION).then(|| "known".to_string())
    }

    fn enqueue(&self, target: &str, payload: &[u8]) -> Result<(), ControllerError> {
        let event = serde_json::from_slice(payload).expect("the event is JSON");
        self.0.locked().push((target.to_string(), event));
        Ok(())
    }
}

#[derive(Default)]
struct Kept(Mutex<HashMap<String, String>>);

impl SavedConfigs for Kept {
    fn load(&self) -> Result<Vec<(String, String)>, SaveError> {
        Ok(self.0.locked().clone().into_iter().collect())
    }

    fn save(&self, bucket: &str, config: Option<&str>) -> Result<(), SaveError> {
        match config {
            Some(config) => self.0.locked().insert(bucket.into(), config.into()),
            None => self.0.locked().remove(bucket),
        };
        Ok(())
    }
}

fn store() -> (NotifyingStore, Arc<FakeQueue>, Arc<Kept>) {
    let kept = Arc::new(Kept::default());
    let notifier = Arc::new(Notifier::open(kept.clone(), "us-east-1", "host").unwrap());
    let queue = Arc::new(FakeQueue::default());
    notifier.deliver_to(queue.clone());
    (
        NotifyingStore::new(Arc::new(FakeStore), notifier),
        queue,
        kept,
    )
}

fn function(arn: &str, events: &[&str], prefix: &str) -> LambdaFunctionConfiguration {
    LambdaFunctionConfiguration {
        events: events.iter().map(|e| Event::from(e.to_string())).collect(),
        filter: Some(NotificationConfigurationFilter {
            key: Some(S3KeyFilter {
                filter_rules: Some(vec![FilterRule {
                    name: Some(FilterRuleName::from_static(FilterRuleName::PREFIX)),
                    value: Some(prefix.into()),
                }]),
            }),
        }),
        id: Some("rule".into()),
        lambda_function_arn: arn.into(),
    }
}

async fn configure(
    store: &NotifyingStore,
    bucket: &str,
    functions: Vec<LambdaFunctionConfiguration>,
) -> S3Result<()> {
    let input = PutBucketNotificationConfigurationInput {
        bucket: bucket.into(),
        expected_bucket_owner: None,
        notification_configuration: NotificationConfiguration {
            lambda_function_configurations: Some(functions),
            ..Default::default()
        },
        skip_destination_validation: None,
    };
    store
        .put_bucket_notification_configuration(internal_request(input))
        .await
        .map(drop)
}

async fn put(store: &NotifyingStore, bucket: &str, key: &str) {
    let input = PutObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        content_length: Some(3),
        ..Default::default()
    };
    let mut req = internal_request(input);
    req.method = http::Method::PUT;
    store.put_object(req).await.unwrap();
}

async fn delete(store: &NotifyingStore, bucket: &str, key: &str, version: Option<&str>) {
    let input = DeleteObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        version_id: version.map(str::to_string),
        ..Default::default()
    };
    store.delete_object(internal_request(input)).await.unwrap();
}

fn sent(queue: &FakeQueue) -> Vec<(String, String, String)> {
    queue
        .0
        .locked()
        .iter()
        .map(|(target, event)| {
            let record = &event["Records"][0];
            (
                target.clone(),
                record["eventName"].as_str().unwrap().to_string(),
                record["s3"]["object"]["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn matching_writes_are_queued_for_their_function_and_others_are_not() {
    let (store, queue, kept) = store();
    put(&store, "photos", "in/before").await;
    configure(
        &store,
        "photos",
        vec![function(FUNCTION, &["s3:ObjectCreated:*"], "in/")],
    )
    .await
    .unwrap();
    assert!(kept.0.locked().contains_key("photos"));
    put(&store, "photos", "in/a b").await;
    put(&store, "photos", "out/x").await;
    put(&store, "other", "in/y").await;
    delete(&store, "photos", "in/a b", None).await;
    assert_eq!(
        sent(&queue),
        vec![("known".into(), "ObjectCreated:Put".into(), "in/a+b".into())]
    );
    let event = queue.0.locked()[0].1["Records"][0]["s3"]["object"].clone();
    assert_eq!(
        (event["size"].as_u64(), event["eTag"].as_str()),
        (Some(3), Some("0123"))
    );
    // An empty configuration removes it, from the store too.
    configure(&store, "photos", vec![]).await.unwrap();
    put(&store, "photos", "in/after").await;
    assert_eq!(sent(&queue).len(), 1);
    assert!(kept.0.locked().is_empty());
}

#[tokio::test]
async fn a_delete_without_a_version_in_a_versioned_bucket_creates_a_marker() {
    let (store, queue, _) = store();
    let events = ["s3:ObjectRemoved:*", "s3:ObjectCreated:Put"];
    configure(&store, "versioned", vec![function(FUNCTION, &events, "")])
        .await
        .unwrap();
    put(&store, "versioned", "k").await;
    delete(&store, "versioned", "k", None).await;
    delete(&store, "versioned", "k", Some("v1")).await;
    let names: Vec<String> = sent(&queue).into_iter().map(|(_, name, _)| name).collect();
    assert_eq!(
        names,
        [
            "ObjectCreated:Put",
            "ObjectRemoved:DeleteMarkerCreated",
            "ObjectRemoved:Delete"
        ]
    );
    let versions: Vec<Value> = queue
        .0
        .locked()
        .iter()
        .map(|(_, e)| e["Records"][0]["s3"]["object"]["versionId"].clone())
        .collect();
    assert_eq!(
        versions,
        [
            Value::from("v1"),
            Value::from("marker"),
            Value::from("marker")
        ]
    );
}

#[tokio::test]
async fn a_configuration_naming_an_unknown_function_is_refused_and_not_kept() {
    let (store, _, kept) = store();
    let unknown = "arn:aws:lambda:us-east-1:000000000000:function:missing";
    let refused = configure(
        &store,
        "b",
        vec![function(unknown, &["s3:ObjectCreated:*"], "")],
    )
    .await
    .unwrap_err();
    assert_eq!(refused.code().as_str(), "InvalidArgument");
    assert!(refused
        .message()
        .unwrap()
        .starts_with("Unable to validate the following destination configurations"));
    assert!(kept.0.locked().is_empty());
}

#[tokio::test]
async fn kept_configurations_apply_when_the_store_opens_again() {
    let (store, _, kept) = store();
    configure(
        &store,
        "b",
        vec![function(FUNCTION, &["s3:ObjectCreated:*"], "")],
    )
    .await
    .unwrap();
    let reopened = Notifier::open(kept, "us-east-1", "host").unwrap();
    assert_eq!(reopened.rules("b").unwrap()[0].function_arn, FUNCTION);
    assert!(reopened.rules("other").is_none());
}
