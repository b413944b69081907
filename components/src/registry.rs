//! Builds components from their definitions: the one place that knows every type.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::error::PubSubError;
use crate::memory::{MemoryComponent, MemoryConfig};
use crate::mqtt::{Mqtt5, MqttConfig};
use crate::nats::{NatsConfig, NatsJetStream};
use crate::postgres::{Postgres, PostgresConfig};
use crate::rabbitmq::{RabbitConfig, RabbitMq};
use crate::redis_streams::{RedisConfig, RedisStreams};
use std::sync::Arc;
use std::time::Duration;

/// The component types this build knows, as written after `pubsub.` in `spec.type`.
pub const KNOWN_TYPES: &[&str] = &[
    "in-memory",
    "redis-streams",
    "postgres",
    "nats-jetstream",
    "rabbitmq",
    "mqtt5",
];

/// A definition's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Settings {
    Memory(MemoryConfig),
    Redis(RedisConfig),
    Postgres(PostgresConfig),
    Nats(NatsConfig),
    Rabbit(RabbitConfig),
    Mqtt(MqttConfig),
}

/// Why a component could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Connect(#[from] PubSubError),
}

/// Checks a definition's type and every metadata value without connecting anywhere,
/// so a bad file is reported before any work starts.
pub fn validate(definition: &ComponentDefinition) -> Result<Settings, ConfigError> {
    match definition.component_type.as_str() {
        "in-memory" => memory_config(definition).map(Settings::Memory),
        "redis-streams" => redis_config(definition).map(Settings::Redis),
        "postgres" => postgres_config(definition).map(Settings::Postgres),
        "nats-jetstream" => nats_config(definition).map(Settings::Nats),
        "rabbitmq" => rabbit_config(definition).map(Settings::Rabbit),
        "mqtt5" => mqtt_config(definition).map(Settings::Mqtt),
        _ => Err(definition.error(
            "spec.type",
            format!(
                "unknown type 'pubsub.{}'; known: {}",
                definition.component_type,
                KNOWN_TYPES.join(", ")
            ),
        )),
    }
}

/// The broker endpoint a definition names (`host:port`), for types that have one.
pub fn endpoint(settings: &Settings) -> Option<String> {
    match settings {
        Settings::Memory(_) => None,
        Settings::Redis(c) => Some(c.host.clone()),
        Settings::Nats(c) => Some(c.url.clone()),
        Settings::Rabbit(c) => Some(c.endpoint()),
        Settings::Mqtt(c) => Some(c.host.clone()),
        Settings::Postgres(c) => {
            let value = |key: &str| {
                c.connection_string
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .filter(|(k, _)| *k == key)
                    .map(|(_, v)| v.to_string())
                    .next_back()
            };
            Some(format!(
                "{}:{}",
                value("host").unwrap_or_else(|| "127.0.0.1".into()),
                value("port").unwrap_or_else(|| "5432".into())
            ))
        }
    }
}

/// Builds the component a definition describes; `endpoint` (`host:port`) replaces the
/// definition's broker address when given.
pub async fn build(
    definition: &ComponentDefinition,
    endpoint: Option<&str>,
) -> Result<Arc<dyn Component>, BuildError> {
    match validate(definition)? {
        Settings::Memory(config) => Ok(Arc::new(MemoryComponent::new(config))),
        Settings::Redis(mut config) => {
            if let Some(endpoint) = endpoint {
                config.host = endpoint.to_string();
            }
            Ok(partitioned(Arc::new(RedisStreams::connect(config).await?)))
        }
        Settings::Nats(mut config) => {
            if let Some(endpoint) = endpoint {
                config.url = endpoint.to_string();
            }
            Ok(partitioned(Arc::new(NatsJetStream::connect(config).await?)))
        }
        Settings::Rabbit(mut config) => {
            if let Some(endpoint) = endpoint {
                config.uri = config.with_endpoint(endpoint);
            }
            Ok(partitioned(Arc::new(RabbitMq::connect(config).await?)))
        }
        Settings::Mqtt(mut config) => {
            if let Some(endpoint) = endpoint {
                config.host = endpoint.to_string();
            }
            Ok(partitioned(Arc::new(Mqtt5::connect(config).await?)))
        }
        Settings::Postgres(mut config) => {
            if let Some((host, port)) = endpoint.and_then(|e| e.rsplit_once(':')) {
                config.connection_string = config.with_endpoint(host, port);
            }
            Ok(partitioned(Arc::new(Postgres::connect(config).await?)))
        }
    }
}

/// A component with partitioned topics emulated on its own broker (see
/// [`crate::partitioned`]).
fn partitioned<C>(component: Arc<C>) -> Arc<dyn Component>
where
    C: Component + crate::partitioned::PartitionStore,
{
    Arc::new(crate::partitioned::Partitioned::new(
        component.clone(),
        component,
    ))
}

fn memory_config(definition: &ComponentDefinition) -> Result<MemoryConfig, ConfigError> {
    definition.check_known(&["maxMessageBytes", "partitions"])?;
    let defaults = MemoryConfig::default();
    let max_message_bytes = definition
        .value::<usize>("maxMessageBytes", "a number of bytes")?
        .unwrap_or(defaults.max_message_bytes);
    let default_partitions = definition
        .value::<u32>("partitions", "a partition count")?
        .unwrap_or(defaults.default_partitions);
    if max_message_bytes == 0 || default_partitions == 0 {
        return Err(definition.error(
            "spec.metadata",
            "maxMessageBytes and partitions must be above 0",
        ));
    }
    Ok(MemoryConfig {
        max_message_bytes,
        default_partitions,
    })
}

fn redis_config(definition: &ComponentDefinition) -> Result<RedisConfig, ConfigError> {
    definition.check_known(&["redisHost", "keyPrefix", "claimIdleMs", "maxMessageBytes"])?;
    let defaults = RedisConfig::default();
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
    Ok(RedisConfig {
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

fn postgres_config(definition: &ComponentDefinition) -> Result<PostgresConfig, ConfigError> {
    definition.check_known(&[
        "connectionString",
        "tablePrefix",
        "visibilityTimeoutMs",
        "maxMessageBytes",
    ])?;
    let defaults = PostgresConfig::default();
    let table_prefix = definition
        .metadata
        .get("tablePrefix")
        .cloned()
        .unwrap_or(defaults.table_prefix);
    if table_prefix.is_empty()
        || !table_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(definition.error(
            "spec.metadata (tablePrefix)",
            format!("'{table_prefix}' may only hold letters, digits and '_'"),
        ));
    }
    let connection_string = definition
        .metadata
        .get("connectionString")
        .cloned()
        .unwrap_or(defaults.connection_string);
    if connection_string.parse::<tokio_postgres::Config>().is_err() {
        return Err(definition.error(
            "spec.metadata (connectionString)",
            "is not a valid PostgreSQL connection string",
        ));
    }
    Ok(PostgresConfig {
        connection_string,
        table_prefix,
        visibility_timeout: definition
            .value::<u64>("visibilityTimeoutMs", "milliseconds")?
            .map(Duration::from_millis)
            .unwrap_or(defaults.visibility_timeout),
        max_message_bytes: definition
            .value::<usize>("maxMessageBytes", "a number of bytes")?
            .unwrap_or(defaults.max_message_bytes),
    })
}

fn nats_config(definition: &ComponentDefinition) -> Result<NatsConfig, ConfigError> {
    definition.check_known(&["natsURL", "streamName", "ackWaitMs", "maxMessageBytes"])?;
    let defaults = NatsConfig::default();
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
    Ok(NatsConfig {
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

fn rabbit_config(definition: &ComponentDefinition) -> Result<RabbitConfig, ConfigError> {
    definition.check_known(&[
        "connectionString",
        "exchange",
        "prefetch",
        "queueExpiryMs",
        "maxMessageBytes",
    ])?;
    let defaults = RabbitConfig::default();
    let uri = definition
        .metadata
        .get("connectionString")
        .cloned()
        .unwrap_or(defaults.uri);
    if !(uri.starts_with("amqp://") || uri.starts_with("amqps://")) {
        return Err(definition.error(
            "spec.metadata (connectionString)",
            format!("expected amqp://user:password@host:port/vhost, got '{uri}'"),
        ));
    }
    let exchange = definition
        .metadata
        .get("exchange")
        .cloned()
        .unwrap_or(defaults.exchange);
    if exchange.is_empty()
        || exchange.len() > 100
        || !exchange
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(definition.error(
            "spec.metadata (exchange)",
            format!("'{exchange}' must be 1 to 100 letters, digits, '_', '-' or '.'"),
        ));
    }
    let prefetch = definition
        .value::<u16>("prefetch", "a message count up to 65535")?
        .unwrap_or(defaults.prefetch);
    if prefetch == 0 {
        return Err(definition.error("spec.metadata (prefetch)", "must be at least 1"));
    }
    let queue_expiry = definition
        .value::<u64>("queueExpiryMs", "milliseconds")?
        .map(Duration::from_millis);
    if queue_expiry.is_some_and(|e| e < Duration::from_secs(1)) {
        return Err(definition.error("spec.metadata (queueExpiryMs)", "must be at least 1000 ms"));
    }
    Ok(RabbitConfig {
        uri,
        exchange,
        prefetch,
        queue_expiry,
        max_message_bytes: definition
            .value::<usize>("maxMessageBytes", "a number of bytes")?
            .unwrap_or(defaults.max_message_bytes),
    })
}

fn mqtt_config(definition: &ComponentDefinition) -> Result<MqttConfig, ConfigError> {
    definition.check_known(&[
        "host",
        "topicPrefix",
        "sessionExpirySeconds",
        "expiryGraceMs",
        "maxMessageBytes",
    ])?;
    let defaults = MqttConfig::default();
    let host = definition
        .metadata
        .get("host")
        .cloned()
        .unwrap_or(defaults.host);
    let host = host
        .strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("mqtt://"))
        .unwrap_or(&host)
        .to_string();
    if host
        .rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
    {
        return Err(definition.error(
            "spec.metadata (host)",
            format!("expected host:port, got '{host}'"),
        ));
    }
    let topic_prefix = definition
        .metadata
        .get("topicPrefix")
        .cloned()
        .unwrap_or(defaults.topic_prefix);
    if topic_prefix.contains(['+', '#']) || topic_prefix.starts_with('$') {
        return Err(definition.error(
            "spec.metadata (topicPrefix)",
            format!("'{topic_prefix}' may not hold '+' or '#' nor start with '$'"),
        ));
    }
    let session_expiry = definition
        .value::<u32>("sessionExpirySeconds", "seconds")?
        .map(|s| Duration::from_secs(u64::from(s)))
        .unwrap_or(defaults.session_expiry);
    if session_expiry.is_zero() {
        return Err(definition.error(
            "spec.metadata (sessionExpirySeconds)",
            "must be at least 1: groups keep their messages in sessions",
        ));
    }
    Ok(MqttConfig {
        host,
        topic_prefix,
        session_expiry,
        expiry_grace: definition
            .value::<u64>("expiryGraceMs", "milliseconds")?
            .map(Duration::from_millis)
            .unwrap_or(defaults.expiry_grace),
        max_message_bytes: definition
            .value::<usize>("maxMessageBytes", "a number of bytes")?
            .unwrap_or(defaults.max_message_bytes),
    })
}
