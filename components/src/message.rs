//! Message and message-id types shared by components and the runtime.

use crate::error::PubSubError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

/// String-to-string message metadata.
pub type Metadata = BTreeMap<String, String>;

/// The position of a delivered message, naming its owner topic and partition.
///
/// Its text form is `topic[#partition]@position` (`@position` alone when the owner
/// topic is unknown). Topic names never contain `#` or `@` (the runtime validates
/// them), so the text form always parses back to the same id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    /// The owner topic; `None` only for ids built without one (which a multi-topic
    /// consumer refuses).
    pub topic: Option<String>,
    /// The partition within the owner topic, where the topic has partitions.
    pub partition: Option<u32>,
    /// The broker's position (offset, sequence, row id...) within the partition.
    pub position: u64,
}

impl MessageId {
    /// An id naming its owner topic and partition.
    pub fn new(topic: impl Into<String>, partition: Option<u32>, position: u64) -> Self {
        MessageId {
            topic: Some(topic.into()),
            partition,
            position,
        }
    }

    /// The owner topic with its partition, e.g. `orders#2`: the unit of ordering,
    /// ack and seek.
    pub fn owner(&self) -> Option<String> {
        self.topic.as_ref().map(|topic| match self.partition {
            Some(p) => format!("{topic}#{p}"),
            None => topic.clone(),
        })
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(owner) = self.owner() {
            f.write_str(&owner)?;
        }
        write!(f, "@{}", self.position)
    }
}

impl FromStr for MessageId {
    type Err = PubSubError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |why: &str| {
            PubSubError::InvalidRequest(format!("message id '{text}' is malformed: {why}"))
        };
        let (owner, position) = text
            .rsplit_once('@')
            .ok_or_else(|| invalid("no '@position'"))?;
        let position = position
            .parse::<u64>()
            .map_err(|_| invalid("position is not an unsigned integer"))?;
        if owner.is_empty() {
            return Ok(MessageId {
                topic: None,
                partition: None,
                position,
            });
        }
        let (topic, partition) = match owner.rsplit_once('#') {
            Some((topic, partition)) => (
                topic,
                Some(
                    partition
                        .parse::<u32>()
                        .map_err(|_| invalid("partition is not an unsigned integer"))?,
                ),
            ),
            None => (owner, None),
        };
        if topic.is_empty() {
            return Err(invalid("empty topic before '#'"));
        }
        Ok(MessageId {
            topic: Some(topic.to_string()),
            partition,
            position,
        })
    }
}

impl Serialize for MessageId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MessageId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A message as the runtime hands it to a component for publishing.
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingMessage {
    pub topic: String,
    pub payload: Vec<u8>,
    pub content_type: Option<String>,
    /// Wire metadata (application metadata plus the runtime's `x-rt-` headers).
    pub metadata: Metadata,
    /// Routes the message to a partition, and scopes per-key ordering.
    pub partition_key: Option<String>,
    /// Absolute expiry, for components with native TTL.
    pub expires_at: Option<SystemTime>,
    /// Absolute due time, for components with native delayed delivery.
    pub deliver_at: Option<SystemTime>,
}

impl OutgoingMessage {
    /// A plain message with no key, expiry or delay.
    pub fn new(topic: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        OutgoingMessage {
            topic: topic.into(),
            payload: payload.into(),
            content_type: None,
            metadata: Metadata::new(),
            partition_key: None,
            expires_at: None,
            deliver_at: None,
        }
    }
}

/// A message a consumer received and has not yet acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedMessage {
    pub id: MessageId,
    pub payload: Vec<u8>,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    pub partition_key: Option<String>,
    /// 1 on first delivery, incremented on each redelivery (a nack, a lease that
    /// expired, a member that left). The runtime relies on it: where dead letters are
    /// emulated, a message answered RETRY at `attempt >= maxDeliveries` is
    /// dead-lettered (or dropped), so a component that does not count redeliveries
    /// retries for ever.
    pub attempt: u32,
    /// When the broker accepted the message (the broker's clock where it stamps one).
    pub publish_time: SystemTime,
}

impl ReceivedMessage {
    /// The owner topic, or an empty string when the component lost it.
    pub fn topic(&self) -> &str {
        self.id.topic.as_deref().unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    #[case("orders@7", Some("orders"), None, 7)]
    #[case("orders#3@0", Some("orders"), Some(3), 0)]
    #[case("a/b.c-d#12@99", Some("a/b.c-d"), Some(12), 99)]
    #[case("@5", None, None, 5)]
    fn parses_text_form(
        #[case] text: &str,
        #[case] topic: Option<&str>,
        #[case] partition: Option<u32>,
        #[case] position: u64,
    ) {
        let id: MessageId = text.parse().unwrap();
        assert_eq!(id.topic.as_deref(), topic);
        assert_eq!(id.partition, partition);
        assert_eq!(id.position, position);
        assert_eq!(id.to_string(), text);
    }

    #[rstest]
    #[case("orders", "no '@position'")]
    #[case("orders@x", "position is not an unsigned integer")]
    #[case("orders#x@1", "partition is not an unsigned integer")]
    #[case("#1@1", "empty topic")]
    fn rejects_malformed_ids(#[case] text: &str, #[case] why: &str) {
        let err = text.parse::<MessageId>().unwrap_err().to_string();
        assert!(err.contains(why), "{err}");
        assert!(err.contains(text), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn text_and_json_forms_round_trip(
            topic in proptest::option::of("[a-zA-Z0-9._/-]{1,40}"),
            partition in proptest::option::of(0u32..1000),
            position in any::<u64>(),
        ) {
            let partition = topic.as_ref().and(partition);
            let id = MessageId { topic, partition, position };
            prop_assert_eq!(id.to_string().parse::<MessageId>().unwrap(), id.clone());
            let json = serde_json::to_string(&id).unwrap();
            prop_assert_eq!(serde_json::from_str::<MessageId>(&json).unwrap(), id);
        }
    }
}
