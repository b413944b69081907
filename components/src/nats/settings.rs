//! The nats-jetstream component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::error::PubSubError;
use crate::registry::TypedSettings;
use futures::future::BoxFuture;
use std::sync::Arc;
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
        let stream = definition
            .metadata
            .get("streamName")
            .cloned()
            .unwrap_or(defaults.stream);
        if stream.is_empty()
            || !stream
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(definition.error(
                "spec.metadata (streamName)",
                format!("'{stream}' may only hold letters, digits, '_' and '-'"),
            ));
        }
        let url = definition
            .metadata
            .get("natsURL")
            .cloned()
            .unwrap_or(defaults.url);
        let url = url.strip_prefix("nats://").unwrap_or(&url).to_string();
        if !url.contains(':') {
            return Err(definition.error(
                "spec.metadata (natsURL)",
                format!("expected host:port, got '{url}'"),
            ));
        }
        Ok(Self {
            url,
            stream,
            ack_wait: definition
                .value::<u64>("ackWaitMs", "milliseconds")?
                .map(Duration::from_millis)
                .unwrap_or(defaults.ack_wait),
            max_message_bytes: definition
                .value::<usize>("maxMessageBytes", "a number of bytes")?
                .unwrap_or(defaults.max_message_bytes),
        })
    }

    fn endpoint(&self) -> Option<String> {
        Some(self.url.clone())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.url = endpoint.to_string();
    }

    fn connect(self) -> BoxFuture<'static, Result<Arc<dyn Component>, PubSubError>> {
        Box::pin(async move {
            Ok(crate::partitioned::wrap(Arc::new(
                NatsJetStream::connect(self).await?,
            )))
        })
    }
}
