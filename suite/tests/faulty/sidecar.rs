//! Deliberately faulty sidecars: `serve` behind an HTTP proxy that changes one thing
//! on the wire, as a sidecar with one defect would. Each must make the cases it
//! breaks FAIL when certified with `--sidecar`.

use async_trait::async_trait;
use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode};
use axum::response::Response;
use pubsub_sidecar::launch::{Launched, Launcher};
use std::sync::Arc;

/// One wire defect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarFault {
    /// Reports failed bulk entries under their ids in lower case (a sidecar that
    /// keeps entries in a map whose keys ignore case).
    FoldsEntryIdCase,
}

/// Starts `inner`'s sidecars behind a proxy with `fault`.
pub struct FaultySidecars {
    pub inner: Arc<dyn Launcher>,
    pub fault: SidecarFault,
}

#[async_trait]
impl Launcher for FaultySidecars {
    async fn launch_on(
        &self,
        app_id: &str,
        app_port: u16,
        http_port: u16,
    ) -> anyhow::Result<Box<dyn Launched>> {
        let inner = self.inner.launch(app_id, app_port).await?;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", http_port)).await?;
        let proxy = Proxy {
            upstream: inner.base(),
            client: reqwest::Client::new(),
            fault: self.fault,
        };
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::new(proxy));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Box::new(ProxiedSidecar {
            base: format!("http://127.0.0.1:{http_port}"),
            inner,
            server,
        }))
    }

    fn describe(&self) -> String {
        format!(
            "{} behind a proxy that {:?}",
            self.inner.describe(),
            self.fault
        )
    }

    fn in_process(&self) -> bool {
        self.inner.in_process()
    }
}

struct ProxiedSidecar {
    base: String,
    inner: Box<dyn Launched>,
    server: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl Launched for ProxiedSidecar {
    fn base(&self) -> String {
        self.base.clone()
    }

    async fn stop(self: Box<Self>) {
        self.server.abort();
        self.inner.stop().await;
    }
}

struct Proxy {
    upstream: String,
    client: reqwest::Client,
    fault: SidecarFault,
}

/// Forwards one request upstream and its answer back, with the fault applied.
async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let Ok(body) = to_bytes(body, usize::MAX).await else {
        return status(StatusCode::BAD_REQUEST);
    };
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).unwrap();
    let mut upstream = proxy
        .client
        .request(method, format!("{}{path}", proxy.upstream))
        .body(body);
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            upstream = upstream.header(name.as_str(), value.as_bytes());
        }
    }
    let Ok(answer) = upstream.send().await else {
        return status(StatusCode::BAD_GATEWAY);
    };
    let code = answer.status().as_u16();
    let headers: Vec<(String, Vec<u8>)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| *name != "content-length" && *name != "transfer-encoding")
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let mut bytes = answer.bytes().await.unwrap_or_default().to_vec();
    if proxy.fault == SidecarFault::FoldsEntryIdCase && path.contains("/publish/bulk/") {
        bytes = fold_failed_entry_ids(&bytes);
    }
    let mut response = Response::builder().status(code);
    for (name, value) in headers {
        if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(bytes)).unwrap()
}

/// A bulk publish answer with every `failedEntries[].entryId` in lower case.
fn fold_failed_entry_ids(body: &[u8]) -> Vec<u8> {
    let Ok(mut answer) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    if let Some(entries) = answer["failedEntries"].as_array_mut() {
        for entry in entries {
            if let Some(id) = entry["entryId"].as_str() {
                entry["entryId"] = serde_json::Value::String(id.to_lowercase());
            }
        }
    }
    serde_json::to_vec(&answer).unwrap()
}

fn status(code: StatusCode) -> Response {
    Response::builder()
        .status(code)
        .body(Body::empty())
        .unwrap()
}
