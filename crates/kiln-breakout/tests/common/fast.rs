//! The fast path against Node for packages of several files, with a store: a package traced
//! in Node (the S3 stand-in's store), compiled with its files and environment, and run on the
//! fast path over events whose answers are compared with Node's.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiln_breakout::compile::CompileOptions;
use kiln_breakout::exec::{Loaded, Outcome};
use kiln_breakout::package::{Environment, Package};
use kiln_breakout::runtime::{Intrinsics, Miss};
use md5::Digest;
use serde_json::{json, Value};

use super::*;

/// The objects `drive.mjs` puts in its stand-in store, for the fast path's side.
pub struct Store {
    pub objects: HashMap<String, String>,
    pub request: usize,
}

impl Store {
    pub fn new(request: usize) -> Store {
        let users: Vec<Value> = (0..50)
            .map(|i| json!({"username": format!("user{i}"), "password": format!("store-secret-{}", i * 7)}))
            .collect();
        let mut objects = HashMap::new();
        objects.insert(
            "users/users.json".to_string(),
            Value::from(users).to_string(),
        );
        objects.insert(
            "commits/kiln/abcdef1.json".to_string(),
            json!({"message": "fix", "author": {"login": "store-secret-login"}}).to_string(),
        );
        objects.insert("commits/kiln/1234567.json".to_string(), "{}".to_string());
        Store { objects, request }
    }
}

impl Intrinsics for Store {
    fn call(&mut self, name: &str, args: &[Value]) -> Result<Value, Miss> {
        let path = format!(
            "{}/{}",
            args[0]["Bucket"].as_str().unwrap_or_default(),
            args[0]["Key"].as_str().unwrap_or_default()
        );
        match name {
            "s3.PutObject" => {
                let body = args[0]["Body"].as_str().unwrap_or_default().to_string();
                let etag = md5::Md5::digest(body.as_bytes())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>();
                self.objects.insert(path, body);
                Ok(json!({"ETag": format!("\"{etag}\"")}))
            }
            "s3.GetObject" => match self.objects.get(&path) {
                Some(body) => Ok(json!({"Body": body, "LastModified": "2024-01-01T00:00:00.000Z"})),
                None => Err(Miss::new("NoSuchKey")),
            },
            _ => Err(Miss::new(format!("{name} not in this store"))),
        }
    }

    fn context(&mut self) -> Result<Value, Miss> {
        Ok(json!({"awsRequestId": format!("req-{}", self.request)}))
    }
}

/// Stages `files` (with the S3 stand-in) as a package in `work/plain`.
pub fn stage(work: &Path, files: &[(&str, &str)]) {
    let plain = work.join("plain");
    install_s3_stand_in(&plain);
    for (path, text) in files {
        let file = plain.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }
}

/// Instruments and traces the package in `work/plain` on `training`, then compiles it with
/// its files and `env` (also the environment Node runs with).
pub fn trace_and_load(
    work: &Path,
    name: &str,
    training: &Value,
    env: &[(&str, &str)],
) -> Result<Loaded, String> {
    let vars: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, Path::new(*v))).collect();
    let trace = trace_in_node(work, name, training, &vars);
    let options = CompileOptions {
        package: Some(Arc::new(Package::read(&work.join("traced")).unwrap())),
        env: Some(Environment {
            vars: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            platform: vec!["AWS_*".into()],
        }),
        ..CompileOptions::default()
    };
    compile_and_load(&trace, &options)
}

/// Runs each event on the fast path: an answer must be Node's. Returns the outcomes.
pub fn compare(
    work: &Path,
    name: &str,
    loaded: &Loaded,
    events: &[Value],
    env: &[(&str, &str)],
) -> Vec<Outcome> {
    let expected = node_answers(work, name, events, env);
    assert_eq!(expected.len(), events.len());
    let mut outcomes = Vec::new();
    for (i, (event, node)) in events.iter().zip(&expected).enumerate() {
        let outcome = loaded.run(
            event.to_string().as_bytes(),
            Box::new(Store::new(i)),
            Duration::from_secs(20),
        );
        match &outcome {
            Outcome::Answer(bytes) => assert_eq!(
                String::from_utf8_lossy(bytes),
                *node,
                "{name}: the fast path answered {event} differently"
            ),
            Outcome::Error(error) => assert_eq!(
                error_line(error),
                *node,
                "{name}: the fast path's error for {event} differs"
            ),
            Outcome::Miss { .. } => {}
        }
        outcomes.push(outcome);
    }
    outcomes
}

pub fn served(outcomes: &[Outcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Answer(_) | Outcome::Error(_)))
        .count()
}
