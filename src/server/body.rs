//! Response bodies that keep the request counted as in flight until they
//! are done (request bodies are read in `budget.rs`).

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::metrics::InFlight;

/// The proxy's response body: a refusal the guard wrote, or the upstream's
/// body streamed frame by frame. Holds the request's in-flight token, so
/// the gauge drops when the last byte is sent or the client goes away.
pub struct ResponseBody {
    inner: BoxBody<Bytes, BodyError>,
    _in_flight: InFlight,
    /// Keeps the connection from counting as idle while this is sent.
    _busy: Option<crate::conn::Busy>,
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

    /// The upstream's body (or the guard's rewrite of a model listing),
    /// ended when the upstream sends nothing for `idle` (see [`Watched`]).
    pub fn streamed<B>(body: B, in_flight: InFlight, idle: Duration, sse: bool) -> Self
    where
        B: Body<Data = Bytes, Error = hyper::Error> + Send + Sync + Unpin + 'static,
    {
        Self {
            inner: Watched {
                inner: body,
                idle,
                sleep: Box::pin(tokio::time::sleep(idle)),
                sse,
                ended: false,
            }
            .boxed(),
            _in_flight: in_flight,
            _busy: None,
        }
    }

    /// Holds `busy` until the body is done.
    pub fn holding(mut self, busy: crate::conn::Busy) -> Self {
        self._busy = Some(busy);
        self
    }
}

/// What a response body can fail with (an upstream error, or the upstream
/// going silent).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The upstream's body with `upstream_idle_timeout_secs` between frames.
///
/// When the upstream fails mid-body (a reset, a stall past the idle
/// timeout), a plain body fails too, so the client's connection is cut and
/// it cannot take a truncated answer for a whole one. An SSE stream instead
/// ends with one last event in SGLang's own in-stream error shape (`data:
/// {"error": ...}`, no `[DONE]`), which streaming clients already handle:
/// they see an error, not a hang or an abrupt reset mid-event.
struct Watched<B> {
    inner: B,
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    sse: bool,
    ended: bool,
}

impl<B> Watched<B> {
    fn fail(&mut self, why: &'static str) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.ended = true;
        tracing::warn!(why, "the upstream's response body ended abnormally");
        if self.sse {
            let event = serde_json::json!({"error": {
                "message": why, "type": "server_error", "code": 502,
            }});
            Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                "data: {event}\n\n"
            ))))))
        } else {
            Poll::Ready(Some(Err(why.into())))
        }
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Data = Bytes, Error = hyper::Error> + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = tokio::time::Instant::now() + self.idle;
                self.sleep.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(_))) => {
                self.fail("the upstream's response failed before it was complete")
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.fail("the upstream sent nothing for upstream_idle_timeout_secs")
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.sse {
            // A final error event may be added.
            SizeHint::default()
        } else {
            self.inner.size_hint()
        }
    }
}
