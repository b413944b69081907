//! The application-facing request, event and handler types of the runtime layer.

use crate::component::{StartPosition, TopicSelector};
use crate::message::{MessageId, Metadata};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishRequest {
    pub topic: String,
    pub data: Vec<u8>,
    pub content_type: Option<String>,
    /// Application metadata; Dapr control keys (`rawPayload`, `ttlInSeconds`,
    /// `deliverAt`, `deliverAfter`, `partitionKey`, `traceparent`) are read from it.
    pub metadata: Metadata,
}

impl PublishRequest {
    /// A request with no content type and no metadata.
    pub fn new(topic: impl Into<String>, data: impl Into<Vec<u8>>) -> Self {
        PublishRequest {
            topic: topic.into(),
            data: data.into(),
            content_type: None,
            metadata: Metadata::new(),
        }
    }

    /// Adds one metadata entry.
    pub fn with_metadata(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata.insert(key.to_string(), value.into());
        self
    }

    /// Sets the content type.
    pub fn with_content_type(mut self, content_type: &str) -> Self {
        self.content_type = Some(content_type.to_string());
        self
    }
}

/// A bulk publish request (Dapr's `BulkPublishRequest`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BulkPublishRequest {
    pub topic: String,
    pub entries: Vec<BulkPublishEntry>,
    /// Applies to every entry; an entry's own metadata overrides it key by key.
    /// Also carries `batchPublishKeepOrder` and `maxBulkPubBytes`.
    pub metadata: Metadata,
}

/// One entry of a bulk publish request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BulkPublishEntry {
    /// Present, non-empty and unique within the request.
    pub entry_id: String,
    pub event: Vec<u8>,
    pub content_type: Option<String>,
    pub metadata: Metadata,
}

/// The outcome of a bulk publish: every entry not listed here was published.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BulkPublishResponse {
    #[serde(rename = "failedEntries")]
    pub failed_entries: Vec<FailedEntry>,
}

impl BulkPublishResponse {
    /// The HTTP status Dapr answers with: 204 when all succeeded, 500 otherwise.
    pub fn http_status(&self) -> u16 {
        if self.failed_entries.is_empty() {
            204
        } else {
            500
        }
    }

    /// True when `entry_id` is reported failed.
    pub fn failed(&self, entry_id: &str) -> bool {
        self.failed_entries.iter().any(|f| f.entry_id == entry_id)
    }
}

/// An entry that was not (or may not have been) published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedEntry {
    #[serde(rename = "entryId")]
    pub entry_id: String,
    pub error: String,
}

/// Bulk subscribe options (Dapr's `bulkSubscribe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkSubscribeOptions {
    pub max_messages_count: usize,
    pub max_await_duration: Duration,
}

impl Default for BulkSubscribeOptions {
    /// Dapr's defaults: 100 messages, 1000 ms.
    fn default() -> Self {
        BulkSubscribeOptions {
            max_messages_count: 100,
            max_await_duration: Duration::from_millis(1000),
        }
    }
}

/// A subscription as an application declares it.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub topics: TopicSelector,
    pub group: String,
    pub start: StartPosition,
    pub dead_letter_topic: Option<String>,
    /// Deliveries before a retried message is dead-lettered (or dropped).
    pub max_deliveries: u32,
    /// Delay before a retried message comes back.
    pub retry_delay: Duration,
    /// A message is not delivered before its publish time plus this delay.
    pub receiver_delay: Option<Duration>,
    /// Set for a bulk subscription, used with a [`Handler::Bulk`].
    pub bulk: Option<BulkSubscribeOptions>,
}

impl Subscription {
    /// A subscription of one topic with defaults: 5 deliveries, 50 ms retry delay.
    pub fn new(topic: impl Into<String>, group: impl Into<String>) -> Self {
        Subscription::selecting(TopicSelector::Single(topic.into()), group)
    }

    /// A subscription of any topic selector.
    pub fn selecting(topics: TopicSelector, group: impl Into<String>) -> Self {
        Subscription {
            topics,
            group: group.into(),
            start: StartPosition::Earliest,
            dead_letter_topic: None,
            max_deliveries: 5,
            retry_delay: Duration::from_millis(50),
            receiver_delay: None,
            bulk: None,
        }
    }
}

/// A delivered message as the application sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The CloudEvent id (or the message id text for raw payloads).
    pub id: String,
    /// The owner topic.
    pub topic: String,
    pub data: Vec<u8>,
    pub content_type: Option<String>,
    /// Application metadata, as published.
    pub metadata: Metadata,
    pub message_id: MessageId,
    /// 1 on first delivery.
    pub attempt: u32,
    pub trace_parent: Option<String>,
    /// The CloudEvent envelope, unless `rawPayload` was set.
    pub cloud_event: Option<serde_json::Value>,
    pub published_at: SystemTime,
}

/// What the application answers for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// Processed: acknowledge.
    Success,
    /// Redeliver this message.
    Retry,
    /// Give up: acknowledge, and dead-letter when a dead-letter topic is set.
    Drop,
}

/// A batch handed to a bulk handler: entries of one topic.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: String,
    pub topic: String,
    pub entries: Vec<BatchEntry>,
}

/// One entry of a delivered batch.
#[derive(Debug, Clone)]
pub struct BatchEntry {
    pub entry_id: String,
    pub event: Event,
}

/// A bulk handler's answer for one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryStatus {
    #[serde(rename = "entryId")]
    pub entry_id: String,
    pub status: Status,
}

/// Handles one message at a time. An `Err` counts as RETRY.
#[async_trait]
pub trait MessageHandler: Send + Sync {
    async fn handle(&self, event: Event) -> Result<Status, String>;
}

/// Handles a batch. An `Err` retries the whole batch; a missing or unknown entry
/// status counts as RETRY.
#[async_trait]
pub trait BulkHandler: Send + Sync {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String>;
}

/// The handler of a subscription.
#[derive(Clone)]
pub enum Handler {
    Single(Arc<dyn MessageHandler>),
    Bulk(Arc<dyn BulkHandler>),
}
