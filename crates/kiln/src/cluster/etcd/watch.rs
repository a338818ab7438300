//! What kiln reads from etcd: a key's [`Entry`], a prefix watch's updates, and the watch's
//! position, from which it resumes without losing an event.

/// A key and its value as kiln reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    pub lease: i64,
}

impl Entry {
    pub(super) fn from_kv(kv: &etcd_client::KeyValue) -> Self {
        Self {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
            lease: kv.lease(),
        }
    }
}

/// What a prefix watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchUpdate {
    /// Every key under the prefix (at the start, and again after a compaction), as of
    /// `revision`: replace.
    Reset {
        entries: Vec<Entry>,
        revision: i64,
    },
    Put(Entry),
    Delete {
        key: String,
        mod_revision: i64,
    },
}

/// Where a prefix watch goes on from: a full list, or a watch from a revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStep {
    List,
    WatchFrom(i64),
}

/// The watch's position: the revision after the last one it has reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchCursor {
    next: Option<i64>,
}

impl WatchCursor {
    pub fn step(&self) -> WatchStep {
        match self.next {
            None => WatchStep::List,
            Some(revision) => WatchStep::WatchFrom(revision),
        }
    }

    /// A full list was reported, as of `revision`.
    pub fn listed(&mut self, revision: i64) {
        self.next = Some(revision + 1);
    }

    /// An event was reported.
    pub fn event(&mut self, mod_revision: i64) {
        self.next = Some(
            self.next
                .map_or(mod_revision + 1, |n| n.max(mod_revision + 1)),
        );
    }

    /// The revision to resume from was compacted away: only a new list can catch up.
    pub fn compacted(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_cursor_resumes_after_the_last_event_and_lists_after_a_compaction() {
        let mut cursor = WatchCursor::default();
        assert_eq!(cursor.step(), WatchStep::List);
        cursor.listed(10);
        assert_eq!(cursor.step(), WatchStep::WatchFrom(11));
        cursor.event(14);
        cursor.event(12); // never goes back
        assert_eq!(cursor.step(), WatchStep::WatchFrom(15));
        cursor.compacted();
        assert_eq!(cursor.step(), WatchStep::List);
    }
}
