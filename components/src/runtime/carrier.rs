//! Message headers for components whose broker or client library has none: the wire
//! metadata (application metadata and the runtime's `x-rt-` headers), the content
//! type, the partition key and the publish time travel in a frame in front of the
//! payload, and come back out of it on delivery. The runtime puts this layer under
//! every component that declares `headers: false`.
//!
//! The frame: the magic line `\0pcs-frame/1\n`, the length of a JSON header as four
//! big-endian bytes, the header, then the payload byte for byte. A delivered payload
//! without the magic line (published by someone else) is handed over as it is.

use crate::capability::Capabilities;
use crate::component::{
    Component, Consumer, ConsumerSpec, PartitionWatch, PartitionsWatch, StartPosition,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8] = b"\0pcs-frame/1\n";

/// What the frame carries besides the payload.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct FrameHeader {
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    metadata: Metadata,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    partition_key: Option<String>,
    /// When the publisher handed the message over, in milliseconds since the epoch.
    published_ms: u64,
}

/// Puts a message's headers and its payload in one frame.
fn frame(message: &OutgoingMessage, now: SystemTime) -> Result<Vec<u8>> {
    let header = FrameHeader {
        metadata: message.metadata.clone(),
        content_type: message.content_type.clone(),
        partition_key: message.partition_key.clone(),
        published_ms: now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    };
    let header = serde_json::to_vec(&header)
        .map_err(|e| PubSubError::InvalidRequest(format!("cannot frame the headers: {e}")))?;
    let length = u32::try_from(header.len()).map_err(|_| {
        PubSubError::InvalidRequest(format!(
            "the message's metadata is too large to frame ({} bytes)",
            header.len()
        ))
    })?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + message.payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&message.payload);
    Ok(out)
}

/// Takes a delivered message's headers out of its frame; a payload that is not a
/// frame, or a damaged one, is left as delivered (with a warning for the latter).
fn unframe(mut message: ReceivedMessage) -> ReceivedMessage {
    let Some(rest) = message.payload.strip_prefix(MAGIC) else {
        return message;
    };
    let parsed = rest
        .get(..4)
        .map(|bytes| u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
        .and_then(|length| Some((rest.get(4..4 + length)?, 4 + length)))
        .and_then(|(header, end)| {
            serde_json::from_slice::<FrameHeader>(header)
                .ok()
                .map(|h| (h, end))
        });
    let Some((header, end)) = parsed else {
        tracing::warn!(id = %message.id, "a delivered payload has a damaged header frame; handed over as it is");
        return message;
    };
    let payload = rest[end..].to_vec();
    message.payload = payload;
    message.metadata = header.metadata;
    message.content_type = header.content_type.or(message.content_type);
    message.partition_key = header.partition_key.or(message.partition_key);
    message.publish_time = UNIX_EPOCH + Duration::from_millis(header.published_ms);
    message
}

/// A component without headers, with the frame layer on top.
pub struct HeaderCarrier {
    inner: Arc<dyn Component>,
}

impl HeaderCarrier {
    /// `component` itself when it declares headers, else the frame layer over it.
    pub fn wrap(component: Arc<dyn Component>) -> Arc<dyn Component> {
        if component.capabilities().headers {
            component
        } else {
            Arc::new(HeaderCarrier { inner: component })
        }
    }

    fn framed(message: OutgoingMessage) -> Result<OutgoingMessage> {
        let payload = frame(&message, SystemTime::now())?;
        Ok(OutgoingMessage { payload, ..message })
    }
}

#[async_trait]
impl Component for HeaderCarrier {
    fn kind(&self) -> &str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn broker_version(&self) -> Result<String> {
        self.inner.broker_version().await
    }

    fn client_version(&self) -> Option<String> {
        self.inner.client_version()
    }

    async fn version_text(&self) -> Result<String> {
        self.inner.version_text().await
    }

    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        self.inner.unmet_broker_requirement().await
    }

    async fn discard_topic(&self, topic: &str) -> Result<()> {
        self.inner.discard_topic(topic).await
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.inner.publish(Self::framed(message)?).await
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let framed = messages
            .into_iter()
            .map(Self::framed)
            .collect::<Result<Vec<_>>>()?;
        self.inner.publish_batch(framed).await
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let inner = self.inner.consumer(spec).await?;
        Ok(Box::new(UnframingConsumer { inner }))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.inner.create_group(spec).await
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.inner.create_topic(topic, partitions).await
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        self.inner.update_partitions(topic, partitions).await
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        self.inner.watch_partitions(topic).await
    }

    async fn watch_partitions_of(&self, topics: &[String]) -> Result<PartitionsWatch> {
        self.inner.watch_partitions_of(topics).await
    }
}

/// A consumer whose deliveries come out of their frames.
struct UnframingConsumer {
    inner: Box<dyn Consumer>,
}

#[async_trait]
impl Consumer for UnframingConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        let messages = self.inner.receive(max, wait).await?;
        Ok(messages.into_iter().map(unframe).collect())
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let messages = self.inner.receive_batch(max, max_await).await?;
        Ok(messages.into_iter().map(unframe).collect())
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.inner.ack(id).await
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.inner.nack(id, delay).await
    }

    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.inner.defer(id, delay).await
    }

    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        self.inner.defer_many(deferrals).await
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        self.inner.extend_lease(ids).await
    }

    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        self.inner.handed_back(ids).await
    }

    async fn reject(&self, id: &MessageId, reason: &str) -> Result<()> {
        self.inner.reject(id, reason).await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.inner.seek(id).await
    }

    async fn seek_all(&self, position: StartPosition) -> Result<()> {
        self.inner.seek_all(position).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.inner.ack_many(ids).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.inner.ack_cumulative(id).await
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.inner.last_message_ids().await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delivered(payload: Vec<u8>) -> ReceivedMessage {
        ReceivedMessage {
            id: MessageId::new("t", None, 1),
            payload,
            content_type: None,
            metadata: Metadata::new(),
            partition_key: None,
            attempt: 1,
            publish_time: UNIX_EPOCH,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
        /// Whatever the metadata, key and payload (empty, binary, or itself starting
        /// like a frame), what comes out of the frame is what went in.
        #[test]
        fn a_frame_gives_back_what_went_in(
            metadata in proptest::collection::btree_map("[a-zA-Z0-9_.-]{1,20}", "\\PC{0,40}", 0..8),
            content_type in proptest::option::of("[a-z]+/[a-z+.-]{1,20}"),
            partition_key in proptest::option::of("\\PC{0,20}"),
            mut payload in proptest::collection::vec(any::<u8>(), 0..300),
            nested in any::<bool>(),
            published_ms in 0u64..4_102_444_800_000,
        ) {
            if nested {
                payload.splice(0..0, MAGIC.iter().copied());
            }
            let message = OutgoingMessage {
                metadata: metadata.clone(),
                content_type: content_type.clone(),
                partition_key: partition_key.clone(),
                ..OutgoingMessage::new("t", payload.clone())
            };
            let sent = UNIX_EPOCH + Duration::from_millis(published_ms);
            let out = unframe(delivered(frame(&message, sent).unwrap()));
            prop_assert_eq!(out.payload, payload);
            prop_assert_eq!(out.metadata, metadata);
            prop_assert_eq!(out.content_type, content_type);
            prop_assert_eq!(out.partition_key, partition_key);
            prop_assert_eq!(out.publish_time, sent);
        }
    }

    #[test]
    fn payloads_that_are_not_frames_or_are_damaged_pass_as_they_are() {
        for payload in [
            b"plain".to_vec(),
            Vec::new(),
            MAGIC.to_vec(),
            [MAGIC, &[0, 0, 0, 9], b"{}"].concat(),
            [MAGIC, &[0, 0, 0, 2], b"no"].concat(),
        ] {
            let out = unframe(delivered(payload.clone()));
            assert_eq!(out.payload, payload);
            assert!(out.metadata.is_empty());
        }
    }
}
