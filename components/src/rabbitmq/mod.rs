//! RabbitMQ component (AMQP 0-9-1, `lapin`): one durable topic exchange for every
//! topic, one durable quorum queue per consumer group, publisher confirms mapped to
//! entries, per-message expiration (native TTL), dead-letter exchanges and delivery
//! limits (native dead letters), nack with requeue for redelivery.
//!
//! Routing (`routing.rs`): a topic's routing key spells the topic one character per
//! word, so that a glob pattern maps exactly onto an AMQP binding pattern. Multi-topic
//! and pattern consumers (`consumer.rs`) bind one queue once per topic or pattern; the
//! delivery's routing key names the owner topic.
//!
//! RabbitMQ keeps messages only for queues that exist: a group sees what was
//! published after it was created (`create_group` or its first consumer).

mod consumer;
mod records;
mod routing;
mod settings;

pub use settings::RabbitConfig;

use crate::capability::{Capabilities, Support};
use crate::component::{
    check_message_size, millis_since_epoch, random_position, stable_hash, Component, Consumer,
    ConsumerSpec, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage};
use async_trait::async_trait;
use consumer::RabbitConsumer;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::PublisherConfirm;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use records::CountedRecords;
use routing::{binding_key, routing_key};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HEADER_METADATA: &str = "pcs-metadata";
const HEADER_TOPIC: &str = "pcs-topic";
const HEADER_KEY: &str = "pcs-partition-key";
const HEADER_PUBLISHED: &str = "pcs-published-ms";
fn amqp<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
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
        let publisher = confirming_channel(
            &connection,
            "opening the publisher channel",
            "enabling publisher confirms",
        )
        .await?;
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
        declare_durable(
            channel,
            queue.clone(),
            arguments,
            "declaring the group's queue",
        )
        .await?;
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
        let consumer = RabbitConsumer::open(self.inner.clone(), spec).await?;
        Ok(Box::new(consumer))
    }

    fn kind(&self) -> &str {
        "rabbitmq"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }
}

/// Waits for a publisher confirm; a nack or a return is a failed publish.
async fn settle(confirm: PublisherConfirm) -> Result<()> {
    if confirmed(confirm, "waiting for the publisher confirm").await? {
        return Ok(());
    }
    Err(PubSubError::broker(
        "publishing",
        "the broker refused the message (publisher nack)",
    ))
}

/// A new channel on `connection` with publisher confirms on; `opening` and
/// `confirming` name the two steps in errors.
async fn confirming_channel(
    connection: &Connection,
    opening: &str,
    confirming: &str,
) -> Result<Channel> {
    let channel = connection.create_channel().await.map_err(amqp(opening))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(amqp(confirming))?;
    Ok(channel)
}

/// Waits for a publisher confirm: `false` when the broker refused the message (a
/// nack); `waiting` names the wait in errors.
async fn confirmed(confirm: PublisherConfirm, waiting: &str) -> Result<bool> {
    let confirmation = confirm.await.map_err(amqp(waiting))?;
    Ok(!confirmation.is_nack())
}

/// Declares the durable queue `name` with `arguments`; `context` names the
/// declaration in errors.
async fn declare_durable(
    channel: &Channel,
    name: ShortString,
    arguments: FieldTable,
    context: &str,
) -> Result<lapin::Queue> {
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .queue_declare(name, options, arguments)
        .await
        .map_err(amqp(context))
}

#[cfg(test)]
mod tests {
    use super::*;

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
