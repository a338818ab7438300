//! Lambda layers as a function refers to them: each layer version's ARN with the content it
//! had when the function took it, so that a function keeps its layers after a layer version
//! is deleted (as on Lambda).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The most layers a function may use (Lambda's limit).
pub const MAX_LAYERS: usize = 5;
/// The longest layer name (Lambda's limit).
pub const MAX_LAYER_NAME: usize = 140;
/// Lambda's pattern of a layer version ARN, as its validation errors quote it.
pub const LAYER_VERSION_ARN_PATTERN: &str =
    r"arn:[a-zA-Z0-9-]+:lambda:[a-zA-Z0-9-]+:\d{12}:layer:[a-zA-Z0-9-_]+:[0-9]+";
/// Lambda's pattern of a LayerName parameter (a name or a layer's ARN).
pub const LAYER_NAME_PATTERN: &str =
    r"(arn:[a-zA-Z0-9-]+:lambda:[a-zA-Z0-9-]+:\d{12}:layer:[a-zA-Z0-9-_]+)|[a-zA-Z0-9-_]+";

/// One of a function's layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRef {
    /// The layer version's ARN, as the function's configuration reports it.
    pub arn: String,
    /// Hex SHA-256 of the layer's zip: its key in the layer store.
    pub code_sha256: String,
    /// The zip's size (`CodeSize` of the function's `Layers`).
    pub code_size: u64,
    /// The extracted size, which counts toward the function's unzipped limit.
    pub unzipped_size: u64,
}

/// A published layer version, as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerVersion {
    pub name: String,
    /// Numbered from 1 per layer; a deleted version's number is never given again.
    pub version: u64,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license_info: Option<String>,
    #[serde(default)]
    pub compatible_runtimes: Vec<String>,
    #[serde(default)]
    pub compatible_architectures: Vec<String>,
    /// Hex SHA-256 of the zip: its key in the layer store.
    pub code_sha256: String,
    pub code_size: u64,
    pub unzipped_size: u64,
    pub created: DateTime<Utc>,
}

/// A layer version's ARN taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerVersionArn {
    pub region: String,
    pub account: String,
    pub name: String,
    pub version: u64,
}

/// Whether `name` is a layer name Lambda accepts: letters, digits, hyphens and underscores.
pub fn valid_layer_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LAYER_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Parses `arn:PARTITION:lambda:REGION:ACCOUNT:layer:NAME:VERSION`; `None` if it is not one.
pub fn parse_layer_version_arn(raw: &str) -> Option<LayerVersionArn> {
    let (layer, version) = raw.rsplit_once(':')?;
    let version = (!version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()))
        .then(|| version.parse::<u64>().ok())??;
    let (region, account, name) = parse_layer_arn(layer)?;
    Some(LayerVersionArn {
        region,
        account,
        name,
        version,
    })
}

/// Parses `arn:PARTITION:lambda:REGION:ACCOUNT:layer:NAME` into its region, account and name.
pub fn parse_layer_arn(raw: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = raw.split(':').collect();
    let ["arn", partition, "lambda", region, account, "layer", name] = parts.as_slice() else {
        return None;
    };
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    let valid = word(partition)
        && word(region)
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && valid_layer_name(name);
    valid.then(|| (region.to_string(), account.to_string(), name.to_string()))
}

/// A key naming an ordered list of layers' contents: where their merged `/opt` is kept.
pub fn merged_key(layers: &[LayerRef]) -> String {
    use sha2::{Digest, Sha256};
    let joined: Vec<&str> = layers.iter().map(|l| l.code_sha256.as_str()).collect();
    hex::encode(Sha256::digest(joined.join(",").as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_version_arns() {
        let arn = parse_layer_version_arn("arn:aws:lambda:us-east-1:123456789012:layer:my-lib:3")
            .unwrap();
        assert_eq!(
            arn,
            LayerVersionArn {
                region: "us-east-1".into(),
                account: "123456789012".into(),
                name: "my-lib".into(),
                version: 3,
            }
        );
        for bad in [
            "my-lib:3",
            "arn:aws:lambda:us-east-1:123456789012:layer:my-lib",
            "arn:aws:lambda:us-east-1:123456789012:layer:my-lib:x",
            "arn:aws:lambda:us-east-1:123456789012:layer:my-lib:-1",
            "arn:aws:lambda:us-east-1:1234:layer:my-lib:1",
            "arn:aws:lambda:us-east-1:123456789012:function:my-lib:1",
            "arn:aws:lambda:us-east-1:123456789012:layer:my lib:1",
            "",
        ] {
            assert_eq!(parse_layer_version_arn(bad), None, "{bad}");
        }
    }

    #[test]
    fn merged_keys_follow_order() {
        let layer = |sha: &str| LayerRef {
            arn: String::new(),
            code_sha256: sha.into(),
            code_size: 1,
            unzipped_size: 1,
        };
        let ab = merged_key(&[layer("a"), layer("b")]);
        assert_eq!(ab, merged_key(&[layer("a"), layer("b")]));
        assert_ne!(ab, merged_key(&[layer("b"), layer("a")]));
    }
}
