//! The redis-streams component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::error::PubSubError;
use crate::registry::TypedSettings;
use futures::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

use super::RedisStreams;

/// Settings (YAML metadata `redisHost`, `keyPrefix`, `claimIdleMs`, `maxMessageBytes`).
#[derive(Debug, Clone, PartialEq)]
pub struct RedisConfig {
    /// `host:port`.
    pub host: String,
    /// Streams are named `<prefix>:<topic>`.
    pub key_prefix: String,
    /// Pending entries idle this long are claimed by other members.
    pub claim_idle: Duration,
    pub max_message_bytes: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            host: "127.0.0.1:6379".into(),
            key_prefix: "pubsub".into(),
            claim_idle: Duration::from_secs(5),
            max_message_bytes: 1024 * 1024,
        }
    }
}

impl TypedSettings for RedisConfig {
    const TYPE: &'static str = "redis-streams";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&["redisHost", "keyPrefix", "claimIdleMs", "maxMessageBytes"])?;
        let defaults = Self::default();
        let host = definition
            .metadata
            .get("redisHost")
            .cloned()
            .unwrap_or(defaults.host);
        if !host.contains(':') {
            return Err(definition.error(
                "spec.metadata (redisHost)",
                format!("expected host:port, got '{host}'"),
            ));
        }
        let claim_idle = definition
            .value::<u64>("claimIdleMs", "milliseconds")?
            .map(Duration::from_millis)
            .unwrap_or(defaults.claim_idle);
        if claim_idle < Duration::from_millis(100) {
            return Err(definition.error("spec.metadata (claimIdleMs)", "must be at least 100 ms"));
        }
        Ok(Self {
            host,
            key_prefix: definition
                .metadata
                .get("keyPrefix")
                .cloned()
                .unwrap_or(defaults.key_prefix),
            claim_idle,
            max_message_bytes: definition
                .value::<usize>("maxMessageBytes", "a number of bytes")?
                .unwrap_or(defaults.max_message_bytes),
        })
    }

    fn endpoint(&self) -> Option<String> {
        Some(self.host.clone())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.host = endpoint.to_string();
    }

    fn connect(self) -> BoxFuture<'static, Result<Arc<dyn Component>, PubSubError>> {
        Box::pin(async move {
            Ok(crate::partitioned::wrap(Arc::new(
                RedisStreams::connect(self).await?,
            )))
        })
    }
}
