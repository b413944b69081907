//! The API's servers (HTTP, gRPC) in their own tasks, stopped on a signal after the
//! requests under way.

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

/// Serves the gRPC `routes` on `listener` until `stopped` says true.
pub(crate) fn spawn_grpc(
    listener: tokio::net::TcpListener,
    routes: tonic::service::Routes,
    mut stopped: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        // Replies go out at once, without Nagle's delay, as the HTTP server's do.
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
        {
            tracing::error!(error = %e, "the sidecar's gRPC server failed");
        }
    })
}
