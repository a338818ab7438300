//! ListMultipartUploads pages: uploads in key order (a key's uploads by id, which is the order
//! they began),
//! under a prefix, rolled up by a delimiter, resumed after `key-marker` and `upload-id-marker`.
//! A pure function over the uploads under the prefix, which a store hands over in that order.

use super::listing::rolls_up;

/// What a ListMultipartUploads request asks for.
#[derive(Debug, Clone, Default)]
pub struct UploadsRequest {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    pub upload_id_marker: Option<String>,
    pub max_uploads: usize,
}

/// One page: uploads, common prefixes, and where the next page starts if there is one.
#[derive(Debug, PartialEq)]
pub struct UploadsPage<T> {
    pub uploads: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix listed, and the last upload's id when it was an upload:
    /// the next page's markers.
    pub last: Option<(String, Option<String>)>,
}

/// Lists one page of `uploads` (under `request.prefix`, in order), each with its key and id.
pub fn list_uploads<T>(
    request: &UploadsRequest,
    uploads: impl IntoIterator<Item = T>,
    key_of: impl Fn(&T) -> &str,
    id_of: impl Fn(&T) -> &str,
) -> UploadsPage<T> {
    let delimiter = request.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut page = UploadsPage {
        uploads: Vec::new(),
        common_prefixes: Vec::new(),
        truncated: false,
        last: None,
    };
    for upload in uploads {
        let key = key_of(&upload);
        if !key.starts_with(&request.prefix)
            || !after_marker(request, delimiter, key, id_of(&upload))
        {
            continue;
        }
        let entry = match delimiter.and_then(|d| common_prefix(&request.prefix, d, key)) {
            Some(common) if page.common_prefixes.last() == Some(&common) => continue,
            Some(common) => (common, None),
            None => (key.to_string(), Some(id_of(&upload).to_string())),
        };
        if page.uploads.len() + page.common_prefixes.len() == request.max_uploads {
            page.truncated = true;
            return page;
        }
        match entry.1 {
            None => page.common_prefixes.push(entry.0.clone()),
            Some(_) => page.uploads.push(upload),
        }
        page.last = Some(entry);
    }
    page
}

/// Whether an upload comes after the request's markers: a key past `key-marker` (and past
/// every key under it, when the marker is a common prefix), or one of `key-marker`'s uploads
/// whose id is past `upload-id-marker` (ids sort in the order their uploads began).
fn after_marker(request: &UploadsRequest, delimiter: Option<&str>, key: &str, id: &str) -> bool {
    let Some(marker) = request.key_marker.as_deref() else {
        return true;
    };
    if delimiter.is_some_and(|d| rolls_up(&request.prefix, d, marker)) && key.starts_with(marker) {
        return false;
    }
    if key != marker {
        return key > marker;
    }
    request
        .upload_id_marker
        .as_deref()
        .is_some_and(|upload_marker| id > upload_marker)
}

/// The common prefix `key` rolls up into, if it has the delimiter after the prefix.
fn common_prefix(prefix: &str, delimiter: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?;
    let at = rest.find(delimiter)?;
    Some(key[..prefix.len() + at + delimiter.len()].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPLOADS: [(&str, &str); 7] = [
        ("a", "u1"),
        ("a", "u2"),
        ("b/1", "u3"),
        ("b/2", "u4"),
        ("c", "u5"),
        ("c", "u6"),
        ("d", "u7"),
    ];

    /// `key:id` of each upload, the common prefixes, and the next page's markers.
    type Listed = (Vec<String>, Vec<String>, Option<(String, Option<String>)>);

    fn list(request: &UploadsRequest) -> Listed {
        let page = list_uploads(request, UPLOADS, |u| u.0, |u| u.1);
        (
            page.uploads
                .iter()
                .map(|u| format!("{}:{}", u.0, u.1))
                .collect(),
            page.common_prefixes,
            page.truncated.then_some(page.last).flatten(),
        )
    }

    fn request(max: usize) -> UploadsRequest {
        UploadsRequest {
            max_uploads: max,
            ..Default::default()
        }
    }

    #[test]
    fn pages_resume_within_a_keys_uploads() {
        let mut req = request(3);
        let (uploads, _, next) = list(&req);
        assert_eq!(uploads, ["a:u1", "a:u2", "b/1:u3"]);
        assert_eq!(next, Some(("b/1".into(), Some("u3".into()))));
        req.key_marker = Some("a".into());
        req.upload_id_marker = Some("u1".into());
        let (uploads, _, _) = list(&req);
        assert_eq!(uploads, ["a:u2", "b/1:u3", "b/2:u4"]);
        // A marker whose upload has gone since still places the page.
        req.upload_id_marker = Some("u1x".into());
        assert_eq!(list(&req).0, ["a:u2", "b/1:u3", "b/2:u4"]);
        req.upload_id_marker = None;
        assert_eq!(list(&req).0, ["b/1:u3", "b/2:u4", "c:u5"]);
        let all = list(&request(100));
        assert_eq!((all.0.len(), all.2), (7, None));
    }

    #[test]
    fn a_delimiter_rolls_keys_up_and_a_prefix_marker_skips_them() {
        let mut req = request(2);
        req.delimiter = Some("/".into());
        let (uploads, prefixes, next) = list(&req);
        assert_eq!(
            (uploads, prefixes),
            (vec!["a:u1".to_string(), "a:u2".into()], vec![])
        );
        req.key_marker = next.clone().map(|n| n.0);
        req.upload_id_marker = next.and_then(|n| n.1);
        let (uploads, prefixes, next) = list(&req);
        assert_eq!(
            (uploads, prefixes),
            (vec!["c:u5".to_string()], vec!["b/".to_string()])
        );
        assert_eq!(next, Some(("c".into(), Some("u5".into()))));
        req.key_marker = Some("b/".into());
        req.upload_id_marker = None;
        assert_eq!(list(&req).0, ["c:u5", "c:u6"]);
        let mut under = request(10);
        under.prefix = "b/".into();
        assert_eq!(list(&under).0, ["b/1:u3", "b/2:u4"]);
    }
}
