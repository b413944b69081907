//! The app's side of the runtime API over gRPC: publish and bulk publish sent to a
//! sidecar with the generated client of the pinned `dapr` crate, as an SDK sends
//! them, and the answers read back into the runtime's results.

use crate::wire::API_TOKEN_HEADER;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::dapr_client::DaprClient;
use pubsub_components::runtime::{
    BulkPublishRequest, BulkPublishResponse, FailedEntry, PublishRequest,
};
use pubsub_components::{MessageId, PubSubError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tonic::transport::Channel;
use tonic_types::StatusExt;

/// A gRPC client of one sidecar's publish API for one pub/sub name.
pub struct GrpcClient {
    client: DaprClient<Channel>,
    base: String,
    pubsub: String,
    api_token: Option<String>,
    /// Positions for the ids of published messages (the API answers none).
    positions: AtomicU64,
}

impl GrpcClient {
    /// A client of the sidecar's gRPC API at `base` (e.g. `http://127.0.0.1:50001`); a
    /// call unanswered within `timeout` fails.
    pub async fn connect(
        base: impl Into<String>,
        pubsub: impl Into<String>,
        api_token: Option<String>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let base = base.into();
        let channel = Channel::from_shared(base.clone())
            .map_err(|e| anyhow::anyhow!("{base} is not a gRPC address: {e}"))?
            .timeout(timeout)
            .connect()
            .await
            .map_err(|e| {
                anyhow::anyhow!("cannot connect to the sidecar's gRPC API at {base}: {e}")
            })?;
        let client = DaprClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(GrpcClient {
            client,
            base,
            pubsub: pubsub.into(),
            api_token,
            positions: AtomicU64::new(0),
        })
    }

    /// The sidecar's gRPC address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `PublishEvent`: the data, its content type, the metadata; a `traceparent` in
    /// the metadata also as the call's header.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        let topic = request.topic.clone();
        let traceparent = request.metadata.get("traceparent").cloned();
        let call = runtime::PublishEventRequest {
            pubsub_name: self.pubsub.clone(),
            topic: request.topic,
            data: request.data,
            data_content_type: request.content_type.unwrap_or_default(),
            metadata: request.metadata.into_iter().collect(),
        };
        let mut call = self.request(call)?;
        if let Some(traceparent) = traceparent.and_then(|t| t.parse().ok()) {
            call.metadata_mut().insert("traceparent", traceparent);
        }
        self.client
            .clone()
            .publish_event(call)
            .await
            .map_err(|status| error(status, "publishing"))?;
        Ok(MessageId::new(
            topic,
            None,
            self.positions.fetch_add(1, Ordering::Relaxed),
        ))
    }

    /// `BulkPublishEvent`: every entry with its bytes, content type and metadata.
    /// Entries that failed come back in the answer.
    pub async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        let call = runtime::BulkPublishRequest {
            pubsub_name: self.pubsub.clone(),
            topic: request.topic,
            entries: request
                .entries
                .into_iter()
                .map(|entry| runtime::BulkPublishRequestEntry {
                    entry_id: entry.entry_id,
                    event: entry.event,
                    content_type: entry.content_type.unwrap_or_default(),
                    metadata: entry.metadata.into_iter().collect(),
                })
                .collect(),
            metadata: request.metadata.into_iter().collect(),
        };
        let answer = self
            .client
            .clone()
            .bulk_publish_event(self.request(call)?)
            .await
            .map_err(|status| error(status, "bulk publishing"))?
            .into_inner();
        Ok(BulkPublishResponse {
            failed_entries: answer
                .failed_entries
                .into_iter()
                .map(|f| FailedEntry {
                    entry_id: f.entry_id,
                    error: f.error,
                })
                .collect(),
        })
    }

    fn request<T>(&self, message: T) -> Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.api_token {
            let value = token.parse().map_err(|_| {
                PubSubError::InvalidRequest("the API token is not a valid header value".into())
            })?;
            request.metadata_mut().insert(API_TOKEN_HEADER, value);
        }
        Ok(request)
    }
}

/// A gRPC error as the runtime's error: what refuses the request as invalid
/// (`InvalidArgument`, a message over the limit), what names nothing served (daprd's
/// reason `DAPR_PUBSUB_NOT_FOUND`, `NotFound`), what refuses the caller, and anything
/// else as the sidecar's or the broker's failure. The message keeps the code and
/// the `ErrorInfo` reason.
pub fn error(status: tonic::Status, what: &str) -> PubSubError {
    let reason = status
        .get_error_details()
        .error_info()
        .map(|info| info.reason.clone())
        .unwrap_or_default();
    error_of(status.code(), &reason, status.message(), what)
}

/// [`error`] of a status given as its code, `ErrorInfo` reason (empty: none) and
/// message (as a client in another language reports it).
pub fn error_of(code: tonic::Code, reason: &str, message: &str, what: &str) -> PubSubError {
    let detail = match reason {
        "" => format!("gRPC {code:?}: {message}"),
        reason => format!("gRPC {code:?} {reason}: {message}"),
    };
    use tonic::Code;
    match code {
        _ if reason == "DAPR_PUBSUB_NOT_FOUND" => PubSubError::NotFound(detail),
        Code::InvalidArgument | Code::ResourceExhausted | Code::OutOfRange => {
            PubSubError::InvalidRequest(detail)
        }
        Code::NotFound => PubSubError::NotFound(detail),
        Code::PermissionDenied | Code::Unauthenticated => PubSubError::NotAllowed(detail),
        _ => PubSubError::Broker {
            context: format!("{what} through the sidecar's gRPC API"),
            message: detail,
        },
    }
}

/// The gRPC code named `name` as grpcio names it (`INVALID_ARGUMENT`) or as tonic
/// shows it (`InvalidArgument`): clients in other languages report codes by name.
pub fn code_named(name: &str) -> Option<tonic::Code> {
    let bare = |text: &str| text.replace('_', "").to_ascii_lowercase();
    (0..=16)
        .map(tonic::Code::from_i32)
        .find(|code| bare(&format!("{code:?}")) == bare(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_read_by_either_name() {
        assert_eq!(
            code_named("INVALID_ARGUMENT"),
            Some(tonic::Code::InvalidArgument)
        );
        assert_eq!(
            code_named("InvalidArgument"),
            Some(tonic::Code::InvalidArgument)
        );
        assert_eq!(
            code_named("UNAUTHENTICATED"),
            Some(tonic::Code::Unauthenticated)
        );
        assert_eq!(code_named("OK"), Some(tonic::Code::Ok));
        assert_eq!(code_named(""), None);
        assert_eq!(code_named("NOT_A_CODE"), None);
    }
}
