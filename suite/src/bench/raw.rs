//! The bench's raw comparison, generic over brokers: the broker's own client library
//! doing the publishing work a component does, batch by batch on the same messages,
//! so that a run compares the component with the raw client side by side. Each
//! broker's client ([`RawClient`]) is in its module under `crate::brokers`, behind its
//! broker's cargo feature; the comparison (`against_raw`) finds it through `crate::brokers::raw_client`.

// Built without any broker's feature, no raw client is there to drive.
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

use super::BenchOptions;
use crate::history::KEY;
use futures::future::LocalBoxFuture;
use pubsub_components::runtime::{PublishRequest, Runtime};
use pubsub_components::OutgoingMessage;
use std::time::{Duration, Instant};

/// What runs after each of the raw client's batches, on the same message ids and
/// outside the raw client's time: the component's own paths, so that the component
/// and the raw client meet the broker in the same state, batch by batch.
pub(crate) type Beside<'a> = dyn FnMut(Vec<usize>) -> LocalBoxFuture<'a, anyhow::Result<()>> + 'a;

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
pub(crate) enum Shape<'a> {
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
pub(crate) struct RawMessage<'a> {
    /// The payload: the app's, or the component's envelope.
    pub payload: &'a [u8],
    pub content_type: Option<&'a str>,
    /// The metadata as JSON.
    pub metadata: String,
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

/// What a raw measurement runs on: the broker's endpoint, the messages per batch, and
/// the bench's options (how many messages, how large).
pub(crate) struct RawRun<'a> {
    pub endpoint: &'a str,
    pub batch: usize,
    pub options: &'a BenchOptions,
}

/// One batch as a raw client publishes it: the messages and their bench ids.
pub(crate) struct RawBatch<'a> {
    // Every client but Redis's reads them.
    #[cfg_attr(
        not(any(
            feature = "nats",
            feature = "postgres",
            feature = "rabbitmq",
            feature = "mqtt",
            feature = "kafka"
        )),
        allow(dead_code)
    )]
    pub ids: &'a [usize],
    pub messages: Vec<RawMessage<'a>>,
}

/// How a raw client's row is labelled: one message at a time, and in batches (where
/// `{batch}` is the batch's size).
pub(crate) struct Labels {
    pub one: &'static str,
    pub batched: &'static str,
}

/// A broker's client library doing the component's publishing work.
pub(crate) trait RawClient: Sized {
    /// Its rows' labels.
    const LABELS: Labels;

    /// Connects, and creates what the messages go to (a stream, a table, a topic).
    async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self>;

    /// Publishes one batch, and waits until the broker has accepted all of it.
    async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()>;

    /// Deletes what [`RawClient::connect`] created, and disconnects.
    async fn finish(self) -> anyhow::Result<()>;
}

/// A broker's raw measurement ([`publish`] for its client), as the brokers' table holds it.
pub(crate) type RawPublish =
    for<'a, 'b, 'c> fn(
        RawRun<'a>,
        &'a [Shape<'b>],
        &'a mut Beside<'c>,
    ) -> LocalBoxFuture<'a, anyhow::Result<(String, Vec<Duration>)>>;

/// The raw measurement with client `C`: for each of `shapes` in turn, batch by batch,
/// its time (its batches only, not `beside`'s), with the row's label.
pub(crate) fn publish<'a, 'b, 'c, C: RawClient + 'static>(
    run: RawRun<'a>,
    shapes: &'a [Shape<'b>],
    beside: &'a mut Beside<'c>,
) -> LocalBoxFuture<'a, anyhow::Result<(String, Vec<Duration>)>> {
    Box::pin(measure::<C>(run, shapes, beside))
}

/// The raw measurement [`publish`] hands out: connect, each batch in each shape timed,
/// `beside` after each batch, then clean up.
async fn measure<C: RawClient>(
    run: RawRun<'_>,
    shapes: &[Shape<'_>],
    beside: &mut Beside<'_>,
) -> anyhow::Result<(String, Vec<Duration>)> {
    let mut client = C::connect(&run).await?;
    let payload = vec![b'x'; run.options.payload_bytes];
    let mut elapsed = vec![Duration::ZERO; shapes.len()];
    for chunk in batches(run.options, run.batch) {
        for (shape, time) in shapes.iter().zip(&mut elapsed) {
            let prepared = shape.prepare(&chunk, &payload)?;
            let started = Instant::now();
            let messages = prepared.messages(&chunk);
            client
                .publish(RawBatch {
                    ids: &chunk,
                    messages,
                })
                .await?;
            *time += started.elapsed();
        }
        beside(chunk).await?;
    }
    client.finish().await?;
    let label = match run.batch {
        1 => C::LABELS.one.to_string(),
        batch => C::LABELS.batched.replace("{batch}", &batch.to_string()),
    };
    Ok((format!("raw client: {label}"), elapsed))
}

/// The message ids of a measurement, in batches.
fn batches(options: &BenchOptions, batch: usize) -> Vec<Vec<usize>> {
    (0..options.messages)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(<[usize]>::to_vec)
        .collect()
}

/// A short id that keeps one run's topics, groups and tables apart from another's.
pub(crate) fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}
