//! One set of admin credentials for the whole cluster.
//!
//! Every node is given the same credentials file (`--credentials-file`); the secret never goes
//! to etcd. etcd holds only `<prefix>/credentials`: the access key id and a SHA-256 fingerprint
//! of the key and secret, written by the first node, so that a node given other credentials is
//! refused at start rather than answering with keys the others reject. The fingerprint is a
//! hash of a 240-bit random secret: it cannot be searched back.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::etcd::Etcd;
use super::ClusterError;
use crate::auth::StoredCredentials;

/// What etcd holds of the cluster's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsRecord {
    pub access_key_id: String,
    pub fingerprint: String,
}

impl CredentialsRecord {
    pub fn of(credentials: &StoredCredentials) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"kiln cluster credentials v1\n");
        hash.update(credentials.access_key_id.as_bytes());
        hash.update(b"\n");
        hash.update(credentials.secret_access_key.as_bytes());
        Self {
            access_key_id: credentials.access_key_id.clone(),
            fingerprint: hex::encode(hash.finalize()),
        }
    }
}

/// Loads the cluster's credentials from `file`, or creates them there if the cluster has none
/// yet; checks them against the cluster's record. The flag tells whether they are new.
pub async fn adopt(
    etcd: &Etcd,
    key: &str,
    file: &Path,
    region: &str,
) -> Result<(StoredCredentials, bool), ClusterError> {
    let file_error = |source| ClusterError::CredentialsFile {
        path: file.to_path_buf(),
        source,
    };
    let (credentials, created) = match StoredCredentials::load_from(file) {
        Ok(credentials) => (credentials, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(existing) = etcd.get(key).await? {
                let record: CredentialsRecord = serde_json::from_slice(&existing.value)
                    .map_err(|_| ClusterError::CorruptCredentialsRecord(key.to_string()))?;
                return Err(ClusterError::CredentialsElsewhere {
                    access_key_id: record.access_key_id,
                    path: file.to_path_buf(),
                });
            }
            let credentials = StoredCredentials::generate(region);
            credentials.save_to(file).map_err(file_error)?;
            (credentials, true)
        }
        Err(e) => return Err(file_error(e)),
    };
    let ours = CredentialsRecord::of(&credentials);
    let value = serde_json::to_vec(&ours).expect("a credentials record serialises");
    let theirs = etcd.put_if_absent(key, value).await?;
    let theirs: CredentialsRecord = serde_json::from_slice(&theirs)
        .map_err(|_| ClusterError::CorruptCredentialsRecord(key.to_string()))?;
    if theirs != ours {
        if created {
            // Another node created the cluster's credentials meanwhile.
            let _ = std::fs::remove_file(file);
        }
        return Err(ClusterError::CredentialsMismatch {
            path: file.to_path_buf(),
            access_key_id: theirs.access_key_id,
        });
    }
    Ok((credentials, created))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_changes_with_the_secret_and_holds_no_part_of_it() {
        let a = StoredCredentials::generate("us-east-1");
        let mut b = a.clone();
        b.secret_access_key.push('x');
        let (ra, rb) = (CredentialsRecord::of(&a), CredentialsRecord::of(&b));
        assert_eq!(ra.access_key_id, a.access_key_id);
        assert_ne!(ra.fingerprint, rb.fingerprint);
        assert_eq!(ra, CredentialsRecord::of(&a));
        let json = serde_json::to_string(&ra).unwrap();
        assert!(!json.contains(&a.secret_access_key[..8]));
    }
}
