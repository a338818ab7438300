//! Function URLs: their configuration (Create/Get/Update/DeleteFunctionUrlConfig) and the
//! `/fn/NAME/...` endpoint, with Lambda's payload format 2.0 and response mapping.

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    authenticate_signature, base_url, parse_json, qualifier, ApiError, SharedState, Signed,
};
use crate::controller::{Cors, InvocationType, Invoked, UrlChange, UrlConfig};
use crate::function::UrlAuth;
use crate::http_event::{event, map_response, plain};
use crate::session::HintSource;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UrlConfigInput {
    /// Required by Create; Update keeps the current one when it is absent.
    auth_type: Option<UrlAuth>,
    /// Update keeps the current settings when it is absent.
    cors: Option<Cors>,
    invoke_mode: Option<String>,
}

impl UrlConfigInput {
    fn parse(body: &Bytes) -> Result<Self, ApiError> {
        let input: Self = parse_json(body)?;
        match input.invoke_mode.as_deref() {
            None | Some("BUFFERED") => {}
            Some(other) => {
                return Err(invalid(format!(
                    "InvokeMode {other} is not supported: kiln's function URLs answer BUFFERED"
                )))
            }
        }
        if let Some(age) = input.cors.as_ref().and_then(|c| c.max_age) {
            if age > 86_400 {
                return Err(invalid(format!(
                    "Value {age} at 'cors.maxAge' failed to satisfy constraint: Member must have value less than or equal to 86400"
                )));
            }
        }
        Ok(input)
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "InvalidParameterValueException",
        message,
    )
}

/// Where function URLs are served, as this request's caller reaches kiln: only the API's
/// listener serves them, so a request on the console's listener is given the API's address.
fn url_base(state: &SharedState, headers: &HeaderMap, console: bool) -> String {
    if console {
        let host = headers.get("host").and_then(|h| h.to_str().ok());
        super::reached_at(state.api_address, host)
    } else {
        base_url(headers)
    }
}

/// Whether a request came to the console's listener.
type Origin = Option<axum::Extension<super::ConsoleOrigin>>;

fn url_config(state: &SharedState, headers: &HeaderMap, console: bool, c: &UrlConfig) -> Value {
    let auth = match c.auth {
        UrlAuth::AwsIam => "AWS_IAM",
        UrlAuth::None => "NONE",
    };
    let (path, arn) = match &c.alias {
        Some(alias) => (
            format!("{}:{alias}", c.function.name),
            state.controller.alias_arn(&c.function.name, alias),
        ),
        None => (
            c.function.name.clone(),
            state.controller.arn(&c.function.name),
        ),
    };
    let format = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let mut config = json!({
        "FunctionUrl": format!("{}/fn/{path}/", url_base(state, headers, console)),
        "FunctionArn": arn,
        "AuthType": auth,
        "CreationTime": format(c.settings.created),
        "LastModifiedTime": format(c.settings.modified),
        "InvokeMode": "BUFFERED",
    });
    if let Some(cors) = &c.settings.cors {
        config["Cors"] = json!(cors);
    }
    config
}

/// Create/Update answer with the config just written.
fn written(
    state: &SharedState,
    headers: &HeaderMap,
    console: bool,
    config: Option<UrlConfig>,
) -> Result<Value, ApiError> {
    let config = config.ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "function URL config has no settings",
        )
    })?;
    Ok(url_config(state, headers, console, &config))
}

pub async fn create_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    origin: Origin,
    Signed { uri, headers, body }: Signed,
) -> Result<Response, ApiError> {
    let input = UrlConfigInput::parse(&body)?;
    let auth = input
        .auth_type
        .ok_or_else(|| invalid("AuthType is required"))?;
    let change = UrlChange::Create {
        auth,
        cors: input.cors,
    };
    let written_config = state
        .controller
        .change_url(&name, qualifier(&uri).as_deref(), change)?;
    let config = written(&state, &headers, origin.is_some(), written_config)?;
    Ok((StatusCode::CREATED, Json(config)).into_response())
}

pub async fn update_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    origin: Origin,
    Signed { uri, headers, body }: Signed,
) -> Result<Response, ApiError> {
    let input = UrlConfigInput::parse(&body)?;
    let change = UrlChange::Update {
        auth: input.auth_type,
        cors: input.cors,
    };
    let written_config = state
        .controller
        .change_url(&name, qualifier(&uri).as_deref(), change)?;
    Ok(Json(written(&state, &headers, origin.is_some(), written_config)?).into_response())
}

pub async fn get_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    origin: Origin,
    Signed { uri, headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let config = state
        .controller
        .url_config(&name, qualifier(&uri).as_deref())?;
    Ok(Json(url_config(&state, &headers, origin.is_some(), &config)).into_response())
}

/// ListFunctionUrlConfigs: the unqualified function's URL config and its aliases'.
pub async fn list_configs(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    origin: Origin,
    Signed { headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let configs: Vec<Value> = state
        .controller
        .url_configs(&name)?
        .iter()
        .map(|c| url_config(&state, &headers, origin.is_some(), c))
        .collect();
    Ok(Json(json!({ "FunctionUrlConfigs": configs })).into_response())
}

pub async fn delete_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, .. }: Signed,
) -> Result<Response, ApiError> {
    state
        .controller
        .change_url(&name, qualifier(&uri).as_deref(), UrlChange::Delete)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn call(
    State(state): State<SharedState>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().strip_prefix("/fn/").unwrap_or_default();
    let (name, raw_path) = match path.find('/') {
        Some(i) => (&path[..i], &path[i..]),
        None => (path, "/"),
    };
    // An alias's URL is `/fn/NAME:ALIAS/`, which some clients send with the colon encoded.
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    let config = match state.controller.url_config(&name, None) {
        Ok(config) => config,
        _ => return plain(StatusCode::NOT_FOUND, "Not Found"),
    };
    let settings = &config.settings;
    let origin = headers
        .get("origin")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // Browsers send preflights unsigned, so they are answered before authentication.
    if let (Some(cors), Some(origin)) = (&settings.cors, &origin) {
        if method == Method::OPTIONS && headers.contains_key("access-control-request-method") {
            let mut response = StatusCode::OK.into_response();
            preflight_headers(cors, origin, &headers, response.headers_mut());
            return response;
        }
    }
    let mut response = respond(
        &state, &config, peer, &method, &uri, &headers, body, raw_path,
    )
    .await;
    if let (Some(cors), Some(origin)) = (&settings.cors, &origin) {
        cors_headers(cors, origin, response.headers_mut());
    }
    response
}

#[allow(clippy::too_many_arguments)]
async fn respond(
    state: &SharedState,
    config: &UrlConfig,
    peer: std::net::SocketAddr,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    raw_path: &str,
) -> Response {
    // A signature only: a console session must not open a function's URL, which is
    // the function's page, not the console's.
    if config.auth == UrlAuth::AwsIam
        && authenticate_signature(state, method, uri, headers, &body, "lambda").is_err()
    {
        return plain(StatusCode::FORBIDDEN, "Forbidden");
    }
    let name = &config.function.name;
    let event = event(
        name,
        method,
        raw_path,
        uri.query().unwrap_or(""),
        headers,
        &body,
        peer,
    );
    let payload = Bytes::from(event.to_string());
    let source = HintSource {
        headers: Some(headers),
        query: uri.query(),
        // A `json:` hint reads the request body the client posted, not the URL event around it.
        json: Some(&body),
    };
    match state
        .controller
        .invoke(
            // An alias's URL runs the alias, routed by its weights as Invoke routes it.
            &match &config.alias {
                Some(alias) => format!("{name}:{alias}"),
                None => name.clone(),
            },
            payload,
            InvocationType::RequestResponse,
            None,
            source,
        )
        .await
    {
        Ok(Invoked::Done {
            outcome,
            request_id,
            ..
        }) => {
            let mut response = if outcome.function_error {
                function_error(&outcome.body)
            } else {
                map_response(&outcome.body)
            };
            set(response.headers_mut(), "x-amzn-requestid", &request_id);
            response
        }
        Ok(_) => plain(StatusCode::BAD_GATEWAY, "Internal Server Error"),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// A function error, as Lambda's function URLs answer it (502). An answer over the 6 MB limit
/// says so: the caller (a web app's user, or a gateway deciding on a fallback) cannot see the
/// function's log.
fn function_error(body: &[u8]) -> Response {
    let error: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if error["errorType"] == "Function.ResponseSizeTooLarge" {
        let detail = error["errorMessage"].as_str().unwrap_or_default();
        return plain(
            StatusCode::BAD_GATEWAY,
            &format!("The function's response is too large for a function URL: {detail}"),
        );
    }
    plain(StatusCode::BAD_GATEWAY, "Internal Server Error")
}

/// The origin to allow, if `origin` may make requests: `*` when any origin may and no
/// credentials are involved, else the origin itself.
fn allowed_origin(cors: &Cors, origin: &str) -> Option<String> {
    let origins = cors.allow_origins.as_deref().unwrap_or_default();
    let any = origins.iter().any(|o| o == "*");
    if any && cors.allow_credentials != Some(true) {
        return Some("*".into());
    }
    (any || origins.iter().any(|o| o.eq_ignore_ascii_case(origin))).then(|| origin.to_string())
}

fn set(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

/// The answer to a CORS preflight, which Lambda gives without invoking the function.
fn preflight_headers(cors: &Cors, origin: &str, request: &HeaderMap, out: &mut HeaderMap) {
    let Some(allowed) = allowed_origin(cors, origin) else {
        return;
    };
    set(out, "access-control-allow-origin", &allowed);
    if allowed != "*" {
        set(out, "vary", "Origin");
    }
    let methods = cors.allow_methods.as_deref().unwrap_or_default();
    if !methods.is_empty() {
        let requested = request
            .get("access-control-request-method")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let value = if methods.iter().any(|m| m == "*") {
            requested.to_string()
        } else {
            methods.join(",")
        };
        set(out, "access-control-allow-methods", &value);
    }
    let allow_headers = cors.allow_headers.as_deref().unwrap_or_default();
    if !allow_headers.is_empty() {
        let requested = request
            .get("access-control-request-headers")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let value = if allow_headers.iter().any(|h| h == "*") {
            requested.to_string()
        } else {
            allow_headers.join(",")
        };
        set(out, "access-control-allow-headers", &value);
    }
    if cors.allow_credentials == Some(true) {
        set(out, "access-control-allow-credentials", "true");
    }
    if let Some(age) = cors.max_age {
        set(out, "access-control-max-age", &age.to_string());
    }
}

/// CORS headers of an actual response; they replace any the function set.
fn cors_headers(cors: &Cors, origin: &str, out: &mut HeaderMap) {
    for name in [
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-expose-headers",
    ] {
        out.remove(name);
    }
    let Some(allowed) = allowed_origin(cors, origin) else {
        return;
    };
    set(out, "access-control-allow-origin", &allowed);
    if allowed != "*" {
        out.append("vary", HeaderValue::from_static("Origin"));
    }
    if cors.allow_credentials == Some(true) {
        set(out, "access-control-allow-credentials", "true");
    }
    let expose = cors.expose_headers.as_deref().unwrap_or_default();
    if !expose.is_empty() {
        set(out, "access-control-expose-headers", &expose.join(","));
    }
}
