//! One app for many subscriptions, each at a route of its own (`/pcs/<n>/deliver`):
//! the app of a sidecar the suite attaches to ([`crate::attach`]), whose
//! subscriptions are declared to the sidecar as resources rather than listed by the
//! app (it lists none). It speaks HTTP, or gRPC, where the route is the `path` of
//! each call.

use pubsub_components::runtime::Handler;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The shared app, running.
pub struct SharedApp {
    address: SocketAddr,
    routes: Routes,
    next: AtomicU64,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
}

/// The shared app's routes, for the protocol it speaks.
enum Routes {
    Http(crate::subscriber::RouteTable),
    Grpc(crate::grpc_subscriber::RouteTable),
}

/// Binds `port` of 127.0.0.1 (the port the sidecar was started with as its app
/// port).
async fn bind(port: u16) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {address} as the sidecar's app: {e}"))?;
    let address = listener.local_addr()?;
    Ok((listener, address))
}

/// The path of route number `route`.
fn path_of(route: u64) -> String {
    format!("/pcs/{route}/deliver")
}

impl SharedApp {
    /// Starts the app over HTTP on `port` of 127.0.0.1.
    pub async fn start(port: u16) -> anyhow::Result<SharedApp> {
        let (listener, address) = bind(port).await?;
        let routes = crate::subscriber::RouteTable::default();
        let (stop, server) = crate::server::spawn(
            listener,
            crate::subscriber::shared_router(routes.clone()),
            "the suite's shared app server",
        );
        Ok(SharedApp {
            address,
            routes: Routes::Http(routes),
            next: AtomicU64::new(1),
            stop,
            server,
        })
    }

    /// Starts the app over gRPC (Dapr's app callbacks) on `port` of 127.0.0.1.
    pub async fn start_grpc(port: u16) -> anyhow::Result<SharedApp> {
        let (listener, address) = bind(port).await?;
        let (stop, stopped) = watch::channel(false);
        let (routes, server) = crate::grpc_subscriber::serve_shared(listener, stopped);
        Ok(SharedApp {
            address,
            routes: Routes::Grpc(routes),
            next: AtomicU64::new(1),
            stop,
            server,
        })
    }

    /// The app's port.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// A new route handing what arrives there to `handler` (none: every delivery
    /// is answered to be delivered again): its number and path.
    pub fn add(&self, handler: Option<Handler>) -> (u64, String) {
        let route = self.next.fetch_add(1, Ordering::Relaxed);
        let path = path_of(route);
        match &self.routes {
            Routes::Http(routes) => {
                let state = crate::subscriber::route_state(handler);
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(route, state);
            }
            Routes::Grpc(routes) => {
                let state = crate::grpc_subscriber::route_state(handler);
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(path.clone(), state);
            }
        }
        (route, path)
    }

    /// Removes a route: what still arrives there is answered to be delivered again
    /// (HTTP 503, gRPC RETRY), never dropped (HTTP 404 is DROP to a sidecar).
    pub fn remove(&self, route: u64) {
        match &self.routes {
            Routes::Http(routes) => {
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&route);
            }
            Routes::Grpc(routes) => {
                routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&path_of(route));
            }
        }
    }

    /// Stops the app.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
    }
}
