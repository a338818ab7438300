//! The API listener's service. An invocation, the hot path, goes straight to its handler; every
//! other request goes through the router and its middleware. The router matched the path,
//! cloned a boxed service, inserted the peer address and the body limit as extensions and
//! collected the path parameters on every request, invocations included; none of it is
//! needed to answer one. An invocation answered here gets what the router's middleware
//! (`lambda_response`) gives every Lambda answer.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::http::Method;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use axum::Router;
use futures_util::future::BoxFuture;
use tower_service::Service;

use super::SharedState;

/// Makes an [`Api`] for each connection: `axum::serve(listener, MakeApi::new(state))`.
pub struct MakeApi {
    router: Router,
    state: SharedState,
}

impl MakeApi {
    pub fn new(state: SharedState) -> Self {
        Self {
            router: super::router(state.clone()),
            state,
        }
    }
}

impl<L> Service<IncomingStream<'_, L>> for MakeApi
where
    L: Listener<Addr = SocketAddr>,
{
    type Response = Api;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Api, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'_, L>) -> Self::Future {
        std::future::ready(Ok(Api {
            router: self.router.clone(),
            state: self.state.clone(),
            remote: *stream.remote_addr(),
        }))
    }
}

/// One connection's service.
#[derive(Clone)]
pub struct Api {
    router: Router,
    state: SharedState,
    remote: SocketAddr,
}

impl Service<Request> for Api {
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        if let Some(name) = invocation(request.method(), request.uri().path()) {
            let state = self.state.clone();
            return Box::pin(async move { Ok(super::invoke::answer(state, name, request).await) });
        }
        request.extensions_mut().insert(ConnectInfo(self.remote));
        Box::pin(self.router.call(request))
    }
}

/// The function an Invoke names (`POST /2015-03-31/functions/NAME/invocations`), decoded as
/// the router's `{name}` is; `None` for any other request, and for one whose name does not
/// decode (the router answers it).
fn invocation(method: &Method, path: &str) -> Option<String> {
    if method != Method::POST {
        return None;
    }
    let name = path
        .strip_prefix("/2015-03-31/functions/")?
        .strip_suffix("/invocations")?;
    if name.is_empty() || name.contains('/') {
        return None;
    }
    percent_encoding::percent_decode_str(name)
        .decode_utf8()
        .ok()
        .map(|name| name.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_invoke_takes_the_short_way() {
        let post = Method::POST;
        let at = |path| invocation(&post, path);
        assert_eq!(
            at("/2015-03-31/functions/f/invocations").as_deref(),
            Some("f")
        );
        // Names and ARNs as SDKs encode them.
        assert_eq!(
            at("/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A000000000000%3Afunction%3Af/invocations")
                .as_deref(),
            Some("arn:aws:lambda:us-east-1:000000000000:function:f")
        );
        assert_eq!(
            at("/2015-03-31/functions/f:prod/invocations").as_deref(),
            Some("f:prod")
        );
        for other in [
            "/2015-03-31/functions//invocations",
            "/2015-03-31/functions/a/b/invocations",
            "/2015-03-31/functions/f/invocations/",
            "/2015-03-31/functions/f/configuration",
            "/2015-03-31/functions/f%FF/invocations",
            "/fn/f/invocations",
        ] {
            assert_eq!(at(other), None, "{other}");
        }
        assert_eq!(
            invocation(&Method::GET, "/2015-03-31/functions/f/invocations"),
            None
        );
    }
}
