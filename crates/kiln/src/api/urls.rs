//! Function URLs: their configuration (Create/Get/Update/DeleteFunctionUrlConfig) and the
//! `/fn/NAME/...` endpoint, with Lambda's payload format 2.0 and response mapping.

use std::collections::BTreeMap;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{authenticate, base_url, parse_json, qualifier, ApiError, SharedState, Signed};
use crate::controller::{Cors, InvocationType, Invoked, UrlChange, UrlSettings};
use crate::function::{Function, UrlAuth};
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

fn url_config(
    state: &SharedState,
    headers: &HeaderMap,
    f: &Function,
    settings: &UrlSettings,
) -> Value {
    let auth = match f.url_auth {
        Some(UrlAuth::AwsIam) => "AWS_IAM",
        _ => "NONE",
    };
    let format = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let mut config = json!({
        "FunctionUrl": format!("{}/fn/{}/", base_url(headers), f.name),
        "FunctionArn": state.controller.arn(&f.name),
        "AuthType": auth,
        "CreationTime": format(settings.created),
        "LastModifiedTime": format(settings.modified),
        "InvokeMode": "BUFFERED",
    });
    if let Some(cors) = &settings.cors {
        config["Cors"] = json!(cors);
    }
    config
}

/// Create/Update answer with the config just written.
fn written(
    state: &SharedState,
    headers: &HeaderMap,
    (f, settings): (Function, Option<UrlSettings>),
) -> Result<Value, ApiError> {
    let settings = settings.ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            "function URL config has no settings",
        )
    })?;
    Ok(url_config(state, headers, &f, &settings))
}

pub async fn create_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
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
    let config = written(&state, &headers, written_config)?;
    Ok((StatusCode::CREATED, Json(config)).into_response())
}

pub async fn update_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
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
    Ok(Json(written(&state, &headers, written_config)?).into_response())
}

pub async fn get_config(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    Signed { uri, headers, .. }: Signed,
) -> Result<Response, ApiError> {
    let (f, settings) = state
        .controller
        .url_config(&name, qualifier(&uri).as_deref())?;
    Ok(Json(url_config(&state, &headers, &f, &settings)).into_response())
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

/// A plain HTTP answer for function URL callers, who are not AWS SDKs.
fn plain(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "Message": message }))).into_response()
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
    let (function, settings) = match state.controller.url_config(name, None) {
        Ok(config) => config,
        _ => return plain(StatusCode::NOT_FOUND, "Not Found"),
    };
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
        &state, &function, peer, &method, &uri, &headers, body, raw_path,
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
    function: &Function,
    peer: std::net::SocketAddr,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    raw_path: &str,
) -> Response {
    if function.url_auth == Some(UrlAuth::AwsIam)
        && authenticate(state, method, uri, headers, &body).is_err()
    {
        return plain(StatusCode::FORBIDDEN, "Forbidden");
    }
    let event = event(
        &function.name,
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
            &function.name,
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

/// Lambda's function URL request event, payload format version 2.0.
pub fn event(
    function: &str,
    method: &Method,
    raw_path: &str,
    raw_query: &str,
    headers: &HeaderMap,
    body: &[u8],
    peer: std::net::SocketAddr,
) -> Value {
    let mut header_map: BTreeMap<String, String> = BTreeMap::new();
    let mut cookies = Vec::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if name == "cookie" {
            cookies.extend(
                value
                    .split(';')
                    .map(|c| c.trim().to_string())
                    .filter(|c| !c.is_empty()),
            );
            continue;
        }
        header_map
            .entry(name.as_str().to_string())
            .and_modify(|existing| {
                existing.push(',');
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    let mut query: Map<String, Value> = Map::new();
    for (key, value) in url_pairs(raw_query) {
        match query.get_mut(&key) {
            Some(Value::String(existing)) => {
                existing.push(',');
                existing.push_str(&value);
            }
            _ => {
                query.insert(key, Value::String(value));
            }
        }
    }
    let text = std::str::from_utf8(body).ok();
    let content_type = header_map
        .get("content-type")
        .map(String::as_str)
        .unwrap_or("");
    let textual = content_type.is_empty()
        || content_type.starts_with("text/")
        || content_type.contains("json")
        || content_type.contains("xml")
        || content_type.contains("x-www-form-urlencoded")
        || content_type.contains("javascript");
    let now = chrono::Utc::now();
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": header_map,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": function,
            "domainName": headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or(""),
            "domainPrefix": function,
            "http": {
                "method": method.as_str(),
                "path": raw_path,
                "protocol": "HTTP/1.1",
                "sourceIp": peer.ip().to_string(),
                "userAgent": headers.get("user-agent").and_then(|h| h.to_str().ok()).unwrap_or(""),
            },
            "requestId": crate::function::new_request_id().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": now.format("%d/%b/%Y:%H:%M:%S %z").to_string(),
            "timeEpoch": now.timestamp_millis(),
        },
        "isBase64Encoded": false,
    });
    if !cookies.is_empty() {
        event["cookies"] = json!(cookies);
    }
    if !query.is_empty() {
        event["queryStringParameters"] = Value::Object(query);
    }
    if !body.is_empty() {
        match text {
            Some(text) if textual => event["body"] = text.into(),
            _ => {
                event["body"] = base64::engine::general_purpose::STANDARD
                    .encode(body)
                    .into();
                event["isBase64Encoded"] = true.into();
            }
        }
    }
    event
}

fn url_pairs(raw: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// Lambda's function URL response mapping: an object with `statusCode` is an HTTP response;
/// anything else is a 200 with the value as a JSON body.
pub fn map_response(body: &[u8]) -> Response {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(object) = value.as_object().filter(|o| o.contains_key("statusCode")) else {
        let body = match &value {
            Value::String(s) => s.clone(),
            _ => String::from_utf8_lossy(body).into_owned(),
        };
        return ([("content-type", "application/json")], body).into_response();
    };
    let status = object
        .get("statusCode")
        .and_then(Value::as_u64)
        .and_then(|c| StatusCode::from_u16(c as u16).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let raw_body = match object.get("body") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let body_bytes = if object
        .get("isBase64Encoded")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        match base64::engine::general_purpose::STANDARD.decode(raw_body.as_bytes()) {
            Ok(bytes) => bytes,
            Err(_) => return plain(StatusCode::BAD_GATEWAY, "Internal Server Error"),
        }
    } else {
        raw_body.into_bytes()
    };
    let mut response = (status, body_bytes).into_response();
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if let Some(Value::Object(custom)) = object.get("headers") {
        for (name, value) in custom {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::from_str(&value),
            ) {
                headers.insert(name, value);
            }
        }
    }
    if let Some(Value::Array(cookies)) = object.get("cookies") {
        for cookie in cookies.iter().filter_map(Value::as_str) {
            if let Ok(value) = HeaderValue::from_str(cookie) {
                headers.append("set-cookie", value);
            }
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn event_has_payload_format_2() {
        let mut headers = HeaderMap::new();
        headers.insert("cookie", HeaderValue::from_static("a=1; b=2"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let peer = "10.0.0.1:5555".parse().unwrap();
        let e = event(
            "f",
            &Method::POST,
            "/x/y",
            "q=1&q=2&z=%20",
            &headers,
            b"{\"k\":1}",
            peer,
        );
        assert_eq!(e["version"], "2.0");
        assert_eq!(e["rawPath"], "/x/y");
        assert_eq!(e["cookies"], json!(["a=1", "b=2"]));
        assert_eq!(e["queryStringParameters"]["q"], "1,2");
        assert_eq!(e["queryStringParameters"]["z"], " ");
        assert_eq!(e["body"], "{\"k\":1}");
        assert_eq!(e["isBase64Encoded"], false);
        assert_eq!(e["requestContext"]["http"]["sourceIp"], "10.0.0.1");
        let binary = event(
            "f",
            &Method::POST,
            "/",
            "",
            &HeaderMap::new(),
            &[0xff, 0x00],
            peer,
        );
        assert_eq!(binary["isBase64Encoded"], true);
    }

    #[test]
    fn responses_map_like_lambda() {
        let r = map_response(
            br#"{"statusCode":201,"headers":{"x-a":"b"},"body":"hi","cookies":["c=1","d=2"]}"#,
        );
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(r.headers()["x-a"], "b");
        assert_eq!(r.headers().get_all("set-cookie").iter().count(), 2);
        let r = map_response(br#"{"hello":"world"}"#);
        assert_eq!(r.status(), StatusCode::OK);
        let r = map_response(br#"{"statusCode":200,"body":"aGk=","isBase64Encoded":true}"#);
        assert_eq!(r.status(), StatusCode::OK);
    }

    proptest! {
        #[test]
        fn mapping_arbitrary_output_never_panics(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = map_response(&body);
        }

        #[test]
        fn query_parsing_never_panics(raw in ".{0,100}") {
            let _ = url_pairs(&raw);
        }
    }
}
