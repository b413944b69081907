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

impl BulkPublishRequest {
    /// A request of `entries` to `topic`, with no request-level metadata.
    pub fn new(topic: impl Into<String>, entries: Vec<BulkPublishEntry>) -> Self {
        BulkPublishRequest {
            topic: topic.into(),
            entries,
            metadata: Metadata::new(),
        }
    }
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

impl Status {
    /// The status a wire answer spells (`SUCCESS`, `RETRY`, `DROP`); `None` for any
    /// other text.
    pub fn from_wire(text: &str) -> Option<Status> {
        match text {
            "SUCCESS" => Some(Status::Success),
            "RETRY" => Some(Status::Retry),
            "DROP" => Some(Status::Drop),
            _ => None,
        }
    }
}

/// A bulk handler's answer in the HTTP shape (`{"statuses":[{"entryId","status"}]}`),
/// read as the contract says: an entry with a missing or unknown status counts as
/// RETRY, and so does an entry the answer leaves out; what was read that way is
/// reported in `warnings`, naming the entry and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkAnswer {
    /// One status per entry of the batch, in the batch's order.
    pub statuses: Vec<EntryStatus>,
    /// Each unknown or missing status, each entry id not in the batch.
    pub warnings: Vec<String>,
}

impl BulkAnswer {
    /// Reads an answer to a batch of `entry_ids`. A body that is not such an answer
    /// (not JSON, no `statuses` array, an entry without a text `entryId`) is an error
    /// naming what was wrong: the handler failed, and the whole batch is retried.
    pub fn from_json(body: &[u8], entry_ids: &[&str]) -> Result<BulkAnswer, String> {
        let value: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| format!("the bulk answer is not JSON ({e}); expected {{\"statuses\":[{{\"entryId\",\"status\"}}]}}"))?;
        let answers = value
            .get("statuses")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| {
                "the bulk answer has no \"statuses\" array; expected {\"statuses\":[{\"entryId\",\"status\"}]}"
                    .to_string()
            })?;
        let mut given: std::collections::HashMap<&str, Status> = std::collections::HashMap::new();
        let mut warnings = Vec::new();
        for (index, answer) in answers.iter().enumerate() {
            let entry_id = answer
                .get("entryId")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("statuses[{index}] has no text \"entryId\""))?;
            let Some(wanted) = entry_ids.iter().find(|id| **id == entry_id) else {
                warnings.push(format!(
                    "statuses[{index}]: entry '{entry_id}' is not in the batch; ignored"
                ));
                continue;
            };
            let status = match answer.get("status") {
                Some(serde_json::Value::String(text)) => match Status::from_wire(text) {
                    Some(status) => status,
                    None => {
                        warnings.push(format!(
                            "entry '{entry_id}': unknown status '{text}' counts as RETRY (expected SUCCESS, RETRY or DROP)"
                        ));
                        Status::Retry
                    }
                },
                Some(other) => {
                    warnings.push(format!(
                        "entry '{entry_id}': status {other} is not text; counts as RETRY (expected SUCCESS, RETRY or DROP)"
                    ));
                    Status::Retry
                }
                None => {
                    warnings.push(format!("entry '{entry_id}': no status; counts as RETRY"));
                    Status::Retry
                }
            };
            if given.insert(wanted, status).is_some() {
                warnings.push(format!(
                    "entry '{entry_id}' is answered twice; the last answer counts"
                ));
            }
        }
        let statuses = entry_ids
            .iter()
            .map(|id| EntryStatus {
                entry_id: id.to_string(),
                status: given.get(id).copied().unwrap_or_else(|| {
                    warnings.push(format!("entry '{id}' has no answer; counts as RETRY"));
                    Status::Retry
                }),
            })
            .collect();
        Ok(BulkAnswer { statuses, warnings })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    fn read(body: &str) -> Result<BulkAnswer, String> {
        BulkAnswer::from_json(body.as_bytes(), &["a", "b", "c"])
    }

    #[test]
    fn unknown_missing_and_absent_statuses_count_as_retry_and_are_named() {
        let answer = read(
            r#"{"statuses":[{"entryId":"a","status":"SUCCESS"},{"entryId":"b","status":"OK"},{"entryId":"zz","status":"DROP"},{"entryId":"a","status":"DROP"}]}"#,
        )
        .unwrap();
        let statuses: Vec<Status> = answer.statuses.iter().map(|s| s.status).collect();
        assert_eq!(statuses, [Status::Drop, Status::Retry, Status::Retry]);
        let warnings = answer.warnings.join("\n");
        for expected in [
            "entry 'b': unknown status 'OK' counts as RETRY",
            "entry 'zz' is not in the batch",
            "entry 'a' is answered twice",
            "entry 'c' has no answer",
        ] {
            assert!(warnings.contains(expected), "{expected}: {warnings}");
        }
        let answer = read(r#"{"statuses":[{"entryId":"a"},{"entryId":"b","status":1}]}"#).unwrap();
        assert!(answer.statuses.iter().all(|s| s.status == Status::Retry));
        assert!(
            answer.warnings[0].contains("'a': no status"),
            "{:?}",
            answer.warnings
        );
        assert!(
            answer.warnings[1].contains("status 1 is not text"),
            "{:?}",
            answer.warnings
        );
    }

    #[test]
    fn a_body_that_is_no_answer_is_an_error_naming_what_is_wrong() {
        for (body, expected) in [
            ("", "not JSON"),
            ("{\"statuses\": {}}", "no \"statuses\" array"),
            ("[]", "no \"statuses\" array"),
            (
                "{\"statuses\":[{\"status\":\"SUCCESS\"}]}",
                "statuses[0] has no text \"entryId\"",
            ),
        ] {
            let error = read(body).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x57a7),
            failure_persistence: None,
            ..Default::default()
        })]
        /// No body panics the reader, and an answer always has one status per entry.
        #[test]
        fn no_answer_panics_and_every_entry_gets_a_status(
            body in proptest::prop_oneof![
                "\\PC{0,80}".prop_map(String::from),
                proptest::collection::vec(("[a-d]{1}", "(SUCCESS|RETRY|DROP|[A-Za-z]{0,6})"), 0..6)
                    .prop_map(|entries| {
                        let items: Vec<String> = entries
                            .iter()
                            .map(|(id, status)| format!("{{\"entryId\":\"{id}\",\"status\":\"{status}\"}}"))
                            .collect();
                        format!("{{\"statuses\":[{}]}}", items.join(","))
                    }),
            ]
        ) {
            if let Ok(answer) = read(&body) {
                proptest::prop_assert_eq!(answer.statuses.len(), 3);
            }
        }
    }
}
