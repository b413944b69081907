//! The postgres component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::time::Duration;

use super::Postgres;

/// Settings (YAML metadata `connectionString`, `tablePrefix`, `visibilityTimeoutMs`,
/// `maxMessageBytes`, `retentionMs`).
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresConfig {
    /// A libpq-style connection string, e.g. `host=127.0.0.1 port=5432 user=postgres dbname=test`.
    pub connection_string: String,
    /// Tables are `<prefix>_messages`, `<prefix>_pending`, `<prefix>_cursors`,
    /// `<prefix>_partitions`; functions `<prefix>_take` and the like.
    pub table_prefix: String,
    /// A delivered, unacknowledged message becomes deliverable again after this.
    pub visibility_timeout: Duration,
    pub max_message_bytes: usize,
    /// How long a message that every group of its topic has read and acknowledged
    /// is kept (for a seek back) before it is deleted; `None` (the default) keeps
    /// every message.
    pub retention: Option<Duration>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            connection_string: "host=127.0.0.1 port=5432 user=postgres dbname=postgres".into(),
            table_prefix: "pubsub".into(),
            visibility_timeout: Duration::from_secs(30),
            max_message_bytes: 1024 * 1024,
            retention: None,
        }
    }
}

impl PostgresConfig {
    /// The connection string aimed at `host:port` instead of the server it names
    /// (key-value or URL form): the old host and port are replaced, not added to (a
    /// second `host=` would make a host list, tried in order).
    pub fn with_endpoint(&self, host: &str, port: &str) -> String {
        let current = self.connection_string.trim();
        for scheme in ["postgresql://", "postgres://"] {
            if let Some(rest) = current.strip_prefix(scheme) {
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                let (authority, tail) = rest.split_at(end);
                let user = authority
                    .rsplit_once('@')
                    .map(|(user, _)| format!("{user}@"))
                    .unwrap_or_default();
                return format!("{scheme}{user}{host}:{port}{tail}");
            }
        }
        let mut kept: Vec<&str> = current
            .split_whitespace()
            .filter(|pair| {
                !["host=", "hostaddr=", "port="]
                    .iter()
                    .any(|key| pair.starts_with(key))
            })
            .collect();
        let host = format!("host={host}");
        let port = format!("port={port}");
        kept.push(&host);
        kept.push(&port);
        kept.join(" ")
    }
}

impl TypedSettings for PostgresConfig {
    const TYPE: &'static str = "postgres";

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&[
            "connectionString",
            "tablePrefix",
            "visibilityTimeoutMs",
            "maxMessageBytes",
            "retentionMs",
        ])?;
        let defaults = Self::default();
        let table_prefix = definition.text_or("tablePrefix", defaults.table_prefix);
        if table_prefix.is_empty()
            || !table_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            let message = format!("'{table_prefix}' may only hold letters, digits and '_'");
            return Err(definition.field_error("tablePrefix", message));
        }
        let connection_string = definition.text_or("connectionString", defaults.connection_string);
        if connection_string.parse::<tokio_postgres::Config>().is_err() {
            return Err(definition.field_error(
                "connectionString",
                "is not a valid PostgreSQL connection string",
            ));
        }
        Ok(Self {
            connection_string,
            table_prefix,
            visibility_timeout: definition
                .millis("visibilityTimeoutMs")?
                .unwrap_or(defaults.visibility_timeout),
            max_message_bytes: definition.max_message_bytes(defaults.max_message_bytes)?,
            retention: definition.millis("retentionMs")?.or(defaults.retention),
        })
    }

    fn endpoint(&self) -> Option<String> {
        let config = self
            .connection_string
            .parse::<tokio_postgres::Config>()
            .ok()?;
        let host = config
            .get_hosts()
            .iter()
            .find_map(|host| match host {
                tokio_postgres::config::Host::Tcp(name) => Some(name.clone()),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(_) => None,
            })
            .unwrap_or_else(|| "127.0.0.1".into());
        let port = config.get_ports().first().copied().unwrap_or(5432);
        Some(format!("{host}:{port}"))
    }

    fn aim_at(&mut self, endpoint: &str) {
        if let Some((host, port)) = endpoint.rsplit_once(':') {
            self.connection_string = self.with_endpoint(host, port);
        }
    }

    fn connect(self) -> Connecting {
        crate::partitioned::connect_wrapped(Postgres::connect(self))
    }
}
