//! `serve`'s channel to an app that speaks gRPC (`--app-protocol grpc`): its
//! subscriptions read from `ListTopicSubscriptions`, events delivered with
//! `OnTopicEvent` (the message's metadata as the call's metadata, as daprd sends it)
//! and batches with `OnBulkTopicEvent`, falling back to `OnBulkTopicEventAlpha1` when
//! the app answers `Unimplemented`. The app's answers map as daprd maps them: a
//! status per event (unknown: RETRY), `Unimplemented` settles the event unhandled,
//! any other error retries it; in a batch, an entry without a status is RETRY.

use crate::wire::{AppSubscription, BulkSubscribe, Routes, Rule, DAPR_EVENT_TYPE};
use async_trait::async_trait;
use dapr::dapr::proto::runtime::v1 as runtime;
use dapr::dapr::proto::runtime::v1::app_callback_alpha_client::AppCallbackAlphaClient;
use dapr::dapr::proto::runtime::v1::app_callback_client::AppCallbackClient;
use dapr::dapr::proto::runtime::v1::topic_event_response::TopicEventResponseStatus;
use pubsub_components::runtime::{Batch, BulkHandler, EntryStatus, Event, MessageHandler, Status};
use pubsub_components::Metadata;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

/// A gRPC client for one app at `base` (e.g. `http://127.0.0.1:3000`).
#[derive(Clone, Debug)]
pub struct GrpcAppChannel {
    base: String,
    channel: Channel,
    /// The app answered the stable bulk callback `Unimplemented`: batches go to the
    /// Alpha1 one from then on.
    alpha_bulk: Arc<AtomicBool>,
}

impl GrpcAppChannel {
    /// A channel to the app at `base`, connected on first use; a call the app has not
    /// answered within `timeout` fails (and the delivery is retried).
    pub fn new(base: impl Into<String>, timeout: Duration) -> anyhow::Result<Self> {
        let base = base.into();
        let channel = Endpoint::from_shared(base.clone())
            .map_err(|e| anyhow::anyhow!("{base} is not an app address: {e}"))?
            .timeout(timeout)
            .connect_lazy();
        Ok(GrpcAppChannel {
            base,
            channel,
            alpha_bulk: Arc::default(),
        })
    }

    /// The app's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The app's subscriptions (`ListTopicSubscriptions`), asked until the app
    /// answers or `within` passes. `Unimplemented` means none, as daprd reads it.
    pub async fn subscriptions(&self, within: Duration) -> anyhow::Result<Vec<AppSubscription>> {
        let deadline = Instant::now() + within;
        let mut client = AppCallbackClient::new(self.channel.clone());
        let answer = loop {
            match client.list_topic_subscriptions(()).await {
                Ok(answer) => break answer.into_inner(),
                Err(status) if status.code() == Code::Unimplemented => return Ok(Vec::new()),
                Err(status) if Instant::now() < deadline => {
                    tracing::debug!(%status, "the app does not answer yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(status) => anyhow::bail!(
                    "the app at {} did not answer ListTopicSubscriptions within {within:?}: {status}",
                    self.base
                ),
            }
        };
        Ok(answer.subscriptions.into_iter().map(declared).collect())
    }

    /// Delivers one event: `Ok` with the app's status, `Err` where the delivery
    /// failed (retried).
    async fn on_topic_event(
        &self,
        event: runtime::TopicEventRequest,
        metadata: &Metadata,
        traceparent: Option<&str>,
    ) -> Result<Status, String> {
        let mut request = tonic::Request::new(event);
        with_metadata(request.metadata_mut(), metadata, traceparent);
        let mut client = AppCallbackClient::new(self.channel.clone());
        match client.on_topic_event(request).await {
            Ok(answer) => Ok(status_of(answer.into_inner().status)),
            // An event the app says it does not handle is settled, as daprd settles
            // it: not delivered again, not dead-lettered.
            Err(status) if status.code() == Code::Unimplemented => {
                tracing::warn!(%status, "the app does not handle the event: settled unhandled");
                Ok(Status::Success)
            }
            Err(status) => Err(format!("the app's OnTopicEvent failed: {status}")),
        }
    }

    /// Delivers one batch: `OnBulkTopicEvent`, or its Alpha1 twin where the app
    /// answers `Unimplemented`. Both unimplemented: every entry is settled
    /// unhandled, as daprd settles them.
    async fn on_bulk_topic_event(
        &self,
        batch: runtime::TopicEventBulkRequest,
    ) -> Result<Vec<runtime::TopicEventBulkResponseEntry>, String> {
        let ids: Vec<String> = batch.entries.iter().map(|e| e.entry_id.clone()).collect();
        let alpha = || async {
            let mut alpha = AppCallbackAlphaClient::new(self.channel.clone());
            #[allow(deprecated)] // the fallback daprd makes
            alpha.on_bulk_topic_event_alpha1(batch.clone()).await
        };
        let answer = if self.alpha_bulk.load(Ordering::Relaxed) {
            alpha().await
        } else {
            let mut stable = AppCallbackClient::new(self.channel.clone());
            match stable.on_bulk_topic_event(batch.clone()).await {
                Err(status) if status.code() == Code::Unimplemented => {
                    self.alpha_bulk.store(true, Ordering::Relaxed);
                    alpha().await
                }
                other => other,
            }
        };
        match answer {
            Ok(answer) => Ok(answer.into_inner().statuses),
            Err(status) if status.code() == Code::Unimplemented => Ok(ids
                .into_iter()
                .map(|entry_id| runtime::TopicEventBulkResponseEntry {
                    entry_id,
                    status: TopicEventResponseStatus::Success as i32,
                })
                .collect()),
            Err(status) => Err(format!("the app's OnBulkTopicEvent failed: {status}")),
        }
    }
}

/// A subscription the app lists, as the app channel's subscriptions are kept.
fn declared(subscription: runtime::TopicSubscription) -> AppSubscription {
    let routes = subscription.routes.map(|routes| Routes {
        rules: routes
            .rules
            .into_iter()
            .map(|rule| Rule {
                matches: rule.r#match,
                path: rule.path,
            })
            .collect(),
        default: Some(routes.default).filter(|d| !d.is_empty()),
    });
    // A subscription without routes is delivered with the empty path, as daprd
    // delivers it ([`AppSubscription::grpc_path`]).
    AppSubscription {
        pubsub_name: subscription.pubsub_name,
        topic: subscription.topic,
        route: None,
        routes,
        metadata: subscription.metadata.into_iter().collect(),
        dead_letter_topic: Some(subscription.dead_letter_topic).filter(|t| !t.is_empty()),
        bulk_subscribe: subscription.bulk_subscribe.map(|b| BulkSubscribe {
            enabled: b.enabled,
            max_messages_count: u32::try_from(b.max_messages_count).ok().filter(|n| *n > 0),
            max_await_duration_ms: u64::try_from(b.max_await_duration_ms)
                .ok()
                .filter(|n| *n > 0),
        }),
    }
}

/// A message's metadata as the call's metadata (keys lowercased, values the bytes
/// they are, UTF-8 included, as over HTTP; what gRPC metadata cannot carry is left
/// out: a name outside digits, lowercase letters, `_`, `-` and `.`, which gRPC servers
/// such as grpcio refuse, failing the whole call), and its `traceparent`.
fn with_metadata(
    headers: &mut tonic::metadata::MetadataMap,
    metadata: &Metadata,
    traceparent: Option<&str>,
) {
    let grpc_name = |key: &str| {
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    };
    for (key, value) in metadata.iter().filter(|(key, _)| grpc_name(key)) {
        let name = tonic::metadata::MetadataKey::from_bytes(key.to_ascii_lowercase().as_bytes());
        let value = tonic::metadata::AsciiMetadataValue::try_from(value.as_bytes());
        match (name, value) {
            (Ok(name), Ok(value))
                if !matches!(name.as_str(), "content-type" | "content-length") =>
            {
                headers.insert(name, value);
            }
            _ => tracing::debug!(%key, "metadata that no header can carry"),
        }
    }
    if let Some(traceparent) = traceparent.and_then(|t| t.parse().ok()) {
        headers.insert("traceparent", traceparent);
    }
}

/// An answer's status as the runtime's: an unknown value is RETRY, as daprd reads it.
fn status_of(status: i32) -> Status {
    match TopicEventResponseStatus::try_from(status) {
        Ok(TopicEventResponseStatus::Success) => Status::Success,
        Ok(TopicEventResponseStatus::Drop) => Status::Drop,
        _ => Status::Retry,
    }
}

/// Where a subscription's events go over gRPC.
#[derive(Clone, Debug)]
pub struct GrpcRoute {
    pub app: GrpcAppChannel,
    pub pubsub_name: String,
    pub path: String,
    pub raw_payload: bool,
}

/// Delivers one event at a time to the app.
pub struct GrpcSingleDelivery {
    pub route: GrpcRoute,
}

#[async_trait]
impl MessageHandler for GrpcSingleDelivery {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        let mut request =
            super::stream::topic_event(&event, &self.route.pubsub_name, self.route.raw_payload);
        request.path = self.route.path.clone();
        self.route
            .app
            .on_topic_event(request, &event.metadata, event.trace_parent.as_deref())
            .await
    }
}

/// Delivers batches to the app.
pub struct GrpcBulkDelivery {
    pub route: GrpcRoute,
}

#[async_trait]
impl BulkHandler for GrpcBulkDelivery {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String> {
        use runtime::topic_event_bulk_request_entry::Event as Entry;
        let entries = batch
            .entries
            .iter()
            .map(|entry| {
                let event = super::stream::topic_event(
                    &entry.event,
                    &self.route.pubsub_name,
                    self.route.raw_payload,
                );
                let (content_type, event) = if self.route.raw_payload {
                    (event.data_content_type.clone(), Entry::Bytes(event.data))
                } else {
                    (
                        crate::wire::CLOUD_EVENT_CONTENT_TYPE.to_string(),
                        Entry::CloudEvent(runtime::TopicEventCeRequest {
                            id: event.id,
                            source: event.source,
                            r#type: event.r#type,
                            spec_version: event.spec_version,
                            data_content_type: event.data_content_type,
                            data: event.data,
                            extensions: event.extensions,
                        }),
                    )
                };
                runtime::TopicEventBulkRequestEntry {
                    entry_id: entry.entry_id.clone(),
                    content_type,
                    metadata: entry.event.metadata.clone().into_iter().collect(),
                    event: Some(event),
                }
            })
            .collect();
        let request = runtime::TopicEventBulkRequest {
            id: batch.id.clone(),
            entries,
            metadata: Default::default(),
            topic: batch.topic.clone(),
            pubsub_name: self.route.pubsub_name.clone(),
            r#type: format!("{DAPR_EVENT_TYPE}.bulk"),
            path: self.route.path.clone(),
        };
        let answered = self.route.app.on_bulk_topic_event(request).await?;
        // An entry without a status is RETRY; a status for an id not in the batch is
        // ignored (daprd's reading, and the documentation's).
        Ok(batch
            .entries
            .iter()
            .map(|entry| {
                let status = answered
                    .iter()
                    .find(|a| a.entry_id == entry.entry_id)
                    .map_or(Status::Retry, |a| status_of(a.status));
                EntryStatus {
                    entry_id: entry.entry_id.clone(),
                    status,
                }
            })
            .collect())
    }
}
