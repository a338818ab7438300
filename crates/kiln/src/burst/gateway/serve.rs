//! The gateway's listener and the way of each request: to the monolith (streamed, or joined
//! as an upgrade), to the function when it is offloaded, or to both as a shadow run.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;

use super::{Gateway, FALLBACK_REASON, MAX_OFFLOAD_BODY, MAX_URI, SERVED_BY, SERVED_BY_KINDS};
use crate::burst::control::{Target, TICK};
use crate::burst::profile::Eligibility;
use crate::burst::shadow;
use crate::burst::table::RouteSource;
use crate::burst::upstream::{
    is_upgrade, strip_hop_by_hop, upstream_request, BadTarget, InFlight, Unreached, Upstream,
};
use crate::controller::{ControllerError, InvocationType, InvokeOptions, Invoked};
use crate::error_chain;
use crate::function::LedgerRef;
use crate::http_event::{event, map_response, plain};
use crate::session::HintSource;
use crate::sync::{LockExt, RwLockExt};

impl Gateway {
    /// Serves `listener` until [`Gateway::stop`], and runs the controller's tick.
    pub fn serve(self: &Arc<Self>, listener: tokio::net::TcpListener) {
        self.listening.store(true, Ordering::Relaxed);
        *self.error.locked() = None;
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(self.clone())
            .into_make_service_with_connect_info::<SocketAddr>();
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let mut stop = self.stop.subscribe();
        let gateway = Arc::downgrade(self);
        tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = served.await {
                if let Some(g) = gateway.upgrade() {
                    g.set_error(format!("the listener failed: {e}"));
                }
            }
            if let Some(g) = gateway.upgrade() {
                g.listening.store(false, Ordering::Relaxed);
            }
        });
        self.read_routes_in_background();
        let weak = Arc::downgrade(self);
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
                let Some(g) = weak.upgrade() else { return };
                g.tick();
            }
        });
    }

    /// The least loaded upstream that is not failing, or the least loaded of all and `true`
    /// when every one is failing.
    fn pick(&self, now: Instant) -> (Arc<Upstream>, bool) {
        let upstreams = self.upstreams.read_locked();
        let healthy = upstreams
            .iter()
            .filter(|u| !u.failing(now))
            .min_by_key(|u| u.inflight.load(Ordering::Relaxed));
        match healthy {
            Some(u) => (u.clone(), false),
            None => (
                upstreams
                    .iter()
                    .min_by_key(|u| u.inflight.load(Ordering::Relaxed))
                    .expect("an app has at least one upstream")
                    .clone(),
                true,
            ),
        }
    }

    fn answer(&self, mut response: Response, by: &'static str) -> Response {
        let counter = match by {
            "monolith" => &self.served.monolith,
            "function" => &self.served.function,
            "fallback" => &self.served.fallback,
            _ => &self.served.gateway,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        response
            .headers_mut()
            .insert(SERVED_BY, HeaderValue::from_static(by));
        response
    }

    /// Sends a request to the monolith and records what it cost.
    async fn forward(
        &self,
        upstream: Arc<Upstream>,
        request: http::Request<Body>,
        route: Option<usize>,
        inflight: InFlight,
    ) -> Result<Response, Unreached> {
        let timeout = self.spec.read_locked().upstream_timeout();
        let started = Instant::now();
        let sent = tokio::time::timeout(timeout, self.client.request(request)).await;
        let elapsed = started.elapsed();
        // The most requests in flight with it: at its start or at its end, itself counted.
        let level = upstream
            .inflight
            .load(Ordering::Relaxed)
            .max(inflight.before + 1);
        drop(inflight);
        let response = match sent {
            Err(_) => {
                upstream.failed();
                return Ok(plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!(
                        "the app's server {} did not answer within {:.0} s",
                        upstream.url,
                        timeout.as_secs_f64()
                    ),
                ));
            }
            Ok(Err(e)) if e.is_connect() => {
                upstream.failed();
                return Err(Unreached(format!("{}: {e}", upstream.url)));
            }
            Ok(Err(e)) => {
                upstream.failed();
                return Ok(plain(
                    StatusCode::BAD_GATEWAY,
                    &format!(
                        "the app's server {} failed: {}",
                        upstream.url,
                        error_chain(&e)
                    ),
                ));
            }
            Ok(Ok(r)) => r,
        };
        if matches!(response.status().as_u16(), 502..=504) {
            upstream.failed();
        } else {
            *upstream.failing_until.locked() = None;
        }
        upstream.served.fetch_add(1, Ordering::Relaxed);
        let streams = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let baseline = {
            let mut profile = self.profile.locked();
            let stats = profile.stats(route);
            stats.record(elapsed, monotonic_second());
            if streams {
                stats.streams += 1;
            }
            stats.baseline()
        };
        self.control.locked().observe(elapsed, baseline, level);
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers, false);
        Ok(Response::from_parts(parts, Body::new(body)))
    }

    /// Runs an offloadable request in the function.
    async fn offload(
        &self,
        head: &http::request::Parts,
        body: &Bytes,
        peer: SocketAddr,
        shadow: bool,
        ledger: Option<&LedgerRef>,
    ) -> Ran {
        let function = self.spec.read_locked().function.clone();
        let raw_path = head.uri.path();
        let query = head.uri.query();
        let payload = event(
            &function,
            &head.method,
            raw_path,
            query.unwrap_or(""),
            &head.headers,
            body,
            peer,
        );
        let source = HintSource {
            headers: Some(&head.headers),
            query,
            json: Some(body),
        };
        let invoked = self
            .controller
            .invoke_with(
                &function,
                Bytes::from(payload.to_string()),
                InvocationType::RequestResponse,
                None,
                source,
                InvokeOptions {
                    shadow,
                    ledger: ledger.cloned(),
                },
            )
            .await;
        match invoked {
            Ok(Invoked::Done {
                outcome,
                request_id,
                ..
            }) if !outcome.function_error => {
                let mut response = map_response(&outcome.body);
                if let Ok(id) = HeaderValue::from_str(&request_id) {
                    response.headers_mut().insert("x-amzn-requestid", id);
                }
                Ran::Answered(response)
            }
            Ok(Invoked::Done { request_id, .. }) => Ran::Failed(request_id),
            Ok(_) => Ran::Failed(String::new()),
            Err(
                e @ (ControllerError::Throttled { .. }
                | ControllerError::TooLarge(_)
                | ControllerError::NotFound(_)
                | ControllerError::ShuttingDown),
            ) => Ran::Never(e.to_string()),
            Err(e) => Ran::Failed(format!("({e})")),
        }
    }
}

impl Gateway {
    /// Runs a copy of a request the monolith answered with `status` in the function, as a
    /// shadow, if its route wants one now; the outcome goes to the route's record.
    fn maybe_shadow(
        self: &Arc<Self>,
        route: usize,
        head: http::request::Parts,
        body: Bytes,
        peer: SocketAddr,
        status: u16,
    ) {
        if matches!(status, 502..=504) {
            return; // the monolith failed: nothing to compare with
        }
        let pattern = {
            let mut profile = self.profile.locked();
            let Some(entry) = profile.routes.get_mut(route) else {
                return;
            };
            if entry.source == RouteSource::Pin || !entry.shadow.wants_run() {
                return;
            }
            entry.shadow.begin();
            entry.pattern.to_string()
        };
        let gateway = self.clone();
        tokio::spawn(async move {
            let outcome = match gateway.offload(&head, &body, peer, true, None).await {
                Ran::Answered(response) => shadow::compare(status, Ok(response.status().as_u16())),
                Ran::Failed(id) => shadow::compare(
                    status,
                    Err(format!("the function failed (request id {id})")),
                ),
                Ran::Never(_) => shadow::Outcome::NotRun,
            };
            let mut profile = gateway.profile.locked();
            if let Some(entry) = profile
                .routes
                .iter_mut()
                .find(|r| r.pattern.as_str() == pattern)
            {
                entry.shadow.end(outcome);
            }
        });
    }
}

/// What became of a request sent to the function.
enum Ran {
    Answered(Response),
    /// The function never ran it.
    Never(String),
    /// It ran and failed; the request id, if any.
    Failed(String),
}

fn monotonic_second() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

/// Every request the gateway answers, its latency recorded by who served it.
async fn handle(
    State(gateway): State<Arc<Gateway>>,
    peer: ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let arrived = Instant::now();
    let response = route(gateway.clone(), peer, request).await;
    let by = response.headers().get(SERVED_BY).map(|v| v.as_bytes());
    if let Some(i) = SERVED_BY_KINDS
        .iter()
        .position(|k| Some(k.as_bytes()) == by)
    {
        gateway.served.latency[i].observe(arrived.elapsed().as_secs_f64());
    }
    response
}

async fn route(
    gateway: Arc<Gateway>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    if request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len())
        > MAX_URI
    {
        return gateway.answer(
            plain(
                StatusCode::URI_TOO_LONG,
                &format!("the request target is longer than {MAX_URI} bytes"),
            ),
            "gateway",
        );
    }
    let (mut head, body) = request.into_parts();
    let path = percent_encoding::percent_decode_str(head.uri.path())
        .decode_utf8_lossy()
        .into_owned();
    // Eligible: may be offloaded. Profiled: may be shadowed (its profile says it is worth
    // offloading; shadow runs decide the rest).
    let (route, eligible, profiled) = {
        let profile = gateway.profile.locked();
        let route = profile.find(head.method.as_str(), &path);
        let entry = route.map(|i| &profile.routes[i]);
        (
            route,
            entry.is_some_and(|r| r.eligible == Eligibility::Eligible),
            entry.is_some_and(|r| r.profiled == Eligibility::Eligible),
        )
    };
    let upgrading = is_upgrade(&head.headers);
    let length = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = head.headers.contains_key(header::TRANSFER_ENCODING);
    let bounded = match (length, chunked) {
        (Some(n), _) => n <= MAX_OFFLOAD_BODY,
        (None, false) => true,
        (None, true) => false,
    };
    let now = Instant::now();
    if !profiled || upgrading || !bounded {
        let (upstream, _) = gateway.pick(now);
        if upgrading {
            return pass_upgrade(gateway, head, peer, upstream, route).await;
        }
        let request = match upstream_request(&head, &upstream, peer, Body::new(body), false) {
            Ok(r) => r,
            Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
        };
        let held = InFlight::new(upstream.clone());
        return match gateway.forward(upstream, request, route, held).await {
            Ok(response) => gateway.answer(response, "monolith"),
            Err(Unreached(why)) => gateway.answer(
                plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("the app's server is unreachable: {why}"),
                ),
                "gateway",
            ),
        };
    }
    // Offloadable: buffered, so that either side can serve it.
    let body = match http_body_util::Limited::new(body, MAX_OFFLOAD_BODY as usize)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return gateway.answer(
                plain(
                    StatusCode::BAD_REQUEST,
                    &format!("the request body could not be read: {e}"),
                ),
                "gateway",
            )
        }
    };
    head.headers.remove(header::EXPECT);
    let (upstream, failing) = gateway.pick(now);
    // Counted at the upstream as it is decided on.
    let held = InFlight::new(upstream.clone());
    let target = if eligible {
        gateway.control.locked().decide(now, held.before, failing)
    } else {
        Target::Monolith
    };
    if target == Target::Monolith {
        let request =
            match upstream_request(&head, &upstream, peer, Body::from(body.clone()), false) {
                Ok(r) => r,
                Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
            };
        match gateway.forward(upstream, request, route, held).await {
            Ok(response) => {
                if let Some(i) = route {
                    let status = response.status().as_u16();
                    gateway.maybe_sample(i, &head, &body, peer, status);
                    gateway.maybe_shadow(i, head, body, peer, status);
                }
                return gateway.answer(response, "monolith");
            }
            // Unreached, the request was never sent: the function may serve it, if it may
            // serve the route at all.
            Err(Unreached(why)) if !eligible => {
                return gateway.answer(
                    plain(
                        StatusCode::BAD_GATEWAY,
                        &format!("the app's server is unreachable: {why}"),
                    ),
                    "gateway",
                )
            }
            Err(Unreached(_)) => {}
        }
    } else {
        drop(held); // the function serves it: not the upstream's
    }
    if let Some(i) = route {
        if let Some(r) = gateway.profile.locked().routes.get_mut(i) {
            r.offloaded += 1;
        }
    }
    // Its writes (database commits, object writes) are recorded, so that a failure that wrote
    // nothing can go back to the monolith.
    let ledger = LedgerRef(Arc::new(kiln_dbproxy::Ledger::new()));
    let ran = gateway
        .offload(&head, &body, peer, false, Some(&ledger))
        .await;
    match ran {
        Ran::Answered(response) => gateway.answer(response, "function"),
        Ran::Failed(request_id) if !ledger.0.is_clean() => {
            let mut response = plain(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "the function failed on this request after it started; it may have \
                     written, so it is not run again (request id {request_id})"
                ),
            );
            if let Ok(id) = HeaderValue::from_str(&request_id) {
                response.headers_mut().insert("x-amzn-requestid", id);
            }
            gateway.answer(response, "gateway")
        }
        ran @ (Ran::Failed(_) | Ran::Never(_)) => {
            let why = match ran {
                Ran::Never(why) => format!("the function did not run it: {why}"),
                Ran::Failed(id) => format!("the function failed (request id {id})"),
                Ran::Answered(_) => unreachable!("matched above"),
            };
            let (upstream, _) = gateway.pick(Instant::now());
            let request = match upstream_request(&head, &upstream, peer, Body::from(body), false) {
                Ok(r) => r,
                Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
            };
            let held = InFlight::new(upstream.clone());
            match gateway.forward(upstream, request, route, held).await {
                Ok(mut response) => {
                    if let Ok(v) = HeaderValue::from_str(&why) {
                        response.headers_mut().insert(FALLBACK_REASON, v);
                    }
                    gateway.answer(response, "fallback")
                }
                Err(Unreached(unreached)) => gateway.answer(
                    plain(
                        StatusCode::BAD_GATEWAY,
                        &format!(
                            "neither the function nor the app's server could serve this request: {why}; {unreached}"
                        ),
                    ),
                    "gateway",
                ),
            }
        }
    }
}

/// An upgrade (WebSocket) goes to the monolith and, once both sides agree, the two
/// connections are joined.
async fn pass_upgrade(
    gateway: Arc<Gateway>,
    mut head: http::request::Parts,
    peer: SocketAddr,
    upstream: Arc<Upstream>,
    route: Option<usize>,
) -> Response {
    let client_side = head.extensions.remove::<hyper::upgrade::OnUpgrade>();
    let request = match upstream_request(&head, &upstream, peer, Body::empty(), true) {
        Ok(r) => r,
        Err(BadTarget) => return gateway.answer(BadTarget::response(), "gateway"),
    };
    let timeout = gateway.spec.read_locked().upstream_timeout();
    let started = Instant::now();
    let sent = tokio::time::timeout(timeout, gateway.client.request(request)).await;
    let mut response = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            upstream.failed();
            return gateway.answer(
                plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("the app's server failed: {}", error_chain(&e)),
                ),
                "gateway",
            );
        }
        Err(_) => {
            upstream.failed();
            return gateway.answer(
                plain(
                    StatusCode::GATEWAY_TIMEOUT,
                    "the app's server did not answer",
                ),
                "gateway",
            );
        }
    };
    gateway
        .profile
        .locked()
        .stats(route)
        .record(started.elapsed(), monotonic_second());
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let server_side = hyper::upgrade::on(&mut response);
        if let Some(client_side) = client_side {
            tokio::spawn(async move {
                if let (Ok(client), Ok(server)) = (client_side.await, server_side.await) {
                    let mut client = TokioIo::new(client);
                    let mut server = TokioIo::new(server);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    }
    let (mut parts, body) = response.into_parts();
    let upgrading = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    strip_hop_by_hop(&mut parts.headers, upgrading);
    gateway.answer(Response::from_parts(parts, Body::new(body)), "monolith")
}
