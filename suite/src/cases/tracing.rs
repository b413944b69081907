//! tracing.*: trace context crosses bulk publish and bulk subscribe per entry.

use super::key_of;
use crate::context::CaseContext;
use crate::history::Record;
use crate::outcome::{CaseError, CaseRun, Context};
use crate::spans::SpanCapture;
use pubsub_components::runtime::trace::{new_traceparent, trace_id};
use pubsub_components::runtime::{BulkPublishRequest, BulkSubscribeOptions, Status, Subscription};
use pubsub_components::Metadata;
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::instrument::WithSubscriber;

pub(super) async fn bulk_parent(ctx: CaseContext) -> CaseRun {
    if ctx.runtime.is_remote() {
        // The spans are the runtime's own, recorded where it runs.
        return Err(CaseError::CannotProvoke(
            "the bulk publish call's own span is recorded inside the remote runtime, where this case cannot capture it; what reaches subscribers (each entry's traceparent) is tracing.per-entry's".into(),
        ));
    }
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let caller = new_traceparent();
    let own = new_traceparent();
    let keys: Vec<String> = (0..6).map(|i| format!("e-{i}")).collect();
    let entries = keys
        .iter()
        .map(|key| {
            let mut entry = super::keyed_entry(key);
            if key == "e-0" {
                entry.metadata.insert("traceparent".into(), own.clone());
            }
            entry
        })
        .collect();
    let mut metadata = Metadata::new();
    metadata.insert("traceparent".into(), caller.clone());
    let capture = SpanCapture::default();
    let response = ctx
        .bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata,
        })
        .with_subscriber(capture.dispatch())
        .await
        .doing("bulk publishing under a caller's traceparent")?;
    let mut outcome = ctx.conclude(&keys, handle).await;
    outcome.expect_no_failed_entries(&response);
    let trace_of = |tp: &str| trace_id(tp).unwrap_or_default().to_string();
    let calls = capture.named("pubsub.bulk_publish");
    let Some(call) = calls.first() else {
        outcome.fail("the bulk publish call recorded no pubsub.bulk_publish span of its own");
        return Ok(outcome);
    };
    outcome.expect(calls.len() == 1, || {
        format!("{} pubsub.bulk_publish spans for one call", calls.len())
    });
    let call_tp = call.fields.get("traceparent").cloned().unwrap_or_default();
    outcome.expect(
        trace_of(&call_tp) == trace_of(&caller) && call_tp != caller,
        || {
            format!(
                "the call's span {call_tp:?} is not a child of the caller's traceparent {caller}"
            )
        },
    );
    let entry_spans = capture.named("pubsub.publish_entry");
    outcome.expect(entry_spans.len() == keys.len(), || {
        format!(
            "{} entry spans for {} entries",
            entry_spans.len(),
            keys.len()
        )
    });
    for span in &entry_spans {
        outcome.expect(
            span.fields.get("parent_traceparent") == Some(&call_tp),
            || {
                format!(
                    "entry span {:?} names parent {:?}, not the call's span {call_tp}",
                    span.fields.get("entry_id"),
                    span.fields.get("parent_traceparent")
                )
            },
        );
    }
    let mut delivered_tps = Vec::new();
    for event in ctx.recorder.events() {
        let key = key_of(&event).to_string();
        let tp = event.trace_parent.clone().unwrap_or_default();
        delivered_tps.push(tp.clone());
        if key == "e-0" {
            outcome.expect(tp == own, || {
                format!("e-0 carried its own traceparent {own}, delivered with {tp:?}")
            });
        } else {
            outcome.expect(trace_of(&tp) == trace_of(&call_tp) && tp != call_tp, || {
                format!("{key}: delivered with traceparent {tp:?}, not a span of its own in the call's trace {}", trace_of(&call_tp))
            });
        }
        let span_tp = entry_spans
            .iter()
            .find(|s| s.fields.get("entry_id") == Some(&key))
            .and_then(|s| s.fields.get("traceparent"));
        outcome.expect(span_tp == Some(&tp), || {
            format!("{key}: its entry span carries {span_tp:?}, the message {tp:?}")
        });
    }
    delivered_tps.sort();
    delivered_tps.dedup();
    outcome.expect(delivered_tps.len() == keys.len(), || {
        "entries share a traceparent: every message must carry its own".into()
    });
    Ok(outcome)
}

pub(super) async fn per_entry(ctx: CaseContext) -> CaseRun {
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
        .bulk_publish(BulkPublishRequest::new(&topic, entries))
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
    let mut outcome = ctx.conclude(&keys, handle).await;
    outcome.expect_no_failed_entries(&response);
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
    if !ctx.runtime.records_spans_here() {
        // The sidecar records them in its own process: what reaches the app (each
        // entry's traceparent, checked above) is what the wire shows.
        outcome.note(
            "the delivery spans are recorded inside the sidecar's process, where this case cannot capture them: only each entry's traceparent at delivery is judged",
        );
        return Ok(outcome);
    }
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
