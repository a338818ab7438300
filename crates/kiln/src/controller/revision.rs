//! How a change is kept from undoing another: Lambda's RevisionId (an update that names one
//! applies only to that revision) and, in cluster mode, a change overtaken by another node's,
//! made again a few times before the caller is told to try later.

use super::ControllerError;
use crate::function::Function;

/// How many times a change overtaken by another node's is made again before the caller is
/// told to try later.
pub(super) const STALE_RETRIES: usize = 5;

/// A change overtaken [`STALE_RETRIES`] times in a row.
pub(super) fn overtaken(name: &str) -> ControllerError {
    ControllerError::Conflict(format!(
        "The operation cannot be performed at this time. Function {name} is being changed on \
         other nodes of the cluster: try again"
    ))
}

/// Lambda's RevisionId: a UUID-shaped digest of everything UpdateFunctionCode and
/// UpdateFunctionConfiguration change, so it changes with each of them and nothing else.
pub fn revision_id(f: &Function) -> String {
    use sha2::{Digest, Sha256};
    let config = serde_json::to_string(&f.config).unwrap_or_default();
    let digest = Sha256::digest(format!(
        "{}\n{}\n{}\n{}",
        f.name,
        f.code_sha256,
        f.last_modified.to_rfc3339(),
        config
    ));
    let h = hex::encode(&digest[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Optimistic locking: an update that names a RevisionId applies only to that revision.
pub(super) fn check_revision(f: &Function, expected: Option<&str>) -> Result<(), ControllerError> {
    match expected {
        Some(expected) if expected != revision_id(f) => Err(ControllerError::PreconditionFailed(
            "The Revision Id provided does not match the latest Revision Id. Call the GetFunction/GetAlias API to retrieve the latest Revision Id".into(),
        )),
        _ => Ok(()),
    }
}
