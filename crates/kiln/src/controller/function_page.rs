//! The functions table's search, sorting and paging (`GET /kiln/v1/functions`): a pure
//! function over the node's rows. A page costs one pass over the rows and a sort of the page
//! alone, however many functions there are; the next page starts after the last row shown
//! (a keyset in the token), not at an offset that functions created or deleted meanwhile
//! would shift.

use std::cmp::Ordering;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Rows a page holds unless asked otherwise, and at most.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 1000;

/// What the table is sorted by; ties are broken by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SortKey {
    Name,
    Runtime,
    /// The memory booked (`MemorySize`).
    Memory,
    LastInvocation,
    /// Function errors per invocation in the last hour.
    ErrorRate,
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [
        SortKey::Name,
        SortKey::Runtime,
        SortKey::Memory,
        SortKey::LastInvocation,
        SortKey::ErrorRate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Runtime => "runtime",
            SortKey::Memory => "memory",
            SortKey::LastInvocation => "lastInvocation",
            SortKey::ErrorRate => "errorRate",
        }
    }

    pub fn parse(text: &str) -> Option<SortKey> {
        Self::ALL.into_iter().find(|k| k.name() == text)
    }
}

/// One function as the table sorts and filters it.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub runtime: String,
    pub memory_mb: u32,
    /// Unix seconds.
    pub last_invocation: Option<i64>,
    pub error_rate: Option<f64>,
}

/// A row's value for the sort key; `None` (never invoked, no rate) sorts last either way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Key {
    Number(f64),
    Text(String),
}

impl Row {
    fn key(&self, sort: SortKey) -> Option<Key> {
        match sort {
            SortKey::Name => None,
            SortKey::Runtime => Some(Key::Text(self.runtime.clone())),
            SortKey::Memory => Some(Key::Number(f64::from(self.memory_mb))),
            SortKey::LastInvocation => self.last_invocation.map(|t| Key::Number(t as f64)),
            SortKey::ErrorRate => self.error_rate.map(Key::Number),
        }
    }
}

/// What a page asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Names containing this, whatever their case.
    pub search: String,
    pub sort: SortKey,
    pub descending: bool,
    pub limit: usize,
    /// Where the previous page ended: its token, decoded.
    pub after: Option<Cursor>,
}

/// The last row of a page, and the query it was a page of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    sort: SortKey,
    descending: bool,
    search: String,
    key: Option<Key>,
    name: String,
}

/// Why a page cannot be given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PageError {
    /// the token is not one a page gave
    #[error("the token is not one a page of functions gave: start again without it")]
    BadToken,
    /// the token was given for another search or sort
    #[error("the token belongs to another search or sort: start again without it")]
    OtherQuery,
}

impl Cursor {
    /// The token a client passes back for the next page.
    pub fn token(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).expect("a cursor serializes"))
    }

    pub fn parse(token: &str) -> Result<Cursor, PageError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| PageError::BadToken)?;
        serde_json::from_slice(&bytes).map_err(|_| PageError::BadToken)
    }
}

/// A page of rows, in order, with how many rows matched and where the next page starts.
#[derive(Debug)]
pub struct Page<'a> {
    pub rows: Vec<&'a Row>,
    pub total: usize,
    pub next: Option<Cursor>,
}

/// The order of the table: by key (missing keys last, whichever the direction), then by
/// name (reversed too when the name is the key).
fn order(
    sort: SortKey,
    descending: bool,
    a: (&Option<Key>, &str),
    b: (&Option<Key>, &str),
) -> Ordering {
    let by_key = match (a.0, b.0) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => {
            let o = match (x, y) {
                (Key::Number(x), Key::Number(y)) => x.total_cmp(y),
                (Key::Text(x), Key::Text(y)) => x.cmp(y),
                (Key::Number(_), Key::Text(_)) => Ordering::Less,
                (Key::Text(_), Key::Number(_)) => Ordering::Greater,
            };
            if descending {
                o.reverse()
            } else {
                o
            }
        }
    };
    let by_name = a.1.cmp(b.1);
    by_key.then(if descending && sort == SortKey::Name {
        by_name.reverse()
    } else {
        by_name
    })
}

/// The page of `rows` that `query` asks for.
pub fn page<'a>(rows: &'a [Row], query: &Query) -> Result<Page<'a>, PageError> {
    let search = query.search.to_lowercase();
    if let Some(after) = &query.after {
        if after.sort != query.sort
            || after.descending != query.descending
            || after.search != query.search
        {
            return Err(PageError::OtherQuery);
        }
    }
    let (sort, descending) = (query.sort, query.descending);
    let mut keyed: Vec<(Option<Key>, &Row)> = Vec::new();
    let mut total = 0;
    for row in rows {
        if !search.is_empty() && !row.name.to_lowercase().contains(&search) {
            continue;
        }
        total += 1;
        let key = row.key(sort);
        let after_cursor = query.after.as_ref().is_none_or(|c| {
            order(sort, descending, (&key, &row.name), (&c.key, &c.name)) == Ordering::Greater
        });
        if after_cursor {
            keyed.push((key, row));
        }
    }
    let cmp = |a: &(Option<Key>, &Row), b: &(Option<Key>, &Row)| {
        order(sort, descending, (&a.0, &a.1.name), (&b.0, &b.1.name))
    };
    let limit = query.limit.clamp(1, MAX_LIMIT);
    let more = keyed.len() > limit;
    if more {
        // Only the page is sorted: the rest is left where the selection put it.
        keyed.select_nth_unstable_by(limit, cmp);
        keyed.truncate(limit);
    }
    keyed.sort_unstable_by(cmp);
    let next = more.then(|| {
        let (key, row) = keyed.last().expect("a full page");
        Cursor {
            sort,
            descending,
            search: query.search.clone(),
            key: key.clone(),
            name: row.name.clone(),
        }
    });
    Ok(Page {
        rows: keyed.into_iter().map(|(_, row)| row).collect(),
        total,
        next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row(name: &str, runtime: &str, memory_mb: u32, last: Option<i64>, rate: Option<f64>) -> Row {
        Row {
            name: name.into(),
            runtime: runtime.into(),
            memory_mb,
            last_invocation: last,
            error_rate: rate,
        }
    }

    fn query(sort: SortKey, descending: bool, limit: usize) -> Query {
        Query {
            search: String::new(),
            sort,
            descending,
            limit,
            after: None,
        }
    }

    /// Every page of `query`, followed by its tokens as a client would.
    fn all_pages(rows: &[Row], mut query: Query) -> Vec<Vec<String>> {
        let mut pages = Vec::new();
        loop {
            let page = page(rows, &query).unwrap();
            pages.push(page.rows.iter().map(|r| r.name.clone()).collect());
            match page.next {
                Some(next) => query.after = Some(Cursor::parse(&next.token()).unwrap()),
                None => return pages,
            }
        }
    }

    fn sample() -> Vec<Row> {
        vec![
            row("thumbs", "python3.11", 512, Some(100), Some(0.5)),
            row("api", "nodejs20.x", 128, Some(300), Some(0.0)),
            row("Resize", "python3.11", 1024, None, None),
            row("billing", "nodejs20.x", 256, Some(200), Some(0.25)),
            row("cron", "provided.al2023", 128, Some(300), None),
        ]
    }

    #[test]
    fn each_key_sorts_both_ways_with_missing_values_last() {
        let rows = sample();
        let names = |sort, descending| all_pages(&rows, query(sort, descending, 10)).concat();
        assert_eq!(
            names(SortKey::Name, false),
            ["Resize", "api", "billing", "cron", "thumbs"]
        );
        assert_eq!(
            names(SortKey::Name, true),
            ["thumbs", "cron", "billing", "api", "Resize"]
        );
        assert_eq!(
            names(SortKey::Memory, true),
            ["Resize", "thumbs", "billing", "api", "cron"]
        );
        assert_eq!(
            names(SortKey::Runtime, false),
            ["api", "billing", "cron", "Resize", "thumbs"]
        );
        assert_eq!(
            names(SortKey::LastInvocation, true),
            ["api", "cron", "billing", "thumbs", "Resize"]
        );
        assert_eq!(
            names(SortKey::ErrorRate, true),
            ["thumbs", "billing", "api", "Resize", "cron"]
        );
        assert_eq!(
            names(SortKey::ErrorRate, false),
            ["api", "billing", "thumbs", "Resize", "cron"]
        );
    }

    #[test]
    fn search_ignores_case_and_counts_the_matches() {
        let rows = sample();
        let mut q = query(SortKey::Name, false, 1);
        q.search = "I".into();
        let first = page(&rows, &q).unwrap();
        assert_eq!(first.total, 3);
        assert_eq!(all_pages(&rows, q).concat(), ["Resize", "api", "billing"]);
    }

    #[test]
    fn a_token_is_only_good_for_its_own_query() {
        let rows = sample();
        let first = page(&rows, &query(SortKey::Memory, false, 2)).unwrap();
        let cursor = Cursor::parse(&first.next.unwrap().token()).unwrap();
        let mut other = query(SortKey::Name, false, 2);
        other.after = Some(cursor.clone());
        assert_eq!(page(&rows, &other).unwrap_err(), PageError::OtherQuery);
        let mut searched = query(SortKey::Memory, false, 2);
        searched.search = "a".into();
        searched.after = Some(cursor);
        assert_eq!(page(&rows, &searched).unwrap_err(), PageError::OtherQuery);
        for bad in ["", "!!", "e30", "bm90IGpzb24"] {
            assert_eq!(
                Cursor::parse(bad).unwrap_err(),
                PageError::BadToken,
                "{bad}"
            );
        }
    }

    #[test]
    fn pages_continue_after_their_last_row_when_rows_come_and_go() {
        let mut rows: Vec<Row> = (0..10)
            .map(|i| row(&format!("f{i:02}"), "python3.11", 128, None, None))
            .collect();
        let first = page(&rows, &query(SortKey::Name, false, 4)).unwrap();
        let names: Vec<_> = first.rows.iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, ["f00", "f01", "f02", "f03"]);
        let mut next = query(SortKey::Name, false, 4);
        next.after = first.next;
        // A function before the page's end is deleted, one is created before it: the next
        // page starts where the last one ended all the same.
        rows.remove(1);
        rows.push(row("f00a", "python3.11", 128, None, None));
        let second = page(&rows, &next).unwrap();
        let names: Vec<_> = second.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["f04", "f05", "f06", "f07"]);
        assert_eq!(second.total, 10);
    }

    #[test]
    fn five_thousand_functions_page_through_in_order() {
        let rows: Vec<Row> = (0..5000)
            .map(|i| {
                row(
                    &format!("fn-{:04}", (i * 7919) % 5000),
                    ["python3.11", "nodejs20.x"][i % 2],
                    128 * (1 + (i % 8) as u32),
                    (i % 3 != 0).then_some(i as i64),
                    (i % 5 != 0).then_some((i % 11) as f64 / 10.0),
                )
            })
            .collect();
        for sort in SortKey::ALL {
            for descending in [false, true] {
                let pages = all_pages(&rows, query(sort, descending, 50));
                assert_eq!(pages.len(), 100);
                let seen = pages.concat();
                let mut expected: Vec<&Row> = rows.iter().collect();
                expected.sort_by(|a, b| {
                    order(
                        sort,
                        descending,
                        (&a.key(sort), &a.name),
                        (&b.key(sort), &b.name),
                    )
                });
                let expected: Vec<String> = expected.iter().map(|r| r.name.clone()).collect();
                assert_eq!(seen, expected, "{sort:?} descending={descending}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_token_parses_or_is_refused_without_panicking(token in ".{0,200}") {
            let _ = Cursor::parse(&token);
        }

        #[test]
        fn paging_visits_every_match_once(
            names in proptest::collection::btree_set("[a-c]{1,4}", 0..40),
            limit in 1usize..7,
            sort in 0usize..5,
            descending in any::<bool>(),
            search in "[a-c]{0,1}",
        ) {
            let rows: Vec<Row> = names
                .iter()
                .enumerate()
                .map(|(i, n)| row(n, ["x", "y"][i % 2], (i % 3) as u32, (i % 4 != 0).then_some(i as i64), None))
                .collect();
            let mut q = query(SortKey::ALL[sort], descending, limit);
            q.search = search.clone();
            let seen = all_pages(&rows, q).concat();
            let mut wanted: Vec<String> = names.iter().filter(|n| n.contains(&search)).cloned().collect();
            let mut sorted = seen.clone();
            sorted.sort();
            wanted.sort();
            prop_assert_eq!(sorted, wanted);
        }
    }
}
