//! The Kafka component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::component::{Component, StartPosition};
use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::sync::Arc;
use std::time::Duration;

use super::Kafka;

/// Settings (YAML metadata `brokers`, `consumerGroup`, `initialOffset`,
/// `metadataRefreshIntervalMs`, `acks`, `maxMessageBytes`, `partitions`,
/// `durableBroker`).
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port[,host:port...]`.
    pub brokers: String,
    /// Put before every subscription's group to make the Kafka consumer group id
    /// (`<consumerGroup>.<group>`); empty: the subscription's group alone.
    pub consumer_group: String,
    /// Where a new group starts when its subscription does not ask for the latest.
    pub initial_offset: StartPosition,
    /// How often clients refresh topic metadata (new topics for pattern
    /// subscriptions, partition counts).
    pub metadata_refresh: Duration,
    /// The producer's `acks`: `all` (every in-sync replica) or `1` (the leader).
    pub acks: Acks,
    pub max_message_bytes: usize,
    /// Partitions of the topics the component creates.
    pub partitions: u32,
    /// Whether the broker keeps what it acknowledged across a crash (Kafka does; a
    /// broker on in-memory storage, such as tansu with `memory://`, does not). With
    /// `acks: 1` a crash may lose records too, so durability is declared only for
    /// `acks: all` on a durable broker.
    pub durable_broker: bool,
}

/// How many replicas acknowledge a record before it counts as published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    All,
    Leader,
}

impl Acks {
    /// The value of librdkafka's `acks`.
    pub fn as_config(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "1",
        }
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            consumer_group: String::new(),
            initial_offset: StartPosition::Earliest,
            metadata_refresh: Duration::from_secs(1),
            acks: Acks::All,
            max_message_bytes: 1024 * 1024,
            partitions: 1,
            durable_broker: true,
        }
    }
}

impl KafkaConfig {
    /// The Kafka consumer group id of a subscription's group.
    pub fn group_id(&self, group: &str) -> String {
        if self.consumer_group.is_empty() {
            group.to_string()
        } else {
            format!("{}.{group}", self.consumer_group)
        }
    }
}

impl TypedSettings for KafkaConfig {
    const TYPE: &'static str = "kafka";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&[
            "brokers",
            "consumerGroup",
            "initialOffset",
            "metadataRefreshIntervalMs",
            "acks",
            "maxMessageBytes",
            "partitions",
            "durableBroker",
        ])?;
        let defaults = Self::default();
        let brokers = definition.text_or("brokers", defaults.brokers);
        if brokers.split(',').any(|broker| {
            broker
                .trim()
                .rsplit_once(':')
                .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        }) {
            let message = format!("expected host:port[,host:port...], got '{brokers}'");
            return Err(definition.field_error("brokers", message));
        }
        let consumer_group = definition.text_or("consumerGroup", defaults.consumer_group);
        if !consumer_group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            || consumer_group.len() > 200
        {
            let message = format!(
                "'{consumer_group}' may only hold up to 200 letters, digits, '.', '_' and '-'"
            );
            return Err(definition.field_error("consumerGroup", message));
        }
        let initial_offset = match definition.metadata.get("initialOffset").map(String::as_str) {
            None | Some("oldest") => StartPosition::Earliest,
            Some("newest") => StartPosition::Latest,
            Some(other) => {
                let message = format!("expected 'oldest' or 'newest', got '{other}'");
                return Err(definition.field_error("initialOffset", message));
            }
        };
        let metadata_refresh = definition
            .millis_at_least("metadataRefreshIntervalMs", Duration::from_millis(100))?
            .unwrap_or(defaults.metadata_refresh);
        let acks = match definition.metadata.get("acks").map(String::as_str) {
            None | Some("all") | Some("-1") => Acks::All,
            Some("1") => Acks::Leader,
            Some("0") => {
                return Err(definition.field_error(
                    "acks",
                    "'0' sends without waiting for the broker, so no publish could be confirmed; expected 'all' or '1'",
                ))
            }
            Some(other) => {
                let message = format!("expected 'all' or '1', got '{other}'");
                return Err(definition.field_error("acks", message));
            }
        };
        let max_message_bytes = definition.max_message_bytes(defaults.max_message_bytes)?;
        if !(1000..=1_000_000_000).contains(&max_message_bytes) {
            return Err(definition.field_error(
                "maxMessageBytes",
                "must be from 1000 to 1000000000 bytes (librdkafka's range)",
            ));
        }
        let partitions = definition
            .value::<u32>("partitions", "a partition count")?
            .unwrap_or(defaults.partitions);
        if partitions == 0 {
            return Err(definition.field_error("partitions", "must be at least 1"));
        }
        let durable_broker = definition
            .value::<bool>("durableBroker", "true or false")?
            .unwrap_or(defaults.durable_broker);
        Ok(Self {
            brokers,
            consumer_group,
            initial_offset,
            metadata_refresh,
            acks,
            max_message_bytes,
            partitions,
            durable_broker,
        })
    }

    fn endpoint(&self) -> Option<String> {
        self.brokers.split(',').next().map(|b| b.trim().to_string())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.brokers = endpoint.to_string();
    }

    fn connect(self) -> Connecting {
        Box::pin(async move { Ok(Arc::new(Kafka::connect(self).await?) as Arc<dyn Component>) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn settings(metadata: &[(&str, &str)]) -> Result<KafkaConfig, ConfigError> {
        let mut text = String::from(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: k\nspec:\n  type: pubsub.kafka\n  metadata:\n",
        );
        for (name, value) in metadata {
            text.push_str(&format!("    - name: {name}\n      value: \"{value}\"\n"));
        }
        KafkaConfig::from_definition(
            &ComponentDefinition::parse(&text, Path::new("k.yaml")).unwrap(),
        )
    }

    #[test]
    fn every_setting_is_read() {
        let config = settings(&[
            ("brokers", "10.0.0.1:9092,10.0.0.2:9093"),
            ("consumerGroup", "orders"),
            ("initialOffset", "newest"),
            ("metadataRefreshIntervalMs", "500"),
            ("acks", "1"),
            ("maxMessageBytes", "2000000"),
            ("partitions", "3"),
            ("durableBroker", "false"),
        ])
        .unwrap();
        assert_eq!(config.endpoint().as_deref(), Some("10.0.0.1:9092"));
        assert_eq!(config.group_id("g"), "orders.g");
        assert_eq!(config.initial_offset, StartPosition::Latest);
        assert_eq!(config.metadata_refresh, Duration::from_millis(500));
        assert_eq!(config.acks, Acks::Leader);
        assert_eq!(
            (config.max_message_bytes, config.partitions),
            (2_000_000, 3)
        );
        assert!(!config.durable_broker);
        assert_eq!(settings(&[]).unwrap(), KafkaConfig::default());
    }

    #[test]
    fn bad_settings_name_their_field_and_what_was_expected() {
        for (field, value, expected) in [
            ("brokers", "localhost", "expected host:port"),
            ("brokers", "a:1,b", "expected host:port"),
            ("consumerGroup", "has space", "may only hold"),
            ("initialOffset", "earliest", "expected 'oldest' or 'newest'"),
            ("metadataRefreshIntervalMs", "5", "at least 100 ms"),
            ("metadataRefreshIntervalMs", "soon", "milliseconds"),
            ("acks", "0", "no publish could be confirmed"),
            ("acks", "most", "expected 'all' or '1'"),
            ("maxMessageBytes", "10", "from 1000 to 1000000000"),
            ("partitions", "0", "at least 1"),
            ("durableBroker", "maybe", "true or false"),
            ("nonsense", "1", "nonsense"),
        ] {
            let error = settings(&[(field, value)]).unwrap_err().to_string();
            assert!(
                error.contains("k.yaml") && error.contains(field) && error.contains(expected),
                "{field}={value}: {error}"
            );
        }
    }
}
