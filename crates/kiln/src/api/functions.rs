//! Function resources: Create, Get, GetConfiguration, List, UpdateCode, UpdateConfiguration,
//! Delete and the concurrency calls; PublishVersion and ListVersionsByFunction.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use super::pages::{max_items, page, start_after_key, start_after_name};
use super::{
    base_url, parse_json, parse_json_or_default, qualified, ApiError, SharedState, Signed,
};
use crate::controller::code::StoredCode;
use crate::controller::{ConfigPatch, Controller, Lifecycle, Qualified};
use crate::function::settings::SettingsInput;
use crate::function::{
    BreakoutConfig, Function, FunctionConfig, LambdaSettings, MemorySizing, NetworkMode, Prebake,
    WebConfig,
};
use crate::session::SessionConfig;

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct EnvironmentInput {
    #[serde(default)]
    variables: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StorageInput {
    size: u32,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct CodeInput {
    zip_file: Option<String>,
    s3_bucket: Option<String>,
    image_uri: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CreateInput {
    function_name: String,
    runtime: Option<String>,
    role: Option<String>,
    handler: Option<String>,
    #[serde(default)]
    code: CodeInput,
    description: Option<String>,
    timeout: Option<u32>,
    memory_size: Option<u32>,
    environment: Option<EnvironmentInput>,
    ephemeral_storage: Option<StorageInput>,
    package_type: Option<String>,
    architectures: Option<Vec<String>>,
    /// kiln's extension: `isolated` (default) or `host`.
    kiln_network: Option<NetworkMode>,
    /// kiln's extension: when to build the function's snapshot, and how to warm it up.
    kiln_prebake: Option<Prebake>,
    /// kiln's extension: where a request's session id comes from, and session placement.
    kiln_sessions: Option<SessionConfig>,
    /// kiln's extension: `predicted` (default) or `booked` memory limits.
    kiln_memory_sizing: Option<MemorySizing>,
    /// kiln's extension: the function is an unmodified web app (its Handler is not used).
    kiln_web: Option<WebConfig>,
    /// kiln's extension: the trace-compiled fast path for a Node function.
    kiln_breakout: Option<BreakoutConfig>,
    /// `kiln:` tags set kiln's extension settings too.
    #[serde(default)]
    tags: BTreeMap<String, String>,
    /// Publish version 1 as well.
    #[serde(default)]
    publish: bool,
    /// Layer version ARNs, extracted to `/opt` in order.
    #[serde(default)]
    layers: Vec<String>,
    #[serde(flatten)]
    settings: SettingsInput,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateConfigInput {
    runtime: Option<String>,
    role: Option<String>,
    handler: Option<String>,
    description: Option<String>,
    timeout: Option<u32>,
    memory_size: Option<u32>,
    environment: Option<EnvironmentInput>,
    ephemeral_storage: Option<StorageInput>,
    kiln_network: Option<NetworkMode>,
    kiln_prebake: Option<Prebake>,
    /// `null` turns sessions off.
    #[serde(default, deserialize_with = "present")]
    kiln_sessions: Option<Option<SessionConfig>>,
    kiln_memory_sizing: Option<MemorySizing>,
    /// `null` makes the function a plain one again.
    #[serde(default, deserialize_with = "present")]
    kiln_web: Option<Option<WebConfig>>,
    /// `null` turns the fast path off.
    #[serde(default, deserialize_with = "present")]
    kiln_breakout: Option<Option<BreakoutConfig>>,
    revision_id: Option<String>,
    /// Layer version ARNs; an empty list takes every layer away.
    layers: Option<Vec<String>>,
    #[serde(flatten)]
    settings: SettingsInput,
}

/// A field that is present, even as `null` (`Some(None)`), as opposed to absent (`None`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateCodeInput {
    zip_file: Option<String>,
    s3_bucket: Option<String>,
    image_uri: Option<String>,
    #[serde(default)]
    dry_run: bool,
    revision_id: Option<String>,
    architectures: Option<Vec<String>>,
    /// Publish a version of the new code as well.
    #[serde(default)]
    publish: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "PascalCase")]
struct PublishInput {
    code_sha256: Option<String>,
    description: Option<String>,
    revision_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ConcurrencyInput {
    reserved_concurrent_executions: i64,
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(rename = "Marker")]
    marker: Option<String>,
    #[serde(rename = "MaxItems")]
    max_items: Option<String>,
}

pub(super) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "InvalidParameterValueException",
        message,
    )
}

fn decode_zip(
    zip_file: Option<String>,
    s3_bucket: Option<String>,
    image_uri: Option<String>,
) -> Result<Vec<u8>, ApiError> {
    if s3_bucket.is_some() || image_uri.is_some() {
        return Err(invalid(
            "kiln accepts deployment packages as Code.ZipFile only",
        ));
    }
    let zip = zip_file.ok_or_else(|| invalid("Please provide a source for function code."))?;
    base64::engine::general_purpose::STANDARD
        .decode(zip.as_bytes())
        .map_err(|_| {
            invalid(
                "Could not unzip uploaded file. Please check your file, then try to upload again.",
            )
        })
}

/// This host's architecture, as Lambda names it.
fn host_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        other => other,
    }
}

/// `Architectures`: one of Lambda's, and the one this host runs (kiln does not emulate).
fn check_architectures(requested: Option<&[String]>) -> Result<(), ApiError> {
    let Some(requested) = requested else {
        return Ok(());
    };
    let listed = format!("[{}]", requested.join(", "));
    let validation = |constraint: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            format!("1 validation error detected: Value '{listed}' at 'architectures' failed to satisfy constraint: {constraint}"),
        )
    };
    match requested {
        [] => Err(validation(
            "Member must have length greater than or equal to 1",
        )),
        [one] if one == "x86_64" || one == "arm64" => {
            if one == host_architecture() {
                Ok(())
            } else {
                Err(invalid(format!(
                    "kiln runs functions on its host's architecture, {}; {one} is not available here",
                    host_architecture()
                )))
            }
        }
        [_] => Err(validation(
            "Member must satisfy constraint: [Member must satisfy enum value set: [x86_64, arm64]]",
        )),
        _ => Err(validation(
            "Member must have length less than or equal to 1",
        )),
    }
}

/// Lambda's FunctionConfiguration shape.
pub fn configuration(controller: &Controller, f: &Function) -> Value {
    let mut config = json!({
        "FunctionName": f.name,
        "FunctionArn": controller.arn(&f.name),
        "Runtime": f.config.runtime,
        "Role": f.config.role,
        "Handler": f.config.handler,
        "CodeSize": f.code_size,
        "Description": f.config.description,
        "Timeout": f.config.timeout_s,
        "MemorySize": f.config.memory_mb,
        "LastModified": f.last_modified.format("%Y-%m-%dT%H:%M:%S%.3f%z").to_string(),
        "CodeSha256": StoredCode::sha256_base64(&f.code_sha256),
        "Version": "$LATEST",
        "RevisionId": crate::controller::revision_id(f),
        "PackageType": "Zip",
        "Architectures": [host_architecture()],
        "EphemeralStorage": { "Size": f.config.ephemeral_storage_mb },
        "SnapStart": { "ApplyOn": "None", "OptimizationStatus": "Off" },
        "KilnNetwork": f.config.network,
        "KilnPrebake": f.config.prebake.answered(f.config.network),
        "KilnMemorySizing": f.config.memory_sizing,
    });
    match controller.lifecycle(f) {
        Lifecycle::Creating => {
            config["State"] = json!("Pending");
            config["StateReason"] = json!("The function is being created.");
            config["StateReasonCode"] = json!("Creating");
        }
        Lifecycle::Updating => {
            config["State"] = json!("Active");
            config["LastUpdateStatus"] = json!("InProgress");
            config["LastUpdateStatusReason"] = json!("The function is being created.");
            config["LastUpdateStatusReasonCode"] = json!("Creating");
        }
        Lifecycle::Ready => {
            config["State"] = json!("Active");
            config["LastUpdateStatus"] = json!("Successful");
        }
        // A create that failed is a failed update too, as Lambda reports it.
        Lifecycle::Failed(failure) => {
            config["State"] = json!("Failed");
            config["StateReason"] = json!(failure.reason);
            config["StateReasonCode"] = json!(failure.code);
            config["LastUpdateStatus"] = json!("Failed");
            config["LastUpdateStatusReason"] = json!(failure.reason);
            config["LastUpdateStatusReasonCode"] = json!(failure.code);
        }
        Lifecycle::UpdateFailed(failure) => {
            config["State"] = json!("Active");
            config["LastUpdateStatus"] = json!("Failed");
            config["LastUpdateStatusReason"] = json!(failure.reason);
            config["LastUpdateStatusReasonCode"] = json!(failure.code);
        }
    }
    if let Some(sessions) = &f.config.sessions {
        config["KilnSessions"] = json!(sessions);
    }
    if let Some(web) = &f.config.web {
        config["KilnWeb"] = json!(web);
    }
    if let Some(breakout) = &f.config.breakout {
        config["KilnBreakout"] = json!(breakout);
    }
    if let Some(status) = controller.breakout_status(f) {
        config["KilnBreakoutStatus"] = json!(status);
    }
    if !f.config.layers.is_empty() {
        config["Layers"] = f
            .config
            .layers
            .iter()
            .map(|l| json!({ "Arn": l.arn, "CodeSize": l.code_size }))
            .collect();
    }
    if !f.config.env.is_empty() || f.config.settings.environment_set {
        config["Environment"] = json!({ "Variables": f.config.env });
    }
    lambda_settings(
        &mut config,
        &f.config.settings,
        &f.name,
        &f.config.runtime,
        &controller.config().region,
    );
    config
}

/// Lambda's FunctionConfiguration shape for `$LATEST`, a version, or the version an alias
/// names, under the ARN the caller qualified.
pub fn qualified_configuration(controller: &Controller, q: &Qualified) -> Value {
    let mut config = configuration(controller, &q.function);
    config["FunctionArn"] = q.arn.clone().into();
    if q.version == crate::function::versions::LATEST {
        return config;
    }
    config["Version"] = q.version.clone().into();
    config["RevisionId"] = q.revision_id.clone().into();
    // A version is never updated: it is Pending until its start paths are built, then Active.
    if let Some(fields) = config.as_object_mut() {
        for key in [
            "StateReason",
            "StateReasonCode",
            "LastUpdateStatusReason",
            "LastUpdateStatusReasonCode",
        ] {
            fields.remove(key);
        }
    }
    match &q.lifecycle {
        Lifecycle::Creating => {
            config["State"] = json!("Pending");
            config["StateReason"] = json!("The function is being created.");
            config["StateReasonCode"] = json!("Creating");
        }
        Lifecycle::Failed(failure) | Lifecycle::UpdateFailed(failure) => {
            config["State"] = json!("Failed");
            config["StateReason"] = json!(failure.reason);
            config["StateReasonCode"] = json!(failure.code);
        }
        Lifecycle::Updating | Lifecycle::Ready => config["State"] = json!("Active"),
    }
    config["LastUpdateStatus"] = json!("Successful");
    config
}

/// The settings kiln keeps but does not act on, in Lambda's shapes, with Lambda's defaults for
/// those never set.
fn lambda_settings(
    config: &mut Value,
    settings: &LambdaSettings,
    name: &str,
    runtime: &str,
    region: &str,
) {
    config["TracingConfig"] = match &settings.tracing {
        Some(tracing) => json!(tracing),
        None => json!({ "Mode": "PassThrough" }),
    };
    let logging = settings.logging.clone().unwrap_or_default();
    let mut logging_out = json!({
        "LogFormat": settings.log_format(),
        "LogGroup": logging.log_group.unwrap_or_else(|| format!("/aws/lambda/{name}")),
    });
    // Lambda reports log levels only for the JSON format, which they filter.
    if settings.log_format() == "JSON" {
        logging_out["ApplicationLogLevel"] = logging
            .application_log_level
            .unwrap_or_else(|| "INFO".into())
            .into();
        logging_out["SystemLogLevel"] = logging
            .system_log_level
            .unwrap_or_else(|| "INFO".into())
            .into();
    }
    config["LoggingConfig"] = logging_out;
    if let Some(vpc) = &settings.vpc {
        // kiln has no VPCs: there is no VPC id to derive from the subnets.
        config["VpcConfig"] = json!({
            "SubnetIds": vpc.subnet_ids,
            "SecurityGroupIds": vpc.security_group_ids,
            "VpcId": "",
            "Ipv6AllowedForDualStack": vpc.ipv6_allowed_for_dual_stack,
        });
    }
    if let Some(target) = &settings.dead_letter_target {
        config["DeadLetterConfig"] = json!({ "TargetArn": target });
    }
    if let Some(key) = &settings.kms_key_arn {
        config["KMSKeyArn"] = key.as_str().into();
    }
    // A stable name for the runtime kiln runs (Lambda names a runtime version by a digest).
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(runtime.as_bytes()));
    config["RuntimeVersionConfig"] = json!({
        "RuntimeVersionArn": format!("arn:aws:lambda:{region}::runtime:{digest}"),
    });
}

pub async fn create(
    State(state): State<SharedState>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: CreateInput = parse_json(&body)?;
    check_architectures(input.architectures.as_deref())?;
    if input.package_type.as_deref().is_some_and(|p| p != "Zip") {
        return Err(invalid("kiln supports PackageType Zip only"));
    }
    // A web function's Handler is not used, so it may be left out.
    let handler = input.handler.or_else(|| {
        input
            .kiln_web
            .as_ref()
            .map(|_| crate::function::web::UNUSED_HANDLER.to_string())
    });
    let (Some(runtime), Some(handler)) = (input.runtime, handler) else {
        return Err(invalid("Runtime and Handler are mandatory parameters for functions created with deployment packages."));
    };
    let zip = decode_zip(
        input.code.zip_file,
        input.code.s3_bucket,
        input.code.image_uri,
    )?;
    let mut config = FunctionConfig {
        runtime,
        handler,
        memory_mb: input.memory_size.unwrap_or(128),
        timeout_s: input.timeout.unwrap_or(3),
        env: input
            .environment
            .as_ref()
            .map(|e| e.variables.clone())
            .unwrap_or_default(),
        description: input.description.unwrap_or_default(),
        network: input.kiln_network.unwrap_or_default(),
        ephemeral_storage_mb: input.ephemeral_storage.map(|s| s.size).unwrap_or(512),
        role: String::new(),
        prebake: input.kiln_prebake.unwrap_or_default(),
        sessions: input.kiln_sessions,
        memory_sizing: input.kiln_memory_sizing.unwrap_or_default(),
        web: input.kiln_web,
        breakout: input.kiln_breakout,
        settings: LambdaSettings {
            environment_set: input.environment.is_some(),
            ..LambdaSettings::default()
        },
        event_invoke: None,
        layers: state.controller.resolve_layers(&input.layers, &[])?,
    };
    config.settings.apply(input.settings);
    if let Some(role) = input.role {
        config.role = role;
    } else {
        config.role = format!(
            "arn:aws:iam::{}:role/kiln-function",
            state.controller.config().account_id
        );
    }
    let function = state
        .controller
        .create_tagged(&input.function_name, config, zip, input.tags)
        .await?;
    let mut answer = if input.publish {
        let version = state
            .controller
            .publish_version(&function.name, None, None, None)?;
        qualified_configuration(&state.controller, &version)
    } else {
        configuration(&state.controller, &function)
    };
    // Lambda's CreateFunction answers Pending, even when a small package was extracted and
    // the function made ready before the answer was written.
    if answer["State"] == "Active" {
        if let Some(fields) = answer.as_object_mut() {
            fields.remove("LastUpdateStatus");
        }
        answer["State"] = json!("Pending");
        answer["StateReason"] = json!("The function is being created.");
        answer["StateReasonCode"] = json!("Creating");
    }
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

pub async fn get(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let target = state.controller.get_qualified(&qualified(&name, &uri))?;
    let function = &target.function;
    let query = super::kiln::code_query(&state.credentials, &function.code_sha256);
    let mut out = json!({
        "Configuration": qualified_configuration(&state.controller, &target),
        "Code": {
            "RepositoryType": "S3",
            "Location": format!("{}/kiln/v1/code/{}.zip?{query}", base_url(&headers), function.code_sha256),
        },
        "Tags": function.tags,
    });
    if let Some(n) = function.reserved_concurrency {
        out["Concurrency"] = json!({ "ReservedConcurrentExecutions": n });
    }
    Ok(Json(out).into_response())
}

pub async fn get_configuration(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    let target = state.controller.get_qualified(&qualified(&name, &uri))?;
    Ok(Json(qualified_configuration(&state.controller, &target)).into_response())
}

/// ListVersionsByFunction: `$LATEST` (under its qualified ARN, as Lambda lists it), then each
/// published version in order.
pub async fn list_versions(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let max_items = max_items(query.max_items.as_deref())?;
    let all = state.controller.list_versions(&name)?;
    // The marker names the last version of the previous page.
    let start = start_after_key(&all, query.marker.as_deref(), |v| v.version.clone());
    let out = page(
        &all,
        start,
        max_items,
        "Versions",
        |v| qualified_configuration(&state.controller, v),
        |v| v.version.clone(),
    );
    Ok(Json(out).into_response())
}

/// PublishVersion.
pub async fn publish_version(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: PublishInput = parse_json_or_default(&body)?;
    state.controller.check_settled(&name)?;
    let version = state.controller.publish_version(
        &name,
        input.code_sha256.as_deref(),
        input.description,
        input.revision_id.as_deref(),
    )?;
    Ok((
        StatusCode::CREATED,
        Json(qualified_configuration(&state.controller, &version)),
    )
        .into_response())
}

/// GetFunctionCodeSigningConfig: kiln checks no code signatures, so no function has a
/// configuration (Lambda then answers an empty object).
pub async fn get_code_signing_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    state.controller.get(&name)?;
    Ok(Json(json!({})).into_response())
}

/// GetAccountSettings: Lambda's account limits as the node has them (its instance limit for
/// concurrency; the code size limits kiln enforces), and what its functions use.
pub async fn account_settings(
    State(state): State<SharedState>,
    _: Signed,
) -> Result<Response, ApiError> {
    use crate::controller::code::{MAX_UNZIPPED_BYTES, MAX_ZIP_BYTES};
    let settings = state.controller.account_settings();
    Ok(Json(json!({
        "AccountLimit": {
            // Lambda's default quota for the account's code storage (75 GB).
            "TotalCodeSize": 80_530_636_800u64,
            "CodeSizeUnzipped": MAX_UNZIPPED_BYTES,
            "CodeSizeZipped": MAX_ZIP_BYTES,
            "ConcurrentExecutions": settings.concurrent_executions,
            "UnreservedConcurrentExecutions": settings.unreserved_concurrent_executions,
        },
        "AccountUsage": {
            "TotalCodeSize": settings.total_code_size,
            "FunctionCount": settings.function_count,
        },
    }))
    .into_response())
}

pub async fn list(
    State(state): State<SharedState>,
    Query(query): Query<ListQuery>,
    _: Signed,
) -> Result<Response, ApiError> {
    let max_items = max_items(query.max_items.as_deref())?;
    let all = state.controller.list();
    // The marker is the name of the last function of the previous page.
    let start = start_after_name(&all, query.marker.as_deref(), |f| &f.name);
    let out = page(
        &all,
        start,
        max_items,
        "Functions",
        |f| configuration(&state.controller, f),
        |f| f.name.clone(),
    );
    Ok(Json(out).into_response())
}

pub async fn delete(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    state.controller.delete(&qualified(&name, &uri))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn update_code(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: UpdateCodeInput = parse_json(&body)?;
    check_architectures(input.architectures.as_deref())?;
    let zip = decode_zip(input.zip_file, input.s3_bucket, input.image_uri)?;
    let function = if input.dry_run {
        state
            .controller
            .check_code(&name, &zip, input.revision_id.as_deref())?
    } else {
        state
            .controller
            .update_code(&name, zip, input.revision_id.as_deref())
            .await?
    };
    if input.publish && !input.dry_run {
        let version = state
            .controller
            .publish_version(&function.name, None, None, None)?;
        return Ok(Json(qualified_configuration(&state.controller, &version)).into_response());
    }
    Ok(Json(configuration(&state.controller, &function)).into_response())
}

pub async fn update_configuration(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: UpdateConfigInput = parse_json(&body)?;
    let layers = match &input.layers {
        Some(arns) => {
            let current = state.controller.get(&name)?.config.layers;
            let layers = state.controller.resolve_layers(arns, &current)?;
            state.controller.prepare_layers(&layers).await?;
            Some(layers)
        }
        None => None,
    };
    let patch = ConfigPatch {
        runtime: input.runtime,
        handler: input.handler,
        memory_mb: input.memory_size,
        timeout_s: input.timeout,
        env: input.environment.map(|e| e.variables),
        description: input.description,
        role: input.role,
        ephemeral_storage_mb: input.ephemeral_storage.map(|s| s.size),
        network: input.kiln_network,
        prebake: input.kiln_prebake,
        sessions: input.kiln_sessions,
        memory_sizing: input.kiln_memory_sizing,
        web: input.kiln_web,
        breakout: input.kiln_breakout,
        settings: input.settings,
        layers,
    };
    let function = state
        .controller
        .update_config(&name, patch, input.revision_id.as_deref())?;
    Ok(Json(configuration(&state.controller, &function)).into_response())
}

pub async fn put_concurrency(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body, .. }: Signed,
) -> Result<Response, ApiError> {
    let input: ConcurrencyInput = parse_json(&body)?;
    let n = u32::try_from(input.reserved_concurrent_executions)
        .map_err(|_| invalid("ReservedConcurrentExecutions must be a non-negative integer"))?;
    state.controller.set_concurrency(&name, Some(n))?;
    Ok(Json(json!({ "ReservedConcurrentExecutions": n })).into_response())
}

pub async fn delete_concurrency(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    _: Signed,
) -> Result<Response, ApiError> {
    state.controller.set_concurrency(&name, None)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get_concurrency(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { body: _, .. }: Signed,
) -> Result<Response, ApiError> {
    let body = match state.controller.reserved_concurrency(&name)? {
        Some(n) => json!({ "ReservedConcurrentExecutions": n }),
        None => json!({}),
    };
    Ok(Json(body).into_response())
}
