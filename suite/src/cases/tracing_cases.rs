//! Trace context per message through bulk publish and bulk delivery.

use super::key_of;
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::Record;
use crate::outcome::{CaseRun, Context};
use crate::spans::SpanCapture;
use pubsub_components::runtime::trace::new_traceparent;
use pubsub_components::runtime::{BulkPublishRequest, BulkSubscribeOptions, Status, Subscription};
use pubsub_components::{Feature, Metadata};
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::instrument::WithSubscriber;

pub fn cases() -> Vec<Case> {
    vec![Case {
        id: "tracing.per-entry",
        must: "Every entry of a bulk publish MUST keep its own traceparent through delivery, and the batch delivery MUST record one span per entry linked to that entry's trace, naming the batch.",
        requires: &[Feature::BulkPublish, Feature::BulkSubscribe],
        level: Level::Feature,
        injects: &[],
        bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
        run: |ctx| Box::pin(per_entry(ctx)),
    }]
}

async fn per_entry(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = Some(BulkSubscribeOptions {
        max_messages_count: 10,
        max_await_duration: Duration::from_millis(200),
    });
    ctx.create_group(&subscription).await?;
    let traces: BTreeMap<String, String> = (0..10)
        .map(|i| (format!("e-{i}"), new_traceparent()))
        .collect();
    let entries = traces
        .iter()
        .map(|(key, traceparent)| {
            let mut entry = super::keyed_entry(key);
            entry
                .metadata
                .insert("traceparent".into(), traceparent.clone());
            entry
        })
        .collect();
    let response = ctx
        .bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata: Metadata::new(),
        })
        .await
        .doing("bulk publishing entries with their own traceparent")?;
    let capture = SpanCapture::default();
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None),
        )
        .with_subscriber(capture.dispatch())
        .await?;
    let keys: Vec<String> = traces.keys().cloned().collect();
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    outcome.expect(response.failed_entries.is_empty(), || {
        format!("entries failed: {:?}", response.failed_entries)
    });
    for event in ctx.recorder.events() {
        let key = key_of(&event);
        let expected = traces.get(key);
        outcome.expect(event.trace_parent.as_ref() == expected, || {
            format!(
                "{key}: delivered with traceparent {:?}, published with {expected:?}",
                event.trace_parent
            )
        });
    }
    let history = ctx.recorder.history();
    let batch_of: BTreeMap<String, String> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Delivered {
                key: Some(k),
                batch: Some(b),
                ..
            } => Some((k.clone(), b.clone())),
            _ => None,
        })
        .collect();
    let spans = capture.named("pubsub.deliver");
    for (key, traceparent) in &traces {
        let matching: Vec<_> = spans
            .iter()
            .filter(|s| s.fields.get("traceparent") == Some(traceparent))
            .collect();
        outcome.expect(!matching.is_empty(), || {
            format!("{key}: no delivery span linked to its traceparent {traceparent}")
        });
        if let (Some(span), Some(batch)) = (matching.first(), batch_of.get(key)) {
            outcome.expect(span.fields.get("batch_id") == Some(batch), || {
                format!(
                    "{key}: its span names batch {:?}, but it was delivered in batch {batch}",
                    span.fields.get("batch_id")
                )
            });
        }
    }
    outcome.note(format!("{} delivery spans captured", spans.len()));
    Ok(outcome)
}
