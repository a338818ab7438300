//! `kiln cluster status | drain NODE|--self | undrain NODE|--self`.

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
    Drain(NodeArg),
    /// Let NODE take new placements again.
    Undrain(NodeArg),
}

/// The node a drain or undrain is for: named, or the node the CLI talks to.
#[derive(Args, Debug)]
struct NodeArg {
    /// The node's id, as `kiln cluster status` lists it.
    #[arg(required_unless_present = "this_node", conflicts_with = "this_node")]
    node: Option<String>,
    /// The node at --endpoint (its own id, as it reports it): for a hook that runs beside the
    /// node, such as a Kubernetes preStop, which knows its address but not its id.
    #[arg(long = "self")]
    this_node: bool,
}

pub fn run(client: &Client, args: ClusterArgs, json_output: bool) -> anyhow::Result<i32> {
    let (target, drain) = match args.command {
        ClusterCommand::Status => return status(client, json_output),
        ClusterCommand::Drain(target) => (target, true),
        ClusterCommand::Undrain(target) => (target, false),
    };
    let node = match target.node {
        Some(node) => node,
        None => this_node(client)?,
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

/// The id of the node at the client's endpoint, from its cluster status.
fn this_node(client: &Client) -> anyhow::Result<String> {
    let (_, _, body) = client.call("GET", "/kiln/v1/cluster", b"", &[])?;
    let status: Value = serde_json::from_slice(&body)?;
    match status["nodeId"].as_str() {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => anyhow::bail!("the node at the endpoint did not say its id (is it a cluster node?)"),
    }
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: ClusterArgs,
    }

    fn parse(args: &[&str]) -> Result<NodeArg, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("cluster").chain(args.iter().copied()))?;
        match cli.args.command {
            ClusterCommand::Drain(target) | ClusterCommand::Undrain(target) => Ok(target),
            ClusterCommand::Status => panic!("not a drain"),
        }
    }

    #[test]
    fn a_drain_names_a_node_or_says_self_but_not_both() {
        let named = parse(&["drain", "n2"]).unwrap();
        assert_eq!(named.node.as_deref(), Some("n2"));
        assert!(!named.this_node);
        let this = parse(&["drain", "--self"]).unwrap();
        assert_eq!(this.node, None);
        assert!(this.this_node);
        assert!(parse(&["undrain", "--self"]).unwrap().this_node);
        assert!(parse(&["drain"]).is_err());
        assert!(parse(&["drain", "n2", "--self"]).is_err());
    }
}
