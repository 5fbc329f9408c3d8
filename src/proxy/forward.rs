//! The upstream client: one HTTP/1.1 connection pool to SGLang (or its
//! router), with the configured connect and response-header timeouts. Bodies
//! stream back as they arrive; the caller decides what to do with them.

use std::error::Error as _;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::errors::Reason;

/// Idle upstream connections are closed after this; SGLang's uvicorn closes
/// its own after 5 s by default, so a shorter value avoids reusing a socket the
/// server is closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

thread_local! {
    /// The event loop this thread runs (`server::ProxyLoops`, from 1): 0 for
    /// any other thread.
    static EVENT_LOOP: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the calling thread as event loop `n`, whose requests use the
/// upstream pool `n`.
pub fn set_event_loop(n: usize) {
    EVENT_LOOP.with(|l| l.set(n));
}

pub struct Upstream {
    /// One pool per event loop: a pooled connection is served by a task on
    /// the loop that opened it, so sharing pools across loops would wake
    /// another thread for every request.
    clients: Vec<Client<HttpConnector, Full<Bytes>>>,
    scheme: Scheme,
    authority: Authority,
    host_header: HeaderValue,
    /// The base URL's path without its trailing slash ("" for `http://host:port`).
    base_path: String,
    response_timeout: Duration,
    /// Longest silence of a streamed response body (`upstream_idle_timeout_secs`).
    idle_timeout: Duration,
}

impl Upstream {
    /// `base` is the validated `http://` base URL from the configuration.
    pub fn new(
        base: &Uri,
        connect_timeout: Duration,
        response_timeout: Duration,
        idle_timeout: Duration,
        event_loops: usize,
    ) -> Result<Self, String> {
        let authority = base
            .authority()
            .cloned()
            .ok_or_else(|| format!("upstream `{base}` has no host"))?;
        let host_header = HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = || {
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .pool_timer(TokioTimer::new())
                .build(connector.clone())
        };
        Ok(Self {
            clients: (0..event_loops.max(1)).map(|_| client()).collect(),
            scheme: base.scheme().cloned().unwrap_or(Scheme::HTTP),
            authority,
            host_header,
            base_path: base.path().trim_end_matches('/').to_string(),
            response_timeout,
            idle_timeout,
        })
    }

    /// The longest the upstream may go silent mid-body before the guard ends the response.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// The `Host` header for upstream requests.
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }

    /// The upstream URL for a canonical path (and the query of a pass-through request).
    pub fn uri(&self, canonical_path: &str, query: Option<&str>) -> Result<Uri, Reason> {
        let target = match query {
            Some(q) => format!("{}{canonical_path}?{q}", self.base_path),
            None => format!("{}{canonical_path}", self.base_path),
        };
        let path = PathAndQuery::try_from(target)
            .map_err(|_| Reason::BadPath("the path cannot be sent upstream".into()))?;
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| Reason::Internal(format!("upstream url: {e}")))
    }

    /// Sends `req` and waits for the response headers, at most the response
    /// timeout. The body is not waited for: an SSE stream may last far longer.
    /// Dropping the returned future, or the response body, drops the upstream
    /// request and closes its connection, which is how a client that goes away
    /// cancels the work upstream.
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Reason> {
        let n = EVENT_LOOP.with(std::cell::Cell::get);
        let client = &self.clients[n.min(self.clients.len() - 1)];
        match tokio::time::timeout(self.response_timeout, client.request(req)).await {
            Err(_) => Err(Reason::UpstreamTimeout),
            Ok(Err(e)) => {
                // The detail (addresses, OS error) is for operators, not clients.
                tracing::warn!(error = %ErrorChain(&e), "upstream request failed");
                Err(classify(&e))
            }
            Ok(Ok(resp)) => Ok(resp),
        }
    }
}

/// A connect timeout is a timeout (504); anything else that kept a response
/// from arriving is an unavailable upstream (502). The message reaches the
/// client, so it names the failure, not addresses.
fn classify(e: &hyper_util::client::legacy::Error) -> Reason {
    let mut source = e.source();
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return Reason::UpstreamTimeout;
        }
        source = s.source();
    }
    if e.is_connect() {
        Reason::UpstreamUnavailable("could not connect to the upstream".into())
    } else {
        Reason::UpstreamUnavailable("the upstream closed the connection without a response".into())
    }
}

/// An error and its sources, `: `-separated: hyper's top-level message alone
/// ("client error (Connect)") does not say what failed.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upstream(base: &str) -> Upstream {
        Upstream::new(
            &base.parse().unwrap(),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(1),
            1,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn builds_upstream_urls() {
        let u = upstream("http://127.0.0.1:30000");
        assert_eq!(
            u.uri("/generate", None).unwrap(),
            "http://127.0.0.1:30000/generate"
        );
        assert_eq!(
            u.uri("/v1/models", Some("a=1")).unwrap(),
            "http://127.0.0.1:30000/v1/models?a=1"
        );
        assert_eq!(u.host_header(), "127.0.0.1:30000");
        let prefixed = upstream("http://127.0.0.1:30000/sglang/");
        assert_eq!(
            prefixed.uri("/generate", None).unwrap(),
            "http://127.0.0.1:30000/sglang/generate"
        );
    }

    #[tokio::test]
    async fn refused_connection_is_unavailable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let u = upstream(&format!("http://{addr}"));
        let req = Request::get(u.uri("/health", None).unwrap())
            .body(Full::new(Bytes::new()))
            .unwrap();
        let err = u.send(req).await.unwrap_err();
        assert_eq!(err.label(), "upstream_unavailable");
    }
}
