//! `bench`: throughput and latency of a component through the runtime, with ratios
//! taken from the same run (bulk vs single, emulated vs native).

use crate::history::KEY;
use async_trait::async_trait;
use hdrhistogram::Histogram;
use pubsub_components::runtime::{
    Batch, BulkHandler, BulkPublishEntry, BulkPublishRequest, BulkSubscribeOptions, EntryStatus,
    Event, Handler, MessageHandler, PublishRequest, Runtime, RuntimeOptions, Status, Subscription,
};
use pubsub_components::{Component, Feature, Metadata, Support};
use pubsub_reports::{BenchReport, LatencySummary, Measurement};
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
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            messages: 2000,
            payload_bytes: 256,
            receive_timeout: Duration::from_secs(60),
        }
    }
}

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

fn measurement(
    label: &str,
    messages: usize,
    elapsed: Duration,
    baseline: Option<&Measurement>,
) -> Measurement {
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let rate = messages as f64 / seconds;
    Measurement {
        label: label.to_string(),
        messages: messages as u64,
        seconds,
        rate,
        ratio: baseline.map(|b| rate / b.rate),
        baseline: baseline.map(|b| b.label.clone()),
    }
}

async fn publish_single(
    runtime: &Runtime,
    topic: &str,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let payload = vec![b'x'; options.payload_bytes];
    let started = Instant::now();
    for i in 0..options.messages {
        let request = PublishRequest::new(topic, payload.clone())
            .with_content_type("application/octet-stream")
            .with_metadata(KEY, i.to_string());
        runtime.publish(request).await?;
    }
    Ok(started.elapsed())
}

async fn publish_bulk(
    runtime: &Runtime,
    topic: &str,
    batch: usize,
    raw_payload: bool,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let payload = vec![b'x'; options.payload_bytes];
    let requests: Vec<BulkPublishRequest> = (0..options.messages)
        .collect::<Vec<_>>()
        .chunks(batch)
        .map(|chunk| BulkPublishRequest {
            topic: topic.to_string(),
            entries: chunk
                .iter()
                .map(|i| BulkPublishEntry {
                    entry_id: i.to_string(),
                    event: payload.clone(),
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
        })
        .collect();
    let started = Instant::now();
    for request in requests {
        let response = runtime.bulk_publish(request).await?;
        anyhow::ensure!(
            response.failed_entries.is_empty(),
            "bulk publish failed entries: {:?}",
            response.failed_entries
        );
    }
    Ok(started.elapsed())
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

    fn count(&self, event: &Event) {
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
        if self.received.fetch_add(1, Ordering::SeqCst) + 1 >= self.target {
            self.done.notify_one();
        }
    }

    async fn wait(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.received.load(Ordering::SeqCst) < self.target {
            if tokio::time::timeout_at(deadline, self.done.notified())
                .await
                .is_err()
            {
                anyhow::bail!(
                    "received {} of {} messages within {timeout:?}",
                    self.received.load(Ordering::SeqCst),
                    self.target
                );
            }
        }
        Ok(())
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
        Ok(batch
            .entries
            .iter()
            .map(|entry| {
                self.count(&entry.event);
                EntryStatus {
                    entry_id: entry.entry_id.clone(),
                    status: Status::Success,
                }
            })
            .collect())
    }
}

async fn consume(
    runtime: &Runtime,
    topic: &str,
    bulk: bool,
    options: &BenchOptions,
) -> anyhow::Result<Duration> {
    let counter = Counter::new(options.messages);
    let mut subscription = Subscription::new(topic, format!("bench-{}", run_id()));
    let handler = if bulk {
        subscription.bulk = Some(BulkSubscribeOptions {
            max_messages_count: 100,
            max_await_duration: Duration::from_millis(50),
        });
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
    let counter = Counter::new(samples);
    let handle = runtime
        .subscribe(
            Subscription::new(&topic, format!("bench-{}", run_id())),
            Handler::Single(counter.clone()),
        )
        .await?;
    let payload = vec![b'x'; options.payload_bytes];
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

/// The same publishing work done with the broker's client library directly: the
/// measurement's label and elapsed time, or `None` for types without a raw client here.
async fn raw_publish(
    component_type: &str,
    endpoint: &str,
    batch: usize,
    options: &BenchOptions,
) -> anyhow::Result<Option<(String, Duration)>> {
    match component_type {
        "redis-streams" => {
            let client = redis::Client::open(format!("redis://{endpoint}/"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let key = format!("pcs-bench-raw-{}", run_id());
            let payload = vec![b'x'; options.payload_bytes];
            let started = Instant::now();
            for chunk in (0..options.messages).collect::<Vec<_>>().chunks(batch) {
                let mut pipe = redis::pipe();
                for i in chunk {
                    pipe.cmd("XADD")
                        .arg(&key)
                        .arg("*")
                        .arg("payload")
                        .arg(&payload)
                        .arg("md")
                        .arg(i.to_string());
                }
                let _: Vec<String> = pipe.query_async(&mut conn).await?;
            }
            let elapsed = started.elapsed();
            let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
            let label = if batch == 1 {
                "raw client: XADD one at a time".to_string()
            } else {
                format!("raw client: pipelined XADD x{batch}")
            };
            Ok(Some((label, elapsed)))
        }
        "nats-jetstream" => {
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
            let payload = bytes::Bytes::from(vec![b'x'; options.payload_bytes]);
            let started = Instant::now();
            for chunk in (0..options.messages).collect::<Vec<_>>().chunks(batch) {
                let mut acks = Vec::with_capacity(chunk.len());
                for _ in chunk {
                    acks.push(
                        context
                            .publish(format!("{stream}.raw"), payload.clone())
                            .await?,
                    );
                }
                for ack in acks {
                    ack.await?;
                }
            }
            let elapsed = started.elapsed();
            context.delete_stream(&stream).await?;
            let label = if batch == 1 {
                "raw client: publish, await ack, one at a time".to_string()
            } else {
                format!("raw client: {batch} async publishes, then their acks")
            };
            Ok(Some((label, elapsed)))
        }
        "postgres" => {
            let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "5432"));
            let (client, connection) = tokio_postgres::connect(
                &format!("host={host} port={port} user=postgres dbname=test"),
                tokio_postgres::NoTls,
            )
            .await?;
            tokio::spawn(connection);
            let table = format!("pcs_bench_raw_{}", run_id());
            client
                .batch_execute(&format!("CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, topic TEXT, payload BYTEA, metadata TEXT)"))
                .await?;
            let payload = vec![b'x'; options.payload_bytes];
            let started = Instant::now();
            for chunk in (0..options.messages).collect::<Vec<_>>().chunks(batch) {
                let topics: Vec<&str> = chunk.iter().map(|_| "raw").collect();
                let payloads: Vec<&[u8]> = chunk.iter().map(|_| payload.as_slice()).collect();
                let metadata: Vec<String> = chunk.iter().map(|i| i.to_string()).collect();
                client
                    .query(
                        &format!("INSERT INTO {table} (topic, payload, metadata) SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::text[]) RETURNING id"),
                        &[&topics, &payloads, &metadata],
                    )
                    .await?;
            }
            let elapsed = started.elapsed();
            client.batch_execute(&format!("DROP TABLE {table}")).await?;
            let label = if batch == 1 {
                "raw client: INSERT one at a time".to_string()
            } else {
                format!("raw client: multi-row INSERT x{batch}")
            };
            Ok(Some((label, elapsed)))
        }
        _ => Ok(None),
    }
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

    let single = measurement(
        "single publish",
        n,
        publish_single(&runtime, &format!("{prefix}-single"), options).await?,
        None,
    );
    for batch in [1, 10, 100] {
        let elapsed = publish_bulk(
            &runtime,
            &format!("{prefix}-bulk-{batch}"),
            batch,
            false,
            options,
        )
        .await?;
        measurements.push(measurement(
            &format!("bulk publish x{batch}"),
            n,
            elapsed,
            Some(&single),
        ));
    }
    let native_bulk = runtime.mode(Feature::BulkPublish) == Support::Native;
    if native_bulk {
        let emulated = Runtime::with_options(
            name,
            component.clone(),
            RuntimeOptions {
                force_emulation: true,
                ..RuntimeOptions::default()
            },
        );
        let elapsed = publish_bulk(
            &emulated,
            &format!("{prefix}-emulated-100"),
            100,
            false,
            options,
        )
        .await?;
        let native = measurements.last().cloned();
        measurements.push(measurement(
            "bulk publish x100, runtime emulation",
            n,
            elapsed,
            native.as_ref(),
        ));
    }
    let bulk_100 = measurements
        .iter()
        .find(|m| m.label == "bulk publish x100")
        .cloned();
    let raw_payload =
        publish_bulk(&runtime, &format!("{prefix}-raw-100"), 100, true, options).await?;
    measurements.push(measurement(
        "bulk publish x100, rawPayload (no envelope)",
        n,
        raw_payload,
        bulk_100.as_ref(),
    ));
    measurements.insert(0, single);
    if let Some(endpoint) = endpoint {
        let single = measurements[0].clone();
        let raw_100 = measurements.last().cloned().expect("measured above");
        for (batch, baseline) in [(1, single), (100, raw_100)] {
            if let Some((label, elapsed)) =
                raw_publish(component.kind(), endpoint, batch, options).await?
            {
                let raw = measurement(&label, n, elapsed, None);
                // How many times the raw client's time the component takes for the same work.
                measurements.push(Measurement {
                    ratio: Some(raw.rate / baseline.rate),
                    baseline: Some(format!("{} (component time / raw time)", baseline.label)),
                    ..raw
                });
            }
        }
    }

    // Both subscriptions read the x100 topic, which holds n messages.
    let topic = format!("{prefix}-bulk-100");
    let single_consume = measurement(
        "single subscribe",
        n,
        consume(&runtime, &topic, false, options).await?,
        None,
    );
    let bulk_consume = measurement(
        "bulk subscribe x100",
        n,
        consume(&runtime, &topic, true, options).await?,
        Some(&single_consume),
    );
    measurements.push(single_consume);
    measurements.push(bulk_consume);

    let latency = latency(&runtime, options).await?;
    Ok(BenchReport {
        component: name.to_string(),
        settings: format!(
            "{n} messages per measurement, {} byte payloads in the CloudEvents envelope, sequential publishers; a publish counts once the broker accepted it; handlers answer SUCCESS; bulk publish {}; latency: publish call to handler, {} messages, one at a time",
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
        "{:<40} {:>9} {:>10} {:>12}  ratio\n",
        "measurement", "messages", "seconds", "msg/s"
    ));
    for m in &report.measurements {
        let ratio = m
            .ratio
            .map(|r| format!("{r:.2}x vs {}", m.baseline.as_deref().unwrap_or("?")))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<40} {:>9} {:>10.3} {:>12.0}  {ratio}\n",
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
