//! The app channel: what a sidecar asks of the app it serves over HTTP (its
//! subscriptions, `GET /dapr/subscribe`) and how it delivers events to it.

use crate::wire::AppSubscription;
use std::time::Duration;
use tokio::time::Instant;

/// An HTTP client for one app at `base` (e.g. `http://127.0.0.1:3000`).
#[derive(Clone, Debug)]
pub struct AppChannel {
    client: reqwest::Client,
    base: String,
}

/// The app's answer to a delivery: its HTTP status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

impl AppChannel {
    /// A channel to the app at `base`; a delivery the app has not answered within
    /// `timeout` fails (and is retried, as any failed delivery).
    pub fn new(base: impl Into<String>, timeout: Duration) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the app's HTTP client: {e}"))?;
        Ok(AppChannel {
            client,
            base: base.into().trim_end_matches('/').to_string(),
        })
    }

    /// The app's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The app's subscriptions (`GET /dapr/subscribe`), asked until the app answers
    /// or `within` passes (an app may start after its sidecar). A 404 means none, as
    /// daprd reads it; a body that is not a list of subscriptions is an error naming
    /// what was wrong.
    pub async fn subscriptions(&self, within: Duration) -> anyhow::Result<Vec<AppSubscription>> {
        let url = format!("{}/dapr/subscribe", self.base);
        let deadline = Instant::now() + within;
        let response = loop {
            match self.client.get(&url).send().await {
                Ok(response) => break response,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "the app does not answer yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => anyhow::bail!(
                    "the app at {} did not answer GET /dapr/subscribe within {within:?}: {e}",
                    self.base
                ),
            }
        };
        let status = response.status().as_u16();
        if status == 404 {
            return Ok(Vec::new());
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| anyhow::anyhow!("reading the app's GET /dapr/subscribe answer: {e}"))?;
        if !(200..300).contains(&status) {
            anyhow::bail!(
                "the app answered GET /dapr/subscribe with HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        serde_json::from_slice(&body).map_err(|e| {
            anyhow::anyhow!(
                "the app's GET /dapr/subscribe answer is not a list of subscriptions ({e}): {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )
        })
    }

    /// POSTs `body` to the app's `path` with the message's `metadata` as headers; an `Err` is a transport failure (refused,
    /// reset, timed out) naming it.
    pub async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        content_type: &str,
        traceparent: Option<&str>,
        metadata: &pubsub_components::Metadata,
    ) -> Result<AppResponse, String> {
        let mut request = self.client.post(format!("{}{path}", self.base));
        // The message's metadata as headers, as daprd adds them
        // (WithCustomHTTPMetadata); a key or value no header can carry is left out.
        for (key, value) in metadata {
            let name = reqwest::header::HeaderName::from_bytes(key.as_bytes());
            let value = reqwest::header::HeaderValue::from_bytes(value.as_bytes());
            match (name, value) {
                (Ok(name), Ok(value)) if name != reqwest::header::CONTENT_LENGTH => {
                    request = request.header(name, value)
                }
                _ => tracing::debug!(%key, "metadata that no header can carry"),
            }
        }
        let mut request = request
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("delivering to the app's {path} failed: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("reading the app's answer from {path} failed: {e}"))?;
        Ok(AppResponse {
            status,
            body: body.to_vec(),
        })
    }
}
