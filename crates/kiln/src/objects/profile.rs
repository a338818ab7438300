//! The object store's endpoint in the `kiln` profile of the AWS CLI and SDKs.
//!
//! `kiln up` writes `[profile kiln]` with the control API as `endpoint_url`; S3 is served on
//! another port, so the profile gets a `services` section that gives S3 its own endpoint (the
//! SDKs' service-specific endpoint configuration):
//!
//! ```ini
//! [profile kiln]
//! services = kiln
//! [services kiln]
//! s3 =
//!   endpoint_url = http://127.0.0.1:9001
//! ```

use std::fs;
use std::path::{Path, PathBuf};

const PROFILE: &str = "[profile kiln]";
const SERVICES: &str = "[services kiln]";

/// Where the AWS CLI reads its config file.
pub fn aws_config_path() -> PathBuf {
    if let Some(path) = std::env::var_os("AWS_CONFIG_FILE") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".aws/config")
}

/// Points the `kiln` profile's S3 endpoint at `endpoint`, keeping everything else in the file.
pub fn write_s3_endpoint(config_file: &Path, endpoint: &str) -> std::io::Result<()> {
    // A symlinked file (dotfile managers do that) is updated where it points, not replaced.
    let resolved = fs::canonicalize(config_file);
    let path = resolved.as_deref().unwrap_or(config_file);
    let existing = fs::read_to_string(path).unwrap_or_default();
    crate::auth::write_private_file(path, &with_s3_endpoint(&existing, endpoint))
}

/// The config text with the profile's `services` line and the services section (re)placed.
pub fn with_s3_endpoint(existing: &str, endpoint: &str) -> String {
    let mut out = String::new();
    let mut section = String::new();
    let mut saw_profile = false;
    for line in existing.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            if section == PROFILE {
                end_profile(&mut out);
            }
            section = trimmed.to_string();
            saw_profile |= section == PROFILE;
        }
        let ours = section == SERVICES
            || (section == PROFILE
                && trimmed
                    .split_once('=')
                    .is_some_and(|(k, _)| k.trim() == "services"));
        if !ours {
            out.push_str(line);
            out.push('\n');
        }
    }
    if section == PROFILE {
        end_profile(&mut out);
    }
    if !saw_profile {
        out.push_str(&format!("{PROFILE}\nservices = kiln\n"));
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!("{SERVICES}\ns3 =\n  endpoint_url = {endpoint}\n"));
    out
}

/// Closes the profile section with its `services` line (before any blank lines).
fn end_profile(out: &mut String) {
    while out.ends_with("\n\n") {
        out.pop();
    }
    out.push_str("services = kiln\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinked_config_stays_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("dotfiles-config");
        fs::write(&target, "[default]\nregion = eu-west-1\n").unwrap();
        let link = dir.path().join("config");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_s3_endpoint(&link, "http://127.0.0.1:9001").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        let text = fs::read_to_string(&target).unwrap();
        assert!(
            text.contains("[default]") && text.contains("endpoint_url = http://127.0.0.1:9001")
        );
    }

    #[test]
    fn services_section_is_added_once_and_replaced() {
        let start = "[default]\nregion = eu-west-1\n\n[profile kiln]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:9000\n";
        let once = with_s3_endpoint(start, "http://127.0.0.1:9001");
        let twice = with_s3_endpoint(&once, "http://127.0.0.1:9005");
        assert!(twice.contains("[default]\nregion = eu-west-1"));
        assert_eq!(twice.matches("services = kiln").count(), 1);
        assert_eq!(twice.matches("[services kiln]").count(), 1);
        assert!(twice.contains("endpoint_url = http://127.0.0.1:9005"));
        assert!(!twice.contains("9001"));
        assert!(twice.contains(
            "[profile kiln]\nregion = us-east-1\nendpoint_url = http://127.0.0.1:9000\nservices = kiln\n"
        ));
        let fresh = with_s3_endpoint("", "http://h:1");
        assert_eq!(
            fresh,
            "[profile kiln]\nservices = kiln\n\n[services kiln]\ns3 =\n  endpoint_url = http://h:1\n"
        );
    }
}
