//! A member of a consumer group on the PostgreSQL queue: reads and claims through the
//! server-side functions of [`super::schema`] (one round trip hands over a batch),
//! acknowledges by deleting its pending rows, and trims what every group is done with.

use super::{Link, PostgresConfig};
use crate::component::{
    ensure_open, owner_topic, Consumer, ConsumerSpec, StartPosition, TopicSelector,
};
use crate::error::Result;
use crate::message::{MessageId, Metadata, ReceivedMessage};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The longest an idle member waits without news (a notification or a due time it
/// knows of): a member of the same group may have released rows.
const IDLE_POLL: Duration = Duration::from_millis(50);
/// How soon an idle member looks again when committed rows wait behind a transaction
/// that is still running.
const HELD_BACK_POLL: Duration = Duration::from_millis(2);
/// The most messages one trim deletes per topic.
const TRIM_BATCH: i32 = 10_000;
/// A member vacuums the pending table once it has acknowledged this many rows since it
/// last did (and at most every [`VACUUM_EVERY`]).
const VACUUM_AFTER: u64 = 2_000;
const VACUUM_EVERY: Duration = Duration::from_millis(500);

pub(super) struct PostgresConsumer {
    link: Arc<Link>,
    notify: Arc<Notify>,
    prefix: String,
    visibility: Duration,
    /// How long a message every group acknowledged is kept.
    retention: Option<Duration>,
    name: String,
    spec: ConsumerSpec,
    closed: AtomicBool,
    /// When this member last trimmed.
    trimmed: Mutex<Instant>,
    /// Rows acknowledged (deleted) since this member last vacuumed.
    acked: AtomicU64,
    /// When this member last vacuumed.
    vacuumed: Mutex<Instant>,
    /// Acknowledgements on their way to the server.
    acks: Arc<AckQueue>,
    /// The task that sends them.
    flusher: tokio::task::JoinHandle<()>,
}

/// Acknowledgements on their way: `ack` returns once its ids are queued here (as
/// RabbitMQ and NATS acknowledgements are sent without waiting for the server), and a
/// task deletes every queued row in one statement, so a member handling one message at
/// a time does not wait a round trip per message. `close` and `seek` send what is
/// queued first. A crash loses only queued acknowledgements: those messages are
/// delivered again (at least once).
struct AckQueue {
    link: Arc<Link>,
    /// The DELETE of a group's pending rows by id.
    sql: String,
    group: String,
    ids: Mutex<Vec<i64>>,
    wake: Notify,
    /// Held while a batch is sent, so that `flush` returns after every earlier one.
    sending: tokio::sync::Mutex<()>,
}

impl AckQueue {
    fn push(&self, ids: impl IntoIterator<Item = i64>) {
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(ids);
        self.wake.notify_one();
    }

    /// Sends what is queued; returns once every acknowledgement queued before the call
    /// reached the server.
    async fn flush(&self) -> Result<()> {
        let _sending = self.sending.lock().await;
        let ids = std::mem::take(&mut *self.ids.lock().unwrap_or_else(|p| p.into_inner()));
        if ids.is_empty() {
            return Ok(());
        }
        self.link
            .execute(&self.sql, &[&self.group, &ids], "acknowledging")
            .await
    }

    /// Sends acknowledgements as they are queued, until the consumer ends.
    async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            if let Err(e) = self.flush().await {
                // The rows stay pending and are delivered again after their lease.
                tracing::warn!(error = %e, "sending acknowledgements failed");
            }
        }
    }
}

impl Drop for PostgresConsumer {
    fn drop(&mut self) {
        self.flusher.abort();
    }
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

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The topics `selector` covers now (a pattern: the topics with messages that match).
async fn topics_of(link: &Link, prefix: &str, selector: &TopicSelector) -> Result<Vec<String>> {
    match selector {
        TopicSelector::Single(t) => Ok(vec![t.clone()]),
        TopicSelector::List(ts) => Ok(ts.clone()),
        TopicSelector::Pattern(p) => {
            let rows = link
                .query(
                    &format!("SELECT DISTINCT topic FROM {prefix}_messages WHERE topic LIKE $1"),
                    &[&like_pattern(p)],
                    "listing topics for a pattern",
                )
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        }
    }
}

/// Records where `spec`'s group starts on each topic it covers (kept where it exists):
/// from then on, what the group has not read and acknowledged is never trimmed.
pub(super) async fn register(link: &Link, prefix: &str, spec: &ConsumerSpec) -> Result<()> {
    let topics = topics_of(link, prefix, &spec.topics).await?;
    let latest = spec.start == StartPosition::Latest;
    link.query(
        &format!("SELECT {prefix}_register($1, $2, $3)"),
        &[&spec.group, &topics, &latest],
        "registering the group",
    )
    .await?;
    Ok(())
}

impl PostgresConsumer {
    /// Opens a member of `spec`'s group on its own connection, which LISTENs for new
    /// messages.
    pub(super) async fn open(config: &PostgresConfig, spec: ConsumerSpec) -> Result<Self> {
        let notify = Arc::new(Notify::new());
        let prefix = config.table_prefix.clone();
        let link = Arc::new(
            Link::open(
                config,
                Some(notify.clone()),
                Some(format!("LISTEN {prefix}_new")),
            )
            .await?,
        );
        let acks = Arc::new(AckQueue {
            link: link.clone(),
            sql: format!("DELETE FROM {prefix}_pending WHERE grp = $1 AND message_id = ANY($2)"),
            group: spec.group.clone(),
            ids: Mutex::new(Vec::new()),
            wake: Notify::new(),
            sending: tokio::sync::Mutex::new(()),
        });
        Ok(PostgresConsumer {
            flusher: tokio::spawn(acks.clone().run()),
            acks,
            link,
            notify,
            prefix,
            visibility: config.visibility_timeout,
            retention: config.retention,
            name: format!("c-{}", uuid::Uuid::new_v4().simple()),
            spec,
            closed: AtomicBool::new(false),
            trimmed: Mutex::new(Instant::now()),
            acked: AtomicU64::new(0),
            vacuumed: Mutex::new(Instant::now()),
        })
    }

    fn ensure_open(&self) -> Result<()> {
        ensure_open(&self.closed, || format!("consumer {}", self.name))
    }

    /// The topics covered now.
    async fn topics(&self) -> Result<Vec<String>> {
        topics_of(&self.link, &self.prefix, &self.spec.topics).await
    }

    /// The topics covered now, or only `only` among them.
    async fn covered(&self, only: Option<&str>) -> Result<Vec<String>> {
        let mut topics = self.topics().await?;
        topics.retain(|t| only.is_none_or(|o| o == t));
        Ok(topics)
    }

    /// Records where the group starts on each covered topic (kept if it exists).
    pub(super) async fn register_topics(&self) -> Result<()> {
        register(&self.link, &self.prefix, &self.spec).await
    }

    async fn take(&self, max: usize, only: Option<&str>) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        if matches!(self.spec.topics, TopicSelector::Pattern(_)) {
            self.register_topics().await?;
        }
        let topics = self.covered(only).await?;
        let receiver_delay = self.spec.receiver_delay.map_or(0, millis);
        let rows = self
            .link
            .query(
                &format!(
                    "SELECT id, topic, payload, content_type, metadata, partition_key, published_us, attempts
                     FROM {}_take($1, $2, $3, $4, $5, $6)",
                    self.prefix
                ),
                &[
                    &self.spec.group,
                    &topics,
                    &self.name,
                    &i32::try_from(max).unwrap_or(i32::MAX),
                    &millis(self.visibility),
                    &receiver_delay,
                ],
                "claiming messages",
            )
            .await?;
        self.trim_now_and_then(&topics).await;
        self.vacuum_now_and_then().await;
        Ok(rows
            .iter()
            .map(|row| ReceivedMessage {
                id: MessageId::new(row.get::<_, String>(1), None, row.get::<_, i64>(0) as u64),
                payload: row.get(2),
                content_type: row.get(3),
                metadata: serde_json::from_str::<Metadata>(row.get::<_, &str>(4))
                    .unwrap_or_default(),
                partition_key: row.get(5),
                attempt: row.get::<_, i32>(7).max(1) as u32,
                publish_time: UNIX_EPOCH
                    + Duration::from_micros(row.get::<_, i64>(6).max(0) as u64),
            })
            .collect())
    }

    /// How long an idle member may wait before looking again.
    async fn idle_wait(&self, only: Option<&str>) -> Result<Duration> {
        let topics = self.covered(only).await?;
        let row = self
            .link
            .query_one(
                &format!(
                    "SELECT due_in_ms, held_back FROM {}_idle($1, $2)",
                    self.prefix
                ),
                &[&self.spec.group, &topics],
                "looking for the next due message",
            )
            .await?;
        if row.get::<_, Option<bool>>(1).unwrap_or(false) {
            return Ok(HELD_BACK_POLL);
        }
        Ok(match row.get::<_, Option<i64>>(0) {
            Some(due_in) => Duration::from_millis(due_in.max(0) as u64).min(IDLE_POLL),
            None => IDLE_POLL,
        })
    }

    /// Deletes what every group is done with, at most once per tenth of the
    /// retention (and once a second at most often). A failed trim is tried again
    /// later; it never fails a read.
    async fn trim_now_and_then(&self, topics: &[String]) {
        let Some(retention) = self.retention else {
            return;
        };
        let every = (retention / 10).max(Duration::from_secs(1));
        {
            let mut last = self.trimmed.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() < every {
                return;
            }
            *last = Instant::now();
        }
        if let Err(e) = self.trim(topics).await {
            tracing::warn!(error = %e, "trimming acknowledged messages failed");
        }
    }

    /// Vacuums the pending table once this member has deleted enough rows: a claim
    /// walks the group's index range, and deleted rows stay in it until a vacuum
    /// (autovacuum looks once a minute), so without this a claim would cost more with
    /// every message acknowledged. Another member's vacuum under way is not waited for.
    async fn vacuum_now_and_then(&self) {
        if self.acked.load(Ordering::Relaxed) < VACUUM_AFTER {
            return;
        }
        {
            let mut last = self.vacuumed.lock().unwrap_or_else(|p| p.into_inner());
            if last.elapsed() < VACUUM_EVERY {
                return;
            }
            *last = Instant::now();
        }
        self.acked.store(0, Ordering::Relaxed);
        if let Err(e) = self
            .link
            .simple(
                &format!("VACUUM (SKIP_LOCKED) {}_pending", self.prefix),
                "vacuuming the pending table",
            )
            .await
        {
            tracing::warn!(error = %e, "vacuuming the pending table failed");
        }
    }

    async fn trim(&self, topics: &[String]) -> Result<()> {
        let Some(retention) = self.retention else {
            return Ok(());
        };
        self.link
            .query(
                &format!("SELECT {}_trim($1, $2, $3)", self.prefix),
                &[&topics, &millis(retention), &TRIM_BATCH],
                "deleting acknowledged messages",
            )
            .await?;
        Ok(())
    }

    /// Waits for a notification, a due time or a short poll interval.
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
            let wake = deadline.min(now + self.idle_wait(only).await?);
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
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        self.take_until(max, Instant::now() + wait, None).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        for id in ids {
            self.owned(id)?;
        }
        self.acked.fetch_add(ids.len() as u64, Ordering::Relaxed);
        self.acks.push(ids.iter().map(|id| id.position as i64));
        Ok(())
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = owner_topic(id, &self.spec.topics)?;
        self.acks.flush().await?;
        self.link
            .execute(
                &format!(
                    "DELETE FROM {}_pending
                     WHERE grp = $1 AND topic = $2 AND message_id <= $3 AND owner = $4",
                    self.prefix
                ),
                &[&self.spec.group, &topic, &(id.position as i64), &self.name],
                "acknowledging cumulatively",
            )
            .await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ack_many(std::slice::from_ref(id)).await
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.ensure_open()?;
        self.owned(id)?;
        self.link
            .execute(
                &format!(
                    "UPDATE {}_pending SET owner = NULL,
                        visible_at = clock_timestamp() + ($3::int8::float8 * interval '1 millisecond')
                     WHERE grp = $1 AND message_id = $2",
                    self.prefix
                ),
                &[&self.spec.group, &(id.position as i64), &millis(delay)],
                "scheduling a redelivery",
            )
            .await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = owner_topic(id, &self.spec.topics)?;
        // An acknowledgement still queued would delete the row the seek brings back.
        self.acks.flush().await?;
        self.link
            .query(
                &format!("SELECT {}_seek($1, $2, $3)", self.prefix),
                &[&self.spec.group, &topic, &(id.position as i64)],
                "seeking",
            )
            .await?;
        self.notify.notify_waiters();
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let topics = self.topics().await?;
        let rows = self
            .link
            .query(
                &format!(
                    "SELECT topic, max(id) FROM {}_messages WHERE topic = ANY($1)
                     GROUP BY topic ORDER BY topic",
                    self.prefix
                ),
                &[&topics],
                "reading the last messages",
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| MessageId::new(r.get::<_, String>(0), None, r.get::<_, i64>(1) as u64))
            .collect())
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.acks.flush().await?;
        self.flusher.abort();
        self.link
            .execute(
                &format!(
                    "UPDATE {}_pending SET owner = NULL, visible_at = clock_timestamp()
                     WHERE grp = $1 AND owner = $2",
                    self.prefix
                ),
                &[&self.spec.group, &self.name],
                "releasing held messages",
            )
            .await?;
        // What this member acknowledged last may be all that held a message back.
        let topics = self.topics().await?;
        self.trim(&topics).await
    }
}
