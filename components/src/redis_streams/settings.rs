//! The redis-streams component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
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
        let host = definition.text_or("redisHost", defaults.host);
        definition.check_host_port("redisHost", &host)?;
        let claim_idle = definition
            .millis_at_least("claimIdleMs", Duration::from_millis(100))?
            .unwrap_or(defaults.claim_idle);
        Ok(Self {
            host,
            key_prefix: definition.text_or("keyPrefix", defaults.key_prefix),
            claim_idle,
            max_message_bytes: definition.max_message_bytes(defaults.max_message_bytes)?,
        })
    }

    fn endpoint(&self) -> Option<String> {
        Some(self.host.clone())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.host = endpoint.to_string();
    }

    fn connect(self) -> Connecting {
        crate::partitioned::connect_wrapped(RedisStreams::connect(self))
    }
}
