//! The nats-jetstream component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::time::Duration;

use super::NatsJetStream;

/// Settings (YAML metadata `natsURL`, `streamName`, `ackWaitMs`, `maxMessageBytes`).
#[derive(Debug, Clone, PartialEq)]
pub struct NatsConfig {
    /// `host:port`.
    pub url: String,
    /// The stream holding every topic; subjects are `<stream>.<topic>`.
    pub stream: String,
    /// A delivered message not acknowledged within this is delivered again.
    pub ack_wait: Duration,
    pub max_message_bytes: usize,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "127.0.0.1:4222".into(),
            stream: "PUBSUB".into(),
            ack_wait: Duration::from_secs(30),
            max_message_bytes: 1024 * 1024,
        }
    }
}

impl TypedSettings for NatsConfig {
    const TYPE: &'static str = "nats-jetstream";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&["natsURL", "streamName", "ackWaitMs", "maxMessageBytes"])?;
        let defaults = Self::default();
        let stream = definition.text_or("streamName", defaults.stream);
        if stream.is_empty()
            || !stream
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            let message = format!("'{stream}' may only hold letters, digits, '_' and '-'");
            return Err(definition.field_error("streamName", message));
        }
        let url = definition.text_or("natsURL", defaults.url);
        let url = url.strip_prefix("nats://").unwrap_or(&url).to_string();
        definition.check_host_port("natsURL", &url)?;
        Ok(Self {
            url,
            stream,
            ack_wait: definition.millis("ackWaitMs")?.unwrap_or(defaults.ack_wait),
            max_message_bytes: definition.max_message_bytes(defaults.max_message_bytes)?,
        })
    }

    fn endpoint(&self) -> Option<String> {
        Some(self.url.clone())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.url = endpoint.to_string();
    }

    fn connect(self) -> Connecting {
        crate::partitioned::connect_wrapped(NatsJetStream::connect(self))
    }
}
