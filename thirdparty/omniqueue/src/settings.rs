//! The settings of each backend, read from a component definition with errors that
//! name the field.

use pubsub_components::config::{ComponentDefinition, ConfigError};
use std::time::Duration;

/// Which omniqueue backend, with its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    Redis(RedisSettings),
    Rabbit(RabbitSettings),
    Memory,
}

/// omniqueue's Redis Streams backend.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisSettings {
    /// `host:port`.
    pub host: String,
    /// Put in front of every key (streams, delayed sets, locks).
    pub key_prefix: String,
    /// omniqueue's `ack_deadline_ms`: a delivered message not acknowledged within it
    /// is put back on the stream.
    pub ack_deadline: Duration,
}

/// omniqueue's RabbitMQ backend.
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitSettings {
    /// `host:port`.
    pub host: String,
    pub user: String,
    pub password: String,
    /// Put in front of every exchange and queue name.
    pub prefix: String,
    /// omniqueue's `consume_prefetch_count`.
    pub prefetch: u16,
}

impl RabbitSettings {
    /// The AMQP URI.
    pub fn uri(&self) -> String {
        format!("amqp://{}:{}@{}/%2f", self.user, self.password, self.host)
    }
}

/// The backend a definition describes; `endpoint` (`host:port`) replaces the broker
/// address it names.
pub fn backend(
    definition: &ComponentDefinition,
    endpoint: Option<&str>,
) -> Result<Backend, ConfigError> {
    match definition.component_type.as_str() {
        "omniqueue-redis" => {
            let mut settings = redis(definition)?;
            if let Some(endpoint) = endpoint {
                settings.host = endpoint.to_string();
            }
            Ok(Backend::Redis(settings))
        }
        "omniqueue-rabbitmq" => {
            let mut settings = rabbit(definition)?;
            if let Some(endpoint) = endpoint {
                settings.host = endpoint.to_string();
            }
            Ok(Backend::Rabbit(settings))
        }
        "omniqueue-memory" => memory(definition).map(|()| Backend::Memory),
        other => Err(definition.error(
            "spec.type",
            format!("'pubsub.{other}' is not an omniqueue type"),
        )),
    }
}

fn host(
    definition: &ComponentDefinition,
    field: &str,
    default: &str,
) -> Result<String, ConfigError> {
    let host = definition
        .metadata
        .get(field)
        .cloned()
        .unwrap_or_else(|| default.to_string());
    match host.rsplit_once(':') {
        Some((name, port)) if !name.is_empty() && port.parse::<u16>().is_ok() => Ok(host),
        _ => Err(definition.error(
            &format!("spec.metadata ({field})"),
            format!("expected host:port, got '{host}'"),
        )),
    }
}

/// The Redis backend's settings.
pub fn redis(definition: &ComponentDefinition) -> Result<RedisSettings, ConfigError> {
    definition.check_known(&["redisHost", "keyPrefix", "ackDeadlineMs"])?;
    let ack_deadline = definition
        .value::<u64>("ackDeadlineMs", "milliseconds")?
        .unwrap_or(5000);
    if ack_deadline < 100 {
        return Err(definition.error(
            "spec.metadata (ackDeadlineMs)",
            format!("must be at least 100 ms, got {ack_deadline}"),
        ));
    }
    Ok(RedisSettings {
        host: host(definition, "redisHost", "127.0.0.1:6379")?,
        key_prefix: definition
            .metadata
            .get("keyPrefix")
            .cloned()
            .unwrap_or_else(|| "omniqueue".into()),
        ack_deadline: Duration::from_millis(ack_deadline),
    })
}

/// The RabbitMQ backend's settings.
pub fn rabbit(definition: &ComponentDefinition) -> Result<RabbitSettings, ConfigError> {
    definition.check_known(&["host", "user", "password", "prefix", "prefetch"])?;
    let prefetch = definition
        .value::<u16>("prefetch", "a message count from 1 to 65535")?
        .unwrap_or(1000);
    if prefetch == 0 {
        return Err(definition.error(
            "spec.metadata (prefetch)",
            "must be at least 1 (0 means unlimited to RabbitMQ)",
        ));
    }
    let text = |field: &str, default: &str| {
        definition
            .metadata
            .get(field)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    };
    Ok(RabbitSettings {
        host: host(definition, "host", "127.0.0.1:5672")?,
        user: text("user", "guest"),
        password: text("password", "guest"),
        prefix: text("prefix", "omniqueue"),
        prefetch,
    })
}

/// The in-memory backend has no settings.
pub fn memory(definition: &ComponentDefinition) -> Result<(), ConfigError> {
    definition.check_known(&[])
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

    #[test]
    fn bad_values_name_their_field() {
        for (kind, metadata, field) in [
            (
                "omniqueue-redis",
                "    - name: redisHost\n      value: nohost\n",
                "redisHost",
            ),
            (
                "omniqueue-redis",
                "    - name: ackDeadlineMs\n      value: \"10\"\n",
                "ackDeadlineMs",
            ),
            (
                "omniqueue-redis",
                "    - name: ackDeadlineMs\n      value: soon\n",
                "ackDeadlineMs",
            ),
            (
                "omniqueue-rabbitmq",
                "    - name: prefetch\n      value: \"0\"\n",
                "prefetch",
            ),
            (
                "omniqueue-rabbitmq",
                "    - name: host\n      value: \"h:99999\"\n",
                "host",
            ),
            (
                "omniqueue-memory",
                "    - name: size\n      value: \"1\"\n",
                "size",
            ),
        ] {
            let error = backend(&definition(kind, metadata), None)
                .unwrap_err()
                .to_string();
            assert!(error.contains(field), "{kind}: {error}");
        }
    }

    #[test]
    fn an_endpoint_replaces_the_named_host() {
        let d = definition(
            "omniqueue-rabbitmq",
            "    - name: host\n      value: \"a:1\"\n",
        );
        let Backend::Rabbit(settings) = backend(&d, Some("127.0.0.1:5999")).unwrap() else {
            panic!("not rabbit")
        };
        assert_eq!(settings.uri(), "amqp://guest:guest@127.0.0.1:5999/%2f");
    }
}
