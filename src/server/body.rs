//! Response bodies that keep the request counted as in flight until they
//! are done (request bodies are read in `budget.rs`).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::metrics::InFlight;

/// The proxy's response body: a refusal the guard wrote, or the upstream's
/// body streamed frame by frame. Holds the request's in-flight token, so
/// the gauge drops when the last byte is sent or the client goes away.
pub struct ResponseBody {
    inner: BoxBody<Bytes, hyper::Error>,
    _in_flight: InFlight,
    /// Keeps the connection from counting as idle while this is sent.
    _busy: Option<super::conn::Busy>,
}

impl ResponseBody {
    pub fn full(bytes: Bytes, in_flight: InFlight) -> Self {
        Self {
            inner: Full::new(bytes)
                .map_err(|never: Infallible| match never {})
                .boxed(),
            _in_flight: in_flight,
            _busy: None,
        }
    }

    /// The upstream's body (or the guard's rewrite of a model listing).
    pub fn streamed<B>(body: B, in_flight: InFlight) -> Self
    where
        B: Body<Data = Bytes, Error = hyper::Error> + Send + Sync + 'static,
    {
        Self {
            inner: body.boxed(),
            _in_flight: in_flight,
            _busy: None,
        }
    }

    /// Holds `busy` until the body is done.
    pub fn holding(mut self, busy: super::conn::Busy) -> Self {
        self._busy = Some(busy);
        self
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
