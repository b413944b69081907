//! An HTTP server in its own task, stopped on a signal after the requests under way.

use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Serves `router` on `listener` until the returned sender says true; `what` names
/// the server in the error logged should it fail.
pub(crate) fn spawn(
    listener: tokio::net::TcpListener,
    router: Router,
    what: &'static str,
) -> (watch::Sender<bool>, JoinHandle<()>) {
    let (stop, mut stopped) = watch::channel(false);
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "{what} failed");
        }
    });
    (stop, server)
}
