//! ListObjects paging: prefixes, delimiters (common prefixes), start-after, continuation
//! tokens and max-keys, over any source of keys in S3's order (UTF-8 byte order).
//!
//! The walk asks its source for a batch of keys at a time and, after each common prefix, jumps
//! straight past every key under it, so a listing of `photos/` with a million keys below
//! `photos/2024/` costs one lookup for that prefix, not a million.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::Bound;

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

impl<T> Page<T> {
    /// Neither an object nor a common prefix.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty() && self.common_prefixes.is_empty()
    }
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
    let delimiter = request.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut cursor = match &request.start {
        // A token from another listing may point before this prefix.
        Cursor::From(k) | Cursor::After(k) if k.as_str() < request.prefix.as_str() => {
            Cursor::From(request.prefix.clone())
        }
        // After a common prefix (a v1 NextMarker): past every key under it, as S3 does, or a
        // client paging by NextMarker would get it back forever.
        Cursor::After(k) if delimiter.is_some_and(|d| rolls_up(&request.prefix, d, k)) => {
            match successor(k) {
                Some(next) => Cursor::From(next),
                None => return Ok(page),
            }
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
            if let Some(delimiter) = delimiter {
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

/// Whether `key` is itself a common prefix of a listing of `prefix` by `delimiter`: it ends at
/// the first delimiter after the prefix.
pub(crate) fn rolls_up(prefix: &str, delimiter: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .and_then(|rest| {
            rest.find(delimiter)
                .map(|at| at + delimiter.len() == rest.len())
        })
        .unwrap_or(false)
}

/// An item of a merged listing: an object, or a common prefix the other source rolled up.
#[derive(Clone)]
enum Merged<T> {
    Object(T),
    Prefix,
}

/// A page listed from `start` that ended after `last`: `last` was a common prefix or a key.
fn past(last: &str, prefix: bool) -> Option<Cursor> {
    if prefix {
        successor(last).map(Cursor::From)
    } else {
        Some(Cursor::After(last.to_string()))
    }
}

/// Where a listing goes on after a page whose last key and last common prefix are these
/// (None: nothing follows).
pub fn after_page(last_key: Option<&str>, last_prefix: Option<&str>) -> Option<Cursor> {
    match (last_key, last_prefix) {
        (Some(k), Some(p)) if p > k => past(p, true),
        (Some(k), _) => past(k, false),
        (None, Some(p)) => past(p, true),
        (None, None) => None,
    }
}

/// Whether `key` comes before `cursor` (a page that ended there covered it).
fn before(cursor: &Cursor, key: &str) -> bool {
    match cursor {
        Cursor::From(k) => key < k.as_str(),
        Cursor::After(k) => key <= k.as_str(),
    }
}

/// One page of a listing over two sources: a page another store listed with `request` (its
/// objects, its common prefixes, whether it was truncated), and `extra`, items held apart
/// (in any order) that take the place of the other store's item of the same key. Those past
/// what the other store's page covered wait for the next page, so paging through the merged
/// listing, each page from its predecessor's `next`, lists the union once.
pub fn merge<T: Clone>(
    request: &ListRequest,
    objects: Vec<T>,
    common_prefixes: Vec<String>,
    truncated: bool,
    extra: Vec<T>,
    key_of: impl Fn(&T) -> &str,
) -> Page<T> {
    // Where the other store's next page starts: everything before it is covered here. (A
    // truncated page with nothing on it teaches nothing: the caller asks for the next one.)
    let end = if truncated {
        after_page(
            objects.last().map(&key_of),
            common_prefixes.last().map(String::as_str),
        )
    } else {
        None
    };
    if extra.is_empty()
        && request.max_keys > 0
        && objects.len() + common_prefixes.len() <= request.max_keys
    {
        // Nothing to merge: the page as it is, but for what lies before the cursor (a common
        // prefix the other store rolled up again), without copying it.
        let objects: Vec<T> = objects
            .into_iter()
            .filter(|o| !before(&request.start, key_of(o)))
            .collect();
        let common_prefixes: Vec<String> = common_prefixes
            .into_iter()
            .filter(|p| !before(&request.start, p))
            .collect();
        let last = objects
            .last()
            .map(&key_of)
            .max(common_prefixes.last().map(String::as_str))
            .map(str::to_string);
        return Page {
            objects,
            common_prefixes,
            last,
            next: end,
        };
    }
    let mut items: BTreeMap<String, Merged<T>> = BTreeMap::new();
    for object in objects {
        items.insert(key_of(&object).to_string(), Merged::Object(object));
    }
    for prefix in common_prefixes {
        items.insert(prefix, Merged::Prefix);
    }
    for item in extra {
        let key = key_of(&item);
        if end.as_ref().is_none_or(|end| before(end, key)) {
            items.insert(key.to_string(), Merged::Object(item));
        }
    }
    let fetch = |cursor: &Cursor, below: Option<&str>, limit: usize| {
        let lower = match cursor {
            Cursor::From(k) => Bound::Included(k.clone()),
            Cursor::After(k) => Bound::Excluded(k.clone()),
        };
        Ok::<_, Infallible>(
            items
                .range::<String, _>((lower, Bound::Unbounded))
                .take_while(|(k, _)| below.is_none_or(|b| k.as_str() < b))
                .take(limit)
                .collect::<Vec<_>>(),
        )
    };
    let Ok(page) = list(request, fetch, |(k, _)| k.as_str());
    Page {
        objects: page
            .objects
            .into_iter()
            .filter_map(|(_, item)| match item {
                Merged::Object(o) => Some(o.clone()),
                // A common prefix ends with the delimiter: `list` always rolls it up.
                Merged::Prefix => None,
            })
            .collect(),
        common_prefixes: page.common_prefixes,
        last: page.last,
        next: page.next.or(end),
    }
}

/// What to ask a store that knows only `start-after` (S3's ListObjectsV2) for a listing from
/// `cursor`: the same keys, and perhaps some before them (those with a prefix of the returned
/// value and below the cursor), which [`merge`] leaves out.
pub fn start_after(cursor: &Cursor) -> Option<String> {
    match cursor {
        Cursor::After(k) => Some(k.clone()),
        Cursor::From(k) => {
            let mut chars: Vec<char> = k.chars().collect();
            let last = chars.pop()?;
            let below = match last as u32 {
                0 => None,
                0xE000 => Some('\u{D7FF}'),
                n => char::from_u32(n - 1),
            };
            chars.extend(below);
            Some(chars.into_iter().collect()).filter(|s: &String| !s.is_empty())
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
        all_pages(prefix, max_keys, |start| {
            let request = ListRequest {
                prefix: prefix.into(),
                delimiter: delimiter.map(str::to_string),
                start,
                max_keys,
            };
            list(&request, source(keys), |k| k.as_str()).unwrap()
        })
    }

    /// Every page of a listing from the top, each from its predecessor's token: the objects
    /// and common prefixes, each page at most `max_keys` of them.
    fn all_pages<T>(
        prefix: &str,
        max_keys: usize,
        mut page_at: impl FnMut(Cursor) -> Page<T>,
    ) -> (Vec<T>, Vec<String>) {
        let mut objects = Vec::new();
        let mut prefixes = Vec::new();
        let mut start = Cursor::start(prefix, None);
        for _ in 0..10_000 {
            let page = page_at(start);
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

    /// Pages through the union of `store` and `extra` as the object cache does: the store is
    /// asked from [`start_after`] of each page's cursor, and again from its own next page while
    /// a merged page comes out empty. Objects carry where they came from (`true`: extra).
    ///
    /// A `naive` store rolls up every key past `start-after`, even under a common prefix the
    /// listing is already past, as another S3 store may: its pages hold such prefixes again.
    fn merged_all(
        store: &BTreeSet<String>,
        extra: &BTreeSet<String>,
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: usize,
        naive: bool,
    ) -> (Vec<(String, bool)>, Vec<String>) {
        let request = |start: Cursor| ListRequest {
            prefix: prefix.into(),
            delimiter: delimiter.map(str::to_string),
            start,
            max_keys,
        };
        // The store's pages from `start-after`: objects, common prefixes, truncated.
        type StorePage = (Vec<String>, Vec<String>, bool);
        let store_pages = |after: Option<String>| -> Box<dyn Iterator<Item = StorePage>> {
            if naive {
                let all = naive_listing(store, prefix, delimiter, after.as_deref());
                let pages: Vec<StorePage> = all
                    .chunks(max_keys)
                    .enumerate()
                    .map(|(i, chunk)| {
                        let pick = |common: bool| {
                            chunk
                                .iter()
                                .filter(move |(_, p)| *p == common)
                                .map(|(k, _)| k.clone())
                        };
                        (
                            pick(false).collect(),
                            pick(true).collect(),
                            (i + 1) * max_keys < all.len(),
                        )
                    })
                    .collect();
                return Box::new(pages.into_iter());
            }
            let mut next = Some(Cursor::start(prefix, after.as_deref()));
            Box::new(std::iter::from_fn(move || {
                let got = list(&request(next.take()?), source(store), |k| k.as_str()).unwrap();
                next = got.next.clone();
                Some((got.objects, got.common_prefixes, got.next.is_some()))
            }))
        };
        all_pages(prefix, max_keys, |start| {
            let mut pages = store_pages(start_after(&start));
            loop {
                let (got, common, truncated) = pages.next().unwrap_or_default();
                let page = merge(
                    &request(start.clone()),
                    got.into_iter().map(|k| (k, false)).collect(),
                    common,
                    truncated,
                    extra.iter().map(|k| (k.clone(), true)).collect(),
                    |(k, _)| k.as_str(),
                );
                // As the cache does: a merged page that came out empty asks for the next one.
                if !(truncated && page.is_empty()) {
                    break page;
                }
            }
        })
    }

    /// What a store that rolls up every key past `start_after` lists, whole: keys and common
    /// prefixes (true), in order.
    fn naive_listing(
        keys: &BTreeSet<String>,
        prefix: &str,
        delimiter: Option<&str>,
        start_after: Option<&str>,
    ) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = Vec::new();
        let past = |k: &String| start_after.is_none_or(|s| k.as_str() > s);
        for key in keys.iter().filter(|k| k.starts_with(prefix) && past(k)) {
            let rest = &key[prefix.len()..];
            match delimiter.and_then(|d| rest.find(d).map(|p| p + d.len())) {
                Some(end) => {
                    let common = key[..prefix.len() + end].to_string();
                    if out.last() != Some(&(common.clone(), true)) {
                        out.push((common, true));
                    }
                }
                None => out.push((key.clone(), false)),
            }
        }
        out
    }

    #[test]
    fn a_merged_listing_pages_through_both_sources() {
        let set = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        let store = set(&["a", "b/1", "b/2", "c", "d/1", "e"]);
        let extra = set(&["b/3", "c", "c/1", "f"]);
        let (objects, prefixes) = merged_all(&store, &extra, "", Some("/"), 2, false);
        assert_eq!(
            objects,
            vec![
                ("a".to_string(), false),
                ("c".to_string(), true),
                ("e".to_string(), false),
                ("f".to_string(), true)
            ]
        );
        assert_eq!(prefixes, vec!["b/", "c/", "d/"]);
        assert_eq!(
            start_after(&Cursor::From("a0".into())).as_deref(),
            Some("a/")
        );
        assert_eq!(
            start_after(&Cursor::From("a\0".into())).as_deref(),
            Some("a")
        );
        assert_eq!(
            start_after(&Cursor::From("\u{E000}".into())).as_deref(),
            Some("\u{D7FF}")
        );
        assert_eq!(start_after(&Cursor::From("\0".into())), None);
        assert_eq!(
            start_after(&Cursor::After("k".into())).as_deref(),
            Some("k")
        );
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
        // A v1 NextMarker that is a common prefix: the next page starts past everything under it.
        let request = ListRequest {
            prefix: String::new(),
            delimiter: Some("/".into()),
            start: Cursor::start("", Some("b/")),
            max_keys: 1,
        };
        let page = list(&request, source(&keys), |k| k.as_str()).unwrap();
        assert_eq!(page.objects, vec!["c".to_string()]);
        assert!(page.common_prefixes.is_empty());
        // A marker inside one still gets it (keys past the marker are under it).
        let request = ListRequest {
            start: Cursor::start("", Some("b/1")),
            ..request
        };
        let page = list(&request, source(&keys), |k| k.as_str()).unwrap();
        assert_eq!(page.common_prefixes, vec!["b/".to_string()]);
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

        /// A listing merged from a store and items held apart, paged with any page size,
        /// returns what one pass over their union would, the items held apart winning.
        #[test]
        fn merged_paging_matches_reference(
            store in proptest::collection::btree_set("[ab/é\u{10FFFF}]{0,4}", 0..30),
            extra in proptest::collection::btree_set("[ab/é\u{10FFFF}]{0,4}", 0..8),
            prefix in "[ab/]{0,2}",
            delimiter in proptest::option::of("[/b]{1,2}"),
            max_keys in 1usize..6,
            naive in any::<bool>(),
        ) {
            let (objects, prefixes) =
                merged_all(&store, &extra, &prefix, delimiter.as_deref(), max_keys, naive);
            let union: BTreeSet<String> = store.union(&extra).cloned().collect();
            let (want_objects, want_prefixes) = reference(&union, &prefix, delimiter.as_deref());
            let want_objects: Vec<(String, bool)> = want_objects
                .into_iter()
                .map(|k| { let held = extra.contains(&k); (k, held) })
                .collect();
            prop_assert_eq!(objects, want_objects);
            prop_assert_eq!(prefixes, want_prefixes);
        }

        #[test]
        fn tokens_never_panic(token in ".{0,40}") {
            let _ = Cursor::from_token(&token);
        }
    }
}
