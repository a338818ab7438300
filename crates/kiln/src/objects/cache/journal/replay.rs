//! Reading the journal back: what its segments hold, the latest unsettled version of each key,
//! without changing anything.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

use bytes::Bytes;

use super::super::entries::{Meta, ObjectKey};
use super::frame::{decode_all, segment_path, DONE, PUT};

/// A version that was acknowledged but had not reached the backing store.
#[derive(Debug)]
pub struct PendingWrite {
    pub key: ObjectKey,
    pub version: u64,
    pub meta: Meta,
    pub body: Bytes,
}

/// What the journal held when it was opened.
#[derive(Debug, Default)]
pub struct Recovered {
    pub pending: Vec<PendingWrite>,
    /// The highest version in the journal.
    pub last_version: u64,
    /// Frames that could not be read (a torn tail, or corruption).
    pub bad_frames: usize,
}

/// What the segments in `dir` hold, read without changing anything.
pub(super) struct Replay {
    /// The segments' numbers, oldest first.
    pub(super) numbers: Vec<u64>,
    pub(super) recovered: Recovered,
    /// Unsettled records per segment.
    pub(super) segments: BTreeMap<u64, usize>,
    pub(super) unsettled: HashMap<ObjectKey, Vec<(u64, u64)>>,
}

pub(super) fn replay(dir: &Path) -> io::Result<Replay> {
    let mut numbers: Vec<u64> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    let mut recovered = Recovered::default();
    let mut writer_segments = BTreeMap::new();
    let mut unsettled: HashMap<ObjectKey, Vec<(u64, u64)>> = HashMap::new();
    // The latest unsettled version's contents per key.
    let mut latest: HashMap<ObjectKey, (u64, Meta, Bytes)> = HashMap::new();
    for &n in &numbers {
        let mut data = Vec::new();
        File::open(segment_path(dir, n))?.read_to_end(&mut data)?;
        let (frames, torn) = decode_all(&Bytes::from(data));
        if torn {
            recovered.bad_frames += 1;
            tracing::warn!("object cache: journal segment {n} ends in a torn or corrupt record");
        }
        writer_segments.insert(n, 0usize);
        for frame in frames {
            recovered.last_version = recovered.last_version.max(frame.version);
            let key = frame.header.key;
            match (frame.kind, frame.header.meta) {
                (PUT, Some(meta)) => {
                    unsettled
                        .entry(key.clone())
                        .or_default()
                        .push((frame.version, n));
                    *writer_segments.entry(n).or_default() += 1;
                    if latest.get(&key).is_none_or(|(v, ..)| *v < frame.version) {
                        latest.insert(key, (frame.version, meta, frame.body));
                    }
                }
                (DONE, _) => {
                    if let Some(records) = unsettled.get_mut(&key) {
                        records.retain(|(v, segment)| {
                            let settled = *v <= frame.version;
                            if settled {
                                *writer_segments.get_mut(segment).expect("segment counted") -= 1;
                            }
                            !settled
                        });
                    }
                    if latest.get(&key).is_some_and(|(v, ..)| *v <= frame.version) {
                        latest.remove(&key);
                    }
                }
                _ => recovered.bad_frames += 1,
            }
        }
    }
    unsettled.retain(|_, records| !records.is_empty());
    let mut pending: Vec<PendingWrite> = latest
        .into_iter()
        .map(|(key, (version, meta, body))| PendingWrite {
            key,
            version,
            meta,
            body,
        })
        .collect();
    pending.sort_by_key(|p| p.version);
    recovered.pending = pending;
    Ok(Replay {
        numbers,
        recovered,
        segments: writer_segments,
        unsettled,
    })
}
