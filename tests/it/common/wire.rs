//! Requests written byte by byte: raw HTTP/1.1 (any request target, any
//! framing, pipelining) and h2c (prior knowledge, through hyper's client, or
//! raw frames for what hyper's client would refuse to send).

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::PATIENCE;

/// How an HTTP/1.1 request's body is framed on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length`.
    Length,
    /// `Transfer-Encoding: chunked` in chunks of this many bytes, each with a
    /// chunk extension, and a trailer field after the last chunk.
    Chunked(usize),
    /// Framing headers are in `headers` already and `body` is sent as is
    /// (conflicting or unusual framing). HTTP/1 only.
    Verbatim,
}

/// One request, as a client could write it.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: &'static str,
    /// The request target exactly as written on the wire (HTTP/1) or as `:path` (h2c).
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub framing: Framing,
    /// `HTTP/1.1` unless a case says otherwise.
    pub version: &'static str,
}

impl Req {
    /// A JSON POST with `Content-Length`.
    pub fn post(target: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Self {
            method: "POST",
            target: target.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
            framing: Framing::Length,
            version: "HTTP/1.1",
        }
    }

    pub fn method(mut self, m: &'static str) -> Self {
        self.method = m;
        self
    }

    pub fn target(mut self, t: impl Into<String>) -> Self {
        self.target = t.into();
        self
    }

    /// Replaces every header of this name (none: remove it).
    pub fn header(mut self, name: &str, value: Option<&str>) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(v) = value {
            self.headers.push((name.into(), v.into()));
        }
        self
    }

    /// Adds a header line, keeping any of the same name.
    pub fn add_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn framing(mut self, f: Framing) -> Self {
        self.framing = f;
        self
    }

    /// Whether this request can only be written in HTTP/1 (h2c has no such spelling).
    pub fn h1_only(&self) -> bool {
        self.framing == Framing::Verbatim
            || self.version != "HTTP/1.1"
            || !self.target.starts_with('/')
            || self.target.contains('#')
            || self.target.starts_with("//")
            || self
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"))
    }

    /// The HTTP/1.1 bytes; `close` adds `Connection: close`.
    pub fn to_h1(&self, close: bool) -> Vec<u8> {
        let mut out = format!(
            "{} {} {}\r\nhost: 127.0.0.1\r\n",
            self.method, self.target, self.version
        )
        .into_bytes();
        for (n, v) in &self.headers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        if close {
            out.extend_from_slice(b"connection: close\r\n");
        }
        match self.framing {
            Framing::Length => {
                out.extend_from_slice(
                    format!("content-length: {}\r\n\r\n", self.body.len()).as_bytes(),
                );
                out.extend_from_slice(&self.body);
            }
            Framing::Chunked(size) => {
                out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                out.extend_from_slice(&chunked(&self.body, size));
            }
            Framing::Verbatim => {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&self.body);
            }
        }
        out
    }
}

/// `body` in chunks of `size` bytes (with a chunk extension on each) and a trailer.
pub fn chunked(body: &[u8], size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for c in body.chunks(size.max(1)) {
        out.extend_from_slice(format!("{:x};ext=1\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    out
}

/// A response as read off the wire.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Writes `reqs` back to back on one connection (pipelined; the last one
/// asks for `Connection: close`), then reads every response until the guard
/// closes the connection.
pub async fn h1_pipeline(addr: SocketAddr, reqs: &[Req]) -> Vec<RawResponse> {
    let mut wire = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        wire.extend_from_slice(&r.to_h1(i + 1 == reqs.len()));
    }
    h1_raw(addr, &wire).await
}

/// Writes `wire` and reads responses until the connection is closed.
pub async fn h1_raw(addr: SocketAddr, wire: &[u8]) -> Vec<RawResponse> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The guard may answer and close before it has read everything; a write
    // error then is part of the answer, not a test failure.
    let _ = stream.write_all(wire).await;
    let mut read = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the guard closes the connection after the last answer");
    parse_responses(&read)
}

/// Splits bytes read from a connection into HTTP/1.1 responses.
pub fn parse_responses(mut bytes: &[u8]) -> Vec<RawResponse> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut slots);
        let Ok(httparse::Status::Complete(len)) = resp.parse(bytes) else {
            panic!("not an HTTP response: {:?}", String::from_utf8_lossy(bytes));
        };
        let status = resp.code.unwrap();
        let headers: Vec<(String, String)> = resp
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        bytes = &bytes[len..];
        if (100..200).contains(&status) && status != 101 {
            // An interim answer (`100 Continue`): the final one follows.
            continue;
        }
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let body = if let Some(cl) = get("content-length") {
            let n: usize = cl.parse().unwrap();
            let b = bytes[..n].to_vec();
            bytes = &bytes[n..];
            b
        } else if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            let (b, used) = dechunk(bytes);
            bytes = &bytes[used..];
            b
        } else {
            let b = bytes.to_vec();
            bytes = &[];
            b
        };
        out.push(RawResponse {
            status,
            headers,
            body,
        });
    }
    out
}

fn dechunk(bytes: &[u8]) -> (Vec<u8>, usize) {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + bytes[at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = std::str::from_utf8(&bytes[at..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        at = line_end + 2;
        if size == 0 {
            // No trailers from the guard: just the final CRLF.
            return (body, at + 2);
        }
        body.extend_from_slice(&bytes[at..at + size]);
        at += size + 2;
    }
}

// === h2c ===

/// A response over h2c.
#[derive(Debug, Clone)]
pub struct H2Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Sends `reqs` as concurrent streams on one h2c (prior knowledge)
/// connection; `None` for a stream the guard reset instead of answering.
/// Bodies go out in DATA frames of at most `frame` bytes.
pub async fn h2_streams(addr: SocketAddr, reqs: &[Req], frame: usize) -> Vec<Option<H2Response>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let sends = reqs.iter().map(|r| {
        let mut sender = sender.clone();
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = r
            .body
            .chunks(frame.max(1))
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut b = http::Request::builder()
            .method(r.method)
            .uri(format!("http://{addr}{}", r.target));
        for (n, v) in &r.headers {
            b = b.header(n.as_str(), v.as_str());
        }
        let req = b
            .body(StreamBody::new(futures_util::stream::iter(frames)))
            .unwrap();
        async move {
            let resp = sender.send_request(req).await.ok()?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.ok()?.to_bytes().to_vec();
            Some(H2Response { status, body })
        }
    });
    tokio::time::timeout(PATIENCE, futures_util::future::join_all(sends))
        .await
        .expect("h2c answers")
}

/// An HPACK literal header field without indexing (no Huffman coding).
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x00);
    for s in [name, value] {
        assert!(s.len() < 127, "short strings only");
        out.push(s.len() as u8);
        out.extend_from_slice(s.as_bytes());
    }
}

fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// The frame types the server sent on a raw h2c connection.
#[derive(Debug, Default)]
pub struct RawH2 {
    /// Frame types (1 HEADERS, 3 RST_STREAM, 7 GOAWAY, ...) seen for stream 1 or the connection.
    pub frames: Vec<u8>,
}

impl RawH2 {
    /// Whether stream 1 was answered with response headers.
    pub fn answered(&self) -> bool {
        self.frames.contains(&1)
    }

    /// Whether the stream or the connection was torn down.
    pub fn reset(&self) -> bool {
        self.frames.contains(&3) || self.frames.contains(&7)
    }
}

/// One request on stream 1 of a raw h2c connection, with header fields
/// hyper's client would refuse to send (`transfer-encoding`, ...).
pub async fn h2_raw(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> RawH2 {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    h2_frame(&mut out, 4, 0, 0, &[]); // SETTINGS
    let mut block = Vec::new();
    for (n, v) in headers {
        hpack_literal(&mut block, n, v);
    }
    h2_frame(&mut out, 1, 0x4, 1, &block); // HEADERS, END_HEADERS
    h2_frame(&mut out, 0, 0x1, 1, body); // DATA, END_STREAM
    stream.write_all(&out).await.unwrap();
    let mut seen = RawH2::default();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, async {
        let mut chunk = [0u8; 4096];
        loop {
            while buf.len() >= 9 {
                let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
                if buf.len() < 9 + len {
                    break;
                }
                let (kind, flags) = (buf[3], buf[4]);
                let sid = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff;
                if kind == 4 && flags & 1 == 0 {
                    // Acknowledge the server's SETTINGS.
                    let mut ack = Vec::new();
                    h2_frame(&mut ack, 4, 1, 0, &[]);
                    let _ = stream.write_all(&ack).await;
                }
                if sid == 1 || kind == 7 {
                    seen.frames.push(kind);
                }
                buf.drain(..9 + len);
                if seen.reset() || seen.answered() {
                    return;
                }
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    seen
}
