//! PostgreSQL queue component: tables and server-side functions created by the
//! component ([`schema`]), a multi-row insert for bulk publish, reads that follow a
//! commit-safe cursor and claim due rows with `FOR UPDATE SKIP LOCKED` in one round
//! trip ([`consumer`]), a visibility timeout for redelivery, native delayed delivery
//! through a visible-at column, LISTEN/NOTIFY to wake readers, and deletion of what
//! every group acknowledged after a retention. TTL and dead letters are left to the
//! runtime.

mod consumer;
mod schema;
mod settings;

pub use settings::PostgresConfig;

use crate::capability::{Capabilities, Support};
use crate::component::{check_message_size, Component, Consumer, ConsumerSpec};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage};
use async_trait::async_trait;
use consumer::PostgresConsumer;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Statement};

fn db(context: &str) -> impl Fn(tokio_postgres::Error) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, describe(&e))
}

/// The server's own words for a database error (its Display says only "db error"),
/// else the error with its causes.
fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} {}: {}", db.severity(), db.code().code(), db.message());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as i64
}
/// How long opening a connection may take (a server behind a black hole never
/// answers).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Connects and drives the connection; notifications wake `notify`.
async fn connect(config: &PostgresConfig, notify: Option<Arc<Notify>>) -> Result<Client> {
    let (client, mut connection) = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_postgres::connect(&config.connection_string, NoTls),
    )
    .await
    .map_err(|_| {
        PubSubError::broker(
            "connecting to PostgreSQL",
            format!("no answer within {CONNECT_TIMEOUT:?}"),
        )
    })?
    .map_err(|e| PubSubError::broker("connecting to PostgreSQL", describe(&e)))?;
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => {
                    if let Some(notify) = &notify {
                        notify.notify_waiters();
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "PostgreSQL connection ended");
                    break;
                }
            }
        }
    });
    Ok(client)
}

/// A connection opened again once it died (the server restarted or the network
/// failed): the call that finds it closed connects again, and LISTENs again.
/// Statements are prepared once per connection.
struct Link {
    config: PostgresConfig,
    /// Woken by notifications (consumers).
    notify: Option<Arc<Notify>>,
    /// Run on every new connection (`LISTEN ...`).
    on_connect: Option<String>,
    live: tokio::sync::Mutex<Live>,
}

/// The connection in use and the statements prepared on it, by their text.
struct Live {
    client: Arc<Client>,
    statements: HashMap<String, Statement>,
}

impl Link {
    async fn open(
        config: &PostgresConfig,
        notify: Option<Arc<Notify>>,
        on_connect: Option<String>,
    ) -> Result<Self> {
        let client = Link::connect(config, notify.clone(), on_connect.as_deref()).await?;
        Ok(Link {
            config: config.clone(),
            notify,
            on_connect,
            live: tokio::sync::Mutex::new(Live {
                client: Arc::new(client),
                statements: HashMap::new(),
            }),
        })
    }

    async fn connect(
        config: &PostgresConfig,
        notify: Option<Arc<Notify>>,
        on_connect: Option<&str>,
    ) -> Result<Client> {
        let client = connect(config, notify).await?;
        if let Some(statement) = on_connect {
            client
                .batch_execute(statement)
                .await
                .map_err(db("setting up a new connection"))?;
        }
        Ok(client)
    }

    /// The live connection, opened again when the last one died.
    async fn get(&self) -> Result<Arc<Client>> {
        Ok(self.live().await?.client.clone())
    }

    async fn live(&self) -> Result<tokio::sync::MutexGuard<'_, Live>> {
        let mut live = self.live.lock().await;
        if live.client.is_closed() {
            let client = Link::connect(
                &self.config,
                self.notify.clone(),
                self.on_connect.as_deref(),
            )
            .await?;
            *live = Live {
                client: Arc::new(client),
                statements: HashMap::new(),
            };
            if let Some(notify) = &self.notify {
                // Whatever arrived while it was away is read now.
                notify.notify_waiters();
            }
        }
        Ok(live)
    }

    /// The live connection and `sql` prepared on it.
    async fn prepared(&self, sql: &str, context: &str) -> Result<(Arc<Client>, Statement)> {
        let mut live = self.live().await?;
        if let Some(statement) = live.statements.get(sql) {
            return Ok((live.client.clone(), statement.clone()));
        }
        let statement = live.client.prepare(sql).await.map_err(db(context))?;
        live.statements.insert(sql.to_string(), statement.clone());
        Ok((live.client.clone(), statement))
    }

    /// Runs `sql` (prepared once per connection) and returns its rows.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        context: &str,
    ) -> Result<Vec<tokio_postgres::Row>> {
        let (client, statement) = self.prepared(sql, context).await?;
        client.query(&statement, params).await.map_err(db(context))
    }

    /// Runs `sql` (prepared once per connection), which returns exactly one row.
    async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        context: &str,
    ) -> Result<tokio_postgres::Row> {
        let (client, statement) = self.prepared(sql, context).await?;
        client
            .query_one(&statement, params)
            .await
            .map_err(db(context))
    }

    /// Runs `sql` as a simple query (statements that cannot be prepared or run in a
    /// transaction, such as VACUUM).
    async fn simple(&self, sql: &str, context: &str) -> Result<()> {
        let client = self.get().await?;
        client.batch_execute(sql).await.map_err(db(context))
    }

    /// Runs `sql` (prepared once per connection) for its effect.
    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        context: &str,
    ) -> Result<()> {
        let (client, statement) = self.prepared(sql, context).await?;
        client
            .execute(&statement, params)
            .await
            .map_err(db(context))?;
        Ok(())
    }
}

/// The PostgreSQL component.
pub struct Postgres {
    config: PostgresConfig,
    link: Link,
}

impl Postgres {
    /// Connects and creates the tables if needed.
    pub async fn connect(config: PostgresConfig) -> Result<Self> {
        if !config
            .table_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(PubSubError::InvalidRequest(format!(
                "tablePrefix '{}' may only hold letters, digits and '_'",
                config.table_prefix
            )));
        }
        let client = connect(&config, None).await?;
        client
            .batch_execute(&schema::setup(&config.table_prefix))
            .await
            .map_err(db("creating the queue tables and functions"))?;
        drop(client);
        Ok(Postgres {
            link: Link::open(&config, None, None).await?,
            config,
        })
    }

    fn check_size(&self, message: &OutgoingMessage) -> Result<()> {
        check_message_size(message, self.config.max_message_bytes)
    }
}

struct Row {
    topic: String,
    payload: Vec<u8>,
    content_type: Option<String>,
    metadata: String,
    partition_key: Option<String>,
    visible_at: i64,
}

impl Row {
    fn of(message: &OutgoingMessage) -> Row {
        Row {
            topic: message.topic.clone(),
            payload: message.payload.clone(),
            content_type: message.content_type.clone(),
            metadata: serde_json::to_string(&message.metadata).unwrap_or_default(),
            partition_key: message.partition_key.clone(),
            visible_at: message.deliver_at.map_or(0, micros),
        }
    }
}

/// Refuses a consumer group without a name.
fn check_group(spec: &ConsumerSpec) -> Result<()> {
    if spec.group.is_empty() {
        return Err(PubSubError::InvalidRequest(
            "consumer group name is empty".into(),
        ));
    }
    Ok(())
}

/// Partition records in rows of `<prefix>_partitions`.
#[async_trait]
impl crate::partitioned::PartitionStore for Postgres {
    async fn read_partitions(&self, topic: &str) -> Result<Option<crate::PartitionUpdate>> {
        let row = self
            .link
            .get()
            .await?
            .query_opt(
                &format!(
                    "SELECT version, partitions FROM {}_partitions WHERE topic = $1",
                    self.config.table_prefix
                ),
                &[&topic],
            )
            .await
            .map_err(db("reading a partition record"))?;
        Ok(row.map(|row| crate::PartitionUpdate {
            version: row.get::<_, i64>(0) as u64,
            partitions: row.get::<_, i32>(1) as u32,
        }))
    }

    async fn incarnation(&self) -> Result<String> {
        // A restart ends the connection; the link opens a new one to the new server.
        let sql = "SELECT pg_postmaster_start_time()::text";
        let row = self
            .link
            .query_one(sql, &[], "reading the server's start time")
            .await?;
        Ok(row.get(0))
    }

    async fn write_partitions(&self, topic: &str, record: crate::PartitionUpdate) -> Result<()> {
        self.link.get().await?
            .execute(
                &format!(
                    "INSERT INTO {}_partitions (topic, version, partitions) VALUES ($1, $2, $3)
                     ON CONFLICT (topic) DO UPDATE SET version = excluded.version, partitions = excluded.partitions",
                    self.config.table_prefix
                ),
                &[&topic, &(record.version as i64), &(record.partitions as i32)],
            )
            .await
            .map_err(db("writing a partition record"))?;
        Ok(())
    }
}

impl PostgresConfig {
    /// What the component declares, decided by its settings alone. Delays within the
    /// baseline's precision: an idle member wakes at the next due time it reads from
    /// the server (or within 50 ms when another member may have released rows).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            delayed_delivery: Support::Native,
            receiver_delay: Support::Native,
            max_message_bytes: Some(self.max_message_bytes),
            // The visibility timeout.
            lease: self.visibility_timeout,
            redelivers_slow_handlers: true,
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for Postgres {
    async fn broker_version(&self) -> Result<String> {
        let row = self
            .link
            .query_one("SHOW server_version", &[], "reading the server version")
            .await?;
        Ok(format!("PostgreSQL {}", row.get::<_, String>(0)))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        let mut ids = self.publish_batch(vec![message]).await?;
        ids.pop().expect("one result per message")
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let mut results: Vec<Option<Result<MessageId>>> = Vec::new();
        let mut rows = Vec::new();
        for message in &messages {
            match self.check_size(message) {
                Ok(()) => {
                    rows.push(Row::of(message));
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        if !rows.is_empty() {
            let p = &self.config.table_prefix;
            let topics: Vec<&str> = rows.iter().map(|r| r.topic.as_str()).collect();
            let payloads: Vec<&[u8]> = rows.iter().map(|r| r.payload.as_slice()).collect();
            let types: Vec<Option<&str>> = rows.iter().map(|r| r.content_type.as_deref()).collect();
            let metadata: Vec<&str> = rows.iter().map(|r| r.metadata.as_str()).collect();
            let keys: Vec<Option<&str>> = rows.iter().map(|r| r.partition_key.as_deref()).collect();
            let visible: Vec<i64> = rows.iter().map(|r| r.visible_at).collect();
            let (client, insert) = self
                .link
                .prepared(
                    &format!(
                        "WITH inserted AS (
                           INSERT INTO {p}_messages (topic, payload, content_type, metadata, partition_key, visible_at)
                           SELECT t, b, c, m, k, CASE WHEN v = 0 THEN clock_timestamp() ELSE to_timestamp(v::float8 / 1e6) END
                           FROM UNNEST($1::text[], $2::bytea[], $3::text[], $4::text[], $5::text[], $6::int8[])
                                WITH ORDINALITY AS u(t, b, c, m, k, v, ord)
                           ORDER BY ord
                           RETURNING id),
                         woken AS (SELECT pg_notify('{p}_new', ''))
                         SELECT id FROM inserted, woken ORDER BY id"
                    ),
                    "preparing the multi-row insert",
                )
                .await?;
            let inserted = client
                .query(
                    &insert,
                    &[&topics, &payloads, &types, &metadata, &keys, &visible],
                )
                .await;
            let outcome: Vec<Result<MessageId>> = match inserted {
                Ok(ids) if ids.len() == rows.len() => ids
                    .iter()
                    .zip(&rows)
                    .map(|(row, r)| {
                        Ok(MessageId::new(
                            r.topic.clone(),
                            None,
                            row.get::<_, i64>(0) as u64,
                        ))
                    })
                    .collect(),
                Ok(ids) => {
                    let why = format!("{} ids for {} rows", ids.len(), rows.len());
                    rows.iter()
                        .map(|_| Err(PubSubError::broker("multi-row insert", &why)))
                        .collect()
                }
                Err(e) => rows
                    .iter()
                    .map(|_| Err(PubSubError::broker("multi-row insert", &e)))
                    .collect(),
            };
            let mut outcome = outcome.into_iter();
            for slot in results.iter_mut().filter(|r| r.is_none()) {
                *slot = outcome.next();
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every entry has a result"))
            .collect())
    }

    /// Registers the group on its topics, so that what it has not read is kept for it
    /// (a retention trims only what every registered group acknowledged).
    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        check_group(spec)?;
        consumer::register(&self.link, &self.config.table_prefix, spec).await
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        check_group(&spec)?;
        let consumer = PostgresConsumer::open(&self.config, spec).await?;
        consumer.register_topics().await?;
        Ok(Box::new(consumer))
    }

    fn kind(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }
}

#[cfg(test)]
mod endpoint_tests {
    use super::PostgresConfig;

    #[test]
    fn an_endpoint_replaces_the_host_and_port() {
        let config = |s: &str| PostgresConfig {
            connection_string: s.into(),
            ..PostgresConfig::default()
        };
        assert_eq!(
            config("host=127.0.0.1 port=5432 user=postgres dbname=test")
                .with_endpoint("127.0.0.1", "40001"),
            "user=postgres dbname=test host=127.0.0.1 port=40001"
        );
        assert_eq!(
            config("postgresql://postgres@db.example:5432/test?sslmode=disable")
                .with_endpoint("127.0.0.1", "40001"),
            "postgresql://postgres@127.0.0.1:40001/test?sslmode=disable"
        );
        assert_eq!(
            config("postgres://db:5432").with_endpoint("10.0.0.1", "7"),
            "postgres://10.0.0.1:7"
        );
    }
}
