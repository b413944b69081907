//! The mqtt5 component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::time::Duration;

use super::Mqtt5;

/// Settings (YAML metadata `host`, `topicPrefix`, `sessionExpirySeconds`,
/// `expiryGraceMs`, `maxMessageBytes`).
#[derive(Debug, Clone, PartialEq)]
pub struct MqttConfig {
    /// `host:port` of the broker.
    pub host: String,
    /// Put before every topic on the broker (e.g. `pcs/`).
    pub topic_prefix: String,
    /// How long a group's session outlives its last member.
    pub session_expiry: Duration,
    /// Added to a message's TTL for the broker's expiry interval.
    pub expiry_grace: Duration,
    pub max_message_bytes: usize,
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            host: "127.0.0.1:1883".into(),
            topic_prefix: String::new(),
            session_expiry: Duration::from_secs(3600),
            expiry_grace: Duration::from_secs(60),
            max_message_bytes: 1024 * 1024,
        }
    }
}

impl TypedSettings for MqttConfig {
    const TYPE: &'static str = "mqtt5";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&[
            "host",
            "topicPrefix",
            "sessionExpirySeconds",
            "expiryGraceMs",
            "maxMessageBytes",
        ])?;
        let defaults = Self::default();
        let host = definition.text_or("host", defaults.host);
        let host = host
            .strip_prefix("tcp://")
            .or_else(|| host.strip_prefix("mqtt://"))
            .unwrap_or(&host)
            .to_string();
        definition.check_host_port("host", &host)?;
        let topic_prefix = definition.text_or("topicPrefix", defaults.topic_prefix);
        if topic_prefix.contains(['+', '#']) || topic_prefix.starts_with('$') {
            let message = format!("'{topic_prefix}' may not hold '+' or '#' nor start with '$'");
            return Err(definition.field_error("topicPrefix", message));
        }
        let session_expiry = definition
            .value::<u32>("sessionExpirySeconds", "seconds")?
            .map(|s| Duration::from_secs(u64::from(s)))
            .unwrap_or(defaults.session_expiry);
        if session_expiry.is_zero() {
            return Err(definition.field_error(
                "sessionExpirySeconds",
                "must be at least 1: groups keep their messages in sessions",
            ));
        }
        Ok(Self {
            host,
            topic_prefix,
            session_expiry,
            expiry_grace: definition
                .millis("expiryGraceMs")?
                .unwrap_or(defaults.expiry_grace),
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
        crate::partitioned::connect_wrapped(Mqtt5::connect(self))
    }
}
