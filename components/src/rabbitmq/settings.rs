//! The rabbitmq component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::time::Duration;

use super::RabbitMq;

/// Settings (YAML metadata `connectionString`, `exchange`, `prefetch`,
/// `queueExpiryMs`, `maxMessageBytes`).
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitConfig {
    /// `amqp://user:password@host:port/vhost`.
    pub uri: String,
    /// The topic exchange every topic is published to.
    pub exchange: String,
    /// Unacknowledged messages a consumer may hold.
    pub prefetch: u16,
    /// Group queues unused (no consumer, no redeclaration) this long are deleted.
    pub queue_expiry: Option<Duration>,
    pub max_message_bytes: usize,
}

impl Default for RabbitConfig {
    fn default() -> Self {
        RabbitConfig {
            uri: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            exchange: "pubsub".into(),
            prefetch: 512,
            queue_expiry: None,
            max_message_bytes: 1024 * 1024,
        }
    }
}

impl RabbitConfig {
    /// `host:port` of the URI.
    pub fn endpoint(&self) -> String {
        let rest = self.uri.split_once("://").map_or(&*self.uri, |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or(rest);
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:5672")
        }
    }

    /// The URI with its `host:port` replaced.
    pub fn with_endpoint(&self, endpoint: &str) -> String {
        let current = self.endpoint();
        match self.uri.find(&current) {
            Some(_) => self.uri.replacen(&current, endpoint, 1),
            None => {
                let host = current.trim_end_matches(":5672");
                self.uri.replacen(host, endpoint, 1)
            }
        }
    }
}

impl TypedSettings for RabbitConfig {
    const TYPE: &'static str = "rabbitmq";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&[
            "connectionString",
            "exchange",
            "prefetch",
            "queueExpiryMs",
            "maxMessageBytes",
        ])?;
        let defaults = Self::default();
        let uri = definition.text_or("connectionString", defaults.uri);
        if !(uri.starts_with("amqp://") || uri.starts_with("amqps://")) {
            let message = format!("expected amqp://user:password@host:port/vhost, got '{uri}'");
            return Err(definition.field_error("connectionString", message));
        }
        let exchange = definition.text_or("exchange", defaults.exchange);
        if exchange.is_empty()
            || exchange.len() > 100
            || !exchange
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            let message = format!("'{exchange}' must be 1 to 100 letters, digits, '_', '-' or '.'");
            return Err(definition.field_error("exchange", message));
        }
        let prefetch = definition
            .value::<u16>("prefetch", "a message count up to 65535")?
            .unwrap_or(defaults.prefetch);
        if prefetch == 0 {
            return Err(definition.field_error("prefetch", "must be at least 1"));
        }
        Ok(Self {
            uri,
            exchange,
            prefetch,
            queue_expiry: definition.millis_at_least("queueExpiryMs", Duration::from_secs(1))?,
            max_message_bytes: definition.max_message_bytes(defaults.max_message_bytes)?,
        })
    }

    fn endpoint(&self) -> Option<String> {
        Some(self.endpoint())
    }

    fn aim_at(&mut self, endpoint: &str) {
        self.uri = self.with_endpoint(endpoint);
    }

    fn connect(self) -> Connecting {
        crate::partitioned::connect_wrapped(RabbitMq::connect(self))
    }
}
