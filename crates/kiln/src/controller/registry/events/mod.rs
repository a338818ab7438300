//! The queue of asynchronous (Event) invocations: [`EventQueue`], kept in a single node's SQLite
//! database ([`Database`]) or, in cluster mode, in etcd ([`EtcdEvents`]).

mod etcd;

use chrono::{DateTime, Utc};

pub use etcd::{EtcdEvents, INLINE_PAYLOAD};

use super::{AsyncFailure, Database, PendingEvent, Progress, QueuedEvent, RegistryError, Requeue};

/// The queue's operations, as the controller's delivery loop uses them. Ids are the queue's
/// own (in etcd: this node's handle of an event it claimed).
pub trait EventQueue: Send + Sync {
    fn enqueue(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
    ) -> Result<i64, RegistryError>;

    /// Queues a schedule's firing (`schedule` firing for time `at`) together with the record
    /// that it fired, atomically. Only the node's own queue keeps schedules.
    fn enqueue_firing(
        &self,
        _request_id: &str,
        _function: &str,
        _payload: &[u8],
        _schedule: &str,
        _at: &chrono::DateTime<chrono::Utc>,
    ) -> Result<i64, RegistryError> {
        Err(RegistryError::Unsupported(
            "schedules are not available in cluster mode yet",
        ))
    }

    /// The time each schedule last fired for.
    fn schedule_firings(
        &self,
    ) -> Result<std::collections::HashMap<String, chrono::DateTime<chrono::Utc>>, RegistryError>
    {
        Ok(Default::default())
    }
    /// Events due now that this node is to deliver, as [`Database::due_events_capped`].
    fn due_events_capped(
        &self,
        limit: usize,
        busy: &[(i64, String)],
        cap: &dyn Fn(&str) -> usize,
    ) -> Result<Vec<QueuedEvent>, RegistryError>;
    fn complete_event(&self, id: i64) -> Result<(), RegistryError>;
    fn retry_event(
        &self,
        id: i64,
        not_before: DateTime<Utc>,
        why: Requeue,
        resume: Option<&Progress>,
    ) -> Result<(), RegistryError>;
    fn fail_event(&self, event: &QueuedEvent, error: &str) -> Result<(), RegistryError>;
    fn queue_depth(&self) -> Result<u64, RegistryError>;
    fn failure(&self, request_id: &str) -> Result<Option<String>, RegistryError>;
    /// Deletes the queued events of a deleted function or sequence; the runs they would have
    /// resumed.
    fn drop_events(&self, function: &str) -> Result<Vec<String>, RegistryError>;
    /// Whether a sequence's event resumes where it stopped (else its retry starts over).
    fn resumes(&self) -> bool {
        true
    }
    /// The oldest queued events and the most recent failures, at most `limit` of each, and
    /// what is done with a failure (the console's async page).
    fn pending_events(&self, _limit: usize) -> Result<Vec<PendingEvent>, RegistryError> {
        Err(RegistryError::Unsupported(UNLISTED))
    }
    fn failures(&self, _limit: usize) -> Result<Vec<AsyncFailure>, RegistryError> {
        Err(RegistryError::Unsupported(UNLISTED))
    }
    /// Queues a failed event again, its attempts reset; false when there is no such failure.
    fn requeue_failure(&self, _request_id: &str) -> Result<bool, RegistryError> {
        Err(RegistryError::Unsupported(UNLISTED))
    }
    fn delete_failure(&self, _request_id: &str) -> Result<bool, RegistryError> {
        Err(RegistryError::Unsupported(UNLISTED))
    }
}

/// What a queue without listings answers (the cluster's, in etcd, for now).
const UNLISTED: &str =
    "the async queue's listing and its failures' retry are not available in cluster mode yet";

impl EventQueue for Database {
    fn pending_events(&self, limit: usize) -> Result<Vec<PendingEvent>, RegistryError> {
        Database::pending_events(self, limit)
    }

    fn failures(&self, limit: usize) -> Result<Vec<AsyncFailure>, RegistryError> {
        Database::failures(self, limit)
    }

    fn requeue_failure(&self, request_id: &str) -> Result<bool, RegistryError> {
        Database::requeue_failure(self, request_id)
    }

    fn delete_failure(&self, request_id: &str) -> Result<bool, RegistryError> {
        Database::delete_failure(self, request_id)
    }

    fn enqueue_firing(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
        schedule: &str,
        at: &chrono::DateTime<chrono::Utc>,
    ) -> Result<i64, RegistryError> {
        Database::enqueue_firing(self, request_id, function, payload, schedule, at)
    }

    fn schedule_firings(
        &self,
    ) -> Result<std::collections::HashMap<String, chrono::DateTime<chrono::Utc>>, RegistryError>
    {
        Database::schedule_firings(self)
    }

    fn enqueue(
        &self,
        request_id: &str,
        function: &str,
        payload: &[u8],
    ) -> Result<i64, RegistryError> {
        Database::enqueue(self, request_id, function, payload)
    }

    fn due_events_capped(
        &self,
        limit: usize,
        busy: &[(i64, String)],
        cap: &dyn Fn(&str) -> usize,
    ) -> Result<Vec<QueuedEvent>, RegistryError> {
        Database::due_events_capped(self, limit, busy, cap)
    }

    fn complete_event(&self, id: i64) -> Result<(), RegistryError> {
        Database::complete_event(self, id)
    }

    fn retry_event(
        &self,
        id: i64,
        not_before: DateTime<Utc>,
        why: Requeue,
        resume: Option<&Progress>,
    ) -> Result<(), RegistryError> {
        Database::retry_event(self, id, not_before, why, resume)
    }

    fn fail_event(&self, event: &QueuedEvent, error: &str) -> Result<(), RegistryError> {
        Database::fail_event(self, event, error)
    }

    fn queue_depth(&self) -> Result<u64, RegistryError> {
        Database::queue_depth(self)
    }

    fn failure(&self, request_id: &str) -> Result<Option<String>, RegistryError> {
        Database::failure(self, request_id)
    }

    fn drop_events(&self, function: &str) -> Result<Vec<String>, RegistryError> {
        Database::drop_events(self, function)
    }
}
