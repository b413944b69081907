//! What each omniqueue backend needs to send to a topic and to consume in a group:
//! its builders, with the keys, exchanges and queues named after the topic and group,
//! and the topology omniqueue leaves to its user.

use crate::settings::{RabbitSettings, RedisSettings};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, ConnectionProperties, ExchangeKind};
use omniqueue::backends::redis::RedisConnectionManager;
use omniqueue::backends::{
    InMemoryBackend, InMemoryProducer, RabbitMqBackend, RabbitMqConfig, RabbitMqProducer,
    RedisBackend, RedisConfig,
};
use omniqueue::{DynConsumer, QueueConsumer as _};
use pubsub_components::{PubSubError, Result, StartPosition};
use std::time::Duration;

/// The producer half of one topic.
pub enum Sender {
    Redis(omniqueue::backends::RedisProducer<RedisConnectionManager>),
    Rabbit(Box<RabbitMqProducer>),
    Memory(InMemoryProducer),
}

impl Sender {
    /// Sends one payload.
    pub async fn send(&self, payload: &[u8]) -> omniqueue::Result<()> {
        match self {
            Sender::Redis(p) => p.send_raw(payload).await,
            Sender::Rabbit(p) => p.send_raw(payload).await,
            Sender::Memory(p) => p.send_raw(payload).await,
        }
    }

    /// Sends one payload to be delivered after `delay` (omniqueue's scheduled send).
    pub async fn send_delayed(&self, payload: &[u8], delay: Duration) -> omniqueue::Result<()> {
        match self {
            Sender::Redis(p) => p.send_raw_scheduled(payload, delay).await,
            Sender::Rabbit(p) => p.send_raw_scheduled(payload, delay).await,
            Sender::Memory(p) => p.send_raw_scheduled(payload, delay).await,
        }
    }
}

pub fn broker_error(context: &str) -> impl Fn(omniqueue::QueueError) -> PubSubError + '_ {
    move |e| PubSubError::Broker {
        context: context.to_string(),
        message: e.to_string(),
    }
}

fn redis_error(context: &str) -> impl Fn(redis::RedisError) -> PubSubError + '_ {
    move |e| PubSubError::Broker {
        context: context.to_string(),
        message: e.to_string(),
    }
}

fn amqp_error(context: &str) -> impl Fn(lapin::Error) -> PubSubError + '_ {
    move |e| PubSubError::Broker {
        context: context.to_string(),
        message: e.to_string(),
    }
}

/// Redis: one stream per topic, one consumer group per group.
pub mod redis_streams {
    use super::*;

    pub fn stream(settings: &RedisSettings, topic: &str) -> String {
        format!("{}:{topic}", settings.key_prefix)
    }

    fn config(settings: &RedisSettings, topic: &str, group: &str, member: &str) -> RedisConfig {
        let stream = stream(settings, topic);
        RedisConfig {
            dsn: format!("redis://{}", settings.host),
            max_connections: 8,
            reinsert_on_nack: true,
            queue_key: stream.clone(),
            delayed_queue_key: format!("{stream}:delayed"),
            delayed_lock_key: format!("{stream}:delayed-lock"),
            consumer_group: group.to_string(),
            consumer_name: member.to_string(),
            payload_key: "payload".into(),
            ack_deadline_ms: settings.ack_deadline.as_millis() as i64,
            dlq_config: None,
            sentinel_config: None,
        }
    }

    /// The producer of `topic`. omniqueue's producer also runs the delayed-message
    /// mover and, for the group it is given, the reclaim of timed-out deliveries: it
    /// gets a group of its own that never reads.
    pub async fn sender(settings: &RedisSettings, topic: &str) -> Result<Sender> {
        let group = "omniqueue-producers";
        create_group(settings, topic, group, StartPosition::Latest).await?;
        let producer = RedisBackend::builder(config(settings, topic, group, "producer"))
            .build_producer()
            .await
            .map_err(broker_error("building an omniqueue Redis producer"))?;
        Ok(Sender::Redis(producer))
    }

    /// A member of `group` on `topic`.
    pub async fn consumer(
        settings: &RedisSettings,
        topic: &str,
        group: &str,
        member: &str,
    ) -> Result<DynConsumer> {
        let consumer = RedisBackend::builder(config(settings, topic, group, member))
            .build_consumer()
            .await
            .map_err(broker_error("building an omniqueue Redis consumer"))?;
        Ok(consumer.into_dyn())
    }

    /// Creates the consumer group (omniqueue expects it to exist).
    pub async fn create_group(
        settings: &RedisSettings,
        topic: &str,
        group: &str,
        start: StartPosition,
    ) -> Result<()> {
        let client = redis::Client::open(format!("redis://{}", settings.host))
            .map_err(redis_error("opening a Redis client"))?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(redis_error("connecting to Redis"))?;
        let from = match start {
            StartPosition::Earliest => "0",
            StartPosition::Latest => "$",
        };
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream(settings, topic))
            .arg(group)
            .arg(from)
            .arg("MKSTREAM")
            .query_async(&mut connection)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(redis_error("creating the consumer group")(e)),
        }
    }

    /// The server's version, from INFO.
    pub async fn version(settings: &RedisSettings) -> Result<String> {
        let client = redis::Client::open(format!("redis://{}", settings.host))
            .map_err(redis_error("opening a Redis client"))?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(redis_error("connecting to Redis"))?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .map_err(redis_error("reading INFO"))?;
        let version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        Ok(format!("Redis {version} at {}", settings.host))
    }
}

/// RabbitMQ: a fanout exchange per topic, a durable queue per group bound to it.
pub mod rabbitmq {
    use super::*;

    pub fn exchange(settings: &RabbitSettings, topic: &str) -> String {
        format!("{}.{topic}", settings.prefix)
    }

    pub fn queue(settings: &RabbitSettings, topic: &str, group: &str) -> String {
        format!("{}.{topic}.{group}", settings.prefix)
    }

    fn config(settings: &RabbitSettings, topic: &str, group: &str, member: &str) -> RabbitMqConfig {
        RabbitMqConfig {
            uri: settings.uri(),
            connection_properties: ConnectionProperties::default(),
            publish_exchange: exchange(settings, topic),
            publish_routing_key: String::new(),
            publish_options: Default::default(),
            // Persistent, so that a durable queue keeps it across a broker restart.
            publish_properties: BasicProperties::default().with_delivery_mode(2),
            consume_queue: queue(settings, topic, group),
            consumer_tag: member.to_string(),
            consume_options: Default::default(),
            consume_arguments: FieldTable::default(),
            consume_prefetch_count: Some(settings.prefetch),
            requeue_on_nack: true,
        }
    }

    /// The producer of `topic` (its exchange declared first).
    pub async fn sender(settings: &RabbitSettings, topic: &str) -> Result<Sender> {
        declare(settings, topic, None).await?;
        let producer = RabbitMqBackend::builder(config(settings, topic, "", "producer"))
            .build_producer()
            .await
            .map_err(broker_error("building an omniqueue RabbitMQ producer"))?;
        Ok(Sender::Rabbit(Box::new(producer)))
    }

    /// A member of `group` on `topic` (its queue declared and bound first).
    pub async fn consumer(
        settings: &RabbitSettings,
        topic: &str,
        group: &str,
        member: &str,
    ) -> Result<DynConsumer> {
        declare(settings, topic, Some(group)).await?;
        let consumer = RabbitMqBackend::builder(config(settings, topic, group, member))
            .build_consumer()
            .await
            .map_err(broker_error("building an omniqueue RabbitMQ consumer"))?;
        Ok(consumer.into_dyn())
    }

    /// Declares the topic's exchange and, with a group, the group's queue bound to it
    /// (omniqueue expects them to exist).
    pub async fn declare(
        settings: &RabbitSettings,
        topic: &str,
        group: Option<&str>,
    ) -> Result<()> {
        // AMQP names are short strings (at most 255 bytes); lapin sends a longer one
        // as a broken frame, and the broker closes the connection on it.
        let names = [
            Some(exchange(settings, topic)),
            group.map(|g| queue(settings, topic, g)),
        ];
        if let Some(long) = names.iter().flatten().find(|name| name.len() > 255) {
            return Err(PubSubError::InvalidRequest(format!(
                "topic '{topic}' makes the RabbitMQ name '{long}' longer than AMQP's 255 bytes"
            )));
        }
        let connection =
            lapin::Connection::connect(&settings.uri(), ConnectionProperties::default())
                .await
                .map_err(amqp_error("connecting to RabbitMQ"))?;
        let channel = connection
            .create_channel()
            .await
            .map_err(amqp_error("opening a channel"))?;
        let exchange = exchange(settings, topic);
        channel
            .exchange_declare(
                &exchange,
                ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(amqp_error("declaring the topic's exchange"))?;
        if let Some(group) = group {
            let queue = queue(settings, topic, group);
            channel
                .queue_declare(
                    &queue,
                    QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(amqp_error("declaring the group's queue"))?;
            channel
                .queue_bind(
                    &queue,
                    &exchange,
                    "",
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(amqp_error("binding the group's queue"))?;
        }
        let _ = connection.close(200, "declared").await;
        Ok(())
    }

    /// The server's version, from its AMQP greeting.
    pub async fn version(settings: &RabbitSettings) -> Result<String> {
        let version = pubsub_components::rabbitmq::server_version(&settings.host)
            .await
            .ok_or_else(|| PubSubError::Broker {
                context: "reading the RabbitMQ version".into(),
                message: format!("no RabbitMQ greeting from {}", settings.host),
            })?;
        Ok(format!("RabbitMQ {version} at {}", settings.host))
    }
}

/// In memory: one omniqueue channel per topic (its producer and its only consumer).
pub mod memory {
    use super::*;

    /// A new channel for a topic.
    pub async fn pair() -> Result<(Sender, DynConsumer)> {
        let (producer, consumer) = InMemoryBackend::builder()
            .build_pair()
            .await
            .map_err(broker_error("building an omniqueue in-memory queue"))?;
        Ok((Sender::Memory(producer), consumer.into_dyn()))
    }
}
