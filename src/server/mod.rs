//! The listeners: the proxy port (HTTP/1.1 and h2c) in front of SGLang, the
//! admin port (metrics, liveness, readiness) and, when configured, the gRPC
//! port (`ext::grpc`) and the HTTP authorization port (`ext::authz_http`).
//! [`serve`] is the one assembly: `cli::serve` binds the configured
//! addresses and calls it; the tests and the demo bind `127.0.0.1:0` and
//! call it the same way.

mod admin;
pub(crate) mod body;
mod handler;
mod models;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::app::Apps;
use crate::conn::admission::{Connections, LISTENERS};
use crate::conn::{self, framing};
use crate::proxy::Client;
use crate::reload::Runtime;

pub use body::ResponseBody;

/// Every listener [`serve`] runs, bound by the caller.
pub struct Listeners {
    /// The proxy port, served by [`ProxyLoops`] (`io_threads` event loops).
    pub proxy: TcpListener,
    /// Metrics and probes, on the caller's event loop.
    pub admin: TcpListener,
    /// Envoy ext_authz and ext_proc over gRPC, and gRPC health (`grpc_listen`).
    pub grpc: Option<TcpListener>,
    /// The HTTP authorization service (`authz_listen`).
    pub authz: Option<TcpListener>,
}

/// Where the proxy port's event loops run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLoops {
    /// `io_threads` threads, each with a runtime of its own ([`ProxyLoops`]):
    /// what [`serve`], and so `prefill-guard serve`, always does.
    Threads,
    /// One loop, a task on the caller's runtime, whatever `io_threads` says.
    ///
    /// For in-process tests only; no configuration can ask for it
    /// (`io_threads` must be at least 1). A test on tokio's paused clock
    /// (`#[tokio::test(start_paused = true)]`) pauses only its own
    /// runtime's timers: on loops of their own, the proxy port's timeouts
    /// (the response and client timeouts, the connection watchdog, the
    /// shutdown grace) would stay on the real clock, out of its reach.
    /// Sharing the caller's runtime gives up what the threads are for (the
    /// admin port never waiting behind the proxy's traffic), which a test
    /// does not need.
    Caller,
}

/// Serves `runtime`'s current [`crate::app::App`] on every listener until
/// `shutdown` resolves, then stops accepting and lets in-flight requests
/// (SSE streams included) finish for up to `shutdown_grace`; connections
/// still open after that are dropped. Stops the runtime's discovery last.
///
/// The proxy port gets event loops of its own; the caller's loop keeps the
/// admin port, authorization, reloads and signals, so a flood of bodies on
/// the proxy port never delays a liveness probe behind them.
pub async fn serve(
    listeners: Listeners,
    runtime: Arc<Runtime>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    serve_on(EventLoops::Threads, listeners, runtime, shutdown).await
}

/// [`serve`] with the proxy port's event loops where `on` says
/// ([`EventLoops::Caller`] is for tests).
pub async fn serve_on(
    on: EventLoops,
    listeners: Listeners,
    runtime: Arc<Runtime>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Listeners {
        proxy,
        admin,
        grpc,
        authz,
    } = listeners;
    let config = runtime.config().await;
    let proxy = proxy.into_std()?;
    let listen = proxy.local_addr()?;
    // One signal stops every listener and event loop; they drain together.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Held here, not in the `App`: a reload must not forget who is connected.
    let connections = Arc::new(Connections::default());
    if authz.is_some() {
        connections.authz_bound();
    }
    let loops = ProxyLoops::start(
        &proxy,
        on,
        config.io_threads,
        runtime.apps(),
        &connections,
        &stopped,
    )?;
    drop(proxy);
    let grpc_addr = grpc.as_ref().map(TcpListener::local_addr).transpose()?;
    let authz_addr = authz.as_ref().map(TcpListener::local_addr).transpose()?;
    tracing::info!(
        listen = %listen,
        admin_listen = %admin.local_addr()?,
        grpc_listen = grpc_addr.map(tracing::field::display),
        authz_listen = authz_addr.map(tracing::field::display),
        upstream = %config.upstream,
        prefill_urls = config.prefill_urls.len(),
        io_threads = config.io_threads,
        count_workers = config.count_workers,
        "prefill-guard serving"
    );
    // The gRPC listener drains alongside the proxy.
    let grpc = grpc.map(|listener| {
        let mut stopped = stopped.clone();
        let until = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::spawn(crate::ext::grpc::serve(listener, runtime.apps(), until))
    });
    let signal = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    let served = run_listeners(admin, authz, runtime.apps(), connections, signal).await;
    loops.join().await;
    if let Some(grpc) = grpc {
        // Streams still open after the grace are dropped with the process.
        if let Ok(Ok(Err(e))) = tokio::time::timeout(config.shutdown_grace, grpc).await {
            tracing::error!(error = %e, "the gRPC listener failed");
        }
    }
    runtime.stop().await;
    served?;
    // The last line: an operator reading the log knows the drain finished
    // and the exit was clean (status 0), not a kill mid-drain.
    tracing::info!("prefill-guard stopped: drained, exiting");
    Ok(())
}

/// The admin and authorization listeners, on the caller's event loop; both
/// stop accepting at `shutdown` and drain under the same grace.
async fn run_listeners(
    admin: TcpListener,
    authz: Option<TcpListener>,
    apps: Arc<Apps>,
    connections: Arc<Connections>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let (builder, admin_builder) = (connection_builder(true), connection_builder(false));
    let (mut admin_conns, mut authz_conns) = (JoinSet::new(), JoinSet::new());
    let admin_apps = apps.clone();
    let authz_apps = apps.clone();
    let admin_connections = connections.clone();
    let authz_accept = async {
        match &authz {
            Some(l) => {
                accept(
                    l,
                    &builder,
                    &graceful,
                    &mut authz_conns,
                    Some(Limited {
                        listener: AUTHZ,
                        apps: apps.clone(),
                        connections: connections.clone(),
                    }),
                    move |_, framing, activity| {
                        authz_service(authz_apps.clone(), framing, activity)
                    },
                )
                .await
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = accept(&admin, &admin_builder, &graceful, &mut admin_conns, None, move |_, _, _| admin_service(admin_apps.clone(), admin_connections.clone())) => {}
        () = authz_accept => {}
        () = shutdown => tracing::info!("shutting down: no new connections, draining in-flight requests"),
    }
    drop((admin, authz));
    drain(graceful, apps.load().shutdown_grace).await;
    // Dropping the sets aborts whatever did not finish in time.
    Ok(())
}

/// The event loops of the proxy port (`io_threads`), one thread each, apart
/// from the loop [`run_listeners`] runs for the admin and authorization
/// ports. Each accepts from the same socket and serves what it accepted to
/// the end, on a current-thread runtime: no request wakes another thread, as
/// in Envoy's or nginx's workers. (Or one loop on the caller's runtime,
/// for tests: [`EventLoops::Caller`].)
pub struct ProxyLoops {
    drained: Vec<tokio::sync::oneshot::Receiver<()>>,
    release: tokio::sync::watch::Sender<bool>,
    running: Vec<Running>,
}

/// One loop of [`ProxyLoops`], to wait for at the end.
enum Running {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

impl ProxyLoops {
    /// Starts `count` loops (one, on the caller's runtime, with
    /// [`EventLoops::Caller`]) accepting from `listener` (the proxy socket,
    /// non-blocking) until `stop` turns true or its sender is dropped; then
    /// they drain like [`run_listeners`].
    pub fn start(
        listener: &std::net::TcpListener,
        on: EventLoops,
        count: usize,
        apps: Arc<Apps>,
        connections: &Arc<Connections>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<Self> {
        let (release, released) = tokio::sync::watch::channel(false);
        let mut loops = Self {
            drained: Vec::with_capacity(count),
            release,
            running: Vec::with_capacity(count),
        };
        if on == EventLoops::Caller {
            // No thread is marked as an event loop (`proxy::set_event_loop`):
            // its requests use the upstream pool of every other thread.
            let (done, drained) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(proxy_loop(
                listener.try_clone()?,
                apps,
                connections.clone(),
                stop.clone(),
                done,
                released,
            ));
            loops.drained.push(drained);
            loops.running.push(Running::Task(task));
            return Ok(loops);
        }
        // The loops log where the thread that starts them logs.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        for n in 1..=count {
            let listener = listener.try_clone()?;
            let (apps, stopped, released) = (apps.clone(), stop.clone(), released.clone());
            let connections = connections.clone();
            let dispatch = dispatch.clone();
            let (done, drained) = tokio::sync::oneshot::channel();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let thread = std::thread::Builder::new()
                .name(format!("proxy-loop-{n}"))
                .spawn(move || {
                    crate::proxy::set_event_loop(n);
                    tracing::dispatcher::with_default(&dispatch, || {
                        runtime.block_on(proxy_loop(
                            listener,
                            apps,
                            connections,
                            stopped,
                            done,
                            released,
                        ))
                    });
                })?;
            loops.drained.push(drained);
            loops.running.push(Running::Thread(thread));
        }
        Ok(loops)
    }

    /// Waits until every loop has drained (each under `shutdown_grace`
    /// from the stop signal). Only then do the loops end: until every
    /// connection is done, any of them may be using an upstream connection
    /// pooled by another loop, whose runtime must still be running.
    pub async fn join(self) {
        for drained in self.drained {
            let _ = drained.await;
        }
        let _ = self.release.send(true);
        for running in self.running {
            match running {
                Running::Thread(thread) => {
                    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                }
                Running::Task(task) => {
                    let _ = task.await;
                }
            }
        }
    }
}

async fn proxy_loop(
    listener: std::net::TcpListener,
    apps: Arc<Apps>,
    connections: Arc<Connections>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
    drained: tokio::sync::oneshot::Sender<()>,
    mut released: tokio::sync::watch::Receiver<bool>,
) {
    match TcpListener::from_std(listener) {
        Ok(listener) => {
            let graceful = GracefulShutdown::new();
            let builder = connection_builder(true);
            let limited = Limited {
                listener: PROXY,
                apps: apps.clone(),
                connections,
            };
            let mut conns = JoinSet::new();
            let serving = apps.clone();
            tokio::select! {
                () = accept(&listener, &builder, &graceful, &mut conns, Some(limited), move |peer, framing, activity| proxy_service(serving.clone(), peer, framing, activity)) => {}
                _ = stopped.wait_for(|s| *s) => {}
            }
            drop(listener);
            drain(graceful, apps.load().shutdown_grace).await;
        }
        Err(e) => tracing::error!(error = %e, "a proxy event loop could not register the listener"),
    }
    let _ = drained.send(());
    let _ = released.wait_for(|r| *r).await;
}

/// Waits for the watched connections to finish, at most `grace`; the caller
/// then drops (aborts) whatever is left.
async fn drain(graceful: GracefulShutdown, grace: Duration) {
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "shutdown grace expired; dropping connections still open"
        );
    }
}

/// `watched`: the connections run under `conn::watchdog`, which times
/// request heads and idle keep-alive apart. hyper's own head timer would
/// also end idle keep-alive connections at the head timeout, so it is off
/// there; the admin port keeps it (hyper's 30 s default).
fn connection_builder(watched: bool) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    if watched {
        builder.http1().header_read_timeout(None);
    }
    builder.http2().timer(TokioTimer::new());
    builder
}

/// Which listener a connection limit and its watchdog apply to (the admin
/// port has neither: probes and scrapes must get through whatever clients do).
#[derive(Clone)]
struct Limited {
    /// An index into `conn::admission::LISTENERS`.
    listener: usize,
    apps: Arc<Apps>,
    connections: Arc<Connections>,
}

const PROXY: usize = 0;
const AUTHZ: usize = 1;

/// Accepts connections until dropped. Each connection runs in its own task,
/// watched by `graceful` so shutdown can wait for it. On a `limited`
/// listener a connection takes a slot (or is closed at once when the limits
/// are reached) and runs under the watchdog of `conn.rs`.
async fn accept<S, B>(
    listener: &TcpListener,
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    conns: &mut JoinSet<()>,
    limited: Option<Limited>,
    make_service: impl Fn(SocketAddr, framing::Connection, conn::Activity) -> S,
) where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let watch = match &limited {
                        Some(l) => {
                            let app = l.apps.load();
                            let limits = app.client;
                            let admitted = l.connections.admit(
                                l.listener,
                                peer.ip(),
                                limits.max_connections,
                                limits.max_connections_per_client,
                            );
                            match admitted {
                                Ok(slot) => Some((slot, limits, app.metrics.clone(), l.listener)),
                                Err(reason) => {
                                    app.metrics
                                        .connection_refused(LISTENERS[l.listener], reason);
                                    tracing::debug!(%peer, reason, "connection refused at accept");
                                    drop(stream);
                                    continue;
                                }
                            }
                        }
                        None => None,
                    };
                    // Every byte read also goes to the connection's framing sniffer.
                    let framing = framing::Connection::default();
                    let activity = conn::Activity::default();
                    let io = TokioIo::new(framing.wrap(stream));
                    let service = make_service(peer, framing.clone(), activity.clone());
                    let conn = builder.serve_connection(io, service).into_owned();
                    let conn = graceful.watch(conn);
                    conns.spawn(async move {
                        let ended = match watch {
                            None => conn.await,
                            Some((slot, limits, metrics, listener)) => {
                                let _slot = slot;
                                // The timeout is counted inside the branch's own future:
                                // select! drops the connection (closing it) before a
                                // handler runs, and a client that sees the close must
                                // find it counted already.
                                let timed_out = async {
                                    let phase = conn::watchdog(activity, framing, limits).await;
                                    metrics.client_timeout(LISTENERS[listener], phase.label());
                                    phase
                                };
                                tokio::select! {
                                    ended = conn => ended,
                                    phase = timed_out => {
                                        tracing::debug!(%peer, phase = phase.label(), "client too slow: connection closed");
                                        Ok(())
                                    }
                                }
                            }
                        };
                        if let Err(e) = ended {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            // Reap finished connections so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

fn proxy_service(
    apps: Arc<Apps>,
    peer: SocketAddr,
    framing: framing::Connection,
    activity: conn::Activity,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<ResponseBody>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<ResponseBody>, Infallible>> + Send,
> + Send {
    let client = Client { ip: peer.ip() };
    service_fn(move |mut req: Request<Incoming>| {
        // hyper calls the service once per request, in order: the sniffer's
        // verdict on this one travels with it to the handler.
        req.extensions_mut().insert(framing.next_verdict());
        let busy = activity.busy();
        // The state as of this request's arrival; a reload during it does not
        // change what it is checked and forwarded with.
        let app = apps.load_full();
        async move {
            let id = crate::proxy::headers::request_id(req.headers());
            let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or_default());
            let response = handler::handle(&app, client, id, req)
                .instrument(span)
                .await;
            Ok(response.map(|body| body.holding(busy)))
        }
    })
}

/// What the authz and admin listeners answer: always a whole body.
type FullResponse = Response<http_body_util::Full<bytes::Bytes>>;

fn authz_service(
    apps: Arc<Apps>,
    framing: framing::Connection,
    activity: conn::Activity,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = FullResponse,
    Error = Infallible,
    Future = impl Future<Output = Result<FullResponse, Infallible>> + Send,
> + Send {
    service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(framing.next_verdict());
        // Whole answers: the connection is busy until the check is decided.
        let busy = activity.busy();
        let app = apps.load_full();
        async move {
            let id = crate::proxy::headers::request_id(req.headers());
            let span = tracing::info_span!("authz", request_id = id.to_str().unwrap_or_default());
            let response = crate::ext::authz_http::handle(&app, id, req)
                .instrument(span)
                .await;
            drop(busy);
            Ok(response)
        }
    })
}

fn admin_service(
    apps: Arc<Apps>,
    connections: Arc<Connections>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = FullResponse,
    Error = Infallible,
    Future = impl Future<Output = Result<FullResponse, Infallible>> + Send,
> + Send {
    service_fn(move |req| {
        let app = apps.load_full();
        let connections = connections.clone();
        async move { Ok(admin::handle(&app, &connections, &req)) }
    })
}
