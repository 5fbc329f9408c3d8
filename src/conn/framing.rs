//! HTTP/1.1 message framing the guard refuses, and the connection sniffer
//! that lets it see what hyper hides.
//!
//! A body framed two ways (`Content-Length` and `Transfer-Encoding`), or with
//! a transfer coding other than a single `chunked`, is how request smuggling
//! starts: two parsers split the same bytes into different requests. The
//! guard re-serialises every inspected body and sets its own
//! `Content-Length`, so upstream never sees the client's framing; refusing
//! ambiguous framing outright (and closing the connection, whose byte stream
//! can no longer be trusted) removes the question altogether.
//!
//! What hyper 1.x does on its own (HTTP/1):
//! * `Transfer-Encoding` whose last coding is not `chunked` (`identity`,
//!   `gzip`, `chunked, gzip`), or any `Transfer-Encoding` on HTTP/1.0: 400 and
//!   the connection is closed before the service is called.
//! * `Content-Length` values that differ or are not digits: 400, closed.
//! * `Content-Length` *with* `Transfer-Encoding: chunked`: accepted, framed
//!   as chunked (RFC 9112 §6.3), and the `Content-Length` header is **removed**
//!   before the service sees the request. hyper closes the connection after
//!   the response, but the service cannot tell this request from a plain
//!   chunked one.
//! * `gzip, chunked`, `chunked, chunked` and several `Transfer-Encoding`
//!   lines ending in `chunked`: accepted; the header stays visible.
//!
//! So the guard checks twice: [`check_headers`] refuses what the service can
//! see, and [`Sniffer`] reads every HTTP/1 request head on the connection with
//! the same parser hyper uses (`httparse`), before hyper does, and remembers
//! which requests were framed ambiguously. Each request's verdict reaches the
//! handler as a request extension ([`Verdict`]).
//!
//! The sniffer is defence in depth, not what the guard's safety rests on:
//! every body the guard forwards is the one it counted. Where the sniffer and
//! hyper could disagree (the sniffer loses track of where a message ends), it
//! fails closed: that request and every later one on the connection is
//! refused. HTTP/2 has no such framing (`h2` refuses `transfer-encoding` and
//! checks `content-length` against the DATA it receives), so an h2c
//! connection is not sniffed.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::header::{self, HeaderMap};
use http::{Request, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::errors::Reason;
use crate::inspect::framing::Sniffer;

/// Refuses framing the service can see: any `Transfer-Encoding` but a single
/// `chunked` (hyper already refused the rest), and `Content-Length` beside a
/// `Transfer-Encoding` (hyper removes it; checked in case that ever changes).
pub fn check_headers(version: Version, headers: &HeaderMap) -> Result<(), Reason> {
    let te: Vec<&[u8]> = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    if te.is_empty() {
        return Ok(());
    }
    if headers.contains_key(header::CONTENT_LENGTH) {
        return Err(bad("`Content-Length` together with `Transfer-Encoding`"));
    }
    if version == Version::HTTP_2 || version == Version::HTTP_3 {
        return Err(bad("`Transfer-Encoding` is not allowed in HTTP/2"));
    }
    match te.as_slice() {
        [one] if one.trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(()),
        _ => Err(bad(
            "a transfer coding other than a single `chunked` (only `Transfer-Encoding: chunked` is accepted)",
        )),
    }
}

fn bad(what: &str) -> Reason {
    Reason::BadFraming(format!(
        "{what}: the request's framing is ambiguous, so it is refused and the connection closed"
    ))
}

/// The sniffer's verdict on one request, attached to it as an extension by
/// the connection's service. A request without one (the admin port, tests
/// that call the handler directly) was not sniffed.
#[derive(Debug, Clone)]
pub struct Verdict(pub Result<(), String>);

/// The verdict of `req`, if it has one, as a refusal.
pub fn check_verdict<B>(req: &Request<B>) -> Result<(), Reason> {
    match req.extensions().get::<Verdict>() {
        Some(Verdict(Err(why))) => Err(bad(why)),
        _ => Ok(()),
    }
}

/// One connection's sniffer, shared by its IO (which feeds it) and its
/// service (which asks it about each request in turn).
#[derive(Clone, Default)]
pub struct Connection {
    sniffer: Arc<Mutex<Sniffed>>,
    /// Requests the service has been called for (HTTP/1 serves them in order).
    served: Arc<AtomicU64>,
}

impl Connection {
    /// Wraps a connection's stream so every byte read also reaches the sniffer.
    pub fn wrap<T>(&self, io: T) -> SniffedIo<T> {
        SniffedIo {
            inner: io,
            sniffer: self.sniffer.clone(),
        }
    }

    /// When the request head being received began to arrive, if one is
    /// partly received (HTTP/1 only; an h2c connection has none).
    pub fn head_started(&self) -> Option<tokio::time::Instant> {
        self.sniffer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .head_started
    }

    /// The verdict on the next request the service is called for.
    pub fn next_verdict(&self) -> Verdict {
        let index = self.served.fetch_add(1, Ordering::AcqRel);
        let sniffed = self.sniffer.lock().unwrap_or_else(|e| e.into_inner());
        Verdict(sniffed.sniffer.verdict(index))
    }
}

/// The sniffer and when the head it is collecting began to arrive, under one
/// lock so the watchdog never sees one without the other.
#[derive(Default)]
struct Sniffed {
    sniffer: Sniffer,
    /// When the head being collected got its first byte
    /// (`header_read_timeout_ms`), on the watchdog's clock (`conn`).
    head_started: Option<tokio::time::Instant>,
}

impl Sniffed {
    fn feed(&mut self, bytes: &[u8]) {
        self.sniffer.feed(bytes);
        if !self.sniffer.head_partial() {
            self.head_started = None;
        } else if self.head_started.is_none() {
            self.head_started = Some(tokio::time::Instant::now());
        }
    }
}

/// A stream whose reads are also fed to the connection's [`Sniffer`].
pub struct SniffedIo<T> {
    inner: T,
    sniffer: Arc<Mutex<Sniffed>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for SniffedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                self.sniffer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .feed(new);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SniffedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_check_sees_what_hyper_leaves() {
        let mut h = HeaderMap::new();
        assert!(check_headers(Version::HTTP_11, &h).is_ok());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert!(check_headers(Version::HTTP_11, &h).is_ok());
        assert!(check_headers(Version::HTTP_2, &h).is_err());
        h.insert(header::CONTENT_LENGTH, "3".parse().unwrap());
        assert!(check_headers(Version::HTTP_11, &h).is_err());
        h.remove(header::CONTENT_LENGTH);
        h.append(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        let e = check_headers(Version::HTTP_11, &h).unwrap_err();
        assert_eq!(e.label(), "bad_framing");
        assert!(e.closes_connection());
        h.insert(header::TRANSFER_ENCODING, "gzip, chunked".parse().unwrap());
        assert!(check_headers(Version::HTTP_11, &h).is_err());
    }
}
