//! ListObjects paging: prefixes, delimiters (common prefixes), start-after, continuation
//! tokens and max-keys, over any source of keys in S3's order (UTF-8 byte order).
//!
//! The walk asks its source for a batch of keys at a time and, after each common prefix, jumps
//! straight past every key under it, so a listing of `photos/` with a million keys below
//! `photos/2024/` costs one lookup for that prefix, not a million.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Where a listing (or its next page) starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// Keys greater than or equal to this one.
    From(String),
    /// Keys strictly greater than this one.
    After(String),
}

impl Cursor {
    /// An opaque continuation token for this position.
    pub fn token(&self) -> String {
        let text = match self {
            Self::From(k) => format!("f:{k}"),
            Self::After(k) => format!("a:{k}"),
        };
        URL_SAFE_NO_PAD.encode(text)
    }

    pub fn from_token(token: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(token.trim()).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        match text.split_at_checked(2)? {
            ("f:", k) => Some(Self::From(k.to_string())),
            ("a:", k) => Some(Self::After(k.to_string())),
            _ => None,
        }
    }

    /// Where a listing begins: at the prefix, or after `start_after` when that is further.
    pub fn start(prefix: &str, start_after: Option<&str>) -> Self {
        match start_after {
            Some(after) if after >= prefix => Self::After(after.to_string()),
            _ => Self::From(prefix.to_string()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ListRequest {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub start: Cursor,
    pub max_keys: usize,
}

#[derive(Debug)]
pub struct Page<T> {
    pub objects: Vec<T>,
    pub common_prefixes: Vec<String>,
    /// The last key or common prefix returned (ListObjects v1's NextMarker).
    pub last: Option<String>,
    /// Where the next page starts, if the listing was truncated.
    pub next: Option<Cursor>,
}

/// Keys fetched per round trip to the source, at most.
const BATCH: usize = 1000;

/// Lists one page. `fetch(cursor, below, limit)` returns up to `limit` items whose keys are at
/// or past `cursor` and below `below` (no bound if None), in key order.
pub fn list<T, E>(
    request: &ListRequest,
    mut fetch: impl FnMut(&Cursor, Option<&str>, usize) -> Result<Vec<T>, E>,
    key_of: impl Fn(&T) -> &str,
) -> Result<Page<T>, E> {
    let below = successor(&request.prefix);
    let mut page = Page {
        objects: Vec::new(),
        common_prefixes: Vec::new(),
        last: None,
        next: None,
    };
    if request.max_keys == 0 {
        return Ok(page);
    }
    let mut cursor = match &request.start {
        // A token from another listing may point before this prefix.
        Cursor::From(k) | Cursor::After(k) if k.as_str() < request.prefix.as_str() => {
            Cursor::From(request.prefix.clone())
        }
        start => start.clone(),
    };
    let mut count = 0;
    'fetch: loop {
        // One more than fits, to learn whether the page is truncated.
        let limit = (request.max_keys - count + 1).min(BATCH);
        let batch = fetch(&cursor, below.as_deref(), limit)?;
        let exhausted = batch.len() < limit;
        for item in batch {
            let key = key_of(&item);
            if !key.starts_with(&request.prefix) {
                // Keys under a prefix are contiguous and the cursor starts in them: the rest are
                // past it (the source only returns such keys when `successor` has no bound).
                return Ok(page);
            }
            if count == request.max_keys {
                page.next = Some(cursor);
                return Ok(page);
            }
            if let Some(delimiter) = request.delimiter.as_deref().filter(|d| !d.is_empty()) {
                let rest = &key[request.prefix.len()..];
                if let Some(pos) = rest.find(delimiter) {
                    let common = key[..request.prefix.len() + pos + delimiter.len()].to_string();
                    count += 1;
                    page.last = Some(common.clone());
                    page.common_prefixes.push(common.clone());
                    match successor(&common) {
                        Some(next) => cursor = Cursor::From(next),
                        None => return Ok(page),
                    }
                    continue 'fetch;
                }
            }
            count += 1;
            page.last = Some(key.to_string());
            cursor = Cursor::After(key.to_string());
            page.objects.push(item);
        }
        if exhausted {
            return Ok(page);
        }
    }
}

/// The smallest string greater than every string that starts with `prefix` (None for "" or a
/// prefix of only U+10FFFF). UTF-8 preserves code-point order, so this bounds byte order too.
pub fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(c) = chars.pop() {
        let next = match c as u32 + 1 {
            0xD800 => Some('\u{E000}'),
            n => char::from_u32(n),
        };
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// `encoding-type=url`: botocore sets it on every listing and URL-decodes the keys it gets back,
/// so keys with `+`, `%` or control characters survive only if we encode them.
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

pub fn url_encode(value: &str) -> String {
    utf8_percent_encode(value, KEY_ENCODE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::convert::Infallible;
    use std::ops::Bound;

    fn source(
        keys: &BTreeSet<String>,
    ) -> impl FnMut(&Cursor, Option<&str>, usize) -> Result<Vec<String>, Infallible> + '_ {
        move |cursor, below, limit| {
            let lower = match cursor {
                Cursor::From(k) => Bound::Included(k.clone()),
                Cursor::After(k) => Bound::Excluded(k.clone()),
            };
            Ok(keys
                .range((lower, Bound::Unbounded))
                .take_while(|k| below.is_none_or(|b| k.as_str() < b))
                .take(limit)
                .cloned()
                .collect())
        }
    }

    /// Everything a full listing returns, the obvious way.
    fn reference(
        keys: &BTreeSet<String>,
        prefix: &str,
        delimiter: Option<&str>,
    ) -> (Vec<String>, Vec<String>) {
        let mut objects = Vec::new();
        let mut prefixes = Vec::new();
        for key in keys.iter().filter(|k| k.starts_with(prefix)) {
            let rest = &key[prefix.len()..];
            match delimiter.and_then(|d| rest.find(d).map(|p| p + d.len())) {
                Some(end) => {
                    let common = key[..prefix.len() + end].to_string();
                    if !prefixes.contains(&common) {
                        prefixes.push(common);
                    }
                }
                None => objects.push(key.clone()),
            }
        }
        (objects, prefixes)
    }

    fn list_all(
        keys: &BTreeSet<String>,
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: usize,
    ) -> (Vec<String>, Vec<String>) {
        let mut objects = Vec::new();
        let mut prefixes = Vec::new();
        let mut start = Cursor::start(prefix, None);
        for _ in 0..10_000 {
            let request = ListRequest {
                prefix: prefix.into(),
                delimiter: delimiter.map(str::to_string),
                start: start.clone(),
                max_keys,
            };
            let page = list(&request, source(keys), |k| k.as_str()).unwrap();
            assert!(page.objects.len() + page.common_prefixes.len() <= max_keys);
            objects.extend(page.objects);
            prefixes.extend(page.common_prefixes);
            match page.next {
                // Tokens survive their round trip.
                Some(next) => start = Cursor::from_token(&next.token()).unwrap(),
                None => return (objects, prefixes),
            }
        }
        panic!("listing did not terminate");
    }

    #[test]
    fn delimiter_groups_and_pages() {
        let keys: BTreeSet<String> = ["a", "b/1", "b/2", "b/c/3", "c", "d/1"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(
            list_all(&keys, "", Some("/"), 2),
            (vec!["a".into(), "c".into()], vec!["b/".into(), "d/".into()])
        );
        assert_eq!(
            list_all(&keys, "b/", Some("/"), 1),
            (vec!["b/1".into(), "b/2".into()], vec!["b/c/".into()])
        );
        let request = ListRequest {
            prefix: String::new(),
            delimiter: None,
            start: Cursor::start("", Some("b/2")),
            max_keys: 2,
        };
        let page = list(&request, source(&keys), |k| k.as_str()).unwrap();
        assert_eq!(page.objects, vec!["b/c/3".to_string(), "c".to_string()]);
        assert_eq!(page.next, Some(Cursor::After("c".into())));
    }

    #[test]
    fn successor_bounds_prefixes() {
        assert_eq!(successor(""), None);
        assert_eq!(successor("a/").as_deref(), Some("a0"));
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(url_encode("a b+c/d%é"), "a%20b%2Bc/d%25%C3%A9");
    }

    proptest! {
        /// Paging through any key set with any page size returns exactly what one pass would.
        #[test]
        fn paging_matches_reference(
            keys in proptest::collection::btree_set("[ab/é\u{10FFFF}]{0,5}", 0..40),
            prefix in "[ab/]{0,2}",
            delimiter in proptest::option::of("[/b]{1,2}"),
            max_keys in 1usize..6,
        ) {
            let got = list_all(&keys, &prefix, delimiter.as_deref(), max_keys);
            prop_assert_eq!(got, reference(&keys, &prefix, delimiter.as_deref()));
        }

        #[test]
        fn tokens_never_panic(token in ".{0,40}") {
            let _ = Cursor::from_token(&token);
        }
    }
}
