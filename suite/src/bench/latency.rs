//! End-to-end latency: from the publish call to the subscriber's handler, one message
//! at a time.

use super::counter::Counter;
use super::{run_id, BenchOptions};
use crate::history::KEY;
use pubsub_components::runtime::{Handler, PublishRequest, Runtime, Subscription};
use pubsub_reports::LatencySummary;
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) async fn latency(
    runtime: &Runtime,
    options: &BenchOptions,
) -> anyhow::Result<LatencySummary> {
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
