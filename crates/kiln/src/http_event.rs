//! Lambda's payload format 2.0 for HTTP: a request as the event a function URL (or an app's
//! gateway) gives a function, and the function's answer as an HTTP response.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::{json, Map, Value};

/// A plain HTTP answer for callers who are not AWS SDKs.
pub fn plain(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "Message": message }))).into_response()
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
