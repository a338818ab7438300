//! A session's changes and state as the log and the runtimes' frames carry them: the entries
//! of one invocation's batch (puts and deletes, their encoding and decoding) and the state they
//! build up (what a new primary loads).

use std::collections::HashMap;

use bytes::Bytes;

use crate::session::MAX_KEY_BYTES;

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// How a value was written: raw bytes, or the JSON encoding of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bytes = 0,
    Json = 1,
}

/// One change to a session's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Put {
        key: String,
        kind: Kind,
        value: Bytes,
    },
    Delete {
        key: String,
    },
}

impl Entry {
    pub fn key(&self) -> &str {
        match self {
            Entry::Put { key, .. } | Entry::Delete { key } => key,
        }
    }
}

/// Appends the encoding of a put to `out`.
pub fn encode_put(out: &mut Vec<u8>, key: &str, kind: Kind, value: &[u8]) {
    out.push(OP_PUT);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.push(kind as u8);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// Appends the encoding of a delete to `out`.
pub fn encode_delete(out: &mut Vec<u8>, key: &str) {
    out.push(OP_DELETE);
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
}

/// The entries of a record body; an error names what is malformed.
pub fn decode(body: &Bytes) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Result<std::ops::Range<usize>, String> {
        let end = at
            .checked_add(n)
            .filter(|end| *end <= body.len())
            .ok_or_else(|| format!("entry cut short at byte {at}"))?;
        let range = *at..end;
        *at = end;
        Ok(range)
    };
    while at < body.len() {
        let op = body[take(&mut at, 1)?.start];
        let len = take(&mut at, 2)?;
        let key_len = u16::from_le_bytes([body[len.start], body[len.start + 1]]) as usize;
        if key_len == 0 || key_len > MAX_KEY_BYTES {
            return Err(format!("a key of {key_len} bytes"));
        }
        let key = std::str::from_utf8(&body[take(&mut at, key_len)?])
            .map_err(|_| "a key that is not UTF-8".to_string())?
            .to_string();
        match op {
            OP_PUT => {
                let kind = match body[take(&mut at, 1)?.start] {
                    0 => Kind::Bytes,
                    1 => Kind::Json,
                    other => return Err(format!("unknown value kind {other}")),
                };
                let len = take(&mut at, 4)?;
                let value_len = u32::from_le_bytes(body[len].try_into().expect("4 bytes")) as usize;
                let value = body.slice(take(&mut at, value_len)?);
                entries.push(Entry::Put { key, kind, value });
            }
            OP_DELETE => entries.push(Entry::Delete { key }),
            other => return Err(format!("unknown entry op {other}")),
        }
    }
    Ok(entries)
}

/// A session's state in memory: what the agent holds for runtimes that run inside it (wasm),
/// and what a log replays into.
#[derive(Debug, Default, Clone)]
pub struct StateMap {
    entries: HashMap<String, (Kind, Bytes)>,
    bytes: u64,
}

impl StateMap {
    pub fn get(&self, key: &str) -> Option<&(Kind, Bytes)> {
        self.entries.get(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.keys()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bytes of keys and values, which the session size limit bounds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The size the state would have after `entries`.
    pub fn bytes_after(&self, entries: &[Entry]) -> u64 {
        let mut sizes: HashMap<&str, Option<u64>> = HashMap::new();
        for entry in entries {
            let size = match entry {
                Entry::Put { key, value, .. } => Some((key.len() + value.len()) as u64),
                Entry::Delete { .. } => None,
            };
            sizes.insert(entry.key(), size);
        }
        let mut bytes = self.bytes;
        for (key, size) in sizes {
            if let Some((_, old)) = self.entries.get(key) {
                bytes -= (key.len() + old.len()) as u64;
            }
            bytes += size.unwrap_or(0);
        }
        bytes
    }

    pub fn apply(&mut self, entry: Entry) {
        match entry {
            Entry::Put { key, kind, value } => {
                self.bytes += (key.len() + value.len()) as u64;
                if let Some((_, old)) = self.entries.insert(key.clone(), (kind, value)) {
                    self.bytes -= (key.len() + old.len()) as u64;
                }
            }
            Entry::Delete { key } => {
                if let Some((_, old)) = self.entries.remove(&key) {
                    self.bytes -= (key.len() + old.len()) as u64;
                }
            }
        }
    }

    /// The whole state as one record body of puts (what a new primary loads).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes as usize + self.entries.len() * 8);
        for (key, (kind, value)) in &self.entries {
            encode_put(&mut out, key, *kind, value);
        }
        out
    }
}
