//! The subscribe side: single and bulk subscriptions through the runtime, and the
//! component's own consumer without it, each draining one filled topic.

use super::counter::Counter;
use super::publish::publish_bulk;
use super::sizing::{measurement, Timed};
use super::{run_id, BenchOptions};
use pubsub_components::runtime::{BulkSubscribeOptions, Handler, Runtime, Subscription};
use pubsub_components::{Component, Consumer, ConsumerSpec, MessageId, TopicSelector};
use pubsub_reports::Measurement;
use std::time::{Duration, Instant};

/// The topic sizes the consume side is measured on: PostgreSQL keeps topics in a
/// table, so a second topic ten times larger shows whether a read costs more as the
/// topic grows.
pub(super) fn topic_sizes(kind: &str, options: &BenchOptions) -> Vec<usize> {
    let base = options.consume_messages.max(1);
    if kind == "postgres" {
        vec![base, base * 10]
    } else {
        vec![base]
    }
}

/// Single and bulk subscribe throughput on one topic of `messages` messages: its
/// groups exist before it is filled (queue and session brokers keep messages only for
/// groups that exist), and each drains it once, single and bulk groups alternately.
pub(super) async fn measurements(
    runtime: &Runtime,
    prefix: &str,
    options: &BenchOptions,
    messages: usize,
    label_suffix: &str,
) -> anyhow::Result<Vec<Measurement>> {
    let topic = format!("{prefix}-consume-{messages}");
    let repeats = options.consume_repeats.max(1);
    let own_group = || {
        ConsumerSpec::new(
            TopicSelector::Single(topic.clone()),
            format!("bench-{}", run_id()),
        )
    };
    let readers: Vec<Readers> = (0..repeats)
        .map(|_| Readers {
            single: bench_subscription(&topic, false),
            bulk: bench_subscription(&topic, true),
            own: own_group(),
            own_decoding: own_group(),
        })
        .collect();
    for readers in &readers {
        runtime.create_group(&readers.single).await?;
        runtime.create_group(&readers.bulk).await?;
        runtime.component().create_group(&readers.own).await?;
        runtime
            .component()
            .create_group(&readers.own_decoding)
            .await?;
    }
    let fill = BenchOptions {
        messages,
        // The bound on a drain grows with the topic.
        receive_timeout: options.receive_timeout * (messages / 20_000).max(1) as u32,
        ..options.clone()
    };
    publish_bulk(runtime, &topic, 100, false, &fill).await?;
    let (mut single_times, mut bulk_times) = (Vec::new(), Vec::new());
    let (mut own_times, mut own_decoding_times) = (Vec::new(), Vec::new());
    let component = runtime.component().as_ref();
    for readers in readers {
        single_times.push(consume(runtime, readers.single, &fill).await?);
        bulk_times.push(consume(runtime, readers.bulk, &fill).await?);
        own_times.push(drain_consumer(component, readers.own, &fill, false).await?);
        own_decoding_times
            .push(drain_consumer(component, readers.own_decoding, &fill, true).await?);
    }
    let timed = |times| Timed { messages, times };
    let single = measurement(
        &format!("single subscribe{label_suffix}"),
        &timed(single_times),
        None,
    );
    let bulk = measurement(
        &format!("bulk subscribe x100{label_suffix}"),
        &timed(bulk_times),
        Some(&single),
    );
    let own = measurement(
        &format!("component consumer x100, no runtime{label_suffix}"),
        &timed(own_times),
        Some(&single),
    );
    let own_decoding = measurement(
        &format!("component consumer x100, each message decoded to its event{label_suffix}"),
        &timed(own_decoding_times),
        Some(&single),
    );
    Ok(vec![single, bulk, own, own_decoding])
}

/// The groups that drain one consume topic once each.
struct Readers {
    single: Subscription,
    bulk: Subscription,
    /// The component's own consumer, without the runtime.
    own: ConsumerSpec,
    /// The component's own consumer, each message decoded to the event an app gets.
    own_decoding: ConsumerSpec,
}

/// How many messages [`drain_consumer`] asks for at once, as bulk subscribe x100 does.
const DRAIN_BATCH: usize = 100;

/// Times the component's own consumer (no runtime: no handler, no spans, and no
/// envelope decoding unless `decode`) draining `options.messages` messages of its
/// group in receives of [`DRAIN_BATCH`], each acknowledged together: what the broker
/// and the component can hand over at most, the ceiling of any subscription through
/// the runtime. With `decode`, each message is also decoded to the event an app gets,
/// the work every delivery does once per message whether single or bulk: the ceiling
/// of any subscription that hands events over.
async fn drain_consumer(
    component: &dyn Component,
    spec: ConsumerSpec,
    options: &BenchOptions,
    decode: bool,
) -> anyhow::Result<Duration> {
    let consumer = component.consumer(spec).await?;
    let started = Instant::now();
    let drained = drain(consumer.as_ref(), options, decode).await;
    let elapsed = started.elapsed();
    consumer.close().await?;
    drained.map(|()| elapsed)
}

/// Receives (decoding each message to its event when `decode`) and acknowledges, in
/// [`DRAIN_BATCH`]es, until `options.messages` came, within `options.receive_timeout`.
async fn drain(
    consumer: &dyn Consumer,
    options: &BenchOptions,
    decode: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut received = 0;
    while received < options.messages {
        let left = options.receive_timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            anyhow::bail!(
                "the component's consumer received {received} of {} messages within {:?}",
                options.messages,
                options.receive_timeout
            );
        }
        let batch = consumer
            .receive(DRAIN_BATCH, left.min(Duration::from_millis(100)))
            .await?;
        received += batch.len();
        if decode {
            for message in &batch {
                std::hint::black_box(pubsub_components::runtime::to_event(message)?);
            }
        }
        let ids: Vec<MessageId> = batch.into_iter().map(|m| m.id).collect();
        if !ids.is_empty() {
            consumer.ack_many(&ids).await?;
        }
    }
    Ok(())
}

/// A bench subscriber's subscription: its own group, bulk or not.
fn bench_subscription(topic: &str, bulk: bool) -> Subscription {
    let mut subscription = Subscription::new(topic, format!("bench-{}", run_id()));
    if bulk {
        subscription.bulk = Some(BulkSubscribeOptions {
            max_messages_count: 100,
            max_await_duration: Duration::from_millis(50),
        });
    }
    subscription
}

/// Times `subscription` (whose group exists) reading `options.messages` messages.
async fn consume(
    runtime: &Runtime,
    subscription: Subscription,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let counter = Counter::new(options.messages);
    let handler = if subscription.bulk.is_some() {
        Handler::Bulk(counter.clone())
    } else {
        Handler::Single(counter.clone())
    };
    let started = Instant::now();
    let handle = runtime.subscribe(subscription, handler).await?;
    let result = counter.wait(options.receive_timeout).await;
    let elapsed = started.elapsed();
    handle.stop().await;
    result.map(|_| elapsed)
}
