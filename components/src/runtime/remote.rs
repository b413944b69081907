//! A runtime answered elsewhere: the application-facing API served by another
//! process (a Dapr-compatible sidecar over HTTP), so that what is certified in
//! process is certified through it, unchanged, by the same cases.

use super::{
    BulkPublishRequest, BulkPublishResponse, Handler, PublishRequest, Subscription,
    SubscriptionHandle,
};
use crate::error::Result;
use crate::message::MessageId;
use async_trait::async_trait;

/// The `component` of a [`crate::PubSubError::Unsupported`] that says the remote
/// runtime's API has no words for what was asked, not that the component lacks it.
pub const BEYOND_REMOTE_API: &str = "remote-api";

/// The application-facing pub/sub API of a runtime the suite does not run itself.
/// Requests go to it as they are: validating them is the remote runtime's job, and
/// part of what is certified.
#[async_trait]
pub trait RemoteRuntime: Send + Sync {
    /// Publishes one message.
    async fn publish(&self, request: PublishRequest) -> Result<MessageId>;
    /// Publishes a bulk request, answering its failed entries.
    async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse>;
    /// Starts delivering `subscription` to `handler`; ready once the remote runtime
    /// has taken the subscription.
    async fn subscribe(
        &self,
        subscription: Subscription,
        handler: Handler,
    ) -> Result<SubscriptionHandle>;
    /// Makes the subscription's group keep messages from now on, ahead of its first
    /// subscriber, where the remote API can express that.
    async fn create_group(&self, subscription: &Subscription) -> Result<()>;
    /// Whether JSON payloads cross as the values they parse to, serialized again (an
    /// SDK client publishing them, an SDK app handing its handler the parsed
    /// value), so they arrive equal as JSON, not byte for byte. Default: as they are.
    fn reserializes_json(&self) -> bool {
        false
    }

    /// Whether the remote runtime runs in this process, so that the spans it
    /// records (a delivery's `pubsub.deliver`) reach this process's tracing
    /// subscriber. Default: it runs elsewhere (a sidecar process), its spans there.
    fn records_spans_here(&self) -> bool {
        false
    }

    /// Why the subscribing app's handler sees only an event's data and metadata
    /// (no CloudEvent, no content type), as an SDK's handler does; `None`: it sees
    /// the whole event.
    fn hands_over_data_only(&self) -> Option<&'static str> {
        None
    }

    /// Why a delivery's attempt is as the app that received it counted it (the API
    /// carries no attempt number), so that attempts do not count on across the
    /// members of a group; `None`: the component's own count. Default: `None`.
    fn counts_attempts_per_app(&self) -> Option<&'static str> {
        None
    }

    /// Whether deliveries reach the subscribing app over gRPC, whose metadata names
    /// are fewer than HTTP's (digits, lowercase letters, `_`, `-`, `.`; none ending in
    /// `-bin` for text), so that a metadata key outside them cannot arrive. Default:
    /// over HTTP.
    fn delivers_metadata_over_grpc(&self) -> bool {
        false
    }
}
