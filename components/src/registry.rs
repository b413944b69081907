//! Builds components from their definitions: the one place that knows every type,
//! built in or added by another crate with [`register`] (a third-party adapter).

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::error::PubSubError;
use crate::memory::{MemoryComponent, MemoryConfig};
use crate::mqtt::{Mqtt5, MqttConfig};
use crate::nats::{NatsConfig, NatsJetStream};
use crate::postgres::{Postgres, PostgresConfig};
use crate::rabbitmq::{RabbitConfig, RabbitMq};
use crate::redis_streams::{RedisConfig, RedisStreams};
use futures::future::BoxFuture;
use std::sync::{Arc, RwLock};
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
    /// A type another crate registered, with the endpoint its definition names.
    External {
        type_name: &'static str,
        endpoint: Option<String>,
    },
}

/// Builds a registered type's component from its definition, at the given endpoint
/// (`host:port`) when one is given.
pub type ExternalBuild = fn(
    ComponentDefinition,
    Option<String>,
) -> BoxFuture<'static, Result<Arc<dyn Component>, BuildError>>;

/// A component type added by a crate outside this one (an adapter for a published
/// queue library): certified like a built-in type, on the broker of the built-in type
/// it names.
#[derive(Clone, Copy)]
pub struct ExternalType {
    /// The type, as written after `pubsub.` in `spec.type` (e.g. `omniqueue-redis`).
    pub name: &'static str,
    /// The built-in type whose broker it runs on (`redis-streams`, `rabbitmq`...), so
    /// the suite provisions, watches and faults that broker; `None`: in process.
    pub broker_of: Option<&'static str>,
    /// The metadata field that names the broker (`host:port` or a URI).
    pub endpoint_field: Option<&'static str>,
    /// The published crate it adapts, with its version (`omniqueue 0.3.0`): reports
    /// mark its rows as third-party.
    pub adapts: &'static str,
    /// Checks a definition without connecting anywhere.
    pub validate: fn(&ComponentDefinition) -> Result<(), ConfigError>,
    /// Builds the component.
    pub build: ExternalBuild,
}

impl std::fmt::Debug for ExternalType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalType")
            .field("name", &self.name)
            .field("broker_of", &self.broker_of)
            .field("adapts", &self.adapts)
            .finish()
    }
}

static EXTERNAL: RwLock<Vec<ExternalType>> = RwLock::new(Vec::new());

/// Adds a component type for this process (again under the same name: replaced).
/// Refused when the name is a built-in type or its broker is not one.
pub fn register(external: ExternalType) -> Result<(), String> {
    if KNOWN_TYPES.contains(&external.name) {
        return Err(format!(
            "'{}' is a built-in type and cannot be registered again",
            external.name
        ));
    }
    if let Some(broker) = external.broker_of {
        if !KNOWN_TYPES.contains(&broker) || broker == "in-memory" {
            return Err(format!(
                "'{}' runs on the broker of '{broker}', which is not a built-in type with a broker (known: {})",
                external.name,
                KNOWN_TYPES.join(", ")
            ));
        }
    }
    let mut types = EXTERNAL.write().unwrap_or_else(|e| e.into_inner());
    types.retain(|t| t.name != external.name);
    types.push(external);
    Ok(())
}

/// The registered type of that name.
pub fn external(type_name: &str) -> Option<ExternalType> {
    EXTERNAL
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|t| t.name == type_name)
        .copied()
}

/// Whether the type is built in or registered.
pub fn is_known(type_name: &str) -> bool {
    KNOWN_TYPES.contains(&type_name) || external(type_name).is_some()
}

/// The built-in type whose broker serves `type_name`: itself when built in, the one
/// it names when registered (`in-memory` for a registered type that runs in process).
pub fn broker_type(type_name: &str) -> &str {
    match external(type_name) {
        Some(t) => t.broker_of.unwrap_or("in-memory"),
        None => type_name,
    }
}

/// The published crate a registered type adapts (`None` for built-in types).
pub fn third_party(type_name: &str) -> Option<&'static str> {
    external(type_name).map(|t| t.adapts)
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
        other => match external(other) {
            Some(t) => {
                (t.validate)(definition)?;
                Ok(Settings::External {
                    type_name: t.name,
                    endpoint: t
                        .endpoint_field
                        .and_then(|field| definition.metadata.get(field).cloned()),
                })
            }
            None => {
                let registered: Vec<&str> = EXTERNAL
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|t| t.name)
                    .collect();
                Err(definition.error(
                    "spec.type",
                    format!(
                        "unknown type 'pubsub.{}'; known: {}",
                        definition.component_type,
                        KNOWN_TYPES
                            .iter()
                            .chain(&registered)
                            .copied()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        },
    }
}

/// The broker endpoint a definition names (`host:port`), for types that have one.
pub fn endpoint(settings: &Settings) -> Option<String> {
    match settings {
        Settings::Memory(_) => None,
        Settings::External { endpoint, .. } => endpoint.clone(),
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
        Settings::External {
            type_name,
            endpoint: named,
        } => {
            let t = external(type_name).expect("validated types stay registered");
            (t.build)(definition.clone(), endpoint.map(str::to_string).or(named)).await
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn definition(kind: &str, metadata: &str) -> ComponentDefinition {
        let text = format!(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: x\nspec:\n  type: pubsub.{kind}\n  version: v1\n  metadata:\n{metadata}"
        );
        ComponentDefinition::parse(&text, Path::new("x.yaml")).unwrap()
    }

    fn external(name: &'static str, broker_of: Option<&'static str>) -> ExternalType {
        ExternalType {
            name,
            broker_of,
            endpoint_field: Some("where"),
            adapts: "somequeue 1.2.3",
            validate: |d| d.check_known(&["where"]),
            build: |_, _| {
                Box::pin(async { Ok(Arc::new(MemoryComponent::default()) as Arc<dyn Component>) })
            },
        }
    }

    #[tokio::test]
    async fn a_registered_type_validates_builds_and_names_its_broker_and_crate() {
        register(external("test-somequeue", Some("redis-streams"))).unwrap();
        let good = definition(
            "test-somequeue",
            "    - name: where\n      value: \"h:1\"\n",
        );
        assert_eq!(
            validate(&good).map(|s| endpoint(&s)).unwrap(),
            Some("h:1".to_string())
        );
        assert!(build(&good, Some("h:2")).await.is_ok());
        assert!(is_known("test-somequeue"));
        assert_eq!(broker_type("test-somequeue"), "redis-streams");
        assert_eq!(broker_type("postgres"), "postgres");
        assert_eq!(third_party("test-somequeue"), Some("somequeue 1.2.3"));
        assert_eq!(third_party("postgres"), None);

        let bad = definition("test-somequeue", "    - name: wher\n      value: \"h:1\"\n");
        let error = validate(&bad).unwrap_err().to_string();
        assert!(error.contains("wher"), "{error}");
        let unknown = definition("nothing-such", "    - name: a\n      value: b\n");
        let error = validate(&unknown).unwrap_err().to_string();
        assert!(
            error.contains("nothing-such") && error.contains("test-somequeue"),
            "the known types include the registered ones: {error}"
        );
    }

    #[test]
    fn built_in_names_and_unknown_brokers_are_refused() {
        let error = register(external("redis-streams", None)).unwrap_err();
        assert!(error.contains("built-in"), "{error}");
        let error = register(external("test-elsewhere", Some("kafka"))).unwrap_err();
        assert!(error.contains("kafka"), "{error}");
        assert!(!is_known("test-elsewhere"));
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x0dd_ba11),
            failure_persistence: None,
            ..Default::default()
        })]
        /// No definition text panics the parser or a type's validation, and every
        /// refusal names the file and a field.
        #[test]
        fn no_definition_panics_and_every_refusal_names_its_field(
            component_type in proptest::sample::select(vec![
                "in-memory", "redis-streams", "postgres", "nats-jetstream", "rabbitmq",
                "mqtt5", "kafka", "",
            ]),
            metadata in proptest::collection::vec(
                (
                    proptest::prop_oneof![
                        proptest::sample::select(vec![
                            "ackWaitMs", "claimIdleMs", "connectionString", "exchange",
                            "expiryGraceMs", "host", "keyPrefix", "maxMessageBytes",
                            "natsURL", "partitions", "prefetch", "queueExpiryMs",
                            "redisHost", "sessionExpirySeconds", "streamName",
                            "tablePrefix", "topicPrefix", "visibilityTimeoutMs",
                        ]).prop_map(str::to_string),
                        "[a-zA-Z]{0,10}",
                    ],
                    proptest::prop_oneof![
                        "-?[0-9]{1,22}",
                        "[a-z]{1,8}://[^\\s\"]{0,30}",
                        "[^\"\\\\]{0,20}",
                    ],
                ),
                0..6,
            ),
            garbage in "\\PC{0,60}",
        ) {
            let mut text = format!(
                "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: p\nspec:\n  type: pubsub.{component_type}\n  metadata:\n"
            );
            for (name, value) in &metadata {
                text.push_str(&format!("    - name: \"{name}\"\n      value: \"{value}\"\n"));
            }
            let source = Path::new("prop.yaml");
            let candidates: [String; 3] = [text.clone(), garbage.clone(), format!("{text}{garbage}")];
            for candidate in candidates {
                match ComponentDefinition::parse(&candidate, source) {
                    Ok(definition) => {
                        if let Err(e) = validate(&definition) {
                            proptest::prop_assert!(e.file == "prop.yaml" && !e.field.is_empty(), "{e}");
                        }
                    }
                    Err(e) => proptest::prop_assert!(e.file == "prop.yaml" && !e.field.is_empty(), "{e}"),
                }
            }
        }
    }
}
