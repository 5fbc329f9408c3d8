//! The signals that stop the process.

/// SIGTERM (what Kubernetes and `docker stop` send) or Ctrl-C.
///
/// The handlers are installed when this is called, not when the future is
/// first polled: call it before announcing readiness, or a SIGTERM sent right
/// after the announcement (a loaded machine can delay the first poll) meets
/// the default action and kills the process without draining.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        async fn first(s: Option<Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        let term = first(signal(SignalKind::terminate()).ok());
        let int = first(signal(SignalKind::interrupt()).ok());
        async move {
            tokio::select! {
                () = term => {}
                () = int => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
