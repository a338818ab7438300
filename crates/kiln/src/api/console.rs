//! The console's HTTP side (`/ui/`): its page and files, signing in and out, and the
//! security headers every console response carries. The console reads and changes kiln
//! through the rest of the API, which takes its session cookie in place of a signature
//! ([`super::authenticate`]).

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;

use super::{ApiError, SharedState};
use crate::console::assets::{self, Asset};
use crate::console::sessions::SessionView;
use crate::console::{Console, ConsoleError, COOKIE, CSRF_HEADER};

/// No inline scripts or styles, no `eval`, nothing from elsewhere, never in a frame.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

pub fn routes() -> Router<SharedState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(page))
        .route("/ui/sign-in", get(sign_in_page))
        .route("/ui/assets/{file}", get(asset))
        .route(
            "/ui/api/session",
            get(session).post(sign_in).delete(sign_out),
        )
        .route("/ui/{*rest}", axum::routing::any(not_found))
        .layer(axum::middleware::map_response(security_headers))
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    // The files change only with the binary; everything else is per session.
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

fn console(state: &SharedState) -> Result<&Console, ApiError> {
    // The routes are mounted only with the console on.
    state.console.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            "the console is off (kiln up --ui off)",
        )
    })
}

/// The session cookie's token, if the request carries one.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(name, value)| (name == COOKIE && !value.is_empty()).then_some(value))
}

fn signed_in(state: &SharedState, headers: &HeaderMap) -> Result<SessionView, ApiError> {
    let token = session_cookie(headers).ok_or(ConsoleError::SignedOut)?;
    Ok(console(state)?.session(token, &state.credentials)?)
}

fn html(asset: &Asset) -> Response {
    ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
}

/// The console, or the way to sign in.
async fn page(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    match signed_in(&state, &headers) {
        Ok(_) => html(&assets::INDEX),
        Err(_) => Redirect::to("/ui/sign-in").into_response(),
    }
}

async fn sign_in_page(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    match signed_in(&state, &headers) {
        Ok(_) => Redirect::to("/ui/").into_response(),
        Err(_) => html(&assets::INDEX),
    }
}

async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let asset = assets::asset(&file).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            format!("the console has no file {file}"),
        )
    })?;
    Ok((
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        asset.body,
    )
        .into_response())
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "ResourceNotFoundException",
        format!("the console has no page {}", uri.path()),
    )
}

fn session_json(state: &SharedState, session: &SessionView) -> serde_json::Value {
    serde_json::json!({
        "accessKeyId": state.credentials.access_key_id,
        "csrfToken": session.csrf_token,
        "expiresAt": session.expires_at,
    })
}

/// The signed-in session: who, its CSRF token and its expiry (Unix seconds).
async fn session(
    State(state): State<SharedState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let session = signed_in(&state, &headers)?;
    Ok(Json(session_json(&state, &session)).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignIn {
    access_key_id: String,
    secret_access_key: String,
}

/// Signs in with `{"accessKeyId", "secretAccessKey"}` (JSON only, so that no other site's
/// form can post it) and sets the session cookie.
async fn sign_in(
    State(state): State<SharedState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let console = console(&state)?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "InvalidRequestContentException",
            "sign in with a JSON body: {\"accessKeyId\": ..., \"secretAccessKey\": ...}",
        ));
    }
    let input: SignIn = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidRequestContentException",
            format!("expected {{\"accessKeyId\": ..., \"secretAccessKey\": ...}}: {e}"),
        )
    })?;
    let opened = console.sign_in(
        peer.ip(),
        input.access_key_id.trim(),
        &input.secret_access_key,
        &state.credentials,
        Instant::now(),
    )?;
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        opened.token,
        console.session_ttl().as_secs()
    );
    let mut response = Json(session_json(&state, &opened.session)).into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).expect("the token is base64url"),
    );
    Ok(response)
}

/// Signs out (with the session's CSRF token): the session ends on the server and the cookie
/// is cleared.
async fn sign_out(
    State(state): State<SharedState>,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let console = console(&state)?;
    let token = session_cookie(&headers).ok_or(ConsoleError::SignedOut)?;
    let csrf = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    console.authorize(token, csrf, is_safe(&method), &state.credentials)?;
    console.sign_out(token);
    Ok((
        StatusCode::NO_CONTENT,
        [(
            header::SET_COOKIE,
            format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        )],
    )
        .into_response())
}

/// Methods that change nothing, and so need no CSRF token.
pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        assert_eq!(session_cookie(&headers), None);
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; b=2"));
        assert_eq!(session_cookie(&headers), None);
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("x=y;  kiln_console=tok-en_1 ; z=w"),
        );
        assert_eq!(session_cookie(&headers), Some("tok-en_1"));
        let mut empty = HeaderMap::new();
        empty.insert(header::COOKIE, HeaderValue::from_static("kiln_console="));
        assert_eq!(session_cookie(&empty), None);
        let mut prefixed = HeaderMap::new();
        prefixed.insert(header::COOKIE, HeaderValue::from_static("xkiln_console=1"));
        assert_eq!(session_cookie(&prefixed), None);
    }
}
