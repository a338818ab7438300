//! `kiln cluster status | drain NODE | undrain NODE`.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::segment;
use super::client::Client;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// The nodes this node knows of, with their state (up, draining, leaving, fenced, gone,
    /// left), and etcd's endpoints.
    Status,
    /// Ask NODE to take no new placements (it keeps serving what it has).
    Drain { node: String },
    /// Let NODE take new placements again.
    Undrain { node: String },
}

pub fn run(client: &Client, args: ClusterArgs, json_output: bool) -> anyhow::Result<i32> {
    let (node, drain) = match args.command {
        ClusterCommand::Status => return status(client, json_output),
        ClusterCommand::Drain { node } => (node, true),
        ClusterCommand::Undrain { node } => (node, false),
    };
    let verb = if drain { "drain" } else { "undrain" };
    let (_, _, body) = client.call(
        "POST",
        &format!("/kiln/v1/cluster/nodes/{}/{verb}", segment(&node)),
        b"",
        &[],
    )?;
    if json_output {
        let value: Value = serde_json::from_slice(&body)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if drain {
        println!("node {node} takes no new placements");
    } else {
        println!("node {node} takes new placements");
    }
    Ok(0)
}

fn status(client: &Client, json_output: bool) -> anyhow::Result<i32> {
    let (_, _, body) = client.call("GET", "/kiln/v1/cluster", b"", &[])?;
    let status: Value = serde_json::from_slice(&body)?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(0);
    }
    println!(
        "this node: {}{} (lease {}, last keep-alive {} ms ago, TTL {} s)",
        status["nodeId"].as_str().unwrap_or(""),
        if status["fenced"].as_bool() == Some(true) {
            ", FENCED"
        } else {
            ""
        },
        status["lease"].as_str().unwrap_or(""),
        status["lastKeepAliveMs"],
        status["leaseTtlS"],
    );
    println!(
        "{:<16} {:<9} {:<22} {:<22} {:<17} STARTED",
        "NODE", "STATE", "API", "PEER", "LEASE"
    );
    for node in status["nodes"].as_array().cloned().unwrap_or_default() {
        println!(
            "{:<16} {:<9} {:<22} {:<22} {:<17} {}",
            format!(
                "{}{}",
                node["id"].as_str().unwrap_or(""),
                if node["thisNode"].as_bool() == Some(true) {
                    "*"
                } else {
                    ""
                }
            ),
            node["state"].as_str().unwrap_or(""),
            node["api"].as_str().unwrap_or(""),
            node["peer"].as_str().unwrap_or(""),
            node["lease"].as_str().unwrap_or(""),
            node["startedAt"].as_str().unwrap_or(""),
        );
    }
    let endpoints: Vec<String> = status["etcd"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["endpoint"].as_str().unwrap_or(""),
                if e["healthy"].as_bool() == Some(true) {
                    "healthy"
                } else {
                    "unhealthy"
                }
            )
        })
        .collect();
    println!("etcd: {}", endpoints.join(", "));
    Ok(0)
}
