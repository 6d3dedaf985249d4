//! The three places a connection's [`Activity`] is moved on from: the socket (bytes arrive), the
//! service (a head is complete; its response is written) and the request body (bytes of it
//! arrive; it ends). Each wrapper passes everything through unchanged.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::response::Response;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tower::Service;

use super::Activity;

/// A socket whose reads tell the connection's activity that bytes arrived.
pub struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as hyper's service, telling the activity when each request begins and ends.
/// Replaces hyper-util's `TowerToHyperService`, which the router was served with before.
#[derive(Clone)]
pub struct Tracked {
    router: Router,
    activity: Arc<Activity>,
}

impl Tracked {
    pub fn new(router: Router, activity: Arc<Activity>) -> Self {
        Self { router, activity }
    }
}

impl hyper::service::Service<hyper::Request<Incoming>> for Tracked {
    type Response = hyper::Response<Served<Body>>;
    type Error = Infallible;
    type Future = Serving<<Router as Service<Request>>::Future>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let request = self.activity.request_began(!body.is_end_stream());
        let body = TimedBody {
            inner: body,
            activity: self.activity.clone(),
            request,
            done: false,
        };
        let req = Request::from_parts(parts, Body::new(body));
        // `Router::poll_ready` is always ready, so calling a clone at once is what `oneshot`
        // would do.
        let future = self.router.clone().call(req);
        Serving {
            future,
            busy: Some(Busy {
                activity: self.activity.clone(),
                request,
            }),
        }
    }
}

/// Ends its request when dropped: with the response body once hyper has written it, or with
/// the handler when the connection goes first.
struct Busy {
    activity: Arc<Activity>,
    request: u32,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.activity.request_ended(self.request);
    }
}

/// The router's future; hands its [`Busy`] on to the response body.
pub struct Serving<F> {
    future: F,
    busy: Option<Busy>,
}

impl<F> Future for Serving<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<hyper::Response<Served<Body>>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(res) = ready!(Pin::new(&mut self.future).poll(cx));
        let busy = self.busy.take();
        Poll::Ready(Ok(res.map(|inner| Served { inner, _busy: busy })))
    }
}

/// A response body that holds its request's [`Busy`] until hyper lets it go.
pub struct Served<B> {
    inner: B,
    _busy: Option<Busy>,
}

impl<B: HttpBody + Unpin> HttpBody for Served<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that reports each chunk and its end (or its drop unread) to the activity.
struct TimedBody {
    inner: Incoming,
    activity: Arc<Activity>,
    request: u32,
    done: bool,
}

impl TimedBody {
    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            self.activity.body_done(self.request);
        }
    }
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    self.activity.body_read(self.request, data.len());
                }
                if self.inner.is_end_stream() {
                    self.finish();
                }
            }
            None | Some(Err(_)) => self.finish(),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        self.finish();
    }
}
