//! RabbitMQ component (AMQP 0-9-1, `lapin`): one durable topic exchange for every
//! topic, one durable quorum queue per consumer group, publisher confirms mapped to
//! entries, per-message expiration (native TTL), dead-letter exchanges and delivery
//! limits (native dead letters), nack with requeue for redelivery.
//!
//! Routing: a topic's routing key spells the topic one character per word
//! (`a.b-c` -> `a.%2E.b.-.c`), so that a glob pattern maps exactly onto an AMQP binding
//! pattern (`*` -> `#`, which matches any run of words). Multi-topic and pattern
//! consumers bind one queue once per topic or pattern; the delivery's routing key
//! names the owner topic.
//!
//! RabbitMQ keeps messages only for queues that exist: a group sees what was
//! published after it was created (`create_group` or its first consumer).

mod records;
mod settings;

pub use settings::RabbitConfig;

use crate::capability::{Capabilities, Support};
use crate::component::{
    check_message_size, millis_since_epoch, owner_topic, random_position, stable_hash, Component,
    Consumer, ConsumerSpec, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use crate::runtime::controls::keys;
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::PublisherConfirm;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use records::CountedRecords;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HEADER_METADATA: &str = "pcs-metadata";
const HEADER_TOPIC: &str = "pcs-topic";
const HEADER_KEY: &str = "pcs-partition-key";
const HEADER_PUBLISHED: &str = "pcs-published-ms";
/// On a deferred copy: the topic it was delivered from (its routing key then names
/// the group's queue).
const HEADER_DEFERRED_TOPIC: &str = "pcs-deferred-topic";
/// On a deferred copy: returns before it was deferred (the copy's own delivery count
/// starts again at zero).
const HEADER_RETURNS: &str = "pcs-returns";
/// The shortest wait queue; longer ones double.
const SHORTEST_WAIT: Duration = Duration::from_millis(64);
/// AMQP routing keys are at most 255 bytes; a topic spelled one character per word
/// takes up to 4 bytes per character.
const MAX_ROUTED_TOPIC: usize = 63;

fn amqp<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
}

/// One topic character as one routing-key word: letters, digits, `-` and `_` as
/// themselves, anything else as `%XX`.
fn word(c: char) -> String {
    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
        c.to_string()
    } else {
        format!("%{:02X}", c as u32)
    }
}

/// The routing key of a topic.
fn routing_key(topic: &str) -> Result<ShortString> {
    if topic.chars().count() > MAX_ROUTED_TOPIC {
        return Err(PubSubError::InvalidRequest(format!(
            "topic '{topic}' is longer than {MAX_ROUTED_TOPIC} characters, the most a RabbitMQ routing key can spell"
        )));
    }
    let key: Vec<String> = topic.chars().map(word).collect();
    short(key.join("."))
}

/// The binding key of a glob pattern: `*` matches any run of words.
fn binding_key(pattern: &str) -> Result<ShortString> {
    let key: Vec<String> = pattern
        .chars()
        .map(|c| if c == '*' { "#".into() } else { word(c) })
        .collect();
    short(key.join("."))
}

/// The topic a routing key spells.
fn topic_of(routing_key: &str) -> String {
    routing_key
        .split('.')
        .map(|w| match w.strip_prefix('%') {
            Some(hex) => u32::from_str_radix(hex, 16)
                .ok()
                .and_then(char::from_u32)
                .map(String::from)
                .unwrap_or_default(),
            None => w.to_string(),
        })
        .collect()
}

fn short(text: String) -> Result<ShortString> {
    ShortString::try_new(text)
        .map_err(|e| PubSubError::InvalidRequest(format!("name too long for AMQP: {e}")))
}

fn long(text: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(text.as_bytes().to_vec()))
}

fn text_header(headers: &FieldTable, name: &str) -> Option<String> {
    match headers.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn number_header(headers: &FieldTable, name: &str) -> Option<i64> {
    match headers.inner().get(name)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some(i64::from(*n)),
        AMQPValue::LongUInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortInt(n) => Some(i64::from(*n)),
        AMQPValue::ShortShortUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// The RabbitMQ component. Its connection is opened again when it died (the broker
/// restarted, the network failed): the call that finds it dead reconnects.
pub struct RabbitMq {
    inner: Arc<Inner>,
}

impl std::ops::Deref for RabbitMq {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

/// How long opening a connection (and its publisher channel) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What the component and its consumers share.
pub struct Inner {
    config: RabbitConfig,
    link: tokio::sync::Mutex<Arc<Link>>,
    /// Connections opened so far (the first is 1).
    links_opened: std::sync::atomic::AtomicU64,
    records: CountedRecords,
}

/// A connection and its confirming publisher channel.
struct Link {
    connection: Connection,
    publisher: Channel,
}

impl Link {
    /// Connects, opens a confirming publisher channel and declares the exchange.
    async fn open(config: &RabbitConfig) -> Result<Self> {
        tokio::time::timeout(CONNECT_TIMEOUT, Self::open_now(config))
            .await
            .map_err(|_| {
                PubSubError::broker(
                    format!("connecting to RabbitMQ at {}", config.endpoint()),
                    format!("no connection within {CONNECT_TIMEOUT:?}"),
                )
            })?
    }

    async fn open_now(config: &RabbitConfig) -> Result<Self> {
        let connection = Connection::connect(&config.uri, ConnectionProperties::default())
            .await
            .map_err(|e| {
                PubSubError::broker(
                    format!("connecting to RabbitMQ at {}", config.endpoint()),
                    e,
                )
            })?;
        let publisher = connection
            .create_channel()
            .await
            .map_err(amqp("opening the publisher channel"))?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(amqp("enabling publisher confirms"))?;
        publisher
            .exchange_declare(
                short(config.exchange.clone())?,
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(amqp("declaring the exchange"))?;
        Ok(Link {
            connection,
            publisher,
        })
    }

    fn alive(&self) -> bool {
        self.connection.status().connected() && self.publisher.status().connected()
    }
}

impl RabbitMq {
    /// Connects, opens a confirming publisher channel and declares the exchange.
    pub async fn connect(config: RabbitConfig) -> Result<Self> {
        let link = Link::open(&config).await?;
        Ok(RabbitMq {
            inner: Arc::new(Inner {
                records: CountedRecords::new(&config.exchange, config.queue_expiry),
                config,
                link: tokio::sync::Mutex::new(Arc::new(link)),
                links_opened: std::sync::atomic::AtomicU64::new(1),
            }),
        })
    }
}

impl Inner {
    /// A new channel on the live connection; `what` names its use in the error.
    async fn channel(&self, what: &'static str) -> Result<Channel> {
        self.link()
            .await?
            .connection
            .create_channel()
            .await
            .map_err(amqp(what))
    }

    /// The live connection, opened again when it died.
    async fn link(&self) -> Result<Arc<Link>> {
        let mut link = self.link.lock().await;
        if !link.alive() {
            *link = Arc::new(Link::open(&self.config).await?);
            self.links_opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(link.clone())
    }

    /// Starts publishing one message; the returned confirm resolves once the broker
    /// has taken responsibility for it.
    async fn send(&self, message: &OutgoingMessage) -> Result<(MessageId, PublisherConfirm)> {
        check_message_size(message, self.config.max_message_bytes)?;
        let key = routing_key(&message.topic)?;
        let position = random_position();
        let mut headers = FieldTable::default();
        headers.insert(
            HEADER_METADATA.into(),
            long(&serde_json::to_string(&message.metadata).unwrap_or_default()),
        );
        headers.insert(HEADER_TOPIC.into(), long(&message.topic));
        headers.insert(
            HEADER_PUBLISHED.into(),
            AMQPValue::LongLongInt(millis_since_epoch(SystemTime::now()) as i64),
        );
        if let Some(partition_key) = &message.partition_key {
            headers.insert(HEADER_KEY.into(), long(partition_key));
        }
        let mut properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(position.to_string().into())
            .with_headers(headers);
        if let Some(content_type) = &message.content_type {
            properties = properties.with_content_type(short(content_type.clone())?);
        }
        if let Some(expires_at) = message.expires_at {
            let left = expires_at
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .as_millis()
                .max(1);
            properties = properties.with_expiration(left.to_string().into());
        }
        let confirm = self
            .link()
            .await?
            .publisher
            .basic_publish(
                short(self.config.exchange.clone())?,
                key,
                BasicPublishOptions::default(),
                &message.payload,
                properties,
            )
            .await
            .map_err(amqp("publishing"))?;
        Ok((MessageId::new(&message.topic, None, position), confirm))
    }

    /// The queue of a group over `topics`.
    fn queue_name(&self, spec: &ConsumerSpec) -> Result<ShortString> {
        let selector = match &spec.topics {
            TopicSelector::Single(topic) => topic.clone(),
            other => {
                let digest = stable_hash(other.describe().as_bytes());
                format!("multi-{digest:016x}")
            }
        };
        let mut name = format!("{}.{}.{selector}", self.config.exchange, spec.group);
        // A topic the contract accepts (up to 249 characters) can make the name too
        // long for AMQP: then its hash stands for it (the group stays readable).
        if name.len() > 255 {
            name = format!(
                "{}.{}.h{:016x}",
                self.config.exchange,
                spec.group,
                stable_hash(selector.as_bytes())
            );
        }
        short(name).map_err(|_| {
            PubSubError::InvalidRequest(format!(
                "group '{}' with topic '{}' makes a queue name over 255 bytes",
                spec.group,
                spec.topics.describe()
            ))
        })
    }

    /// Declares the group's quorum queue with its dead-letter settings and binds it to
    /// every topic or pattern of the spec. Redeclaring with other settings fails.
    async fn declare_group(&self, channel: &Channel, spec: &ConsumerSpec) -> Result<ShortString> {
        let queue = self.queue_name(spec)?;
        let mut arguments = FieldTable::default();
        arguments.insert("x-queue-type".into(), long("quorum"));
        if let Some(expiry) = self.config.queue_expiry {
            arguments.insert(
                "x-expires".into(),
                AMQPValue::LongLongInt(expiry.as_millis() as i64),
            );
        }
        if let Some(max) = spec.max_deliveries {
            // The limit counts returns: a message is delivered at most limit + 1 times.
            arguments.insert(
                "x-delivery-limit".into(),
                AMQPValue::LongLongInt(i64::from(max.saturating_sub(1))),
            );
        }
        if let Some(dead_letter_topic) = &spec.dead_letter_topic {
            arguments.insert("x-dead-letter-exchange".into(), long(&self.config.exchange));
            arguments.insert(
                "x-dead-letter-routing-key".into(),
                long(routing_key(dead_letter_topic)?.as_str()),
            );
        }
        channel
            .queue_declare(
                queue.clone(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await
            .map_err(amqp("declaring the group's queue"))?;
        let bindings = match &spec.topics {
            TopicSelector::Single(topic) => vec![routing_key(topic)?],
            TopicSelector::List(topics) => topics
                .iter()
                .map(|t| routing_key(t))
                .collect::<Result<_>>()?,
            TopicSelector::Pattern(pattern) => vec![binding_key(pattern)?],
        };
        for binding in bindings {
            channel
                .queue_bind(
                    queue.clone(),
                    short(self.config.exchange.clone())?,
                    binding,
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(amqp("binding the group's queue"))?;
        }
        Ok(queue)
    }

    /// The version of the server at `endpoint`, read from its `connection.start`
    /// greeting (server properties, key `version`).
    async fn version_at(endpoint: &str) -> Option<String> {
        let mut stream = tokio::net::TcpStream::connect(endpoint).await.ok()?;
        stream.write_all(b"AMQP\x00\x00\x09\x01").await.ok()?;
        let mut greeting = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut greeting))
            .await
            .ok()?
            .ok()?;
        let greeting = &greeting[..read];
        const KEY: &[u8] = b"\x07versionS";
        let at = greeting.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
        let len = u32::from_be_bytes(greeting.get(at..at + 4)?.try_into().ok()?) as usize;
        let version = greeting.get(at + 4..at + 4 + len)?;
        Some(String::from_utf8_lossy(version).into_owned())
    }
}

/// The version of the RabbitMQ server at `endpoint` (`host:port`), read from its
/// AMQP greeting without logging in; `None` when it does not answer as RabbitMQ.
pub async fn server_version(endpoint: &str) -> Option<String> {
    Inner::version_at(endpoint).await
}

/// Partitioned topics are emulated (see [`crate::partitioned`]) with records held
/// in queue message counts (see [`records`]).
#[async_trait]
impl crate::partitioned::PartitionStore for RabbitMq {
    async fn read_partitions(&self, topic: &str) -> Result<Option<crate::PartitionUpdate>> {
        let link = self.link().await?;
        self.records.read(&link.connection, topic).await
    }

    async fn write_partitions(&self, topic: &str, record: crate::PartitionUpdate) -> Result<()> {
        let link = self.link().await?;
        self.records.write(&link.connection, topic, record).await
    }

    /// The connection's number: it changes when the connection is opened again.
    async fn incarnation(&self) -> Result<String> {
        self.link().await?;
        Ok(self.links_opened.load(Ordering::Relaxed).to_string())
    }
}

impl RabbitConfig {
    /// What the component declares, decided by its settings alone. No lease (the
    /// baseline's zero): unacknowledged deliveries go back to the queue when the
    /// connection dies.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ttl: Support::Native,
            dead_letter: Support::Native,
            seek: false,
            max_message_bytes: Some(self.max_message_bytes),
            recovery_bound: Duration::from_secs(15),
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for RabbitMq {
    fn kind(&self) -> &str {
        "rabbitmq"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }

    async fn broker_version(&self) -> Result<String> {
        let version = Inner::version_at(&self.config.endpoint())
            .await
            .unwrap_or_else(|| "(version unknown)".into());
        Ok(format!("RabbitMQ {version} at {}", self.config.endpoint()))
    }

    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        // A group's queue as every subscription declares it (quorum, delivery limit,
        // dead letters, expiry), on a name of its own, removed again. A broker whose
        // quorum queues refuse one of those arguments cannot serve any group.
        let probe = format!("pcs-probe-{}", uuid::Uuid::new_v4().simple());
        let mut spec = ConsumerSpec::new(TopicSelector::Single(probe.clone()), "probe");
        spec.max_deliveries = Some(3);
        spec.dead_letter_topic = Some(format!("{probe}-dlq"));
        let channel = self.channel("opening a channel").await?;
        let declared = self.declare_group(&channel, &spec).await;
        if let Ok(queue) = &declared {
            let _ = channel
                .queue_delete(queue.clone(), QueueDeleteOptions::default())
                .await;
            let _ = channel.close(200, "probe done".into()).await;
        }
        Ok(match declared {
            Err(e) if e.to_string().contains("PRECONDITION_FAILED") => Some(format!(
                "needs RabbitMQ quorum queues that take the arguments it declares ({}x-delivery-limit, x-dead-letter-exchange; certified from RabbitMQ 3.10); the broker answered: {e}",
                if self.config.queue_expiry.is_some() { "x-expires, " } else { "" }
            )),
            _ => None,
        })
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        let (id, confirm) = self.send(&message).await?;
        settle(confirm).await.map(|_| id)
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        // Each publish queues its frames on its first poll, in order; then all are
        // written together and their confirms awaited together.
        let pending = futures::future::join_all(messages.iter().map(|m| self.send(m))).await;
        let confirmed = pending.into_iter().map(|sent| async move {
            let (id, confirm) = sent?;
            settle(confirm).await.map(|_| id)
        });
        Ok(futures::future::join_all(confirmed).await)
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        let channel = self.channel("opening a channel").await?;
        let declared = self.declare_group(&channel, spec).await;
        let _ = channel.close(200, "group created".into()).await;
        declared.map(|_| ())
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let subscription = self.inner.subscribe(&spec).await?;
        Ok(Box::new(RabbitConsumer {
            inner: self.inner.clone(),
            spec,
            subscription: tokio::sync::Mutex::new(Some(subscription)),
            tags: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }))
    }
}

impl Inner {
    /// Opens a channel, declares the group and starts consuming from its queue.
    async fn subscribe(&self, spec: &ConsumerSpec) -> Result<Subscription> {
        let channel = self.channel("opening a consumer channel").await?;
        let queue = self.declare_group(&channel, spec).await?;
        channel
            .basic_qos(self.config.prefetch, BasicQosOptions::default())
            .await
            .map_err(amqp("setting the prefetch"))?;
        let deliveries = channel
            .basic_consume(
                queue,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("starting to consume"))?;
        Ok(Subscription {
            channel,
            deliveries,
        })
    }
}

/// Waits for a publisher confirm; a nack or a return is a failed publish.
async fn settle(confirm: PublisherConfirm) -> Result<()> {
    let confirmation = confirm
        .await
        .map_err(amqp("waiting for the publisher confirm"))?;
    if confirmation.is_nack() {
        return Err(PubSubError::broker(
            "publishing",
            "the broker refused the message (publisher nack)",
        ));
    }
    Ok(())
}

/// The wait queue a message deferred for `delay` goes to: the longest doubling of
/// 64 ms within it.
fn wait_for(delay: Duration) -> Duration {
    let mut wait = SHORTEST_WAIT;
    while wait * 2 <= delay {
        wait *= 2;
    }
    wait
}

/// The properties of a deferred message's copy: the app's headers, the topic it came
/// from, and the attempts it already had.
fn deferred_copy(unsettled: &Unsettled) -> BasicProperties {
    let mut headers = FieldTable::default();
    let original = unsettled.properties.headers().clone().unwrap_or_default();
    for (name, value) in original.inner() {
        if !name.as_str().starts_with("x-") && name.as_str() != HEADER_RETURNS {
            headers.insert(name.clone(), value.clone());
        }
    }
    headers.insert(HEADER_DEFERRED_TOPIC.into(), long(&unsettled.topic));
    headers.insert(
        HEADER_RETURNS.into(),
        AMQPValue::LongLongInt(i64::from(unsettled.attempt.saturating_sub(1))),
    );
    unsettled.properties.clone().with_headers(headers)
}

/// A consumer's channel and its stream of deliveries.
struct Subscription {
    channel: Channel,
    deliveries: lapin::Consumer,
}

/// A member of a group; when its channel dies (the broker restarted, the network
/// failed) the next receive subscribes again on a new connection.
struct RabbitConsumer {
    inner: Arc<Inner>,
    spec: ConsumerSpec,
    /// `None` after the channel died, until the next receive opens a new one.
    subscription: tokio::sync::Mutex<Option<Subscription>>,
    /// The delivery tag of each unsettled message, with the channel it came on.
    tags: Mutex<HashMap<MessageId, Unsettled>>,
    closed: AtomicBool,
}

/// A delivered message awaiting settlement: its tag and channel, and what a deferred
/// copy needs.
struct Unsettled {
    tag: u64,
    channel: Channel,
    topic: String,
    attempt: u32,
    payload: Vec<u8>,
    properties: BasicProperties,
}

/// The most recent dead-lettering of a message (`x-death` lists the latest first):
/// its reason and the queue it left.
fn last_death(headers: &FieldTable) -> Option<(String, String)> {
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(latest) = deaths.as_slice().first()? else {
        return None;
    };
    Some((
        text_header(latest, "reason")?,
        text_header(latest, "queue").unwrap_or_default(),
    ))
}

/// True for a wait queue's name (see [`RabbitConsumer::defer`]).
fn is_wait_queue(queue: &str) -> bool {
    queue.contains(".wait.")
}

impl RabbitConsumer {
    fn take(&self, id: &MessageId) -> Result<Unsettled> {
        owner_topic(id, &self.spec.topics)?;
        self.tags
            .lock()
            .expect("tags lock")
            .remove(id)
            .ok_or_else(|| {
                PubSubError::NotFound(format!("message {id} is not awaiting settlement"))
            })
    }

    fn tag(&self, id: &MessageId) -> Result<(u64, Channel)> {
        self.take(id).map(|u| (u.tag, u.channel))
    }

    /// Declares the group's wait queue for `wait`: what expires there goes back to the
    /// group's queue (through the default exchange).
    async fn wait_queue(&self, channel: &Channel, wait: Duration) -> Result<ShortString> {
        let group_queue = self.inner.queue_name(&self.spec)?;
        let name = short(format!("{}.wait.{}", group_queue, wait.as_millis())).map_err(|_| {
            PubSubError::InvalidRequest(format!(
                "group '{}' makes a wait queue name over 255 bytes",
                self.spec.group
            ))
        })?;
        let mut arguments = FieldTable::default();
        let ms = wait.as_millis() as i64;
        arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ms));
        arguments.insert("x-dead-letter-exchange".into(), long(""));
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            long(group_queue.as_str()),
        );
        arguments.insert("x-expires".into(), AMQPValue::LongLongInt(ms + 60_000));
        channel
            .queue_declare(
                name.clone(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                arguments,
            )
            .await
            .map_err(amqp("declaring a wait queue"))?;
        Ok(name)
    }

    fn convert(&self, delivery: lapin::message::Delivery, channel: &Channel) -> ReceivedMessage {
        let properties = &delivery.properties;
        let empty = FieldTable::default();
        let headers = properties.headers().as_ref().unwrap_or(&empty);
        let topic = topic_of(delivery.routing_key.as_str());
        let mut metadata: Metadata = text_header(headers, HEADER_METADATA)
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        let topic = text_header(headers, HEADER_DEFERRED_TOPIC).unwrap_or(topic);
        let dead = last_death(headers).filter(|(_, queue)| !is_wait_queue(queue));
        if let Some((reason, _)) = dead {
            let reason = match reason.as_str() {
                "rejected" => "dropped",
                "delivery_limit" => "maxDeliveries",
                other => other,
            };
            metadata.insert(keys::DEAD_LETTER_REASON.into(), reason.into());
            if let Some(original) = text_header(headers, HEADER_TOPIC) {
                metadata.insert(keys::ORIGINAL_TOPIC.into(), original);
            }
        }
        let position = properties
            .message_id()
            .as_ref()
            .and_then(|id| id.as_str().parse().ok())
            .unwrap_or(delivery.delivery_tag);
        let returns = number_header(headers, "x-delivery-count").unwrap_or(0)
            + number_header(headers, HEADER_RETURNS).unwrap_or(0);
        let published = number_header(headers, HEADER_PUBLISHED)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
            .unwrap_or_else(SystemTime::now);
        let id = MessageId::new(&topic, None, position);
        let attempt = 1 + returns.max(0) as u32;
        self.tags.lock().expect("tags lock").insert(
            id.clone(),
            Unsettled {
                tag: delivery.delivery_tag,
                channel: channel.clone(),
                topic,
                attempt,
                payload: delivery.data.clone(),
                properties: properties.clone(),
            },
        );
        ReceivedMessage {
            id,
            content_type: properties
                .content_type()
                .as_ref()
                .map(|c| c.as_str().to_string()),
            partition_key: text_header(headers, HEADER_KEY),
            metadata,
            attempt,
            publish_time: published,
            payload: delivery.data,
        }
    }
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PubSubError::Closed("the consumer is closed".into()));
        }
        let mut current = self.subscription.lock().await;
        if current.is_none() {
            *current = Some(self.inner.subscribe(&self.spec).await?);
        }
        let subscription = current.as_mut().expect("opened above");
        let channel = subscription.channel.clone();
        let first = match tokio::time::timeout(wait, subscription.deliveries.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(delivery))) => delivery,
            Ok(ended) => {
                // The channel died under us (its unacknowledged messages go back to
                // the queue): the next receive subscribes again.
                *current = None;
                let why = match ended {
                    Some(Err(e)) => e.to_string(),
                    _ => "the delivery stream ended".into(),
                };
                return Err(PubSubError::broker(
                    "receiving (the channel was lost; the next receive subscribes again)",
                    why,
                ));
            }
        };
        let mut received = vec![self.convert(first, &channel)];
        while received.len() < max {
            match subscription.deliveries.next().now_or_never() {
                Some(Some(Ok(delivery))) => received.push(self.convert(delivery, &channel)),
                _ => break,
            }
        }
        Ok(received)
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        crate::component::ack_together(self, ids, &self.spec.topics).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        channel
            .basic_ack(tag, BasicAckOptions::default())
            .await
            .map_err(amqp("acknowledging"))
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        // A failed delivery: basic.reject with requeue. Since RabbitMQ 4.3 only a
        // reject counts towards the quorum queue's delivery-count (x-delivery-count,
        // the attempt, and x-delivery-limit, maxDeliveries); a basic.nack returns the
        // message without counting (rabbitmq-server#15387). Earlier versions count both.
        let requeue = BasicRejectOptions { requeue: true };
        if delay.is_zero() {
            return channel
                .basic_reject(tag, requeue)
                .await
                .map_err(amqp("requeueing"));
        }
        // RabbitMQ requeues at once; the message stays unacknowledged here until its
        // delay has passed (closing the channel returns it earlier, which is allowed).
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = channel.basic_reject(tag, requeue).await;
        });
        Ok(())
    }

    /// Hands the message to the group's wait queue for the longest doubling of 64 ms
    /// within `delay` (it expires back into the group's queue, where the runtime holds
    /// or defers it again), and acknowledges the original: unlike a held message, a
    /// deferred one does not fill the prefetch window. The copy keeps its attempt.
    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.defer_many(&[(id.clone(), delay)]).await
    }

    /// Defers in bulk, pipelined: every wait queue needed is declared once, every copy
    /// is published before any confirm is awaited, the confirms are awaited together
    /// (a quorum queue confirms after its disk write, so one at a time would cost a
    /// disk write each), and then each original whose copy was confirmed is
    /// acknowledged; one whose copy was not goes back to the queue, never lost.
    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        let mut first_error: Option<PubSubError> = None;
        let mut taken = Vec::new();
        for (id, delay) in deferrals {
            match self.take(id) {
                Ok(unsettled) => taken.push((unsettled, wait_for(*delay))),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((first, _)) = taken.first() else {
            return first_error.map_or(Ok(()), Err);
        };
        let channel = first.channel.clone();
        let mut queues: HashMap<Duration, Result<ShortString>> = HashMap::new();
        for (_, wait) in &taken {
            if !queues.contains_key(wait) {
                let declared = self.wait_queue(&channel, *wait).await;
                queues.insert(*wait, declared);
            }
        }
        let publisher = match self.inner.link().await {
            Ok(link) => Some(link),
            Err(e) => {
                first_error.get_or_insert(e);
                None
            }
        };
        // Every copy on its way first ...
        let mut sent = Vec::new();
        for (unsettled, wait) in taken {
            let confirm = match (&publisher, &queues[&wait]) {
                (Some(link), Ok(queue)) => link
                    .publisher
                    .basic_publish(
                        "".into(),
                        queue.clone(),
                        BasicPublishOptions::default(),
                        &unsettled.payload,
                        deferred_copy(&unsettled),
                    )
                    .await
                    .map_err(amqp("publishing a deferred copy")),
                (_, Err(e)) => Err(PubSubError::broker("declaring a wait queue", e)),
                (None, _) => Err(PubSubError::broker(
                    "publishing a deferred copy",
                    "no connection",
                )),
            };
            sent.push((unsettled, confirm));
        }
        // ... then their confirms together.
        let settled =
            futures::future::join_all(sent.into_iter().map(|(unsettled, confirm)| async move {
                let copied = match confirm {
                    Ok(confirm) => settle(confirm).await,
                    Err(e) => Err(e),
                };
                (unsettled, copied)
            }))
            .await;
        for (unsettled, copied) in settled {
            let answered = match copied {
                Ok(()) => unsettled
                    .channel
                    .basic_ack(unsettled.tag, BasicAckOptions::default())
                    .await
                    .map_err(amqp("acknowledging a deferred message")),
                Err(e) => {
                    // Never lose it: back to the queue.
                    let _ = unsettled
                        .channel
                        .basic_nack(
                            unsettled.tag,
                            BasicNackOptions {
                                requeue: true,
                                ..Default::default()
                            },
                        )
                        .await;
                    Err(e)
                }
            };
            if let Err(e) = answered {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn reject(&self, id: &MessageId, _reason: &str) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        channel
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
            .map_err(amqp("dead-lettering"))
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(subscription) = self.subscription.lock().await.take() {
            if subscription.channel.status().connected() {
                subscription
                    .channel
                    .close(200, "consumer closed".into())
                    .await
                    .map_err(amqp("closing the consumer channel"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("orders")]
    #[case("a.b/c:d")]
    #[case("pcs-1a2b_x")]
    fn routing_keys_spell_topics_back(#[case] topic: &str) {
        let key = routing_key(topic).unwrap();
        assert_eq!(topic_of(key.as_str()), topic);
    }

    #[test]
    fn a_glob_becomes_a_binding_pattern() {
        assert_eq!(binding_key("ab*").unwrap().as_str(), "a.b.#");
        assert_eq!(binding_key("a.*").unwrap().as_str(), "a.%2E.#");
    }

    #[test]
    fn overlong_topics_are_refused_by_name() {
        let topic = "t".repeat(MAX_ROUTED_TOPIC + 1);
        let error = routing_key(&topic).unwrap_err();
        assert!(error.to_string().contains("longer than 63"), "{error}");
    }

    #[tokio::test]
    async fn the_version_is_read_from_the_servers_greeting() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut header = [0u8; 8];
            socket.read_exact(&mut header).await.unwrap();
            let mut greeting = b"\x01\x00\x00properties\x07versionS".to_vec();
            greeting.extend_from_slice(&6u32.to_be_bytes());
            greeting.extend_from_slice(b"3.10.8\x07product");
            socket.write_all(&greeting).await.unwrap();
        });
        let config = RabbitConfig {
            uri: format!("amqp://guest:guest@{endpoint}/%2f"),
            ..RabbitConfig::default()
        };
        let version = Inner::version_at(&config.endpoint()).await;
        assert_eq!(version.as_deref(), Some("3.10.8"));
    }

    #[test]
    fn endpoints_are_read_and_replaced() {
        let config = RabbitConfig::default();
        assert_eq!(config.endpoint(), "127.0.0.1:5672");
        assert_eq!(
            config.with_endpoint("127.0.0.1:40000"),
            "amqp://guest:guest@127.0.0.1:40000/%2f"
        );
    }
}
