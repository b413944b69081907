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
//! delay (attempt + 1). When the member closes, or a rebalance takes partitions from
//! it, what it still holds unanswered of them is published again to the same partition
//! (a copy carrying its attempt count) before everything it was handed is committed, so
//! the group's next member never receives again what was acknowledged after a gap.
//! Records a receive got before a rebalance took their partition are not handed out;
//! an acknowledgement that comes after it is refused (`NotAllowed`), since a copy went
//! to the partition's new member.

mod intake;
mod ledger;
mod member;
mod poller;
mod settings;

pub use settings::{Acks, KafkaConfig};

use crate::capability::{Capabilities, OrderingScope, Support};
use crate::component::{
    check_message_size, millis_since_epoch, Component, Consumer, ConsumerSpec, StartPosition,
    TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage};
use async_trait::async_trait;
use member::{KafkaConsumer, Member};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{CommitMode, Consumer as _, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Record headers the component owns.
const HEADER_CONTENT_TYPE: &str = "pcs-ct";
const HEADER_METADATA: &str = "pcs-md";
/// On a copy handed forward by a closing member: the attempt its next delivery is.
const HEADER_ATTEMPT: &str = "pcs-attempt";
/// On a copy: when the original was published (milliseconds since the epoch).
const HEADER_PUBLISHED: &str = "pcs-published-ms";
/// On a copy of a record that waited out a retry delay: when it is due (milliseconds
/// since the epoch); the member that polls it holds it until then.
const HEADER_DUE: &str = "pcs-due-ms";

/// The header values of a copy a member hands back.
struct CopyHeaders {
    /// The attempt its next delivery is.
    attempt: u32,
    published_ms: u64,
    due_ms: Option<u64>,
}
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
fn headers(message: &OutgoingMessage, copy: Option<CopyHeaders>) -> OwnedHeaders {
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
    if let Some(copy) = copy {
        headers = headers
            .insert(Header {
                key: HEADER_ATTEMPT,
                value: Some(copy.attempt.to_string().as_bytes()),
            })
            .insert(Header {
                key: HEADER_PUBLISHED,
                value: Some(copy.published_ms.to_string().as_bytes()),
            });
        if let Some(due_ms) = copy.due_ms {
            headers = headers.insert(Header {
                key: HEADER_DUE,
                value: Some(due_ms.to_string().as_bytes()),
            });
        }
    }
    headers
}

fn record<'a>(
    message: &'a OutgoingMessage,
    partition: Option<i32>,
    copy: Option<CopyHeaders>,
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

impl KafkaConfig {
    /// What the component declares, decided by its settings alone.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            bulk_subscribe: Support::Native,
            ordering: OrderingScope::PerPartition,
            max_message_bytes: Some(self.max_message_bytes),
            // A new member joins its group (a rebalance) before it is handed anything.
            delivery_bound: Duration::from_secs(10),
            // A new member is handed records once it has joined its group.
            delay_precision: Duration::from_millis(750),
            // What the broker acknowledged survives a crash only on a durable broker
            // with every in-sync replica acknowledging.
            durable: self.durable_broker && self.acks == Acks::All,
            recovery_bound: Duration::from_secs(20),
            // A closing member hands on what it holds at once; a crashed one's records
            // wait for its session to time out.
            lease: SESSION_TIMEOUT,
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for Kafka {
    fn client_version(&self) -> Option<String> {
        Some(format!(
            "librdkafka {}",
            rdkafka::util::get_rdkafka_version().1
        ))
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

    fn kind(&self) -> &str {
        "kafka"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
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
        let consumer: StreamConsumer<Member> = client_config(&self.config)
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
            .create_with_context(KafkaConsumer::context(&self.producer))
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
        Ok(KafkaConsumer::new(consumer, spec.clone(), join))
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
async fn pin_to_end(consumer: &Arc<StreamConsumer<Member>>, topics: &[&str]) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_regular_expressions() {
        assert_eq!(glob_regex("orders.*"), "^orders\\..*$");
        assert_eq!(glob_regex("a-b_c*"), "^a-b_c.*$");
    }
}
