//! NATS JetStream component: one stream for all topics (subject `<stream>.<topic>`),
//! one durable pull consumer per (group, topic), async publish acks mapped to bulk
//! entries, batch fetch, Ack / Nak(delay) / Term, multi-topic consumers as a set of
//! per-topic consumers with sequence ids, seek by sequence (consumer recreated at it).

mod settings;

pub use settings::NatsConfig;

use crate::capability::Capabilities;
use crate::component::{
    check_message_size, owner_topic, Component, Consumer, ConsumerSpec, StartPosition,
    TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_nats::jetstream::{
    self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy, AckKind,
};
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How long after a pull request's expiry its batch is still read for what the
/// server hands it. The server counts the expiry from when the request reached it
/// (on a loaded machine hundreds of ms after the client sent it), and the status
/// that ends a batch can come late or not at all (seen: a receive stalled 1.5 s on
/// one, a second into a fresh consumer, quiet machine or not). A batch that has not
/// ended when its receive returns is parked ([`Parked`]) and read by later
/// receives until it ends or this slack runs out: a message handed to it is neither
/// waited for in one receive nor lost to this member until its ack wait ends (seen
/// under `scripts/load.sh` before parking: `retry.delay`'s redelivery came 5.6 s
/// after RETRY, at the ack wait).
const BATCH_STATUS_SLACK: Duration = Duration::from_millis(1500);
/// How long the server keeps a request that waits for a message, at least: the
/// receives that follow wait on it, parked, instead of asking again, so that requests
/// seldom end (a redelivery falling due as a request ended was handed to it and
/// waited out the ack wait, about once in ten runs of a row with two retried messages
/// on one topic, with a new request every 100 ms).
const WAITING_REQUEST_LIFE: Duration = Duration::from_millis(500);
/// How long past a parked request's end a closing member still reads it.
const CLOSING_MARGIN: Duration = Duration::from_millis(250);
/// How long a request for what a topic holds now (no wait) is waited for before it
/// is parked: the server answers at once, a loaded machine takes longer.
const NO_WAIT_ANSWER: Duration = Duration::from_millis(250);
const HEADER_METADATA: &str = "Pcs-Metadata";
const HEADER_CONTENT_TYPE: &str = "Pcs-Content-Type";
const HEADER_KEY: &str = "Pcs-Partition-Key";

fn nats<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
}

/// A failed pull within a receive that has messages already: they are held by the
/// member, so the receive hands them over rather than fail (which would strand them
/// until their ack wait ran out); the error shows again on the next pull.
fn spared(error: PubSubError, out: &[ReceivedMessage]) -> Result<()> {
    if out.is_empty() {
        return Err(error);
    }
    tracing::debug!(error = %error, "a pull failed after others had brought messages");
    Ok(())
}

/// The NATS JetStream component.
pub struct NatsJetStream {
    config: NatsConfig,
    context: jetstream::Context,
    stream: jetstream::stream::Stream,
}

impl NatsJetStream {
    /// Connects and creates the stream if needed.
    pub async fn connect(config: NatsConfig) -> Result<Self> {
        let client = async_nats::connect(&config.url)
            .await
            .map_err(|e| PubSubError::broker(format!("connecting to NATS at {}", config.url), e))?;
        let context = jetstream::new(client);
        let stream = context
            .get_or_create_stream(jetstream::stream::Config {
                name: config.stream.clone(),
                subjects: vec![format!("{}.>", config.stream)],
                max_message_size: config.max_message_bytes as i32 * 2,
                ..Default::default()
            })
            .await
            .map_err(nats("creating the stream"))?;
        Ok(NatsJetStream {
            config,
            context,
            stream,
        })
    }

    fn subject(&self, topic: &str) -> String {
        format!("{}.{topic}", self.config.stream)
    }

    fn check(&self, message: &OutgoingMessage) -> Result<()> {
        check_message_size(message, self.config.max_message_bytes)
    }

    async fn send(
        &self,
        message: &OutgoingMessage,
    ) -> Result<jetstream::context::PublishAckFuture> {
        self.check(message)?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            HEADER_METADATA,
            serde_json::to_string(&message.metadata)
                .unwrap_or_default()
                .as_str(),
        );
        if let Some(ct) = &message.content_type {
            headers.insert(HEADER_CONTENT_TYPE, ct.as_str());
        }
        if let Some(key) = &message.partition_key {
            headers.insert(HEADER_KEY, key.as_str());
        }
        self.context
            .publish_with_headers(
                self.subject(&message.topic),
                headers,
                message.payload.clone().into(),
            )
            .await
            .map_err(nats("publishing"))
    }
}

/// Partition records as messages on `<stream>.__partitions.<topic>`: the last one is
/// the record (the stream keeps every version).
#[async_trait]
impl crate::partitioned::PartitionStore for NatsJetStream {
    async fn read_partitions(&self, topic: &str) -> Result<Option<crate::PartitionUpdate>> {
        let subject = format!("{}.__partitions.{topic}", self.config.stream);
        match self.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => {
                let record: (u64, u32) = serde_json::from_slice(&message.payload)
                    .map_err(|e| PubSubError::broker("reading a partition record", e))?;
                Ok(Some(crate::PartitionUpdate {
                    version: record.0,
                    partitions: record.1,
                }))
            }
            Err(e) if e.kind() == jetstream::stream::LastRawMessageErrorKind::NoMessageFound => {
                Ok(None)
            }
            Err(e) => Err(PubSubError::broker("reading a partition record", e)),
        }
    }

    async fn incarnation(&self) -> Result<String> {
        Ok(self.context.client().server_info().server_id)
    }

    async fn write_partitions(&self, topic: &str, record: crate::PartitionUpdate) -> Result<()> {
        let subject = format!("{}.__partitions.{topic}", self.config.stream);
        let payload = serde_json::to_vec(&(record.version, record.partitions))
            .expect("a pair of numbers encodes");
        self.context
            .publish(subject, payload.into())
            .await
            .map_err(nats("writing a partition record"))?
            .await
            .map_err(nats("waiting for the partition record's ack"))?;
        Ok(())
    }
}

impl NatsConfig {
    /// What the component declares, decided by its settings alone.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_message_bytes: Some(self.max_message_bytes),
            // The consumer's ack wait.
            lease: self.ack_wait,
            redelivers_slow_handlers: true,
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for NatsJetStream {
    async fn broker_version(&self) -> Result<String> {
        Ok(format!(
            "nats-server {} at {}",
            self.context.client().server_info().version,
            self.config.url
        ))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        let ack = self
            .send(&message)
            .await?
            .await
            .map_err(nats("waiting for the publish ack"))?;
        Ok(MessageId::new(message.topic, None, ack.sequence))
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        // Send everything first, then collect each entry's ack.
        let mut pending = Vec::with_capacity(messages.len());
        for message in &messages {
            pending.push(self.send(message).await);
        }
        let mut results = Vec::with_capacity(messages.len());
        for (message, sent) in messages.into_iter().zip(pending) {
            results.push(match sent {
                Ok(ack) => ack
                    .await
                    .map(|ack| MessageId::new(message.topic, None, ack.sequence))
                    .map_err(nats("waiting for a publish ack")),
                Err(e) => Err(e),
            });
        }
        Ok(results)
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        if spec.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "consumer group name is empty".into(),
            ));
        }
        let consumer = NatsConsumer {
            stream: self.stream.clone(),
            stream_name: self.config.stream.clone(),
            ack_wait: self.config.ack_wait,
            spec,
            consumers: tokio::sync::Mutex::new(BTreeMap::new()),
            held: Mutex::new(HashMap::new()),
            settled: Mutex::new(Settled::default()),
            closed: AtomicBool::new(false),
            opened_at: SystemTime::now(),
            parked: Mutex::new(Vec::new()),
        };
        consumer.refresh().await?;
        Ok(Box::new(consumer))
    }

    fn kind(&self) -> &str {
        "nats-jetstream"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }
}

type PullConsumer = jetstream::consumer::Consumer<pull::Config>;

struct NatsConsumer {
    stream: jetstream::stream::Stream,
    stream_name: String,
    ack_wait: Duration,
    spec: ConsumerSpec,
    /// One durable consumer per covered topic.
    consumers: tokio::sync::Mutex<BTreeMap<String, PullConsumer>>,
    /// Received, unsettled messages by owner topic and stream sequence.
    held: Mutex<HashMap<(String, u64), jetstream::Message>>,
    /// Recently settled messages: a redelivered copy (at-least-once) settled twice is
    /// not an error.
    settled: Mutex<Settled>,
    closed: AtomicBool,
    /// When this member opened: a topic a pattern finds later is read from then on.
    opened_at: SystemTime,
    /// Pull requests that had not ended when their receive returned.
    parked: Mutex<Vec<Parked>>,
}

/// A pull request whose batch had not ended (no status yet) when its receive
/// returned: later receives take what the server hands it, until it ends or `until`.
struct Parked {
    topic: String,
    batch: pull::Batch,
    until: Instant,
    /// When the server ends the request (as this member reckons it).
    ends: Instant,
}

/// The longest durable consumer name JetStream takes.
const MAX_DURABLE_LEN: usize = 255;

/// A durable name from a group and topic, one per pair (no `.`, `*`, `>` or spaces):
/// letters, digits and `-` as they are, any other character as `_` and its code in
/// hex (so `a.b` and `a_b` stay apart), the two joined by `__`; a name over
/// JetStream's limit is cut and ends with a hash of the whole.
fn durable(group: &str, topic: &str) -> String {
    let escape = |text: &str| -> String {
        text.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c.to_string()
                } else {
                    format!("_{:X}", u32::from(c))
                }
            })
            .collect()
    };
    let name = format!("{}__{}", escape(group), escape(topic));
    if name.len() <= MAX_DURABLE_LEN {
        return name;
    }
    let hash = format!("_h{:016x}", crate::component::stable_hash(name.as_bytes()));
    let mut cut = MAX_DURABLE_LEN - hash.len();
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{hash}", &name[..cut])
}

impl NatsConsumer {
    fn ensure_open(&self) -> Result<()> {
        crate::component::ensure_open(&self.closed, || "consumer".into())
    }

    async fn covered_topics(&self) -> Result<Vec<String>> {
        match &self.spec.topics {
            TopicSelector::Single(t) => Ok(vec![t.clone()]),
            TopicSelector::List(ts) => Ok(ts.clone()),
            TopicSelector::Pattern(_) => {
                let prefix = format!("{}.", self.stream_name);
                let mut subjects = self
                    .stream
                    .info_with_subjects(format!("{}.>", self.stream_name))
                    .await
                    .map_err(nats("listing subjects"))?;
                let mut topics = Vec::new();
                while let Some(entry) = subjects.next().await {
                    let (subject, _) = entry.map_err(nats("listing subjects"))?;
                    if let Some(topic) = subject.strip_prefix(&prefix) {
                        if self.spec.topics.matches(topic) {
                            topics.push(topic.to_string());
                        }
                    }
                }
                Ok(topics)
            }
        }
    }

    async fn consumer_at(
        &self,
        topic: &str,
        deliver_policy: DeliverPolicy,
    ) -> Result<PullConsumer> {
        let name = durable(&self.spec.group, topic);
        self.stream
            .get_or_create_consumer(
                &name,
                pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: format!("{}.{topic}", self.stream_name),
                    deliver_policy,
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: self.ack_wait,
                    max_deliver: -1,
                    ..Default::default()
                },
            )
            .await
            .map_err(nats("creating a durable consumer"))
    }

    /// Starts the group's durable consumer of `topic` again from `policy`, forgetting
    /// what this member holds of that topic.
    async fn reposition(&self, topic: String, policy: DeliverPolicy) -> Result<()> {
        let name = durable(&self.spec.group, &topic);
        let _ = self.stream.delete_consumer(&name).await;
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(t, _), _| *t != topic);
        let consumer = self.consumer_at(&topic, policy).await?;
        self.consumers.lock().await.insert(topic, consumer);
        Ok(())
    }

    /// Opens the per-topic consumers the selector covers now.
    async fn refresh(&self) -> Result<()> {
        let topics = self.covered_topics().await?;
        let mut consumers = self.consumers.lock().await;
        let first = consumers.is_empty();
        for topic in topics {
            if consumers.contains_key(&topic) {
                continue;
            }
            let policy = match self.spec.start {
                StartPosition::Earliest => DeliverPolicy::All,
                StartPosition::Latest if first => DeliverPolicy::New,
                // A topic that appeared after the member opened (a pattern's new
                // partition): everything published to it since then, not only what
                // comes after this refresh (that lost the first messages of a new
                // partition when the refresh came late). A second of slack for
                // server and client clocks: an older message delivered beats a
                // newer one lost.
                StartPosition::Latest => DeliverPolicy::ByStartTime {
                    start_time: (self.opened_at - Duration::from_secs(1)).into(),
                },
            };
            let consumer = self.consumer_at(&topic, policy).await?;
            consumers.insert(topic, consumer);
        }
        Ok(())
    }

    fn owner(&self, id: &MessageId) -> Result<String> {
        owner_topic(id, &self.spec.topics)
    }

    /// The held message `id`, now settled; `None` when it was settled before (a
    /// duplicate delivery's second settlement).
    fn take_held(&self, id: &MessageId) -> Result<Option<jetstream::Message>> {
        let topic = self.owner(id)?;
        let key = (topic, id.position);
        let held = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let mut settled = self.settled.lock().unwrap_or_else(|p| p.into_inner());
        match held {
            Some(message) => {
                settled.insert(key);
                Ok(Some(message))
            }
            None if settled.contains(&key) => Ok(None),
            None => Err(PubSubError::NotFound(format!(
                "message {id} is not held by this consumer"
            ))),
        }
    }

    /// Pulls up to `max` messages of `topic` into `out`: what is there now (`wait`
    /// `None`: the server answers at once), or waiting up to `wait` until `max` came.
    async fn pull(
        &self,
        topic: &str,
        consumer: &PullConsumer,
        max: usize,
        wait: Option<Duration>,
        out: &mut Vec<ReceivedMessage>,
    ) -> Result<()> {
        if max == 0 {
            return Ok(());
        }
        // A waiting request lives longer at the server than this receive waits on it:
        // parked, the next receives wait on it rather than ask again.
        let lifetime = wait.map(|w| w.max(WAITING_REQUEST_LIFE));
        let ends = Instant::now() + lifetime.unwrap_or(NO_WAIT_ANSWER);
        let batch = match lifetime {
            Some(expires) => {
                consumer
                    .batch()
                    .max_messages(max)
                    .expires(expires)
                    .messages()
                    .await
            }
            None => consumer.fetch().max_messages(max).messages().await,
        }
        .map_err(nats("fetching a batch"))?;
        self.read_batch(topic, batch, wait, ends, out).await;
        Ok(())
    }

    /// Waits up to `wait` (a moment without) on a request for `topic` that the server
    /// ends at `ends`, taking what it brings into `out`; a request that has not ended
    /// by then is parked.
    async fn read_batch(
        &self,
        topic: &str,
        mut batch: pull::Batch,
        wait: Option<Duration>,
        ends: Instant,
        out: &mut Vec<ReceivedMessage>,
    ) {
        // The batch ends with the server's status or when `max` came; one still open
        // when the wait is over is parked for later receives (see BATCH_STATUS_SLACK).
        let expiry = Instant::now() + wait.unwrap_or(NO_WAIT_ANSWER);
        loop {
            match tokio::time::timeout_at(expiry, batch.next()).await {
                // An error ends the batch, but not the receive: what `out` holds is
                // held by this member already, and an error returned here would strand
                // it until its ack wait ran out.
                Ok(Some(Err(e))) => {
                    tracing::debug!(error = %e, topic, "a pull request ended with an error");
                    return;
                }
                Ok(Some(Ok(message))) => match self.convert(topic, message) {
                    Ok(received) => out.push(received),
                    Err(e) => tracing::warn!(error = %e, topic, "an unreadable message"),
                },
                Ok(None) => return,
                Err(_) => {
                    self.lock_parked().push(Parked {
                        topic: topic.to_string(),
                        batch,
                        until: ends.max(expiry) + BATCH_STATUS_SLACK,
                        ends,
                    });
                    return;
                }
            }
        }
    }

    /// Waits up to `wait` on a parked request of `topic` that the server still keeps,
    /// rather than ask again; false when there is none.
    async fn wait_on_parked(
        &self,
        topic: &str,
        wait: Duration,
        out: &mut Vec<ReceivedMessage>,
    ) -> bool {
        let alive = Instant::now() + wait;
        let parked = {
            let mut parked = self.lock_parked();
            let found = parked
                .iter()
                .position(|p| p.topic == topic && p.ends > alive);
            found.map(|at| parked.remove(at))
        };
        match parked {
            Some(request) => {
                self.read_batch(topic, request.batch, Some(wait), request.ends, out)
                    .await;
                true
            }
            None => false,
        }
    }

    fn lock_parked(&self) -> std::sync::MutexGuard<'_, Vec<Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes what parked requests received meanwhile (up to `max` in `out`), without
    /// waiting; requests that ended, failed or outlived their slack are dropped.
    fn take_parked(&self, max: usize, out: &mut Vec<ReceivedMessage>) -> Result<()> {
        let parked = std::mem::take(&mut *self.lock_parked());
        let mut kept = Vec::new();
        for mut request in parked {
            let mut open = true;
            while open && out.len() < max {
                match request.batch.next().now_or_never() {
                    Some(Some(Ok(message))) => match self.convert(&request.topic, message) {
                        Ok(received) => out.push(received),
                        Err(e) => {
                            tracing::warn!(error = %e, topic = %request.topic, "an unreadable message");
                        }
                    },
                    Some(Some(Err(e))) => {
                        tracing::debug!(error = %e, topic = %request.topic, "a parked pull request failed");
                        open = false;
                    }
                    Some(None) => open = false,
                    None => break,
                }
            }
            if open && Instant::now() < request.until {
                kept.push(request);
            }
        }
        self.lock_parked().extend(kept);
        Ok(())
    }

    fn convert(&self, topic: &str, message: jetstream::Message) -> Result<ReceivedMessage> {
        let info = message.info().map_err(nats("reading message info"))?;
        let (sequence, attempt, published) = (info.stream_sequence, info.delivered, info.published);
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_string())
        };
        let received = ReceivedMessage {
            id: MessageId::new(topic, None, sequence),
            payload: message.payload.to_vec(),
            content_type: header(HEADER_CONTENT_TYPE),
            metadata: header(HEADER_METADATA)
                .and_then(|json| serde_json::from_str::<Metadata>(&json).ok())
                .unwrap_or_default(),
            partition_key: header(HEADER_KEY),
            attempt: attempt.max(1) as u32,
            publish_time: SystemTime::from(published),
        };
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((topic.to_string(), sequence), message);
        Ok(received)
    }
}

#[async_trait]
impl Consumer for NatsConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        if matches!(self.spec.topics, TopicSelector::Pattern(_)) {
            self.refresh().await?;
        }
        let deadline = Instant::now() + wait;
        let consumers: Vec<(String, PullConsumer)> = self
            .consumers
            .lock()
            .await
            .iter()
            .map(|(t, c)| (t.clone(), c.clone()))
            .collect();
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        loop {
            let mut out = Vec::new();
            // What parked requests were handed meanwhile.
            self.take_parked(max, &mut out)?;
            // What each topic holds now, without waiting.
            for (topic, consumer) in &consumers {
                if out.len() >= max {
                    break;
                }
                self.pull(topic, consumer, max - out.len(), None, &mut out)
                    .await
                    .or_else(|e| spared(e, &out))?;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if out.is_empty() && !left.is_zero() && !consumers.is_empty() {
                // Nothing yet: wait for one message (a request for one ends as it
                // arrives, so a trickle is not held until the wait ends), then take
                // what came with it. With several topics, each is waited on briefly
                // in turn.
                let expires = if consumers.len() == 1 {
                    left
                } else {
                    left.min(Duration::from_millis(20))
                }
                .max(Duration::from_millis(10));
                for (topic, consumer) in &consumers {
                    if !self.wait_on_parked(topic, expires, &mut out).await {
                        self.pull(topic, consumer, 1, Some(expires), &mut out)
                            .await
                            .or_else(|e| spared(e, &out))?;
                    }
                    if !out.is_empty() {
                        self.pull(topic, consumer, max - out.len(), None, &mut out)
                            .await
                            .or_else(|e| spared(e, &out))?;
                        break;
                    }
                }
            }
            if !out.is_empty() {
                // A parked request may have been handed older messages of a topic than
                // those a later request returned (the server serves the oldest waiting
                // request first). They arrive first on the connection, so they are in
                // its batch by now: take them, and hand everything over in stream order.
                self.take_parked(max, &mut out)?;
                out.sort_by(|a, b| (&a.id.topic, a.id.position).cmp(&(&b.id.topic, b.id.position)));
            }
            if !out.is_empty() || Instant::now() >= deadline || consumers.is_empty() {
                if consumers.is_empty() {
                    tokio::time::sleep(left.min(Duration::from_millis(100))).await;
                }
                return Ok(out);
            }
        }
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        crate::component::ack_together(self, ids, &self.spec.topics).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let Some(message) = self.take_held(id)? else {
            return Ok(());
        };
        message.ack().await.map_err(nats("acknowledging"))
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = self.owner(id)?;
        let positions: Vec<u64> = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|(t, position)| *t == topic && *position <= id.position)
            .map(|(_, position)| *position)
            .collect();
        for position in positions {
            self.ack(&MessageId::new(&topic, None, position)).await?;
        }
        Ok(())
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.ensure_open()?;
        let Some(message) = self.take_held(id)? else {
            return Ok(());
        };
        let delay = (!delay.is_zero()).then_some(delay);
        message
            .ack_with(AckKind::Nak(delay))
            .await
            .map_err(nats("negatively acknowledging"))
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        let held: Vec<jetstream::Message> = {
            let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            ids.iter()
                .filter_map(|id| {
                    let topic = self.owner(id).ok()?;
                    held.get(&(topic, id.position)).cloned()
                })
                .collect()
        };
        for message in held {
            // "Work in progress": the ack wait starts again.
            message
                .ack_with(AckKind::Progress)
                .await
                .map_err(nats("extending the ack wait"))?;
        }
        Ok(())
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let topic = self.owner(id)?;
        self.reposition(
            topic,
            DeliverPolicy::ByStartSequence {
                start_sequence: id.position,
            },
        )
        .await
    }

    async fn seek_all(&self, position: StartPosition) -> Result<()> {
        self.ensure_open()?;
        let policy = match position {
            StartPosition::Earliest => DeliverPolicy::All,
            StartPosition::Latest => DeliverPolicy::New,
        };
        for topic in self.covered_topics().await? {
            self.reposition(topic, policy).await?;
        }
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let mut out = Vec::new();
        for topic in self.covered_topics().await? {
            if let Ok(last) = self
                .stream
                .get_last_raw_message_by_subject(&format!("{}.{topic}", self.stream_name))
                .await
            {
                out.push(MessageId::new(topic, None, last.sequence));
            }
        }
        Ok(out)
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // What parked requests were handed goes back with what is held: each is read
        // until it ends or its slack runs out, since the server may still hand it a
        // message, which would otherwise wait out the ack wait on a closed member.
        let mut parked = std::mem::take(&mut *self.lock_parked());
        let mut held: Vec<jetstream::Message> = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, m)| m)
            .collect();
        for request in &mut parked {
            // Until the server ends it, and a little for what it sent just before.
            let until = request.until.min(request.ends + CLOSING_MARGIN);
            while let Ok(Some(Ok(message))) =
                tokio::time::timeout_at(until, request.batch.next()).await
            {
                held.push(message);
            }
        }
        for message in held {
            message
                .ack_with(AckKind::Nak(None))
                .await
                .map_err(nats("releasing a held message"))?;
        }
        Ok(())
    }
}

/// The last settled messages of a consumer, by (topic, stream sequence).
#[derive(Default)]
struct Settled {
    order: std::collections::VecDeque<(String, u64)>,
    keys: std::collections::HashSet<(String, u64)>,
}

impl Settled {
    /// How many settlements are remembered.
    const KEEP: usize = 65_536;

    fn insert(&mut self, key: (String, u64)) {
        if self.keys.insert(key.clone()) {
            self.order.push_back(key);
            if self.order.len() > Self::KEEP {
                if let Some(old) = self.order.pop_front() {
                    self.keys.remove(&old);
                }
            }
        }
    }

    fn contains(&self, key: &(String, u64)) -> bool {
        self.keys.contains(key)
    }
}
