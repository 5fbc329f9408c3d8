//! Request bodies read under a hard cap, and response bodies that keep the
//! request counted as in flight until they are done.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::errors::Reason;
use crate::metrics::InFlight;

/// Reads a whole request body, refusing as soon as its declared length or the
/// bytes received so far exceed `max`: an oversized body is never buffered.
pub async fn read_capped<B>(mut body: B, max: usize) -> Result<Bytes, Reason>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let declared = body.size_hint().lower();
    if declared > max as u64 {
        return Err(Reason::BodyTooLarge { limit: max });
    }
    // Trust the declared length for the first allocation only up to the cap.
    let mut buf = BytesMut::with_capacity(usize::try_from(declared).unwrap_or(max).min(max));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Reason::InvalidRequest {
            message: format!("the request body could not be read: {e}"),
            param: None,
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(Reason::BodyTooLarge { limit: max });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// The proxy's response body: a refusal the guard wrote, or the upstream's
/// body streamed frame by frame. Holds the request's in-flight token, so
/// the gauge drops when the last byte is sent or the client goes away.
pub struct ResponseBody {
    inner: BoxBody<Bytes, hyper::Error>,
    _in_flight: InFlight,
}

impl ResponseBody {
    pub fn full(bytes: Bytes, in_flight: InFlight) -> Self {
        Self {
            inner: Full::new(bytes)
                .map_err(|never: Infallible| match never {})
                .boxed(),
            _in_flight: in_flight,
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
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn reads_up_to_the_cap() {
        assert_eq!(
            read_capped(chunks(&[b"ab", b"cd"]), 4).await.unwrap(),
            "abcd"
        );
        let err = read_capped(chunks(&[b"ab", b"cde"]), 4).await.unwrap_err();
        assert_eq!(err.label(), "body_too_large");
    }

    #[tokio::test]
    async fn refuses_a_declared_length_over_the_cap_without_reading() {
        let err = read_capped(Full::new(Bytes::from_static(b"12345")), 4)
            .await
            .unwrap_err();
        assert_eq!(err.label(), "body_too_large");
    }
}
