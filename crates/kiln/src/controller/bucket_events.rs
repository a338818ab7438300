//! The controller as the destination of the object store's event notifications: a bucket's
//! configuration names functions by ARN, and each event is queued as an `InvocationType=Event`
//! invoke is, so that retries, the event-age limit and destinations apply to it unchanged.

use super::{Controller, ControllerError};
use crate::objects::notify::EventSink;

impl EventSink for Controller {
    fn target(&self, function_arn: &str) -> Option<String> {
        let (entry, _) = self.invocation_target(function_arn).ok()?;
        // A version's event runs that version; an alias's picks when it is delivered, as for
        // an Event invoke.
        match self.function_ref(function_arn).ok()?.qualifier {
            Some(q) if q != crate::function::versions::LATEST => {
                Some(format!("{}:{q}", entry.function.name))
            }
            _ => Some(entry.function.name.clone()),
        }
    }

    fn enqueue(&self, target: &str, payload: &[u8]) -> Result<(), ControllerError> {
        self.enqueue_event(target, payload).map(drop)
    }
}
