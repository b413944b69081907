//! PostgreSQL queue component: tables created by the component, multi-row insert for
//! bulk publish, batch reads that claim rows with `FOR UPDATE SKIP LOCKED` (redelivery)
//! or `ON CONFLICT DO NOTHING` (first delivery), a visibility timeout for redelivery,
//! native delayed delivery through a visible-at column, LISTEN/NOTIFY to wake readers.
//! TTL and dead letters are left to the runtime.

mod settings;

pub use settings::PostgresConfig;

use crate::capability::{Capabilities, DeliveryGuarantee, OrderingScope, Support};
use crate::component::{
    check_message_size, owner_topic, Component, Consumer, ConsumerSpec, StartPosition,
    TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_postgres::{AsyncMessage, Client, NoTls};

fn db(context: &str) -> impl Fn(tokio_postgres::Error) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
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
    .map_err(|e| PubSubError::broker("connecting to PostgreSQL", e))?;
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
struct Link {
    config: PostgresConfig,
    /// Woken by notifications (consumers).
    notify: Option<Arc<Notify>>,
    /// Run on every new connection (`LISTEN ...`).
    on_connect: Option<String>,
    client: tokio::sync::Mutex<Arc<Client>>,
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
            client: tokio::sync::Mutex::new(Arc::new(client)),
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
        let mut current = self.client.lock().await;
        if current.is_closed() {
            let client = Link::connect(
                &self.config,
                self.notify.clone(),
                self.on_connect.as_deref(),
            )
            .await?;
            *current = Arc::new(client);
            if let Some(notify) = &self.notify {
                // Whatever arrived while it was away is read now.
                notify.notify_waiters();
            }
        }
        Ok(current.clone())
    }
}

/// The PostgreSQL component.
pub struct Postgres {
    config: PostgresConfig,
    link: Link,
    /// The multi-row insert, prepared once per connection (keyed by its address).
    insert: tokio::sync::Mutex<Option<(usize, tokio_postgres::Statement)>>,
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
        let p = &config.table_prefix;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {p}_messages (
                    id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, payload BYTEA NOT NULL,
                    content_type TEXT, metadata TEXT NOT NULL, partition_key TEXT,
                    published_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
                    visible_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
                 CREATE INDEX IF NOT EXISTS {p}_messages_topic ON {p}_messages (topic, id);
                 CREATE TABLE IF NOT EXISTS {p}_deliveries (
                    grp TEXT NOT NULL, message_id BIGINT NOT NULL, topic TEXT NOT NULL,
                    attempts INT NOT NULL, visible_at TIMESTAMPTZ NOT NULL, acked BOOLEAN NOT NULL,
                    owner TEXT, PRIMARY KEY (grp, message_id));
                 CREATE INDEX IF NOT EXISTS {p}_deliveries_due ON {p}_deliveries (grp, acked, visible_at);
                 CREATE TABLE IF NOT EXISTS {p}_groups (
                    grp TEXT NOT NULL, topic TEXT NOT NULL, floor BIGINT NOT NULL, PRIMARY KEY (grp, topic));
                 CREATE TABLE IF NOT EXISTS {p}_partitions (
                    topic TEXT PRIMARY KEY, version BIGINT NOT NULL, partitions INT NOT NULL);"
            ))
            .await
            .map_err(db("creating the queue tables"))?;
        drop(client);
        Ok(Postgres {
            link: Link::open(&config, None, None).await?,
            config,
            insert: tokio::sync::Mutex::new(None),
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
        let row = self
            .link
            .get()
            .await?
            .query_one("SELECT pg_postmaster_start_time()::text", &[])
            .await
            .map_err(db("reading the server's start time"))?;
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

#[async_trait]
impl Component for Postgres {
    fn kind(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            bulk_publish: Support::Native,
            bulk_subscribe: Support::Emulated,
            ttl: Support::Emulated,
            dead_letter: Support::Emulated,
            delayed_delivery: Support::Native,
            receiver_delay: Support::Native,
            ordering: OrderingScope::PerTopic,
            multi_topic: true,
            fan_out: true,
            headers: true,
            seek: true,
            partitions: None,
            delivery: DeliveryGuarantee::AtLeastOnce,
            max_message_bytes: Some(self.config.max_message_bytes),
            delivery_bound: Duration::from_secs(5),
            redelivery_bound: Duration::from_secs(2),
            // Due rows are found by a recheck every 50 ms, and a batch of due messages is
            // handed over one ack round trip after another: under a loaded server (CI
            // runs every component at once) the last of six came 665 ms late.
            delay_precision: Duration::from_secs(1),
            clock_tolerance: Duration::from_millis(50),
            durable: true,
            recovery_bound: Duration::from_secs(10),
            // The visibility timeout.
            lease: self.config.visibility_timeout,
            redelivers_slow_handlers: true,
        }
    }

    async fn broker_version(&self) -> Result<String> {
        let row = self
            .link
            .get()
            .await?
            .query_one("SHOW server_version", &[])
            .await
            .map_err(db("reading the server version"))?;
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
            let client = self.link.get().await?;
            let insert = {
                let mut cached = self.insert.lock().await;
                let address = Arc::as_ptr(&client) as usize;
                match cached.as_ref() {
                    Some((on, statement)) if *on == address => statement.clone(),
                    _ => {
                        let statement = client
                            .prepare(&format!(
                                "WITH inserted AS (
                           INSERT INTO {p}_messages (topic, payload, content_type, metadata, partition_key, visible_at)
                           SELECT t, b, c, m, k, CASE WHEN v = 0 THEN clock_timestamp() ELSE to_timestamp(v::float8 / 1e6) END
                           FROM UNNEST($1::text[], $2::bytea[], $3::text[], $4::text[], $5::text[], $6::int8[])
                                WITH ORDINALITY AS u(t, b, c, m, k, v, ord)
                           ORDER BY ord
                           RETURNING id),
                         woken AS (SELECT pg_notify('{p}_new', ''))
                         SELECT id FROM inserted, woken ORDER BY id"
                            ))
                            .await
                            .map_err(db("preparing the multi-row insert"))?;
                        *cached = Some((address, statement.clone()));
                        statement
                    }
                }
            };
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

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        if spec.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "consumer group name is empty".into(),
            ));
        }
        let notify = Arc::new(Notify::new());
        let link = Link::open(
            &self.config,
            Some(notify.clone()),
            Some(format!("LISTEN {}_new", self.config.table_prefix)),
        )
        .await?;
        let consumer = PostgresConsumer {
            link,
            notify,
            prefix: self.config.table_prefix.clone(),
            visibility: self.config.visibility_timeout,
            name: format!("c-{}", uuid::Uuid::new_v4().simple()),
            spec,
            closed: AtomicBool::new(false),
        };
        consumer.register_topics().await?;
        Ok(Box::new(consumer))
    }
}

struct PostgresConsumer {
    link: Link,
    notify: Arc<Notify>,
    prefix: String,
    visibility: Duration,
    name: String,
    spec: ConsumerSpec,
    closed: AtomicBool,
}

fn like_pattern(glob: &str) -> String {
    glob.chars()
        .flat_map(|c| match c {
            '*' => vec!['%'],
            '%' | '_' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

impl PostgresConsumer {
    fn ensure_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PubSubError::Closed(format!(
                "consumer {} was closed",
                self.name
            )));
        }
        Ok(())
    }

    /// The topics covered now.
    async fn topics(&self) -> Result<Vec<String>> {
        match &self.spec.topics {
            TopicSelector::Single(t) => Ok(vec![t.clone()]),
            TopicSelector::List(ts) => Ok(ts.clone()),
            TopicSelector::Pattern(p) => {
                let rows = self
                    .link
                    .get()
                    .await?
                    .query(
                        &format!(
                            "SELECT DISTINCT topic FROM {}_messages WHERE topic LIKE $1",
                            self.prefix
                        ),
                        &[&like_pattern(p)],
                    )
                    .await
                    .map_err(db("listing topics for a pattern"))?;
                Ok(rows.iter().map(|r| r.get(0)).collect())
            }
        }
    }

    /// Records where the group starts on each covered topic (kept if it exists).
    async fn register_topics(&self) -> Result<()> {
        let topics = self.topics().await?;
        let latest = self.spec.start == StartPosition::Latest;
        self.link.get().await?
            .execute(
                &format!(
                    "INSERT INTO {p}_groups (grp, topic, floor)
                     SELECT $1, t, CASE WHEN $3 THEN COALESCE((SELECT max(id) FROM {p}_messages WHERE topic = t), 0) ELSE 0 END
                     FROM UNNEST($2::text[]) AS t
                     ON CONFLICT DO NOTHING",
                    p = self.prefix
                ),
                &[&self.spec.group, &topics, &latest],
            )
            .await
            .map_err(db("registering the group"))?;
        Ok(())
    }

    async fn take(&self, max: usize, only: Option<&str>) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        if matches!(self.spec.topics, TopicSelector::Pattern(_)) {
            self.register_topics().await?;
        }
        let topics: Vec<String> = self
            .topics()
            .await?
            .into_iter()
            .filter(|t| only.is_none_or(|o| o == t))
            .collect();
        let p = &self.prefix;
        let max = max as i64;
        let visibility = self.visibility.as_millis() as i64;
        // Redeliveries that are due, claimed without blocking other members.
        let mut claimed = self
            .link
            .get()
            .await?
            .query(
                &format!(
                    "UPDATE {p}_deliveries d SET attempts = d.attempts + 1, owner = $3,
                        visible_at = clock_timestamp() + ($5::int8::float8 * interval '1 millisecond')
                     WHERE (d.grp, d.message_id) IN (
                        SELECT grp, message_id FROM {p}_deliveries
                        WHERE grp = $1 AND topic = ANY($2) AND NOT acked AND visible_at <= clock_timestamp()
                        ORDER BY message_id LIMIT $4 FOR UPDATE SKIP LOCKED)
                     RETURNING d.message_id, d.attempts"
                ),
                &[&self.spec.group, &topics, &self.name, &max, &visibility],
            )
            .await
            .map_err(db("claiming due redeliveries"))?
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1)))
            .collect::<Vec<_>>();
        if claimed.is_empty() {
            let receiver_delay = self.spec.receiver_delay.map_or(0, |d| d.as_millis() as i64);
            claimed = self
                .link
                .get()
                .await?
                .query(
                    &format!(
                        "INSERT INTO {p}_deliveries (grp, message_id, topic, attempts, visible_at, acked, owner)
                         SELECT $1, m.id, m.topic, 1, clock_timestamp() + ($5::int8::float8 * interval '1 millisecond'), false, $3
                         FROM {p}_messages m JOIN {p}_groups g ON g.grp = $1 AND g.topic = m.topic
                         WHERE m.topic = ANY($2) AND m.id > g.floor
                           AND m.visible_at <= clock_timestamp()
                           AND m.published_at + ($6::int8::float8 * interval '1 millisecond') <= clock_timestamp()
                           AND NOT EXISTS (SELECT 1 FROM {p}_deliveries d WHERE d.grp = $1 AND d.message_id = m.id)
                         ORDER BY m.id LIMIT $4
                         ON CONFLICT DO NOTHING
                         RETURNING message_id, attempts"
                    ),
                    &[&self.spec.group, &topics, &self.name, &max, &visibility, &receiver_delay],
                )
                .await
                .map_err(db("claiming new messages"))?
                .iter()
                .map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1)))
                .collect();
        }
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = claimed.iter().map(|(id, _)| *id).collect();
        let rows = self
            .link
            .get()
            .await?
            .query(
                &format!(
                    "SELECT id, topic, payload, content_type, metadata, partition_key,
                            (extract(epoch FROM published_at) * 1000000)::int8
                     FROM {p}_messages WHERE id = ANY($1) ORDER BY id"
                ),
                &[&ids],
            )
            .await
            .map_err(db("reading claimed messages"))?;
        Ok(rows
            .iter()
            .map(|row| {
                let id: i64 = row.get(0);
                let attempt = claimed
                    .iter()
                    .find(|(c, _)| *c == id)
                    .map_or(1, |(_, a)| *a as u32);
                ReceivedMessage {
                    id: MessageId::new(row.get::<_, String>(1), None, id as u64),
                    payload: row.get(2),
                    content_type: row.get(3),
                    metadata: serde_json::from_str::<Metadata>(row.get::<_, &str>(4))
                        .unwrap_or_default(),
                    partition_key: row.get(5),
                    attempt,
                    publish_time: UNIX_EPOCH
                        + Duration::from_micros(row.get::<_, i64>(6).max(0) as u64),
                }
            })
            .collect())
    }

    /// Waits for a notification (or a short poll interval, for due redeliveries).
    async fn take_until(
        &self,
        max: usize,
        deadline: Instant,
        only: Option<&str>,
    ) -> Result<Vec<ReceivedMessage>> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = self.take(max, only).await?;
            let now = Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            let wake = deadline.min(now + Duration::from_millis(50));
            let _ = tokio::time::timeout_at(wake, notified).await;
        }
    }

    fn owned(&self, id: &MessageId) -> Result<()> {
        owner_topic(id, &self.spec.topics).map(drop)
    }
}

#[async_trait]
impl Consumer for PostgresConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.take_until(max.max(1), Instant::now() + wait, None)
            .await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        crate::component::ack_each(self, ids, &self.spec.topics).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = owner_topic(id, &self.spec.topics)?;
        self.link.get().await?
            .execute(
                &format!(
                    "UPDATE {}_deliveries SET acked = true, owner = NULL
                     WHERE grp = $1 AND topic = $2 AND message_id <= $3 AND owner = $4 AND NOT acked",
                    self.prefix
                ),
                &[&self.spec.group, &topic, &(id.position as i64), &self.name],
            )
            .await
            .map_err(db("acknowledging cumulatively"))?;
        Ok(())
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        self.owned(id)?;
        self.link.get().await?
            .execute(
                &format!("UPDATE {}_deliveries SET acked = true, owner = NULL WHERE grp = $1 AND message_id = $2", self.prefix),
                &[&self.spec.group, &(id.position as i64)],
            )
            .await
            .map_err(db("acknowledging"))?;
        Ok(())
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.ensure_open()?;
        self.owned(id)?;
        self.link.get().await?
            .execute(
                &format!(
                    "UPDATE {}_deliveries SET owner = NULL, visible_at = clock_timestamp() + ($3::int8::float8 * interval '1 millisecond')
                     WHERE grp = $1 AND message_id = $2 AND NOT acked",
                    self.prefix
                ),
                &[&self.spec.group, &(id.position as i64), &(delay.as_millis() as i64)],
            )
            .await
            .map_err(db("scheduling a redelivery"))?;
        Ok(())
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = owner_topic(id, &self.spec.topics)?;
        // Forward or back: what is below `id` is passed (the floor), what is at or
        // above it is new again (its deliveries forgotten).
        self.link
            .get()
            .await?
            .execute(
                &format!(
                    "UPDATE {}_groups SET floor = $3::int8 - 1 WHERE grp = $1 AND topic = $2",
                    self.prefix
                ),
                &[&self.spec.group, &topic, &(id.position as i64)],
            )
            .await
            .map_err(db("moving the group's floor"))?;
        self.link
            .get()
            .await?
            .execute(
                &format!(
                    "DELETE FROM {}_deliveries WHERE grp = $1 AND topic = $2 AND message_id >= $3",
                    self.prefix
                ),
                &[&self.spec.group, &topic, &(id.position as i64)],
            )
            .await
            .map_err(db("seeking"))?;
        self.notify.notify_waiters();
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let topics = self.topics().await?;
        let rows = self
            .link
            .get()
            .await?
            .query(
                &format!("SELECT topic, max(id) FROM {}_messages WHERE topic = ANY($1) GROUP BY topic ORDER BY topic", self.prefix),
                &[&topics],
            )
            .await
            .map_err(db("reading the last messages"))?;
        Ok(rows
            .iter()
            .map(|r| MessageId::new(r.get::<_, String>(0), None, r.get::<_, i64>(1) as u64))
            .collect())
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.link
            .get()
            .await?
            .execute(
                &format!(
                    "UPDATE {}_deliveries SET owner = NULL, visible_at = clock_timestamp()
                     WHERE grp = $1 AND owner = $2 AND NOT acked",
                    self.prefix
                ),
                &[&self.spec.group, &self.name],
            )
            .await
            .map_err(db("releasing held messages"))?;
        Ok(())
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
