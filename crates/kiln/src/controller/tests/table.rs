//! The functions table over a registry of thousands of functions, each created through the
//! controller (its SQLite registry and code store) on a fake node.

use super::*;
use crate::controller::function_page::{page, Cursor, Query, SortKey};
use crate::history::History;

const FUNCTIONS: usize = 2000;

fn name(i: usize) -> String {
    format!("fn-{i:04}")
}

/// Every page of `query`, as a client follows the tokens.
fn pages(rows: &[function_page::Row], mut query: Query) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    loop {
        let found = page(rows, &query).unwrap();
        out.push(found.rows.iter().map(|r| r.name.clone()).collect());
        match found.next {
            Some(next) => query.after = Some(Cursor::parse(&next.token()).unwrap()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_functions_page_by_their_last_hour() {
    let node = node_with(None, false);
    for i in 0..FUNCTIONS {
        deploy(&node, &name(i)).await;
    }
    let history = History::new(16);
    history.record(100, node.controller.counts());
    // Every third function is invoked four times, `i % 4` of them ending in a function error.
    node.agent.answer_with(Box::new(|_, payload| {
        Ok(InvokeOutcome {
            function_error: payload.as_ref() == b"\"fail\"",
            ..outcome(payload.clone())
        })
    }));
    for i in (0..FUNCTIONS).step_by(3) {
        // The first half of them in one second, the rest in the next.
        if i / 3 == FUNCTIONS / 6 {
            history.record(101, node.controller.counts());
        }
        for k in 0..4 {
            let payload = if k < i % 4 { "\"fail\"" } else { "{}" };
            invoke(&node, &name(i), payload).await.unwrap();
        }
    }
    history.record(102, node.controller.counts());
    let rows = node.controller.function_rows(&history.activity(102));
    assert_eq!(rows.len(), FUNCTIONS);
    let query = |sort, descending| Query {
        search: String::new(),
        sort,
        descending,
        limit: 50,
        after: None,
    };

    let by_rate = pages(&rows, query(SortKey::ErrorRate, true));
    assert_eq!(by_rate.len(), FUNCTIONS / 50);
    let order = by_rate.concat();
    let invoked = (0..FUNCTIONS).step_by(3).count();
    let rate = |n: &str| {
        let i: usize = n[3..].parse().unwrap();
        i.is_multiple_of(3).then_some(i % 4)
    };
    // Three failures in four first, then two, one and none; never invoked last, by name.
    let rates: Vec<Option<usize>> = order.iter().map(|n| rate(n)).collect();
    let mut wanted = rates.clone();
    wanted.sort_by(|a, b| match (a, b) {
        (Some(a), Some(b)) => b.cmp(a),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
    assert_eq!(rates, wanted);
    assert!(order[invoked..].windows(2).all(|w| w[0] < w[1]));
    assert_eq!(order.first().map(String::as_str), Some("fn-0003"));

    // The most recent first: those sampled at 102, then at 101, then never.
    let recent = pages(&rows, query(SortKey::LastInvocation, true)).concat();
    let last = |n: &str| rows.iter().find(|r| r.name == n).unwrap().last_invocation;
    let seconds: Vec<Option<i64>> = recent.iter().map(|n| last(n)).collect();
    let at_102 = seconds.iter().filter(|s| **s == Some(102)).count();
    let at_101 = seconds.iter().filter(|s| **s == Some(101)).count();
    assert_eq!(at_101 + at_102, invoked);
    assert!(at_101 > 0 && at_102 > 0);
    assert!(seconds[..at_102].iter().all(|s| *s == Some(102)));
    assert!(seconds[at_102..invoked].iter().all(|s| *s == Some(101)));
    assert!(seconds[invoked..].iter().all(Option::is_none));

    // A search narrows the count and the pages.
    let mut searched = query(SortKey::Name, false);
    searched.search = "FN-19".into();
    let first = page(&rows, &searched).unwrap();
    assert_eq!(first.total, 100);
    assert_eq!(pages(&rows, searched).concat().len(), 100);
}
