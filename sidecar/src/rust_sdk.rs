//! Dapr's Rust SDK (the `dapr` crate, pinned in this crate's manifest) as the publisher
//! of a certification row: the cases' publishes go through its `Client` over gRPC, in
//! this process. What the SDK returns is what the case sees. Its client has no bulk
//! publish, so a bulk request is UNSUPPORTED, saying so.

use pubsub_components::runtime::{BulkPublishRequest, BulkPublishResponse, PublishRequest};
use pubsub_components::{MessageId, PubSubError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The SDK and the version this crate pins (`dapr = "=0.20.0"` in `sidecar/Cargo.toml`;
/// a unit test holds them together), for reports.
pub const RUST_SDK: &str = "dapr (Rust) 0.20.0";

/// The SDK's client, connected to one sidecar.
pub struct RustSdkPublisher {
    client: dapr::Client<dapr::client::TonicClientWithAuth>,
    pubsub: String,
    positions: AtomicU64,
}

impl RustSdkPublisher {
    /// Connects the SDK's client to the sidecar's gRPC API at `base` (e.g.
    /// `http://127.0.0.1:50001`), publishing to pub/sub `pubsub`.
    pub async fn connect(base: &str, pubsub: &str) -> anyhow::Result<Self> {
        let options = dapr::client::ClientOptions::new()
            .with_address(base)
            .with_timeout(Duration::from_secs(60));
        let client = dapr::Client::from_options(options)
            .await
            .map_err(|e| anyhow::anyhow!("{RUST_SDK} cannot connect to {base}: {e:?}"))?;
        Ok(RustSdkPublisher {
            client,
            pubsub: pubsub.to_string(),
            positions: AtomicU64::new(0),
        })
    }

    /// A publish as an app author makes it: `publish_event` with the content type (empty
    /// when none) and the metadata.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        let topic = request.topic.clone();
        self.client
            .clone()
            .publish_event(
                self.pubsub.clone(),
                request.topic,
                request.content_type.unwrap_or_default(),
                request.data,
                Some(request.metadata.into_iter().collect()),
            )
            .await
            .map_err(|e| sdk_error(&e, "publishing"))?;
        Ok(MessageId::new(
            topic,
            None,
            self.positions.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// The SDK's client has no bulk publish.
    pub async fn bulk_publish(&self, _: BulkPublishRequest) -> Result<BulkPublishResponse> {
        Err(PubSubError::Unsupported {
            component: RUST_SDK.into(),
            feature: "bulk publish: the crate's Client has no bulk publish method".into(),
        })
    }
}

/// An error the SDK returned. Its gRPC status is a private field of the SDK's
/// `GrpcError`, shown only in its debug text, so the code and `ErrorInfo` reason are
/// read from there (as an app author would have to) and mapped as the suite's own gRPC
/// client maps them.
fn sdk_error(error: &dapr::error::Error, what: &str) -> PubSubError {
    let text = format!("{error:?}");
    let field = |name: &str| {
        let start = text.find(&format!("{name}: "))? + name.len() + 2;
        let rest = &text[start..];
        let end = rest.find([',', ' ', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim_matches('"').to_string())
    };
    let code = field("code").and_then(|name| crate::grpc_client::code_named(&name));
    // The `ErrorInfo` reason is in the details' bytes, shown escaped: daprd's reasons
    // are `DAPR_` and capitals.
    let reason = text.find("DAPR_").map(|start| {
        text[start..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect::<String>()
    });
    match code {
        Some(code) => {
            crate::grpc_client::error_of(code, reason.as_deref().unwrap_or(""), &text, what)
        }
        None => PubSubError::Broker {
            context: format!("{what} through {RUST_SDK}"),
            message: text,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_status_is_read_from_its_debug_text() {
        let refused: dapr::error::Error = tonic::Status::invalid_argument("topic is empty").into();
        assert!(matches!(
            sdk_error(&refused, "publishing"),
            PubSubError::InvalidRequest(text) if text.contains("topic is empty")
        ));
        let failed: dapr::error::Error = tonic::Status::internal("broker down").into();
        assert!(matches!(
            sdk_error(&failed, "publishing"),
            PubSubError::Broker { .. }
        ));
    }

    #[test]
    fn the_reported_version_is_the_pinned_one() {
        let lock =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
        let pinned = lock
            .split("[[package]]")
            .find(|p| p.contains("name = \"dapr\"\n"))
            .and_then(|p| p.split("version = \"").nth(1))
            .and_then(|v| v.split('"').next())
            .unwrap();
        assert_eq!(RUST_SDK, format!("dapr (Rust) {pinned}"));
    }
}
