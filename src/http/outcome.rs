//! Counts native-API and worker-API requests in `captcha_gateway_requests_total` (docs/API.md
//! "Metrics"): error responses carry their code as a response extension, read here once the
//! handler has answered, so every way a handler can end (extractor refusals included) counts.
//! The compatible API counts its own replies (their code is in the body, with HTTP 200).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{MatchedPath, Request};
use axum::http::Response;

use super::AppState;

/// The error code of an error response, for the outcome label.
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

/// `api` and `endpoint` labels of a route this middleware counts; `None` for routes it does not.
fn labels(path: &str) -> Option<(&'static str, &'static str)> {
    Some(match path {
        "/v1/solve" => ("native", "solve"),
        "/v1/tasks" => ("native", "create_task"),
        "/v1/tasks/{id}" => ("native", "get_task"),
        "/v1/usage" => ("native", "usage"),
        "/v1/pools" => ("native", "pools"),
        "/v1/pools/tokens" => ("native", "import_tokens"),
        "/solve" => ("worker", "solve"),
        _ => return None,
    })
}

/// The layer that counts (a `route_layer`, so it sees the matched route). Hand-written rather
/// than `middleware::from_fn`: that boxes a future and a copy of the route per request, and
/// every request pays it (docs/BENCHMARKS.md).
#[derive(Clone)]
pub struct CountLayer(pub AppState);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            state: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Count<S> {
    inner: S,
    state: AppState,
}

impl<S, B> tower::Service<Request> for Count<S>
where
    S: tower::Service<Request, Response = Response<B>>,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .and_then(|p| labels(p.as_str()))
            .map(|(api, endpoint)| (self.state.clone(), api, endpoint));
        Counted {
            inner: self.inner.call(req),
            route,
        }
    }
}

pin_project_lite::pin_project! {
    /// A counted request's answer, counted once it is there.
    pub struct Counted<F> {
        #[pin]
        inner: F,
        route: Option<(AppState, &'static str, &'static str)>,
    }
}

impl<F, B, E> Future for Counted<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let res = std::task::ready!(this.inner.poll(cx));
        if let (Ok(res), Some((state, api, endpoint))) = (&res, this.route.take()) {
            let status = res.status();
            let outcome = match res.extensions().get::<ErrorCode>() {
                Some(ErrorCode(code)) => code.as_str(),
                None if status.is_success() => "ok",
                // An answer without a code (a framework rejection): its HTTP status.
                None => status.as_str(),
            };
            state.metrics.request(api, endpoint, outcome);
        }
        Poll::Ready(res)
    }
}
