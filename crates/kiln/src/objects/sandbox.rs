//! The object store inside sandboxes: every instance gets the environment the AWS SDKs read
//! (`AWS_ENDPOINT_URL_S3` and its function's own keys), and an isolated sandbox gets the store
//! served on a listener inside its network namespace, accepting only that function's key.

use std::any::Any;

use kiln_sandbox::NetNs;

use super::{ObjectStore, Scope};
use crate::agent::{Attachment, SandboxService, ServiceError};
use crate::function::InstanceSpec;

/// Where the store listens inside an isolated sandbox: an IP literal, so SDKs use path-style
/// addressing and need no name resolution.
pub const SANDBOX_ADDR: &str = "127.0.0.1:9000";

pub struct SandboxObjectStore {
    store: ObjectStore,
    /// The store's own endpoint, for sandboxes on the host's network.
    host_endpoint: String,
}

impl SandboxObjectStore {
    pub fn new(store: ObjectStore, host_endpoint: String) -> Self {
        Self {
            store,
            host_endpoint,
        }
    }
}

impl SandboxService for SandboxObjectStore {
    fn attach(
        &self,
        spec: &InstanceSpec,
        netns: Option<&NetNs>,
        slot: &crate::function::InvocationSlot,
    ) -> Result<Attachment, ServiceError> {
        let credentials = self.store.function_credentials(spec.name());
        let (endpoint, guard) = match netns {
            Some(netns) => {
                let addr = SANDBOX_ADDR.parse().expect("a valid socket address");
                let listener = netns
                    .listen_tcp(addr)
                    .map_err(|e| ServiceError::new("object store listener", e))?;
                let handle = super::serve::serve_tagged(
                    listener,
                    &self.store,
                    Scope::Function(spec.name().to_string()),
                    Some(slot.clone()),
                )
                .map_err(|e| ServiceError::new("object store", e))?;
                let guard: Box<dyn Any + Send + Sync> = Box::new(handle);
                (format!("http://{SANDBOX_ADDR}"), Some(guard))
            }
            None => (self.host_endpoint.clone(), None),
        };
        Ok(Attachment {
            env: vec![
                ("AWS_ENDPOINT_URL_S3".into(), endpoint),
                ("AWS_ACCESS_KEY_ID".into(), credentials.access_key_id),
                (
                    "AWS_SECRET_ACCESS_KEY".into(),
                    credentials.secret_access_key,
                ),
            ],
            guard,
        })
    }
}
