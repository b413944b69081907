//! `bench`: throughput and latency of a component through the runtime, with ratios
//! taken from the same run (bulk vs single, emulated vs native).

mod raw;

use crate::history::KEY;
use anyhow::Context as _;
use async_trait::async_trait;
use futures::future::LocalBoxFuture;
use hdrhistogram::Histogram;
use pubsub_components::runtime::{
    Batch, BulkHandler, BulkPublishEntry, BulkPublishRequest, BulkSubscribeOptions, EntryStatus,
    Event, Handler, MessageHandler, PublishRequest, Runtime, RuntimeOptions, Status, Subscription,
};
use pubsub_components::{
    Component, Consumer, ConsumerSpec, Feature, MessageId, Metadata, Support, TopicSelector,
};
use pubsub_reports::{BenchReport, LatencySummary, Measurement};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// What a bench run measures with.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Messages per measurement.
    pub messages: usize,
    /// Payload bytes per message.
    pub payload_bytes: usize,
    /// Bound on waiting for a subscriber to receive everything.
    pub receive_timeout: Duration,
    /// Runs of each publish measurement; the median time is reported, with the spread.
    pub repeats: usize,
    /// The shortest a publish measurement's run may last: `messages` is scaled up (to
    /// at most `max_messages`) until a run takes this long, so that no ratio rests on
    /// a few milliseconds of a shared machine.
    pub min_seconds: f64,
    /// The most messages a time-sized run publishes.
    pub max_messages: usize,
    /// Messages in the topic each consume measurement drains.
    pub consume_messages: usize,
    /// Groups per consume measurement (single and bulk), each draining the topic once:
    /// the median and the spread are over them.
    pub consume_repeats: usize,
    /// Also publish through `serve` over Dapr's HTTP API, in turn with the
    /// in-process runtime on the same messages (`--through-serve`).
    pub through_serve: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            messages: 2000,
            payload_bytes: 256,
            receive_timeout: Duration::from_secs(60),
            repeats: 5,
            min_seconds: 1.0,
            max_messages: 500_000,
            consume_messages: 20_000,
            consume_repeats: 3,
            through_serve: false,
        }
    }
}

/// The runs of one time-sized measurement.
#[derive(Debug, Clone)]
struct Timed {
    /// Messages per run.
    messages: usize,
    /// Each run's time.
    times: Vec<Duration>,
}

impl Timed {
    fn median(&self) -> Duration {
        let mut times = self.times.clone();
        times.sort();
        times[times.len() / 2]
    }
}

/// How many messages make a run last `options.min_seconds`, from a probe run of
/// `options.messages` that took `probe`: a multiple of 100, at least `messages`, at
/// most `max_messages`.
fn sized_messages(options: &BenchOptions, probe: Duration) -> usize {
    let probe = probe.as_secs_f64().max(1e-6);
    if probe >= options.min_seconds {
        return options.messages;
    }
    // 10% over, so that a run a little faster than the probe still lasts long enough.
    let scaled = (options.messages as f64 * options.min_seconds / probe * 1.1).ceil() as usize;
    scaled
        .min(options.max_messages)
        .max(options.messages)
        .div_ceil(100)
        * 100
}

/// How many times a run may be sized again because it ended too soon.
const MAX_RESIZES: usize = 3;

/// The count to run again with when a run of `messages` that took `elapsed` ended
/// well before `options.min_seconds` (the probe it was sized from ran slow, as a
/// first run on a cold connection does), or `None` when the run counts as it is.
fn resized(options: &BenchOptions, messages: usize, elapsed: Duration) -> Option<usize> {
    let short = elapsed.as_secs_f64() < options.min_seconds * 0.8;
    let again = sized_messages(
        &BenchOptions {
            messages,
            ..options.clone()
        },
        elapsed,
    );
    (short && again > messages).then_some(again)
}

/// Awaits a measurement on `topics`, then lets the component free them (an
/// in-process broker holds every message in this process: a bench of many
/// time-sized runs would hold millions).
async fn discarding<T>(
    runtime: &Runtime,
    topics: &[&str],
    measuring: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let measured = measuring.await;
    let mut discarded = Ok(());
    for topic in topics {
        let result = runtime.component().discard_topic(topic).await;
        if discarded.is_ok() {
            discarded = result.with_context(|| format!("discarding the bench topic '{topic}'"));
        }
    }
    // A failed measurement's error goes first: it says more than a failed cleanup.
    let measured = measured?;
    discarded.map(|()| measured)
}

/// Runs rounds of measurements that share one message count, starting from
/// `messages`: each round runs every path once (`measure` returns their times, in
/// order, each on fresh names) until there are `options.repeats` rounds. When the
/// fastest path of a round ends well short of the minimum, the count is sized again
/// from it and the rounds start over, so every run of a path has the same count.
/// Returns the count and each path's times.
async fn timed_rounds<F, Fut>(
    options: &BenchOptions,
    mut messages: usize,
    mut measure: F,
) -> anyhow::Result<(usize, Vec<Vec<Duration>>)>
where
    F: FnMut(String, BenchOptions) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<Duration>>>,
{
    let mut paths: Vec<Vec<Duration>> = Vec::new();
    let (mut rounds, mut run, mut resizes) = (0, 0, 0);
    while rounds < options.repeats.max(1) {
        let sized = BenchOptions {
            messages,
            ..options.clone()
        };
        let times = measure(run.to_string(), sized).await?;
        run += 1;
        let fastest = times.iter().min().copied().unwrap_or_default();
        match resized(options, messages, fastest) {
            Some(again) if resizes < MAX_RESIZES => {
                messages = again;
                resizes += 1;
                rounds = 0;
                paths.clear();
            }
            _ => {
                paths.resize_with(times.len(), Vec::new);
                for (path, time) in paths.iter_mut().zip(times) {
                    path.push(time);
                }
                rounds += 1;
            }
        }
    }
    Ok((messages, paths))
}

/// Runs a measurement sized by time: a probe run of `options.messages` (not kept)
/// sets how many messages make a run last `options.min_seconds`, then
/// `options.repeats` runs of that many, each on fresh names, so one disturbed run
/// does not decide a ratio. A run that ends well short of the minimum sizes the
/// measurement again from itself, and the runs start over (every run of a
/// measurement has the same count).
async fn timed<F, Fut>(options: &BenchOptions, mut measure: F) -> anyhow::Result<Timed>
where
    F: FnMut(String, BenchOptions) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    let probe = measure("probe".into(), options.clone()).await?;
    let (messages, mut paths) =
        timed_rounds(options, sized_messages(options, probe), |run, sized| {
            let one = measure(run, sized);
            async move { Ok(vec![one.await?]) }
        })
        .await?;
    Ok(Timed {
        messages,
        times: paths.pop().unwrap_or_default(),
    })
}

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// A measurement from time-sized runs: the median's rate, each run's rate, and the
/// ratio to `baseline`'s.
fn measurement(label: &str, timed: &Timed, baseline: Option<&Measurement>) -> Measurement {
    let rate_of = |elapsed: Duration| timed.messages as f64 / elapsed.as_secs_f64().max(1e-9);
    let median = timed.median();
    let rate = rate_of(median);
    Measurement {
        label: label.to_string(),
        messages: timed.messages as u64,
        seconds: median.as_secs_f64(),
        rate,
        ratio: baseline.map(|b| rate / b.rate),
        baseline: baseline.map(|b| b.label.clone()),
        runs: timed.times.iter().map(|t| rate_of(*t)).collect(),
    }
}

/// The topic sizes the consume side is measured on: PostgreSQL keeps topics in a
/// table, so a second topic ten times larger shows whether a read costs more as the
/// topic grows.
fn consume_sizes(kind: &str, options: &BenchOptions) -> Vec<usize> {
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
async fn consume_measurements(
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

async fn publish_single(
    runtime: &Runtime,
    topic: &str,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let payload = vec![b'x'; options.payload_bytes];
    let mut elapsed = Duration::ZERO;
    for i in 0..options.messages {
        let request = PublishRequest::new(topic, payload.clone())
            .with_content_type("application/octet-stream")
            .with_metadata(KEY, i.to_string());
        let started = Instant::now();
        runtime.publish(request).await?;
        elapsed += started.elapsed();
    }
    Ok(elapsed)
}

async fn publish_bulk(
    runtime: &Runtime,
    topic: &str,
    batch: usize,
    raw_payload: bool,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let times = publish_in_turn(&[(runtime, topic, raw_payload)], batch, options).await?;
    Ok(times[0])
}

/// A bulk path of the component: the runtime it goes through, its topic, and whether
/// its entries are sent rawPayload.
type BulkPath<'a> = (&'a Runtime, &'a str, bool);

/// Bulk publishes of `options.messages` through each path, batch by batch in turn on
/// the same messages: each path's time.
async fn publish_in_turn(
    paths: &[BulkPath<'_>],
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Duration>> {
    let payload = vec![b'x'; options.payload_bytes];
    let ids: Vec<usize> = (0..options.messages).collect();
    let times = vec![Cell::new(Duration::ZERO); paths.len()];
    for chunk in ids.chunks(batch) {
        publish_batch_in_turn(paths, chunk, &payload, &times).await?;
    }
    Ok(times.into_iter().map(Cell::into_inner).collect())
}

/// Publishing through `serve` (over Dapr's HTTP API, in this process) against the
/// in-process runtime on the same component: single publishes and bulk x100, each
/// message through both paths in turn, so that both meet the same machine and broker.
/// The serve path's ratio is its rate over the in-process one's.
#[cfg(feature = "sidecar")]
async fn bench_through_serve(
    name: &str,
    runtime: &Runtime,
    component: Arc<dyn Component>,
    prefix: &str,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Measurement>> {
    let kind = component.kind().to_string();
    let (served, target) = crate::through_serve::runtime(name, &kind, component, None)
        .await
        .context("starting serve for the bench")?;
    let mut measurements = Vec::new();
    for batch in [1, 100] {
        let what = if batch == 1 {
            "single publish".to_string()
        } else {
            format!("bulk publish x{batch}")
        };
        let probe_topic = format!("{prefix}-serve-{batch}-probe");
        let probe_path = [(&served, probe_topic.as_str(), false)];
        let probing = publish_paths_in_turn(&probe_path, batch, options);
        let probe = discarding(runtime, &[&probe_topic], probing).await?[0];
        let (messages, mut paths) =
            timed_rounds(options, sized_messages(options, probe), |run, sized| {
                let (runtime, served, prefix) = (runtime, &served, prefix);
                async move {
                    let in_process = format!("{prefix}-in-process-{batch}-{run}");
                    let through = format!("{prefix}-serve-{batch}-{run}");
                    let paths = [
                        (runtime, in_process.as_str(), false),
                        (served, through.as_str(), false),
                    ];
                    let publishing = publish_paths_in_turn(&paths, batch, &sized);
                    discarding(runtime, &[&in_process, &through], publishing).await
                }
            })
            .await?;
        let mut path = |i: usize| Timed {
            messages,
            times: paths.get_mut(i).map(std::mem::take).unwrap_or_default(),
        };
        let in_process = measurement(
            &format!("{what}, in process, in turn with serve"),
            &path(0),
            None,
        );
        let through = measurement(
            &format!("{what} through serve (HTTP)"),
            &path(1),
            Some(&in_process),
        );
        measurements.push(in_process);
        measurements.push(through);
    }
    target.stop().await;
    Ok(measurements)
}

/// Publishes the messages through each path in turn: batches of `batch` as bulk
/// requests, or with `batch` 1 each message as a single publish.
#[cfg(feature = "sidecar")]
async fn publish_paths_in_turn(
    paths: &[BulkPath<'_>],
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Duration>> {
    if batch > 1 {
        return publish_in_turn(paths, batch, options).await;
    }
    let payload = vec![b'x'; options.payload_bytes];
    let mut times = vec![Duration::ZERO; paths.len()];
    for i in 0..options.messages {
        for ((runtime, topic, _), time) in paths.iter().zip(times.iter_mut()) {
            let request = PublishRequest::new(*topic, payload.clone())
                .with_content_type("application/octet-stream")
                .with_metadata(KEY, i.to_string());
            let started = Instant::now();
            runtime.publish(request).await?;
            *time += started.elapsed();
        }
    }
    Ok(times)
}

/// One batch of the messages `ids` through each path in turn, each call's time added
/// to its path's slot in `times`.
async fn publish_batch_in_turn(
    paths: &[BulkPath<'_>],
    ids: &[usize],
    payload: &[u8],
    times: &[Cell<Duration>],
) -> anyhow::Result<()> {
    for ((runtime, topic, raw_payload), time) in paths.iter().zip(times) {
        time.set(time.get() + publish_chunk(runtime, topic, ids, payload, *raw_payload).await?);
    }
    Ok(())
}

/// One bulk publish of the messages `ids`, and the time of its call.
async fn publish_chunk(
    runtime: &Runtime,
    topic: &str,
    ids: &[usize],
    payload: &[u8],
    raw_payload: bool,
) -> anyhow::Result<Duration> {
    let request = bulk_request(topic, ids, payload, raw_payload);
    let started = Instant::now();
    let response = runtime.bulk_publish(request).await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        response.failed_entries.is_empty(),
        "bulk publish failed entries: {:?}",
        response.failed_entries
    );
    Ok(elapsed)
}

/// The app's request for the messages `ids`, built just before its call (as an app
/// builds it) and outside the timer: the time is the runtime's and the broker's.
fn bulk_request(
    topic: &str,
    ids: &[usize],
    payload: &[u8],
    raw_payload: bool,
) -> BulkPublishRequest {
    BulkPublishRequest {
        topic: topic.to_string(),
        entries: ids
            .iter()
            .map(|i| BulkPublishEntry {
                entry_id: i.to_string(),
                event: payload.to_vec(),
                content_type: Some("application/octet-stream".into()),
                metadata: if raw_payload {
                    Metadata::from([
                        (KEY.to_string(), i.to_string()),
                        ("rawPayload".to_string(), "true".to_string()),
                    ])
                } else {
                    Metadata::from([(KEY.to_string(), i.to_string())])
                },
            })
            .collect(),
        metadata: Metadata::new(),
    }
}

/// Counts deliveries and records end-to-end latency.
struct Counter {
    received: AtomicU64,
    target: u64,
    done: Notify,
    latency: Mutex<Histogram<u64>>,
}

impl Counter {
    fn new(target: usize) -> Arc<Self> {
        Arc::new(Counter {
            received: AtomicU64::new(0),
            target: target as u64,
            done: Notify::new(),
            latency: Mutex::new(Histogram::new(3).expect("3 significant digits is valid")),
        })
    }

    /// Counts one delivered event (its latency recorded when it carries a send time)
    /// and wakes the waiter.
    fn count(&self, event: &Event) {
        self.record(event);
        self.done.notify_waiters();
    }

    /// Counts one delivered event without waking the waiter: a batch wakes it once.
    fn record(&self, event: &Event) {
        if let Some(sent) = event
            .metadata
            .get("bench-sent-us")
            .and_then(|v| v.parse::<u64>().ok())
        {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros() as u64;
            let _ = self
                .latency
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(now.saturating_sub(sent).max(1));
        }
        self.received.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits (bounded) until every expected message arrived.
    async fn wait(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_for(self.target, timeout).await
    }

    /// Waits (bounded) until `count` messages arrived.
    async fn wait_for(&self, count: u64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.received.load(Ordering::SeqCst) >= count {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                anyhow::bail!(
                    "received {} of {count} messages within {timeout:?}",
                    self.received.load(Ordering::SeqCst)
                );
            }
        }
    }
}

#[async_trait]
impl MessageHandler for Counter {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.count(&event);
        Ok(Status::Success)
    }
}

#[async_trait]
impl BulkHandler for Counter {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String> {
        let statuses = batch
            .entries
            .into_iter()
            .map(|entry| {
                self.record(&entry.event);
                EntryStatus {
                    entry_id: entry.entry_id,
                    status: Status::Success,
                }
            })
            .collect();
        self.done.notify_waiters();
        Ok(statuses)
    }
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

async fn latency(runtime: &Runtime, options: &BenchOptions) -> anyhow::Result<LatencySummary> {
    let topic = format!("bench-{}-latency", run_id());
    let samples = options.messages.min(1000);
    // One warm-up message first, not sampled: the samples measure a subscriber that
    // is receiving, not how long a group takes to join (a Kafka rebalance).
    let counter = Counter::new(samples + 1);
    let handle = runtime
        .subscribe(
            Subscription::new(&topic, format!("bench-{}", run_id())),
            Handler::Single(counter.clone()),
        )
        .await?;
    let payload = vec![b'x'; options.payload_bytes];
    runtime
        .publish(PublishRequest::new(&topic, payload.clone()).with_metadata(KEY, "warm-up"))
        .await?;
    if let Err(e) = counter.wait_for(1, options.receive_timeout).await {
        handle.stop().await;
        return Err(e.context("waiting for the latency subscriber's warm-up message"));
    }
    for i in 0..samples {
        let sent = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros();
        let request = PublishRequest::new(&topic, payload.clone())
            .with_metadata(KEY, i.to_string())
            .with_metadata("bench-sent-us", sent.to_string());
        runtime.publish(request).await?;
    }
    let result = counter.wait(options.receive_timeout).await;
    handle.stop().await;
    result?;
    let histogram = counter.latency.lock().unwrap_or_else(|p| p.into_inner());
    Ok(LatencySummary {
        samples: histogram.len(),
        p50_us: histogram.value_at_quantile(0.5),
        p99_us: histogram.value_at_quantile(0.99),
        max_us: histogram.max(),
    })
}

/// Benchmarks one component; every ratio compares measurements of this run. With an
/// endpoint, the broker's raw client does the same publishing work for comparison.
pub async fn bench_component(
    name: &str,
    component: Arc<dyn Component>,
    endpoint: Option<&str>,
    options: &BenchOptions,
) -> anyhow::Result<BenchReport> {
    let runtime = Runtime::new(name, component.clone());
    let prefix = format!("bench-{}", run_id());
    let n = options.messages;
    let mut measurements = Vec::new();

    let single_runs = timed(options, |run, sized| {
        let topic = format!("{prefix}-single-{run}");
        let runtime = &runtime;
        async move {
            let publishing = publish_single(runtime, &topic, &sized);
            discarding(runtime, &[&topic], publishing).await
        }
    })
    .await?;
    let single = measurement("single publish", &single_runs, None);
    for batch in [1, 10, 100] {
        let runs = timed(options, |run, sized| {
            let topic = format!("{prefix}-bulk-{batch}-{run}");
            let runtime = &runtime;
            async move {
                let publishing = publish_bulk(runtime, &topic, batch, false, &sized);
                discarding(runtime, &[&topic], publishing).await
            }
        })
        .await?;
        measurements.push(measurement(
            &format!("bulk publish x{batch}"),
            &runs,
            Some(&single),
        ));
    }
    let native_bulk = runtime.mode(Feature::BulkPublish) == Support::Native;
    if native_bulk {
        // The native bulk path and the runtime's emulation of it run in turn, batch by
        // batch on the same messages, so that neither meets a quieter machine or an
        // emptier broker than the other.
        let emulated = Runtime::with_options(
            name,
            component.clone(),
            RuntimeOptions {
                force_emulation: true,
                ..RuntimeOptions::default()
            },
        );
        let probe_topic = format!("{prefix}-emulated-100-probe");
        let probing = publish_bulk(&emulated, &probe_topic, 100, false, options);
        let probe = discarding(&runtime, &[&probe_topic], probing).await?;
        let (messages, mut paths) =
            timed_rounds(options, sized_messages(options, probe), |run, sized| {
                let (runtime, emulated, prefix) = (&runtime, &emulated, &prefix);
                async move {
                    let native = format!("{prefix}-native-100-{run}");
                    let emulation = format!("{prefix}-emulated-100-{run}");
                    let paths = [
                        (runtime, native.as_str(), false),
                        (emulated, &emulation, false),
                    ];
                    let publishing = publish_in_turn(&paths, 100, &sized);
                    discarding(runtime, &[&native, &emulation], publishing).await
                }
            })
            .await?;
        let mut path = |i: usize| Timed {
            messages,
            times: paths.get_mut(i).map(std::mem::take).unwrap_or_default(),
        };
        let native = measurement(
            "bulk publish x100, in turn with the runtime emulation",
            &path(0),
            None,
        );
        let emulation = measurement(
            "bulk publish x100, runtime emulation",
            &path(1),
            Some(&native),
        );
        measurements.push(native);
        measurements.push(emulation);
    }
    #[cfg(feature = "sidecar")]
    if options.through_serve {
        measurements.extend(
            bench_through_serve(name, &runtime, component.clone(), &prefix, options).await?,
        );
    }
    let bulk_100 = measurements
        .iter()
        .find(|m| m.label == "bulk publish x100")
        .cloned();
    // The component's bulk paths (enveloped and rawPayload) and the raw client's x100
    // run in turn, batch by batch, on the same messages: each raw batch is followed by
    // the component's enveloped and rawPayload batches of the same ids, so all three
    // meet the broker in the same state (a shared machine's load drifts, a broker slows
    // as it fills). The count is sized so that the fastest of the three lasts the
    // minimum.
    let probe_topic = format!("{prefix}-raw-100-probe");
    let probing = publish_bulk(&runtime, &probe_topic, 100, true, options);
    let probe = discarding(&runtime, &[&probe_topic], probing).await?;
    // The enveloped path runs in turn only where a raw client is there to compare
    // with; the raw client's label comes with its runs.
    let raw_100_label = Mutex::new(None::<String>);
    let (messages, mut paths) =
        timed_rounds(options, sized_messages(options, probe), |run, sized| {
            let (runtime, prefix, raw_100_label) = (&runtime, &prefix, &raw_100_label);
            let kind = component.kind();
            async move {
                // After each raw batch: the enveloped batch, then the rawPayload one.
                let raw_payload_topic = format!("{prefix}-raw-100-{run}");
                let enveloped_topic = format!("{prefix}-beside-raw-100-{run}");
                let rows = async {
                    let beside_paths = [
                        (runtime, enveloped_topic.as_str(), false),
                        (runtime, &raw_payload_topic, true),
                    ];
                    let payload = vec![b'x'; sized.payload_bytes];
                    let times = [Cell::new(Duration::ZERO), Cell::new(Duration::ZERO)];
                    let (paths, payload, times_ref) = (&beside_paths, &payload, &times);
                    let mut beside = move |ids: Vec<usize>| -> LocalBoxFuture<'_, _> {
                        Box::pin(async move {
                            publish_batch_in_turn(paths, &ids, payload, times_ref).await
                        })
                    };
                    // The raw client sends the app's bytes, then exactly the component's
                    // enveloped bytes: what the envelope's size costs the broker alone.
                    let shapes = [
                        raw::Shape::Plain,
                        raw::Shape::Enveloped {
                            runtime,
                            topic: &enveloped_topic,
                        },
                    ];
                    let raw = match endpoint {
                        Some(endpoint) => {
                            raw::raw_publish(kind, endpoint, 100, &sized, &shapes, &mut beside)
                                .await?
                        }
                        None => None,
                    };
                    match raw {
                        Some((label, raw_times)) => {
                            *raw_100_label.lock().unwrap_or_else(|p| p.into_inner()) = Some(label);
                            // In the order of the rows: rawPayload, enveloped, raw client,
                            // raw client with the enveloped bytes.
                            let [enveloped, raw_payload] = times.map(Cell::into_inner);
                            let mut row_times = vec![raw_payload, enveloped];
                            row_times.extend(raw_times);
                            Ok(row_times)
                        }
                        None => Ok(vec![
                            publish_bulk(runtime, &raw_payload_topic, 100, true, &sized).await?,
                        ]),
                    }
                };
                discarding(runtime, &[&raw_payload_topic, &enveloped_topic], rows).await
            }
        })
        .await?;
    let timed_path = |path: Vec<Duration>| Timed {
        messages,
        times: path,
    };
    let raw_100_runs = paths.get_mut(2).map(std::mem::take);
    let raw_100_enveloped_runs = paths.get_mut(3).map(std::mem::take);
    let enveloped_runs = paths.get_mut(1).map(std::mem::take);
    let raw_payload = measurement(
        "bulk publish x100, rawPayload (no envelope)",
        &timed_path(std::mem::take(&mut paths[0])),
        bulk_100.as_ref(),
    );
    measurements.push(raw_payload.clone());
    measurements.insert(0, single.clone());
    // How many times the raw client's time the component takes for the same work.
    let against_raw = |raw: &Measurement, component: &Measurement, label: &str| Measurement {
        ratio: Some(raw.rate / component.rate),
        baseline: Some(format!("{label} (component time / raw time)")),
        ..raw.clone()
    };
    let mut beside_raw = Vec::new();
    if let (Some(raw_runs), Some(enveloped_runs), Some(label)) = (
        raw_100_runs,
        enveloped_runs,
        raw_100_label
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    ) {
        let raw = measurement(&label, &timed_path(raw_runs), None);
        let enveloped = measurement(
            "bulk publish x100, in turn with the raw client",
            &timed_path(enveloped_runs),
            None,
        );
        // The envelope's cost against the raw client run beside it.
        beside_raw.push(Measurement {
            ratio: Some(raw.rate / enveloped.rate),
            baseline: Some(format!("{label} (component time / raw time)")),
            ..enveloped.clone()
        });
        beside_raw.push(against_raw(&raw, &raw_payload, &raw_payload.label));
        // The same bytes sent by the raw client: what is left of the component's cost
        // once the envelope's size is the broker's for both.
        if let Some(runs) = raw_100_enveloped_runs {
            let same_bytes = measurement(
                &format!("{label}{}", raw::ENVELOPED_LABEL),
                &timed_path(runs),
                None,
            );
            beside_raw.push(against_raw(&same_bytes, &enveloped, &enveloped.label));
        }
    }
    if let Some(endpoint) = endpoint {
        // The raw client one at a time, on as many messages as the component's single
        // publish took.
        let sized_1 = BenchOptions {
            messages: single.messages as usize,
            ..options.clone()
        };
        let mut raw_1_runs = Vec::new();
        for _ in 0..options.repeats.max(1) {
            raw_1_runs.extend(
                raw::raw_publish(
                    component.kind(),
                    endpoint,
                    1,
                    &sized_1,
                    &[raw::Shape::Plain],
                    &mut raw::nothing_beside(),
                )
                .await?
                .map(|(label, times)| (label, times.into_iter().sum::<Duration>())),
            );
        }
        if let Some((label, _)) = raw_1_runs.first().cloned() {
            let raw = measurement(
                &label,
                &Timed {
                    messages: sized_1.messages,
                    times: raw_1_runs.into_iter().map(|(_, elapsed)| elapsed).collect(),
                },
                None,
            );
            measurements.push(against_raw(&raw, &single, &single.label));
        }
    }
    measurements.extend(beside_raw);

    let sizes = consume_sizes(component.kind(), options);
    for (i, messages) in sizes.iter().enumerate() {
        let suffix = if i == 0 {
            String::new()
        } else {
            format!(", {messages}-message topic")
        };
        measurements
            .extend(consume_measurements(&runtime, &prefix, options, *messages, &suffix).await?);
    }

    let latency = latency(&runtime, options).await?;
    Ok(BenchReport {
        component: name.to_string(),
        settings: format!(
            "publish measurements sized to last at least {} s a run (the messages column; at least {n}), the median of {} runs with the spread over them; subscribe measurements drain a topic of {} messages once per group, the median of {} groups with the spread; {} byte payloads in the CloudEvents envelope, sequential publishers; a publish counts once the broker accepted it; raw clients send the same payload, metadata and trace context; handlers answer SUCCESS; bulk publish {}; latency: publish call to handler, {} messages, one at a time",
            options.min_seconds,
            options.repeats.max(1),
            sizes
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" and "),
            options.consume_repeats.max(1),
            options.payload_bytes,
            if native_bulk { "native" } else { "emulated by the runtime" },
            n.min(1000)
        ),
        measurements,
        latency: Some(latency),
    })
}

/// The bench results as a text table.
pub fn bench_table(report: &BenchReport) -> String {
    let mut out = format!("{}: {}\n", report.component, report.settings);
    out.push_str(&format!(
        "{:<44} {:>9} {:>8} {:>10} {:>19}  ratio\n",
        "measurement", "messages", "seconds", "msg/s", "spread (min..max)"
    ));
    for m in &report.measurements {
        let ratio = m
            .ratio
            .map(|r| format!("{r:.2}x vs {}", m.baseline.as_deref().unwrap_or("?")))
            .unwrap_or_default();
        let spread = m
            .spread()
            .map(|(min, max)| format!("{min:.0}..{max:.0}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<44} {:>9} {:>8.3} {:>10.0} {spread:>19}  {ratio}\n",
            m.label, m.messages, m.seconds, m.rate
        ));
    }
    if let Some(l) = &report.latency {
        out.push_str(&format!(
            "end-to-end latency ({} samples): p50 {} µs, p99 {} µs, max {} µs\n",
            l.samples, l.p50_us, l.p99_us, l.max_us
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_sized_to_last_the_minimum_time() {
        let options = BenchOptions::default();
        // 2000 messages in 0.1 s: eleven times as many last a second, with 10% slack.
        assert_eq!(sized_messages(&options, Duration::from_millis(100)), 22_000);
        // Already long enough: the count stays.
        assert_eq!(sized_messages(&options, Duration::from_secs(2)), 2000);
        // A very fast path is capped.
        assert_eq!(
            sized_messages(&options, Duration::from_micros(10)),
            options.max_messages
        );
        // 0 s asks for no sizing.
        let no_sizing = BenchOptions {
            min_seconds: 0.0,
            ..BenchOptions::default()
        };
        assert_eq!(sized_messages(&no_sizing, Duration::from_millis(1)), 2000);
    }

    #[test]
    fn a_run_far_shorter_than_the_minimum_is_sized_again() {
        let options = BenchOptions::default();
        // 22000 messages sized from a slow probe took 0.4 s: sized again from that run
        // (2.75 times as many, 10% over, in hundreds).
        assert_eq!(
            resized(&options, 22_000, Duration::from_millis(400)),
            Some(60_600)
        );
        // 0.9 s is close enough to the minimum: kept.
        assert_eq!(resized(&options, 22_000, Duration::from_millis(900)), None);
        // At the cap nothing can grow: kept.
        assert_eq!(
            resized(&options, options.max_messages, Duration::from_millis(100)),
            None
        );
    }

    #[tokio::test]
    async fn a_measurement_whose_runs_end_too_soon_starts_over_on_a_larger_count() {
        let options = BenchOptions {
            repeats: 3,
            ..BenchOptions::default()
        };
        // A cold probe: 2000 messages in 0.2 s, as if the path ran at 10000 msg/s;
        // the path really runs at 50000 msg/s once warm.
        let seen = std::sync::Mutex::new(Vec::new());
        let timed = timed(&options, |run, sized| {
            seen.lock().unwrap().push((run.clone(), sized.messages));
            async move {
                let rate = if run == "probe" { 10_000.0 } else { 50_000.0 };
                Ok(Duration::from_secs_f64(sized.messages as f64 / rate))
            }
        })
        .await
        .unwrap();
        assert_eq!(timed.times.len(), 3);
        assert!(
            timed
                .times
                .iter()
                .all(|t| t.as_secs_f64() >= options.min_seconds),
            "{timed:?}; runs: {:?}",
            seen.lock().unwrap()
        );
    }

    #[test]
    fn a_measurement_keeps_the_median_and_every_run() {
        let timed = Timed {
            messages: 1000,
            times: vec![
                Duration::from_millis(500),
                Duration::from_millis(250),
                Duration::from_millis(1000),
            ],
        };
        let m = measurement("bulk publish x100", &timed, None);
        assert_eq!(m.seconds, 0.5);
        assert_eq!(m.rate, 2000.0);
        assert_eq!(m.spread(), Some((1000.0, 4000.0)));
    }
}
