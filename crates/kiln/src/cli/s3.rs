//! `kiln s3 …`: the object store from the command line, through aws-sdk-s3 signed with kiln's
//! credentials.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use clap::{Args, Subcommand};
use serde_json::json;

use super::Connection;
use crate::auth::{Credentials, StoredCredentials};
use crate::objects::sdk_keys::sdk_key;

/// Files above this size are uploaded in parts.
const MULTIPART_THRESHOLD: u64 = 64 * 1024 * 1024;
const PART_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Args, Debug)]
pub struct S3Args {
    /// The object store [default: the s3-endpoint file in --data-dir, else http://127.0.0.1:9001].
    #[arg(long, global = true, env = "KILN_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    #[command(subcommand)]
    pub command: S3Command,
}

#[derive(Subcommand, Debug)]
pub enum S3Command {
    /// List buckets, or the objects and prefixes under s3://BUCKET[/PREFIX].
    Ls {
        target: Option<String>,
        /// Every key under the prefix, not one level.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Create a bucket: kiln s3 mb s3://BUCKET
    Mb { target: String },
    /// Delete an empty bucket: kiln s3 rb s3://BUCKET
    Rb { target: String },
    /// Copy local→s3, s3→local or s3→s3; `-` is stdin or stdout.
    Cp {
        source: String,
        destination: String,
        #[arg(long)]
        content_type: Option<String>,
    },
    /// Delete an object: kiln s3 rm s3://BUCKET/KEY
    Rm { target: String },
    /// Print a presigned GET URL for s3://BUCKET/KEY.
    Presign {
        target: String,
        /// Seconds the URL stays valid.
        #[arg(long, default_value_t = 3600)]
        expires_in: u64,
    },
    /// Print the key pair kiln gives FUNCTION's sandboxes: it opens the object store only.
    Credentials { function: String },
}

/// `s3://bucket/key` → (bucket, key).
fn parse_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .with_context(|| format!("`{url}` is not an s3://BUCKET[/KEY] URL"))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("`{url}` names no bucket");
    }
    Ok((bucket.to_string(), key.to_string()))
}

fn credentials(connection: &Connection) -> anyhow::Result<(Credentials, String)> {
    if let (Ok(access_key_id), Ok(secret_access_key)) = (
        std::env::var("AWS_ACCESS_KEY_ID"),
        std::env::var("AWS_SECRET_ACCESS_KEY"),
    ) {
        let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
        return Ok((
            Credentials {
                access_key_id,
                secret_access_key,
            },
            region,
        ));
    }
    let stored = StoredCredentials::load(&connection.data_dir).with_context(|| {
        format!(
            "no credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or point --data-dir at the kiln server's data dir (tried {})",
            StoredCredentials::path(&connection.data_dir).display()
        )
    })?;
    Ok((stored.credentials(), stored.region))
}

fn endpoint(connection: &Connection, flag: Option<String>) -> String {
    flag.or_else(|| {
        std::fs::read_to_string(connection.data_dir.join("s3-endpoint"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .unwrap_or_else(|| "http://127.0.0.1:9001".into())
}

/// An SDK error as `Code: message`, or why the store could not be reached.
fn failure<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    what: &str,
    e: SdkError<E, R>,
) -> anyhow::Error {
    match e.code() {
        Some(code) => anyhow::anyhow!("{what}: {code}: {}", e.message().unwrap_or_default()),
        None => anyhow::anyhow!(
            "{what}: cannot reach the object store: {}",
            aws_sdk_s3::error::DisplayErrorContext(&e)
        ),
    }
}

pub fn run(connection: Connection, args: S3Args) -> anyhow::Result<i32> {
    let (creds, region) = credentials(&connection)?;
    if let S3Command::Credentials { function } = &args.command {
        let function_creds = crate::objects::function_credentials(&creds, function);
        if connection.json {
            println!(
                "{}",
                json!({
                    "function": function,
                    "accessKeyId": function_creds.access_key_id,
                    "secretAccessKey": function_creds.secret_access_key,
                    "region": region,
                })
            );
        } else {
            println!("aws_access_key_id     = {}", function_creds.access_key_id);
            println!(
                "aws_secret_access_key = {}",
                function_creds.secret_access_key
            );
        }
        return Ok(0);
    }
    let endpoint = endpoint(&connection, args.s3_endpoint);
    let client = crate::objects::sdk_keys::client(&endpoint, &creds, &region);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(command(&client, args.command, connection.json))
}

async fn command(client: &Client, command: S3Command, json_output: bool) -> anyhow::Result<i32> {
    match command {
        S3Command::Ls { target, recursive } => ls(client, target, recursive, json_output).await,
        S3Command::Mb { target } => {
            let (bucket, _) = parse_url(&target)?;
            // Making a bucket you own already leaves it as it is: the bucket is there, as asked.
            // (Asked first: in us-east-1 S3 answers a second CreateBucket with 200 and resets
            // the bucket's ACL.)
            let mut owned = client.head_bucket().bucket(&bucket).send().await.is_ok();
            if !owned {
                let created = client.create_bucket().bucket(&bucket).send().await;
                owned = matches!(
                    &created,
                    Err(e) if e.code() == Some("BucketAlreadyOwnedByYou")
                );
                if !owned {
                    created.map_err(|e| failure("make_bucket", e))?;
                }
            }
            report(
                json_output,
                if owned {
                    json!({ "bucket": bucket, "alreadyOwned": true })
                } else {
                    json!({ "created": bucket })
                },
                if owned {
                    format!("make_bucket: {bucket} (you own it already)")
                } else {
                    format!("make_bucket: {bucket}")
                },
            );
            Ok(0)
        }
        S3Command::Rb { target } => {
            let (bucket, _) = parse_url(&target)?;
            client
                .delete_bucket()
                .bucket(&bucket)
                .send()
                .await
                .map_err(|e| failure("remove_bucket", e))?;
            report(
                json_output,
                json!({ "deleted": bucket }),
                format!("remove_bucket: {bucket}"),
            );
            Ok(0)
        }
        S3Command::Rm { target } => {
            let (bucket, key) = parse_url(&target)?;
            if key.is_empty() {
                bail!("`{target}` names no key (use `kiln s3 rb` for buckets)");
            }
            client
                .delete_object()
                .bucket(&bucket)
                .key(sdk_key(&key))
                .send()
                .await
                .map_err(|e| failure("delete", e))?;
            report(
                json_output,
                json!({ "deleted": target }),
                format!("delete: {target}"),
            );
            Ok(0)
        }
        S3Command::Presign { target, expires_in } => {
            let (bucket, key) = parse_url(&target)?;
            let presigning = aws_sdk_s3::presigning::PresigningConfig::expires_in(
                Duration::from_secs(expires_in),
            )?;
            let request = client
                .get_object()
                .bucket(bucket)
                .key(sdk_key(&key))
                .presigned(presigning)
                .await
                .map_err(|e| failure("presign", e))?;
            report(
                json_output,
                json!({ "url": request.uri() }),
                request.uri().to_string(),
            );
            Ok(0)
        }
        S3Command::Cp {
            source,
            destination,
            content_type,
        } => cp(client, &source, &destination, content_type, json_output).await,
        S3Command::Credentials { .. } => unreachable!("handled before connecting"),
    }
}

fn report(json_output: bool, value: serde_json::Value, text: String) {
    if json_output {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

async fn ls(
    client: &Client,
    target: Option<String>,
    recursive: bool,
    json_output: bool,
) -> anyhow::Result<i32> {
    let Some(target) = target else {
        let out = client
            .list_buckets()
            .send()
            .await
            .map_err(|e| failure("ls", e))?;
        let buckets: Vec<_> = out
            .buckets()
            .iter()
            .map(|b| {
                json!({
                    "name": b.name(),
                    "created": b.creation_date().map(|d| d.to_string()),
                })
            })
            .collect();
        if json_output {
            println!("{}", json!({ "buckets": buckets }));
        } else {
            for b in out.buckets() {
                let created = column_time(b.creation_date());
                println!("{created:19}  {}", b.name().unwrap_or_default());
            }
        }
        return Ok(0);
    };
    let (bucket, prefix) = parse_url(&target)?;
    let mut pages = client
        .list_objects_v2()
        .bucket(&bucket)
        .prefix(&prefix)
        .set_delimiter((!recursive).then(|| "/".to_string()))
        .into_paginator()
        .send();
    let mut objects = Vec::new();
    let mut rows = Vec::new();
    let mut prefixes = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| failure("ls", e))?;
        for p in page.common_prefixes() {
            prefixes.push(p.prefix().unwrap_or_default().to_string());
        }
        for o in page.contents() {
            objects.push(json!({
                "key": o.key(),
                "size": o.size(),
                "etag": o.e_tag(),
                "lastModified": o.last_modified().map(|d| d.to_string()),
            }));
            rows.push((
                column_time(o.last_modified()),
                o.size().unwrap_or_default(),
                o.key().unwrap_or_default().to_string(),
            ));
        }
    }
    if json_output {
        println!("{}", json!({ "prefixes": prefixes, "objects": objects }));
    } else {
        for p in &prefixes {
            println!("{:19}  {:>12}  {p}", "", "PRE");
        }
        for (time, size, key) in &rows {
            println!("{time:19}  {size:>12}  {key}");
        }
    }
    Ok(0)
}

/// A listing's time column: always 19 characters wide (`YYYY-MM-DD HH:MM:SS`, UTC), as the AWS
/// CLI's `s3 ls` shows it, so the columns after it line up whatever the store's precision.
fn column_time(time: Option<&aws_sdk_s3::primitives::DateTime>) -> String {
    time.and_then(|t| chrono::DateTime::from_timestamp(t.secs(), 0))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

fn file_name(path: &str) -> anyhow::Result<String> {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .with_context(|| format!("cannot name an object after `{path}`"))
}

async fn cp(
    client: &Client,
    source: &str,
    destination: &str,
    content_type: Option<String>,
    json_output: bool,
) -> anyhow::Result<i32> {
    match (
        source.starts_with("s3://"),
        destination.starts_with("s3://"),
    ) {
        (false, true) => {
            let (bucket, mut key) = parse_url(destination)?;
            if key.is_empty() || key.ends_with('/') {
                key.push_str(&file_name(source)?);
            }
            let size = upload(client, source, &bucket, &key, content_type).await?;
            report(
                json_output,
                json!({ "uploaded": source, "to": format!("s3://{bucket}/{key}"), "size": size }),
                format!("upload: {source} to s3://{bucket}/{key}"),
            );
        }
        (true, false) => {
            let (bucket, key) = parse_url(source)?;
            if key.is_empty() {
                bail!("`{source}` names no key");
            }
            let mut target = PathBuf::from(destination);
            if destination != "-" && (target.is_dir() || destination.ends_with('/')) {
                target.push(file_name(&key)?);
            }
            let size = download(client, &bucket, &key, &target).await?;
            if destination != "-" {
                report(
                    json_output,
                    json!({ "downloaded": source, "to": target, "size": size }),
                    format!("download: {source} to {}", target.display()),
                );
            }
        }
        (true, true) => {
            let (from_bucket, from_key) = parse_url(source)?;
            let (bucket, mut key) = parse_url(destination)?;
            if key.is_empty() || key.ends_with('/') {
                key.push_str(&file_name(&from_key)?);
            }
            let copy_source = format!(
                "{from_bucket}/{}",
                percent_encoding::utf8_percent_encode(
                    &from_key,
                    percent_encoding::NON_ALPHANUMERIC
                )
            );
            client
                .copy_object()
                .bucket(&bucket)
                .key(sdk_key(&key))
                .copy_source(copy_source)
                .send()
                .await
                .map_err(|e| failure("copy", e))?;
            report(
                json_output,
                json!({ "copied": source, "to": format!("s3://{bucket}/{key}") }),
                format!("copy: {source} to s3://{bucket}/{key}"),
            );
        }
        (false, false) => bail!("one of SOURCE and DESTINATION must be an s3:// URL"),
    }
    Ok(0)
}

async fn upload(
    client: &Client,
    source: &str,
    bucket: &str,
    key: &str,
    content_type: Option<String>,
) -> anyhow::Result<u64> {
    if source == "-" {
        let mut data = Vec::new();
        std::io::stdin().read_to_end(&mut data)?;
        let size = data.len() as u64;
        client
            .put_object()
            .bucket(bucket)
            .key(sdk_key(key))
            .set_content_type(content_type)
            .body(ByteStream::from(data))
            .send()
            .await
            .map_err(|e| failure("upload", e))?;
        return Ok(size);
    }
    let size = std::fs::metadata(source)
        .with_context(|| format!("cannot read {source}"))?
        .len();
    if size <= MULTIPART_THRESHOLD {
        let body = ByteStream::from_path(source)
            .await
            .with_context(|| format!("cannot read {source}"))?;
        client
            .put_object()
            .bucket(bucket)
            .key(sdk_key(key))
            .set_content_type(content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| failure("upload", e))?;
        return Ok(size);
    }
    let upload = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(sdk_key(key))
        .set_content_type(content_type)
        .send()
        .await
        .map_err(|e| failure("upload", e))?;
    let upload_id = upload.upload_id().unwrap_or_default().to_string();
    let result = async {
        let mut parts = Vec::new();
        let mut offset = 0;
        while offset < size {
            let length = PART_BYTES.min(size - offset);
            let number = parts.len() as i32 + 1;
            let body = ByteStream::read_from()
                .path(source)
                .offset(offset)
                .length(Length::Exact(length))
                .build()
                .await
                .with_context(|| format!("cannot read {source}"))?;
            let part = client
                .upload_part()
                .bucket(bucket)
                .key(sdk_key(key))
                .upload_id(&upload_id)
                .part_number(number)
                .body(body)
                .send()
                .await
                .map_err(|e| failure("upload", e))?;
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(part.e_tag().map(str::to_string))
                    .set_checksum_crc32(part.checksum_crc32().map(str::to_string))
                    .build(),
            );
            offset += length;
        }
        client
            .complete_multipart_upload()
            .bucket(bucket)
            .key(sdk_key(key))
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| failure("upload", e))?;
        anyhow::Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = client
            .abort_multipart_upload()
            .bucket(bucket)
            .key(sdk_key(key))
            .upload_id(&upload_id)
            .send()
            .await;
    }
    result
}

/// Streams an object to a file (written to a temporary name, then renamed) or to stdout.
async fn download(client: &Client, bucket: &str, key: &str, target: &Path) -> anyhow::Result<u64> {
    let out = client
        .get_object()
        .bucket(bucket)
        .key(sdk_key(key))
        .send()
        .await
        .map_err(|e| failure("download", e))?;
    let mut body = out.body;
    let mut size = 0u64;
    if target == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        while let Some(chunk) = body.try_next().await? {
            stdout.write_all(&chunk)?;
            size += chunk.len() as u64;
        }
        stdout.flush()?;
        return Ok(size);
    }
    let tmp = target.with_file_name(format!(
        ".{}.kiln-download",
        target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("object")
    ));
    let written = async {
        let mut file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        while let Some(chunk) = body.try_next().await? {
            file.write_all(&chunk)?;
            size += chunk.len() as u64;
        }
        file.sync_all()?;
        std::fs::rename(&tmp, target)
            .with_context(|| format!("cannot write {}", target.display()))?;
        anyhow::Ok(size)
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_split_into_bucket_and_key() {
        assert_eq!(
            parse_url("s3://b/a/b.txt").unwrap(),
            ("b".into(), "a/b.txt".into())
        );
        assert_eq!(parse_url("s3://b").unwrap(), ("b".into(), String::new()));
        assert!(parse_url("s3:///k").is_err());
        assert!(parse_url("/tmp/x").is_err());
    }
}
