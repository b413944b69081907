//! Kafka component (librdkafka, through the `rdkafka` crate): native bulk publish (every
//! record of a request handed to the producer at once, each delivery report mapped back
//! to its entry), consumer groups with offset commits as acknowledgements, ordering per
//! partition, multi-topic subscriptions (named topics, or a pattern as a regular
//! expression subscription) whose message ids carry topic and partition.
//!
//! Kafka acknowledges cumulatively (a committed offset covers every record before it),
//! the contract per message. A member keeps a ledger of what it was handed per
//! partition and commits the offset below which everything was answered; a negative
//! acknowledgement keeps its record in the ledger and hands it out again after the
//! delay (attempt + 1). When the member closes, what it still holds unanswered is
//! published again to the same partition (a copy carrying its attempt count) before
//! everything it was handed is committed, so the group's next member never receives
//! again what was acknowledged after a gap.

mod settings;

pub use settings::{Acks, KafkaConfig};

use crate::capability::{Capabilities, DeliveryGuarantee, OrderingScope, Support};
use crate::component::{
    check_message_size, millis_since_epoch, owner_topic, Component, Consumer, ConsumerSpec,
    StartPosition, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{CommitMode, Consumer as _, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Record headers the component owns.
const HEADER_CONTENT_TYPE: &str = "pcs-ct";
const HEADER_METADATA: &str = "pcs-md";
/// On a copy handed forward by a closing member: the attempt its next delivery is.
const HEADER_ATTEMPT: &str = "pcs-attempt";
/// On a copy: when the original was published (milliseconds since the epoch).
const HEADER_PUBLISHED: &str = "pcs-published-ms";
/// How long a member may go silent before the group hands its partitions on.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// How long the broker may hold a fetch that has nothing to return.
const FETCH_WAIT: Duration = Duration::from_millis(5);
/// How long a broker request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

fn broker<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
}

/// The Kafka component.
pub struct Kafka {
    config: KafkaConfig,
    producer: FutureProducer<Quiet>,
    admin: AdminClient<Quiet>,
    /// Topics created or found to exist.
    topics: Mutex<HashSet<String>>,
}

impl Kafka {
    /// Connects to the brokers named in `config` (checked with a metadata request).
    pub async fn connect(config: KafkaConfig) -> Result<Self> {
        let producer: FutureProducer<Quiet> = client_config(&config)
            .set("acks", config.acks.as_config())
            .set(
                "message.max.bytes",
                (config.max_message_bytes + 64 * 1024).to_string(),
            )
            .set(
                "message.timeout.ms",
                REQUEST_TIMEOUT.as_millis().to_string(),
            )
            .set("linger.ms", "1")
            .create_with_context(Quiet)
            .map_err(broker("creating a Kafka producer"))?;
        let admin: AdminClient<Quiet> = client_config(&config)
            .create_with_context(Quiet)
            .map_err(broker("creating a Kafka admin client"))?;
        let component = Kafka {
            config,
            producer,
            admin,
            topics: Mutex::new(HashSet::new()),
        };
        component.cluster().await?;
        Ok(component)
    }

    /// The cluster id and broker count, read with a metadata request.
    async fn cluster(&self) -> Result<(String, usize)> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || {
            let client = producer.client();
            let metadata = client
                .fetch_metadata(None, Duration::from_secs(5))
                .map_err(broker("reading the cluster's metadata"))?;
            let id = client
                .fetch_cluster_id(Duration::from_secs(5))
                .unwrap_or_else(|| "unknown".into());
            Ok((id, metadata.brokers().len()))
        })
        .await
        .map_err(broker("reading the cluster's metadata"))?
    }

    /// Forgets a topic the broker no longer knows (a broker that keeps nothing across
    /// a restart), so that the next publish creates it again.
    fn forget_if_unknown(
        &self,
        topic: &str,
        result: &rdkafka::producer::future_producer::OwnedDeliveryResult,
    ) {
        if let Err((KafkaError::MessageProduction(code), _)) = result {
            if matches!(
                code,
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
            ) {
                self.topics().remove(topic);
            }
        }
    }

    fn topics(&self) -> MutexGuard<'_, HashSet<String>> {
        self.topics.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates the topics not yet known (`partitions` each; one that exists already is
    /// fine).
    async fn ensure_topics(&self, topics: &[&str]) -> Result<()> {
        let missing: Vec<&str> = {
            let known = self.topics();
            let mut missing: Vec<&str> = topics
                .iter()
                .copied()
                .filter(|t| !known.contains(*t))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            missing
        };
        if missing.is_empty() {
            return Ok(());
        }
        let new: Vec<NewTopic<'_>> = missing
            .iter()
            .map(|t| NewTopic::new(t, self.config.partitions as i32, TopicReplication::Fixed(1)))
            .collect();
        let results = self
            .admin
            .create_topics(
                &new,
                &AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT)),
            )
            .await
            .map_err(broker("creating topics"))?;
        for result in results {
            match result {
                Ok(topic) | Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    self.topics().insert(topic);
                }
                Err((topic, code)) => {
                    return Err(PubSubError::broker(
                        format!("creating topic '{topic}'"),
                        code,
                    ))
                }
            }
        }
        Ok(())
    }
}

/// librdkafka's log and error callbacks, at debug level: errors reach callers through
/// results, and a broker the suite stopped must not fill the suite's output.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        tracing::debug!(target: "librdkafka", ?level, facility, "{message}");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, "{reason}");
    }
}

impl ConsumerContext for Quiet {}

fn client_config(config: &KafkaConfig) -> ClientConfig {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &config.brokers)
        .set(
            "topic.metadata.refresh.interval.ms",
            config.metadata_refresh.as_millis().to_string(),
        )
        .set("socket.timeout.ms", REQUEST_TIMEOUT.as_millis().to_string())
        // Connection errors come back through calls; librdkafka's own log keeps only
        // what is critical.
        .set("log_level", "2");
    client
}

/// The headers of a published record: content type, metadata, and on a copy its
/// attempt and first publish time.
fn headers(message: &OutgoingMessage, copy: Option<(u32, u64)>) -> OwnedHeaders {
    let metadata = serde_json::to_vec(&message.metadata).unwrap_or_default();
    let mut headers = OwnedHeaders::new().insert(Header {
        key: HEADER_METADATA,
        value: Some(&metadata),
    });
    if let Some(content_type) = &message.content_type {
        headers = headers.insert(Header {
            key: HEADER_CONTENT_TYPE,
            value: Some(content_type.as_bytes()),
        });
    }
    if let Some((attempt, published_ms)) = copy {
        headers = headers
            .insert(Header {
                key: HEADER_ATTEMPT,
                value: Some(attempt.to_string().as_bytes()),
            })
            .insert(Header {
                key: HEADER_PUBLISHED,
                value: Some(published_ms.to_string().as_bytes()),
            });
    }
    headers
}

fn record<'a>(
    message: &'a OutgoingMessage,
    partition: Option<i32>,
    copy: Option<(u32, u64)>,
) -> FutureRecord<'a, str, [u8]> {
    let mut record = FutureRecord::to(&message.topic)
        .payload(message.payload.as_slice())
        .headers(headers(message, copy))
        .timestamp(millis_since_epoch(SystemTime::now()) as i64);
    if let Some(key) = &message.partition_key {
        record = record.key(key.as_str());
    }
    if let Some(partition) = partition {
        record = record.partition(partition);
    }
    record
}

fn delivered(
    topic: &str,
    result: rdkafka::producer::future_producer::OwnedDeliveryResult,
) -> Result<MessageId> {
    match result {
        Ok(delivery) => Ok(MessageId::new(
            topic,
            Some(delivery.partition as u32),
            delivery.offset as u64,
        )),
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
            Err(PubSubError::InvalidRequest(format!(
                "the broker refused a record of topic '{topic}' as too large"
            )))
        }
        Err((e, _)) => Err(PubSubError::broker("producing a record", e)),
    }
}

#[async_trait]
impl Component for Kafka {
    fn kind(&self) -> &str {
        "kafka"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            bulk_publish: Support::Native,
            bulk_subscribe: Support::Native,
            ttl: Support::Emulated,
            dead_letter: Support::Emulated,
            delayed_delivery: Support::Emulated,
            receiver_delay: Support::Emulated,
            ordering: OrderingScope::PerPartition,
            multi_topic: true,
            fan_out: true,
            headers: true,
            seek: true,
            partitions: None,
            delivery: DeliveryGuarantee::AtLeastOnce,
            max_message_bytes: Some(self.config.max_message_bytes),
            // A new member joins its group (a rebalance) before it is handed anything.
            delivery_bound: Duration::from_secs(10),
            redelivery_bound: Duration::from_secs(2),
            // A new member is handed records once it has joined its group.
            delay_precision: Duration::from_millis(750),
            clock_tolerance: Duration::from_millis(50),
            // What the broker acknowledged survives a crash only on a durable broker
            // with every in-sync replica acknowledging.
            durable: self.config.durable_broker && self.config.acks == Acks::All,
            recovery_bound: Duration::from_secs(20),
            // A closing member hands on what it holds at once; a crashed one's records
            // wait for its session to time out.
            lease: SESSION_TIMEOUT,
            redelivers_slow_handlers: false,
        }
    }

    async fn broker_version(&self) -> Result<String> {
        let (cluster, brokers) = self.cluster().await?;
        Ok(format!(
            "Kafka protocol, cluster {cluster} ({brokers} broker{}) at {}",
            if brokers == 1 { "" } else { "s" },
            self.config.brokers
        ))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        check_message_size(&message, self.config.max_message_bytes)?;
        self.ensure_topics(&[&message.topic]).await?;
        let result = self
            .producer
            .send(record(&message, None, None), REQUEST_TIMEOUT)
            .await;
        self.forget_if_unknown(&message.topic, &result);
        delivered(&message.topic, result)
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let topics: Vec<&str> = messages.iter().map(|m| m.topic.as_str()).collect();
        self.ensure_topics(&topics).await?;
        // Every record is handed to the producer first (it batches them), then each
        // delivery report is awaited and mapped to its entry.
        let mut pending = Vec::with_capacity(messages.len());
        for message in &messages {
            pending.push(
                match check_message_size(message, self.config.max_message_bytes) {
                    Err(e) => Err(e),
                    Ok(()) => match self.producer.send_result(record(message, None, None)) {
                        Ok(delivery) => Ok(delivery),
                        Err((e, _)) => Err(PubSubError::broker("queueing a record", e)),
                    },
                },
            );
        }
        let mut results = Vec::with_capacity(messages.len());
        for (message, pending) in messages.iter().zip(pending) {
            results.push(match pending {
                Err(e) => Err(e),
                Ok(delivery) => match delivery.await {
                    Ok(result) => {
                        self.forget_if_unknown(&message.topic, &result);
                        delivered(&message.topic, result)
                    }
                    Err(_) => Err(PubSubError::broker(
                        "producing a record",
                        "the producer dropped the delivery report",
                    )),
                },
            });
        }
        Ok(results)
    }

    /// A Kafka log keeps every record whatever groups exist: a new group only needs
    /// its start fixed when it starts at the latest (no member joins, so no later
    /// member waits for a phantom one to time out of the group).
    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        if self.start_of(spec) == StartPosition::Earliest {
            return self.ensure_topics(&named_topics(&spec.topics)).await;
        }
        self.open(spec, false).await.map(drop)
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        Ok(Box::new(self.open(&spec, true).await?))
    }
}

impl Kafka {
    /// Where a new group of the spec starts: the latest when the subscription asks
    /// for it, else as `initialOffset` says.
    fn start_of(&self, spec: &ConsumerSpec) -> StartPosition {
        match spec.start {
            StartPosition::Latest => StartPosition::Latest,
            StartPosition::Earliest => self.config.initial_offset,
        }
    }

    /// A member of the spec's group, subscribed when `join`; a new group asked to start
    /// at the latest gets the topics' current ends committed first.
    async fn open(&self, spec: &ConsumerSpec, join: bool) -> Result<KafkaConsumer> {
        if spec.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "consumer group name is empty".into(),
            ));
        }
        let named = named_topics(&spec.topics);
        self.ensure_topics(&named).await?;
        let start = self.start_of(spec);
        let consumer: StreamConsumer<Quiet> = client_config(&self.config)
            .set("group.id", self.config.group_id(&spec.group))
            // Offsets are stored as acknowledgements close gaps and committed once a
            // second (and at close), not one commit per acknowledgement: a commit is
            // a write on the broker, and a member that crashes before its commit only
            // has its records delivered again (at least once).
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            .set("enable.auto.offset.store", "false")
            .set(
                "auto.offset.reset",
                match start {
                    StartPosition::Earliest => "earliest",
                    StartPosition::Latest => "latest",
                },
            )
            .set("partition.assignment.strategy", "range")
            // A member that stops heartbeating (crashed, cut off) leaves the group after
            // this: its unanswered records then go to another member (the lease).
            .set(
                "session.timeout.ms",
                SESSION_TIMEOUT.as_millis().to_string(),
            )
            .set("heartbeat.interval.ms", "1000")
            .set("max.poll.interval.ms", "300000")
            // A fetch the broker holds open while it has nothing ends after this:
            // tansu answers a held fetch only when the wait ends, not when records
            // arrive, so the wait is what a new record waits (librdkafka's 500 ms
            // default made the end-to-end latency 380 ms at the median).
            .set("fetch.wait.max.ms", FETCH_WAIT.as_millis().to_string())
            .create_with_context(Quiet)
            .map_err(broker("creating a Kafka consumer"))?;
        let consumer = Arc::new(consumer);
        if start == StartPosition::Latest && !named.is_empty() {
            pin_to_end(&consumer, &named).await?;
        }
        let subscription: Vec<String> = match &spec.topics {
            TopicSelector::Pattern(glob) => vec![glob_regex(glob)],
            _ => named.iter().map(|t| t.to_string()).collect(),
        };
        let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
        if join {
            consumer.subscribe(&topics).map_err(broker("subscribing"))?;
        }
        Ok(KafkaConsumer {
            consumer: Mutex::new(Some(consumer)),
            producer: self.producer.clone(),
            spec: spec.clone(),
            ledger: Mutex::new(Ledger::default()),
            closed: AtomicBool::new(false),
        })
    }
}

/// The topics a selector names (none for a pattern).
fn named_topics(topics: &TopicSelector) -> Vec<&str> {
    match topics {
        TopicSelector::Single(topic) => vec![topic.as_str()],
        TopicSelector::List(topics) => topics.iter().map(String::as_str).collect(),
        TopicSelector::Pattern(_) => Vec::new(),
    }
}

/// Commits the current end of every partition of `topics` for the consumer's group
/// where the group has committed nothing yet, so that it starts there.
async fn pin_to_end(consumer: &Arc<StreamConsumer<Quiet>>, topics: &[&str]) -> Result<()> {
    let consumer = consumer.clone();
    let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut ends = TopicPartitionList::new();
        for topic in &topics {
            let metadata = consumer
                .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                .map_err(broker("reading a topic's partitions"))?;
            for t in metadata.topics() {
                for p in t.partitions() {
                    let (_, high) = consumer
                        .fetch_watermarks(topic, p.id(), REQUEST_TIMEOUT)
                        .map_err(broker("reading a partition's end"))?;
                    ends.add_partition_offset(topic, p.id(), Offset::Offset(high))
                        .map_err(broker("reading a partition's end"))?;
                }
            }
        }
        let committed = consumer
            .committed_offsets(ends.clone(), REQUEST_TIMEOUT)
            .map_err(broker("reading the group's offsets"))?;
        let mut unset = TopicPartitionList::new();
        for element in ends.elements() {
            let done = committed
                .find_partition(element.topic(), element.partition())
                .is_some_and(|c| matches!(c.offset(), Offset::Offset(_)));
            if !done {
                unset
                    .add_partition_offset(element.topic(), element.partition(), element.offset())
                    .map_err(broker("committing the group's start"))?;
            }
        }
        if unset.count() > 0 {
            consumer
                .commit(&unset, CommitMode::Sync)
                .map_err(broker("committing the group's start"))?;
        }
        Ok(())
    })
    .await
    .map_err(broker("committing the group's start"))?
}

/// A glob (`*` any run of characters) as the anchored regular expression librdkafka
/// takes for a pattern subscription (`^...$`).
fn glob_regex(glob: &str) -> String {
    let mut regex = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => regex.push_str(".*"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => regex.push(c),
            c => {
                regex.push('\\');
                regex.push(c);
            }
        }
    }
    regex.push('$');
    regex
}

/// What a member was handed and has not committed, per topic-partition.
#[derive(Default)]
struct Ledger {
    partitions: HashMap<(String, i32), BTreeMap<i64, Slot>>,
    /// Negatively acknowledged, to be handed out again when due.
    returning: Vec<(Instant, ReceivedMessage)>,
    /// Received and not yet handed out (a batch takes one topic's; the others wait).
    ready: std::collections::VecDeque<ReceivedMessage>,
}

struct Slot {
    /// The attempt of its latest delivery.
    attempt: u32,
    answered: bool,
    /// What handing it on needs.
    message: ReceivedMessage,
}

/// One member of a consumer group.
struct KafkaConsumer {
    /// Taken out and dropped on close: dropping is what makes librdkafka leave the
    /// group at once (an unsubscribed member stays until its session times out).
    consumer: Mutex<Option<Arc<StreamConsumer<Quiet>>>>,
    producer: FutureProducer<Quiet>,
    spec: ConsumerSpec,
    ledger: Mutex<Ledger>,
    closed: AtomicBool,
}

impl KafkaConsumer {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ensure_open(&self) -> Result<()> {
        self.client().map(drop)
    }

    /// The librdkafka consumer, while open.
    fn client(&self) -> Result<Arc<StreamConsumer<Quiet>>> {
        match &*self.consumer.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(consumer) if !self.closed.load(Ordering::Acquire) => Ok(consumer.clone()),
            _ => Err(PubSubError::Closed(format!(
                "consumer of {} in group '{}' was closed",
                self.spec.topics.describe(),
                self.spec.group
            ))),
        }
    }

    /// Returns messages waiting to be handed out, then due ones coming back, up to
    /// `max`, and when the next one comes back.
    fn take_returning(&self, max: usize) -> (Vec<ReceivedMessage>, Option<Instant>) {
        let now = Instant::now();
        let mut ledger = self.ledger();
        let ready = ledger.ready.len().min(max);
        let mut taken: Vec<ReceivedMessage> = ledger.ready.drain(..ready).collect();
        let max = max - taken.len();
        ledger.returning.sort_by_key(|(due, _)| *due);
        let due = ledger
            .returning
            .iter()
            .take_while(|(at, _)| *at <= now)
            .count()
            .min(max);
        taken.extend(ledger.returning.drain(..due).map(|(_, m)| m));
        let next = ledger.returning.first().map(|(at, _)| *at);
        (taken, next)
    }

    /// Records a polled record in the ledger and turns it into a delivery.
    fn admit(&self, record: &BorrowedMessage<'_>) -> ReceivedMessage {
        let mut metadata = Metadata::new();
        let mut content_type = None;
        let mut attempt = 1;
        let mut published_ms = None;
        if let Some(headers) = record.headers() {
            for header in headers.iter() {
                let value = header.value.unwrap_or_default();
                match header.key {
                    HEADER_METADATA => {
                        metadata = serde_json::from_slice(value).unwrap_or_default();
                    }
                    HEADER_CONTENT_TYPE => {
                        content_type = Some(String::from_utf8_lossy(value).into_owned());
                    }
                    HEADER_ATTEMPT => {
                        attempt = std::str::from_utf8(value)
                            .ok()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1);
                    }
                    HEADER_PUBLISHED => {
                        published_ms = std::str::from_utf8(value)
                            .ok()
                            .and_then(|v| v.parse::<u64>().ok());
                    }
                    _ => {}
                }
            }
        }
        let published_ms = published_ms
            .or_else(|| record.timestamp().to_millis().map(|ms| ms.max(0) as u64))
            .unwrap_or_default();
        let message = ReceivedMessage {
            id: MessageId::new(
                record.topic(),
                Some(record.partition() as u32),
                record.offset() as u64,
            ),
            payload: record.payload().unwrap_or_default().to_vec(),
            content_type,
            metadata,
            partition_key: record
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            attempt,
            publish_time: UNIX_EPOCH + Duration::from_millis(published_ms),
        };
        self.ledger()
            .partitions
            .entry((record.topic().to_string(), record.partition()))
            .or_default()
            .insert(
                record.offset(),
                Slot {
                    attempt,
                    answered: false,
                    message: message.clone(),
                },
            );
        message
    }

    /// The ledger slot of a delivered message.
    fn locate(&self, id: &MessageId) -> Result<(String, i32, i64)> {
        let topic = owner_topic(id, &self.spec.topics)?;
        let partition = id.partition.ok_or_else(|| {
            PubSubError::InvalidRequest(format!("message id {id} names no partition"))
        })?;
        Ok((topic, partition as i32, id.position as i64))
    }

    /// Marks a delivery answered and commits what is answered without a gap.
    fn answer(&self, id: &MessageId) -> Result<()> {
        let (topic, partition, offset) = self.locate(id)?;
        let commit = {
            let mut ledger = self.ledger();
            let Some(slots) = ledger.partitions.get_mut(&(topic.clone(), partition)) else {
                return Ok(());
            };
            if let Some(slot) = slots.get_mut(&offset) {
                slot.answered = true;
            }
            let mut next = None;
            while let Some(entry) = slots.first_entry() {
                if !entry.get().answered {
                    break;
                }
                next = Some(*entry.key() + 1);
                entry.remove();
            }
            next
        };
        if let Some(next) = commit {
            let mut offsets = TopicPartitionList::new();
            offsets
                .add_partition_offset(&topic, partition, Offset::Offset(next))
                .map_err(broker("storing an offset"))?;
            self.client()?
                .store_offsets(&offsets)
                .map_err(broker("storing an offset"))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Consumer for KafkaConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        let max = max.max(1);
        let deadline = Instant::now() + wait;
        let consumer = self.client()?;
        let (mut out, mut next_return) = self.take_returning(max);
        while out.len() < max {
            let now = Instant::now();
            let until = if out.is_empty() {
                next_return.map_or(deadline, |due| due.min(deadline))
            } else {
                now
            };
            match tokio::time::timeout_at(until, consumer.recv()).await {
                Ok(Ok(record)) => {
                    let message = self.admit(&record);
                    out.push(message);
                }
                Ok(Err(e)) => {
                    if out.is_empty() {
                        // Topics that do not exist yet (a pattern's) and transient
                        // broker errors: logged, and the wait goes on.
                        tracing::debug!(error = %e, "kafka consumer error");
                        if Instant::now() >= deadline {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    break;
                }
                Err(_) => {
                    if !out.is_empty() || Instant::now() >= deadline {
                        break;
                    }
                    let (due, next) = self.take_returning(max - out.len());
                    out.extend(due);
                    next_return = next;
                }
            }
        }
        Ok(out)
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let mut batch = self.receive(max, max_await).await?;
        let Some(first) = batch.first() else {
            return Ok(batch);
        };
        // One topic per batch: the others' messages wait for the next call.
        let topic = first.topic().to_string();
        let full_by = Instant::now() + max_await;
        loop {
            let (mine, others): (Vec<_>, Vec<_>) =
                batch.into_iter().partition(|m| m.topic() == topic);
            batch = mine;
            self.ledger().ready.extend(others);
            let now = Instant::now();
            if batch.len() >= max || now >= full_by || !self.ledger().ready.is_empty() {
                return Ok(batch);
            }
            let more = self.receive(max - batch.len(), full_by - now).await?;
            if more.is_empty() {
                return Ok(batch);
            }
            batch.extend(more);
        }
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        self.answer(id)
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        for id in ids {
            self.locate(id)?;
        }
        for id in ids {
            self.answer(id)?;
        }
        Ok(())
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let (topic, partition, offset) = self.locate(id)?;
        let earlier: Vec<MessageId> = self
            .ledger()
            .partitions
            .get(&(topic, partition))
            .map(|slots| {
                slots
                    .range(..=offset)
                    .map(|(_, slot)| slot.message.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in &earlier {
            self.answer(id)?;
        }
        Ok(())
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.ensure_open()?;
        let (topic, partition, offset) = self.locate(id)?;
        let mut ledger = self.ledger();
        let again = ledger
            .partitions
            .get_mut(&(topic, partition))
            .and_then(|slots| slots.get_mut(&offset))
            .map(|slot| {
                slot.attempt += 1;
                let mut message = slot.message.clone();
                message.attempt = slot.attempt;
                message
            });
        if let Some(message) = again {
            ledger.returning.push((Instant::now() + delay, message));
        }
        Ok(())
    }

    /// Repositions the owner topic-partition of `id` (assigned to this member) so that
    /// `id` is the next record delivered from it: what the member holds of it is
    /// forgotten, and librdkafka drops what it fetched before the seek.
    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let (topic, partition, offset) = self.locate(id)?;
        let consumer = self.client()?;
        let assigned = consumer
            .assignment()
            .map_err(broker("reading the member's assignment"))?
            .elements_for_topic(&topic)
            .iter()
            .any(|element| element.partition() == partition);
        if !assigned {
            return Err(PubSubError::NotAllowed(format!(
                "cannot seek to {id}: partition {partition} of '{topic}' is not assigned to this member of group '{}' (receive from it first)",
                self.spec.group
            )));
        }
        {
            let mut ledger = self.ledger();
            ledger.partitions.remove(&(topic.clone(), partition));
            let elsewhere = |m: &ReceivedMessage| {
                m.topic() != topic || m.id.partition != Some(partition as u32)
            };
            ledger.returning.retain(|(_, m)| elsewhere(m));
            ledger.ready.retain(elsewhere);
        }
        let target = topic.clone();
        tokio::task::spawn_blocking(move || {
            consumer.seek(&target, partition, Offset::Offset(offset), REQUEST_TIMEOUT)
        })
        .await
        .map_err(|e| PubSubError::broker("seeking", e))?
        .map_err(broker("seeking"))
    }

    /// The last record of each partition of the topics this member covers (its
    /// assignment, else the subscription's named topics): the high watermark less one.
    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let consumer = self.client()?;
        let named: Vec<String> = named_topics(&self.spec.topics)
            .into_iter()
            .map(str::to_string)
            .collect();
        tokio::task::spawn_blocking(move || -> Result<Vec<MessageId>> {
            let mut covered: Vec<(String, i32)> = consumer
                .assignment()
                .map_err(broker("reading the member's assignment"))?
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            if covered.is_empty() {
                for topic in &named {
                    let metadata = consumer
                        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                        .map_err(broker("reading topic metadata"))?;
                    for found in metadata.topics() {
                        covered.extend(
                            found
                                .partitions()
                                .iter()
                                .map(|p| (found.name().to_string(), p.id())),
                        );
                    }
                }
            }
            covered.sort();
            covered.dedup();
            let mut last = Vec::new();
            for (topic, partition) in covered {
                let (low, high) = consumer
                    .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
                    .map_err(broker("reading a partition's watermarks"))?;
                if high > low {
                    last.push(MessageId::new(
                        &topic,
                        Some(partition as u32),
                        (high - 1) as u64,
                    ));
                }
            }
            Ok(last)
        })
        .await
        .map_err(|e| PubSubError::broker("reading last message ids", e))?
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // What is still unanswered goes back to the end of its partition as a copy,
        // then everything handed to this member is committed.
        let (copies, ends) = {
            let mut ledger = self.ledger();
            ledger.returning.clear();
            let mut copies = Vec::new();
            let mut ends = Vec::new();
            for ((topic, partition), slots) in ledger.partitions.drain() {
                if let Some((last, _)) = slots.last_key_value() {
                    ends.push((topic.clone(), partition, *last + 1));
                }
                for slot in slots.into_values().filter(|s| !s.answered) {
                    copies.push((partition, slot));
                }
            }
            (copies, ends)
        };
        tracing::debug!(copies = copies.len(), ends = ?ends, "kafka member closing");
        for (partition, slot) in copies {
            let message = OutgoingMessage {
                topic: slot.message.topic().to_string(),
                payload: slot.message.payload,
                content_type: slot.message.content_type,
                metadata: slot.message.metadata,
                partition_key: slot.message.partition_key,
                expires_at: None,
                deliver_at: None,
            };
            let copy = (
                slot.attempt + 1,
                millis_since_epoch(slot.message.publish_time),
            );
            let result = self
                .producer
                .send(
                    record(&message, Some(partition), Some(copy)),
                    REQUEST_TIMEOUT,
                )
                .await;
            delivered(&message.topic, result)?;
        }
        let mut offsets = TopicPartitionList::new();
        for (topic, partition, next) in &ends {
            offsets
                .add_partition_offset(topic, *partition, Offset::Offset(*next))
                .map_err(broker("committing on close"))?;
        }
        let consumer = self
            .consumer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(consumer) = consumer else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || {
            if offsets.count() > 0 {
                consumer
                    .commit(&offsets, CommitMode::Sync)
                    .map_err(broker("committing on close"))?;
            }
            // The last handle: dropping it closes the consumer and leaves the group.
            drop(consumer);
            Ok(())
        })
        .await
        .map_err(broker("committing on close"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regular_expressions() {
        assert_eq!(glob_regex("orders.*"), "^orders\\..*$");
        assert_eq!(glob_regex("a-b_c*"), "^a-b_c.*$");
    }
}
