//! The journal's records on disk: a frame's encoding (`u32 length · u32 crc32 · payload`),
//! its decoding up to the first frame that does not hold, and the segment files' names.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::super::entries::{Meta, ObjectKey};

pub(super) const PUT: u8 = 1;
pub(super) const DONE: u8 = 2;

#[derive(Serialize, Deserialize)]
pub(super) struct Header {
    #[serde(flatten)]
    pub(super) key: ObjectKey,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) meta: Option<Meta>,
}

pub(super) fn encode(kind: u8, version: u64, header: &Header, body: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(header).expect("a journal header serialises");
    let len = 1 + 8 + 4 + header.len() + body.len();
    let mut payload = Vec::with_capacity(8 + len);
    payload.extend_from_slice(&(len as u32).to_le_bytes());
    payload.extend_from_slice(&[0; 4]);
    payload.push(kind);
    payload.extend_from_slice(&version.to_le_bytes());
    payload.extend_from_slice(&(header.len() as u32).to_le_bytes());
    payload.extend_from_slice(&header);
    payload.extend_from_slice(body);
    let crc = crc32fast::hash(&payload[8..]);
    payload[4..8].copy_from_slice(&crc.to_le_bytes());
    payload
}

pub(super) struct Decoded {
    pub(super) kind: u8,
    pub(super) version: u64,
    pub(super) header: Header,
    pub(super) body: Bytes,
}

/// The frames of one segment, up to the first that does not hold.
pub(super) fn decode_all(data: &Bytes) -> (Vec<Decoded>, bool) {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < data.len() {
        let Some(frame) = decode_one(data, at) else {
            return (out, true);
        };
        at = frame.0;
        out.push(frame.1);
    }
    (out, false)
}

fn decode_one(data: &Bytes, at: usize) -> Option<(usize, Decoded)> {
    let word = |i: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(i..i + 4)?.try_into().ok()?))
    };
    let len = word(at)? as usize;
    let crc = word(at + 4)?;
    let start = at + 8;
    let payload = data.get(start..start.checked_add(len)?)?;
    if crc32fast::hash(payload) != crc || len < 13 {
        return None;
    }
    let kind = payload[0];
    let version = u64::from_le_bytes(payload[1..9].try_into().ok()?);
    let header_len = u32::from_le_bytes(payload[9..13].try_into().ok()?) as usize;
    let header: Header =
        serde_json::from_slice(payload.get(13..13usize.checked_add(header_len)?)?).ok()?;
    let body = data.slice(start + 13 + header_len..start + len);
    Some((
        start + len,
        Decoded {
            kind,
            version,
            header,
            body,
        },
    ))
}

pub(super) fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:016}.log"))
}
