//! `kiln ls --search TEXT --sort KEY [--desc] [--limit N]`: the functions table as kiln
//! searches, sorts and pages it (`/kiln/v1/functions`, what the console's table reads).

use clap::Args;
use serde_json::Value;

use super::client::segment;
use super::client::Client;

/// The most rows one request asks for (the endpoint's limit).
const PAGE: usize = 1000;

#[derive(Args, Debug)]
pub struct TableArgs {
    /// Only functions whose name contains this, whatever the case.
    #[arg(long)]
    search: Option<String>,
    /// Sort by name, runtime, memory, lastInvocation or errorRate (the last hour's).
    #[arg(long)]
    sort: Option<String>,
    /// Largest (or latest) first.
    #[arg(long)]
    desc: bool,
    /// At most this many functions.
    #[arg(long)]
    limit: Option<usize>,
}

impl TableArgs {
    /// No option given: the plain listing (ListFunctions).
    pub fn is_plain(&self) -> bool {
        self.search.is_none() && self.sort.is_none() && !self.desc && self.limit.is_none()
    }
}

pub fn run(client: &Client, args: &TableArgs, json_output: bool) -> anyhow::Result<i32> {
    let wanted = args.limit.unwrap_or(usize::MAX);
    let mut rows: Vec<Value> = Vec::new();
    let mut token: Option<String> = None;
    while rows.len() < wanted {
        let mut query = vec![
            format!("order={}", if args.desc { "desc" } else { "asc" }),
            format!("limit={}", (wanted - rows.len()).min(PAGE)),
        ];
        if let Some(search) = &args.search {
            query.push(format!("search={}", segment(search)));
        }
        if let Some(sort) = &args.sort {
            query.push(format!("sort={}", segment(sort)));
        }
        if let Some(token) = &token {
            query.push(format!("token={}", segment(token)));
        }
        let path = format!("/kiln/v1/functions?{}", query.join("&"));
        let (_, _, body) = client.call("GET", &path, b"", &[])?;
        let page: Value = serde_json::from_slice(&body)?;
        rows.extend(page["Functions"].as_array().cloned().unwrap_or_default());
        match page["NextToken"].as_str() {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    if json_output {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    println!(
        "{:<32} {:<14} {:>7}  {:<20}  {:>11}  ERROR RATE",
        "NAME", "RUNTIME", "MEMORY", "LAST INVOCATION", "INVOCATIONS"
    );
    for row in rows {
        let c = &row["Configuration"];
        let rate = row["ErrorRate"]
            .as_f64()
            .map(|r| format!("{:.1} %", 100.0 * r))
            .unwrap_or_default();
        println!(
            "{:<32} {:<14} {:>4} MB  {:<20}  {:>11}  {}",
            c["FunctionName"].as_str().unwrap_or(""),
            c["Runtime"].as_str().unwrap_or(""),
            c["MemorySize"],
            row["LastInvocation"].as_str().unwrap_or("-"),
            row["Invocations"]
                .as_u64()
                .map(|n| n.to_string())
                .unwrap_or_default(),
            rate
        );
    }
    Ok(0)
}
