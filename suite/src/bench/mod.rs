//! `bench`: throughput and latency of a component through the runtime, with ratios
//! taken from the same run (bulk vs single, emulated vs native, the component vs the
//! broker's raw client).

mod against_raw;
mod consume;
mod counter;
mod latency;
mod publish;
pub(crate) mod raw;
use raw::run_id;
mod sizing;
mod table;
#[cfg(feature = "sidecar")]
mod through_serve;

pub use table::bench_table;

use publish::{discarding, in_turn, publish_bulk, publish_single};
use pubsub_components::runtime::{Runtime, RuntimeOptions};
use pubsub_components::{Component, Feature, Support};
use pubsub_reports::BenchReport;
use sizing::{measurement, timed};
use std::sync::Arc;
use std::time::Duration;

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
        // The native bulk path and the runtime's emulation of it, in turn.
        let emulated = Runtime::with_options(
            name,
            component.clone(),
            RuntimeOptions {
                force_emulation: true,
                ..RuntimeOptions::default()
            },
        );
        measurements.extend(
            in_turn(
                &[
                    (
                        &runtime,
                        "native",
                        "bulk publish x100, in turn with the runtime emulation",
                    ),
                    (
                        &emulated,
                        "emulated",
                        "bulk publish x100, runtime emulation",
                    ),
                ],
                &prefix,
                100,
                options,
            )
            .await?,
        );
    }
    #[cfg(feature = "sidecar")]
    if options.through_serve {
        measurements.extend(
            through_serve::measurements(name, &runtime, component.clone(), &prefix, options)
                .await?,
        );
    }
    let bulk_100 = measurements
        .iter()
        .find(|m| m.label == "bulk publish x100")
        .cloned();
    let kind = component.kind();
    let (raw_payload, beside_raw) = against_raw::bulk(
        &runtime,
        kind,
        endpoint,
        &prefix,
        bulk_100.as_ref(),
        options,
    )
    .await?;
    measurements.push(raw_payload);
    measurements.insert(0, single.clone());
    if let Some(endpoint) = endpoint {
        measurements.extend(against_raw::single(kind, endpoint, &single, options).await?);
    }
    measurements.extend(beside_raw);

    let sizes = consume::topic_sizes(kind, options);
    for (i, messages) in sizes.iter().enumerate() {
        let suffix = if i == 0 {
            String::new()
        } else {
            format!(", {messages}-message topic")
        };
        measurements
            .extend(consume::measurements(&runtime, &prefix, options, *messages, &suffix).await?);
    }

    let latency = latency::latency(&runtime, options).await?;
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
