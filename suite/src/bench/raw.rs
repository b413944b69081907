//! The brokers' own client libraries doing the publishing work a component does, so
//! that a run compares the component with the raw client side by side (each behind
//! its broker's cargo feature).

// Built without any broker's feature, only the dispatcher's fallback is left.
#![cfg_attr(
    not(any(
        feature = "redis",
        feature = "nats",
        feature = "postgres",
        feature = "rabbitmq",
        feature = "mqtt",
        feature = "kafka"
    )),
    allow(dead_code, unused_imports, unused_variables)
)]

use super::{run_id, BenchOptions};
use crate::history::KEY;
use futures::future::LocalBoxFuture;
use pubsub_components::runtime::{PublishRequest, Runtime};
use pubsub_components::OutgoingMessage;
use std::time::{Duration, Instant};

/// What runs after each of the raw client's batches, on the same message ids and
/// outside the raw client's time: the component's own paths, so that the component
/// and the raw client meet the broker in the same state, batch by batch.
pub(super) type Beside<'a> = dyn FnMut(Vec<usize>) -> LocalBoxFuture<'a, anyhow::Result<()>> + 'a;

/// Nothing beside the raw client.
pub(super) fn nothing_beside<'a>(
) -> impl FnMut(Vec<usize>) -> LocalBoxFuture<'a, anyhow::Result<()>> {
    |_| Box::pin(async { Ok(()) })
}

/// The metadata a raw client sends with message `i`: what the component sends for a
/// rawPayload message (the bench's key and a fresh trace context), as JSON.
fn metadata_json(i: usize) -> String {
    let mut metadata = pubsub_components::Metadata::new();
    metadata.insert(KEY.to_string(), i.to_string());
    metadata.insert(
        pubsub_components::runtime::controls::HEADER_TRACEPARENT.to_string(),
        pubsub_components::runtime::trace::new_traceparent(),
    );
    serde_json::to_string(&metadata).unwrap_or_default()
}

/// What a raw client's messages carry.
#[derive(Clone, Copy)]
pub(super) enum Shape<'a> {
    /// The app's payload, with the bench key and a fresh trace context as metadata
    /// (built inside the raw client's time, as an app builds it): what the component
    /// sends for a rawPayload message.
    Plain,
    /// Exactly what the component sends for an enveloped message of `topic` (the
    /// runtime's CloudEvent, its content type and its wire metadata), built before the
    /// raw client's time starts: what the broker costs for the envelope's bytes alone,
    /// without the component's work.
    Enveloped {
        runtime: &'a Runtime,
        topic: &'a str,
    },
}

/// What a raw measurement of [`Shape::Enveloped`] adds to the raw client's label.
pub(super) const ENVELOPED_LABEL: &str = ", the component's enveloped bytes";

impl Shape<'_> {
    /// The messages `ids` of this shape, with `payload` as the app's data.
    fn prepare<'p>(&self, ids: &[usize], payload: &'p [u8]) -> anyhow::Result<Prepared<'p>> {
        let enveloped = match self {
            Shape::Plain => None,
            Shape::Enveloped { runtime, topic } => Some(
                ids.iter()
                    .map(|i| {
                        let request = PublishRequest::new(*topic, payload)
                            .with_content_type("application/octet-stream")
                            .with_metadata(KEY, i.to_string());
                        runtime.wire_message(request)
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        Ok(Prepared { payload, enveloped })
    }
}

/// One batch of a shape's messages, ready for a raw client.
struct Prepared<'p> {
    /// The app's payload ([`Shape::Plain`]).
    payload: &'p [u8],
    /// The component's messages ([`Shape::Enveloped`]).
    enveloped: Option<Vec<OutgoingMessage>>,
}

/// One message as a raw client sends it.
struct RawMessage<'a> {
    payload: &'a [u8],
    content_type: Option<&'a str>,
    /// The metadata as JSON.
    metadata: String,
}

impl Prepared<'_> {
    /// The batch's messages, whose bench ids are `ids`; their metadata is written as
    /// JSON here, inside the raw client's time.
    fn messages(&self, ids: &[usize]) -> Vec<RawMessage<'_>> {
        match &self.enveloped {
            Some(messages) => messages
                .iter()
                .map(|message| RawMessage {
                    payload: &message.payload,
                    content_type: message.content_type.as_deref(),
                    metadata: serde_json::to_string(&message.metadata).unwrap_or_default(),
                })
                .collect(),
            None => ids
                .iter()
                .map(|id| RawMessage {
                    payload: self.payload,
                    content_type: None,
                    metadata: metadata_json(*id),
                })
                .collect(),
        }
    }
}

/// The same publishing work done with the broker's client library directly, for each
/// of `shapes` in turn batch by batch: the measurement's label and the raw client's
/// time per shape (its batches only, not `beside`'s), or `None` for types without a
/// raw client here.
pub(super) async fn raw_publish(
    component_type: &str,
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<Option<(String, Vec<Duration>)>> {
    Ok(match component_type {
        #[cfg(feature = "redis")]
        "redis-streams" => Some(redis(endpoint, batch, options, shapes, beside).await?),
        #[cfg(feature = "nats")]
        "nats-jetstream" => Some(nats(endpoint, batch, options, shapes, beside).await?),
        #[cfg(feature = "postgres")]
        "postgres" => Some(postgres(endpoint, batch, options, shapes, beside).await?),
        #[cfg(feature = "rabbitmq")]
        "rabbitmq" => Some(rabbitmq(endpoint, batch, options, shapes, beside).await?),
        #[cfg(feature = "mqtt")]
        "mqtt5" => Some(mqtt(endpoint, batch, options, shapes, beside).await?),
        #[cfg(feature = "kafka")]
        "kafka" => Some(kafka(endpoint, batch, options, shapes, beside).await?),
        _ => None,
    })
}

/// The message ids of a measurement, in batches.
fn batches(options: &BenchOptions, batch: usize) -> Vec<Vec<usize>> {
    (0..options.messages)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(<[usize]>::to_vec)
        .collect()
}

/// Redis: pipelined XADDs, the same work without the component.
#[cfg(feature = "redis")]
async fn redis(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    let client = redis::Client::open(format!("redis://{endpoint}/"))?;
    // The client's default 500 ms response timeout failed a whole bench once, when
    // an append-only-file write held a pipeline up on a loaded machine; the component
    // waits as long as the broker needs, and so does its baseline (bounded by the
    // bench's receive timeout).
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(options.receive_timeout));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let key = format!("pcs-bench-raw-{}", run_id());
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let mut pipe = redis::pipe();
            for message in prepared.messages(&chunk) {
                let xadd = pipe
                    .cmd("XADD")
                    .arg(&key)
                    .arg("*")
                    .arg("payload")
                    .arg(message.payload);
                if let Some(content_type) = message.content_type {
                    xadd.arg("ct").arg(content_type);
                }
                xadd.arg("md").arg(message.metadata);
            }
            let _: Vec<String> = pipe.query_async(&mut conn).await?;
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    let label = if batch == 1 {
        "raw client: XADD one at a time".to_string()
    } else {
        format!("raw client: pipelined XADD x{batch}")
    };
    Ok((label, elapsed))
}

/// NATS JetStream: async publishes, then their acks, the same work without the component.
#[cfg(feature = "nats")]
async fn nats(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    let client = async_nats::connect(endpoint).await?;
    let context = async_nats::jetstream::new(client);
    let stream = format!("PCS_BENCH_RAW_{}", run_id());
    context
        .create_stream(async_nats::jetstream::stream::Config {
            name: stream.clone(),
            subjects: vec![format!("{stream}.>")],
            ..Default::default()
        })
        .await?;
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let mut acks = Vec::with_capacity(chunk.len());
            for message in prepared.messages(&chunk) {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Pcs-Metadata", message.metadata.as_str());
                if let Some(content_type) = message.content_type {
                    headers.insert("Content-Type", content_type);
                }
                acks.push(
                    context
                        .publish_with_headers(
                            format!("{stream}.raw"),
                            headers,
                            bytes::Bytes::copy_from_slice(message.payload),
                        )
                        .await?,
                );
            }
            for ack in acks {
                ack.await?;
            }
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    context.delete_stream(&stream).await?;
    let label = if batch == 1 {
        "raw client: publish, await ack, one at a time".to_string()
    } else {
        format!("raw client: {batch} async publishes, then their acks")
    };
    Ok((label, elapsed))
}

/// PostgreSQL: multi-row INSERTs into a queue-shaped table, the same work without the component.
#[cfg(feature = "postgres")]
async fn postgres(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "5432"));
    let (client, connection) = tokio_postgres::connect(
        &format!("host={host} port={port} user=postgres dbname=test"),
        tokio_postgres::NoTls,
    )
    .await?;
    tokio::spawn(connection);
    let table = format!("pcs_bench_raw_{}", run_id());
    // The shape of a queue table readers can use: the topic index, a wake-up
    // notification per insert statement.
    client
        .batch_execute(&format!("CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, topic TEXT, payload BYTEA, content_type TEXT, metadata TEXT);
                                 CREATE INDEX ON {table} (topic, id)"))
        .await?;
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let messages = prepared.messages(&chunk);
            let topics: Vec<&str> = chunk.iter().map(|_| "raw").collect();
            let payloads: Vec<&[u8]> = messages.iter().map(|m| m.payload).collect();
            let content_types: Vec<Option<&str>> =
                messages.iter().map(|m| m.content_type).collect();
            let metadata: Vec<&str> = messages.iter().map(|m| m.metadata.as_str()).collect();
            client
                .query(
                    &format!("WITH inserted AS (INSERT INTO {table} (topic, payload, content_type, metadata) SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::text[], $4::text[]) RETURNING id),
                              woken AS (SELECT pg_notify('{table}', ''))
                              SELECT id FROM inserted, woken ORDER BY id"),
                    &[&topics, &payloads, &content_types, &metadata],
                )
                .await?;
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    client.batch_execute(&format!("DROP TABLE {table}")).await?;
    let label = if batch == 1 {
        "raw client: INSERT one at a time".to_string()
    } else {
        format!("raw client: multi-row INSERT x{batch}")
    };
    Ok((label, elapsed))
}

/// RabbitMQ: confirmed publishes, the same work without the component.
#[cfg(feature = "rabbitmq")]
async fn rabbitmq(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    let connection = lapin::Connection::connect(
        &format!("amqp://guest:guest@{endpoint}/%2f"),
        lapin::ConnectionProperties::default(),
    )
    .await?;
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(lapin::options::ConfirmSelectOptions::default())
        .await?;
    let exchange = format!("pcs-bench-raw-{}", run_id());
    channel
        .exchange_declare(
            exchange.as_str().into(),
            lapin::ExchangeKind::Topic,
            lapin::options::ExchangeDeclareOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await?;
    // The component's routing key for a topic of the same length: one word per
    // character (what makes glob patterns AMQP binding patterns).
    let spelled_key = format!("bench-{}-raw-{batch}", run_id())
        .chars()
        .map(String::from)
        .collect::<Vec<_>>()
        .join(".");
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let messages = prepared.messages(&chunk);
            let sends = chunk.iter().zip(&messages).map(|(i, message)| {
                let mut headers = lapin::types::FieldTable::default();
                headers.insert(
                    "md".into(),
                    lapin::types::AMQPValue::LongString(message.metadata.as_str().into()),
                );
                headers.insert(
                    "topic".into(),
                    lapin::types::AMQPValue::LongString(spelled_key.as_str().into()),
                );
                headers.insert(
                    "published-ms".into(),
                    lapin::types::AMQPValue::LongLongInt(*i as i64),
                );
                let mut properties = lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_message_id(i.to_string().into())
                    .with_headers(headers);
                if let Some(content_type) = message.content_type {
                    properties = properties.with_content_type(content_type.into());
                }
                channel.basic_publish(
                    exchange.as_str().into(),
                    spelled_key.as_str().into(),
                    lapin::options::BasicPublishOptions::default(),
                    message.payload,
                    properties,
                )
            });
            let confirms = futures::future::try_join_all(sends).await?;
            futures::future::try_join_all(confirms).await?;
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    channel
        .exchange_delete(
            exchange.as_str().into(),
            lapin::options::ExchangeDeleteOptions::default(),
        )
        .await?;
    // Closed before returning, so its teardown does not slow the next measurement.
    connection.close(200, "bench done".into()).await?;
    let label = if batch == 1 {
        "raw client: publish, await confirm, one at a time".to_string()
    } else {
        format!("raw client: {batch} publishes, then their confirms")
    };
    Ok((label, elapsed))
}

/// MQTT 5: QoS 1 publishes, then their PUBACKs, the same work without the component.
#[cfg(feature = "mqtt")]
async fn mqtt(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "1883"));
    let mut mqtt_options =
        MqttOptions::new(format!("pcs-bench-raw-{}", run_id()), host, port.parse()?);
    mqtt_options.set_outgoing_inflight_upper_limit(1000);
    let mut network = rumqttc::NetworkOptions::new();
    network.set_tcp_nodelay(true);
    mqtt_options.set_network_options(network);
    let (client, mut events) = AsyncClient::new(mqtt_options, 1024);
    let (acked, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let poller = tokio::spawn(async move {
        while let Ok(event) = events.poll().await {
            if let Event::Incoming(Packet::PubAck(_)) = event {
                let _ = acked.send(());
            }
        }
    });
    let topic = format!("pcs/bench-raw-{}", run_id());
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            for message in prepared.messages(&chunk) {
                let properties = PublishProperties {
                    user_properties: vec![("md".into(), message.metadata)],
                    content_type: message.content_type.map(str::to_string),
                    ..Default::default()
                };
                client
                    .publish_with_properties(
                        topic.as_str(),
                        QoS::AtLeastOnce,
                        false,
                        message.payload.to_vec(),
                        properties,
                    )
                    .await?;
            }
            for _ in &chunk {
                acks.recv()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the MQTT connection closed"))?;
            }
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    poller.abort();
    let label = if batch == 1 {
        "raw client: QoS 1 publish, await PUBACK, one at a time".to_string()
    } else {
        format!("raw client: {batch} QoS 1 publishes, then their PUBACKs")
    };
    Ok((label, elapsed))
}

/// Kafka: records handed to librdkafka's producer (configured as the component's:
/// acks all, linger 1 ms), then their delivery reports awaited; the same work without
/// the component.
#[cfg(feature = "kafka")]
async fn kafka(
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::ClientConfig;

    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", endpoint)
        .set("log_level", "2");
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let topic = format!("pcs-bench-raw-{}", run_id());
    for result in admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await?
    {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
    }
    let producer: FutureProducer = config
        .clone()
        .set("acks", "all")
        .set("linger.ms", "1")
        .create()?;
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(options, batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let mut reports = Vec::with_capacity(chunk.len());
            for message in prepared.messages(&chunk) {
                let mut headers = OwnedHeaders::new().insert(Header {
                    key: "pcs-md",
                    value: Some(message.metadata.as_bytes()),
                });
                if let Some(content_type) = message.content_type {
                    headers = headers.insert(Header {
                        key: "pcs-ct",
                        value: Some(content_type.as_bytes()),
                    });
                }
                let record = FutureRecord::<str, [u8]>::to(&topic)
                    .payload(message.payload)
                    .headers(headers);
                reports.push(
                    producer
                        .send_result(record)
                        .map_err(|(e, _)| anyhow::anyhow!("queueing a record: {e}"))?,
                );
            }
            for report in reports {
                report
                    .await?
                    .map_err(|(e, _)| anyhow::anyhow!("producing a record: {e}"))?;
            }
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    admin
        .delete_topics(&[topic.as_str()], &AdminOptions::new())
        .await?;
    let label = if batch == 1 {
        "raw client: produce, await the delivery report, one at a time".to_string()
    } else {
        format!("raw client: {batch} records produced, then their delivery reports")
    };
    Ok((label, elapsed))
}
