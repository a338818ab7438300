//! `kiln layer publish NAME --zip FILE | ls [NAME] | rm NAME VERSION`.

use anyhow::Context;
use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::{segment, Client};

#[derive(Args, Debug)]
pub struct LayerArgs {
    #[command(subcommand)]
    command: LayerCommand,
}

#[derive(Subcommand, Debug)]
enum LayerCommand {
    /// Publish a new version of layer NAME from a .zip file or a directory (zipped for you):
    /// its `python/`, `nodejs/node_modules/`, `bin/` and `lib/` appear under /opt.
    Publish {
        name: String,
        /// The layer's content: a .zip file, or a directory.
        #[arg(long, value_name = "FILE")]
        zip: std::path::PathBuf,
        /// The runtimes it is meant for (ListLayers filters on them).
        #[arg(long, num_args = 1.., value_name = "RUNTIME")]
        runtimes: Vec<String>,
        /// The version's description (up to 256 characters).
        #[arg(long)]
        description: Option<String>,
        /// Its license: an SPDX identifier, a URL or the license's text (`LicenseInfo`).
        #[arg(long)]
        license: Option<String>,
    },
    /// List the layers with their newest version; with NAME, that layer's versions.
    Ls { name: Option<String> },
    /// Delete one version of a layer (the functions that use it keep it).
    Rm { name: String, version: u64 },
}

pub fn run(client: &Client, args: LayerArgs, json_output: bool) -> anyhow::Result<i32> {
    match args.command {
        LayerCommand::Publish {
            name,
            zip,
            runtimes,
            description,
            license,
        } => {
            let bytes = if zip.is_dir() {
                crate::zip_util::zip_dir(&zip)
                    .with_context(|| format!("cannot zip {}", zip.display()))?
            } else {
                std::fs::read(&zip).with_context(|| format!("cannot read {}", zip.display()))?
            };
            let mut body = json!({
                "Content": { "ZipFile": base64::engine::general_purpose::STANDARD.encode(bytes) },
                "CompatibleRuntimes": runtimes,
            });
            if let Some(d) = description {
                body["Description"] = d.into();
            }
            if let Some(l) = license {
                body["LicenseInfo"] = l.into();
            }
            let (_, _, reply) = client.call(
                "POST",
                &format!("/2018-10-31/layers/{}/versions", segment(&name)),
                body.to_string().as_bytes(),
                &[],
            )?;
            let layer: Value = serde_json::from_slice(&reply)?;
            if json_output {
                println!("{}", serde_json::to_string_pretty(&layer)?);
            } else {
                println!(
                    "published {}",
                    layer["LayerVersionArn"].as_str().unwrap_or("")
                );
            }
            Ok(0)
        }
        LayerCommand::Ls { name: None } => list(client, json_output),
        LayerCommand::Ls { name: Some(name) } => versions(client, &name, json_output),
        LayerCommand::Rm { name, version } => {
            client.call(
                "DELETE",
                &format!("/2018-10-31/layers/{}/versions/{version}", segment(&name)),
                b"",
                &[],
            )?;
            if json_output {
                println!("{}", json!({ "deleted": name, "version": version }));
            } else {
                println!("deleted {name} version {version}");
            }
            Ok(0)
        }
    }
}

/// Every page of a list call: the items under `list`.
fn all_pages(client: &Client, path: &str, list: &str) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let page_path = match &marker {
            Some(m) => format!("{path}?Marker={}", segment(m)),
            None => path.to_string(),
        };
        let (_, _, body) = client.call("GET", &page_path, b"", &[])?;
        let page: Value = serde_json::from_slice(&body)?;
        items.extend(page[list].as_array().cloned().unwrap_or_default());
        match page["NextMarker"].as_str() {
            Some(m) => marker = Some(m.to_string()),
            None => return Ok(items),
        }
    }
}

fn list(client: &Client, json_output: bool) -> anyhow::Result<i32> {
    let layers = all_pages(client, "/2018-10-31/layers", "Layers")?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&layers)?);
        return Ok(0);
    }
    println!("{:<32} {:>7}  RUNTIMES", "NAME", "LATEST");
    for layer in layers {
        let latest = &layer["LatestMatchingVersion"];
        println!(
            "{:<32} {:>7}  {}",
            layer["LayerName"].as_str().unwrap_or(""),
            latest["Version"],
            runtimes(latest)
        );
    }
    Ok(0)
}

fn versions(client: &Client, name: &str, json_output: bool) -> anyhow::Result<i32> {
    let path = format!("/2018-10-31/layers/{}/versions", segment(name));
    let versions = all_pages(client, &path, "LayerVersions")?;
    if json_output {
        println!("{}", serde_json::to_string_pretty(&versions)?);
        return Ok(0);
    }
    println!("{:>7}  {:<30} RUNTIMES", "VERSION", "CREATED");
    for v in versions {
        println!(
            "{:>7}  {:<30} {}",
            v["Version"],
            v["CreatedDate"].as_str().unwrap_or(""),
            runtimes(&v)
        );
    }
    Ok(0)
}

fn runtimes(version: &Value) -> String {
    version["CompatibleRuntimes"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}
