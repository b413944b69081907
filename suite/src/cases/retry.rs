//! retry.*: a RETRY or an error redelivers, with the declared delay, up to
//! maxDeliveries.

use super::key_of;
use super::record_dead_letters;
use crate::context::CaseContext;
use crate::history::{Record, Recorder, KEY};
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::{PublishRequest, Status, Subscription};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

pub(super) const MAX_DELIVERIES: u32 = 3;

/// The content type of the raw poison message.
pub(super) const RAW_CONTENT_TYPE: &str = "application/x-protobuf";

/// Two groups retry the same messages: one with a short delay drawn from the seed,
/// one with a delay beyond the broker's lease. On a work queue (no fan-out) each group
/// has its own topic and messages.
pub(super) async fn retry_delay(ctx: CaseContext) -> CaseRun {
    let short = super::generate(300u64..900, ctx.seed(), 1)[0];
    let delays = [
        ("short", Duration::from_millis(short)),
        (
            "beyond-lease",
            ctx.caps.lease
                + Duration::from_millis(if ctx.caps.lease.is_zero() { 1200 } else { 700 }),
        ),
    ];
    // Two RETRYs for the short group, one for the long one, then SUCCESS.
    let retries_of = |label: &str| if label == "short" { 2 } else { 1 };
    let topic_of = |label: &str| {
        if ctx.caps.fan_out {
            ctx.topic("t")
        } else {
            ctx.topic(&format!("t-{label}"))
        }
    };
    let mut subscriptions = Vec::new();
    for (label, delay) in delays {
        let mut subscription = Subscription::new(topic_of(label), ctx.group(label));
        subscription.retry_delay = delay;
        ctx.create_group(&subscription).await?;
        subscriptions.push((label, subscription));
    }
    let mut keys_of: Vec<Vec<String>> = Vec::new();
    let mut required: HashMap<String, usize> = HashMap::new();
    for (label, _) in delays {
        let keys = if ctx.caps.fan_out && !keys_of.is_empty() {
            keys_of[0].clone()
        } else {
            ctx.publish_numbered(&topic_of(label), &format!("m-{label}"), 6)
                .await?
        };
        for key in &keys {
            *required.entry(key.clone()).or_default() += retries_of(label) as usize + 1;
        }
        keys_of.push(keys);
    }
    let mut handles = Vec::new();
    for (label, subscription) in subscriptions {
        let retries = retries_of(label);
        let handler = ctx.recorder.scripted(label, move |event| {
            if event.attempt <= retries {
                Status::Retry
            } else {
                Status::Success
            }
        });
        handles.push(ctx.subscribe(subscription, handler).await?);
    }
    let deadline = ctx.deadline();
    ctx.recorder
        .wait_until(deadline, |h| {
            required
                .iter()
                .all(|(k, wanted)| h.delivery_count(k) >= *wanted)
        })
        .await;
    for handle in handles {
        handle.stop().await;
    }
    let mut outcome = ctx.check(&ctx.criteria());
    let history = ctx.recorder.history();
    let tolerance = ctx.caps.clock_tolerance;
    let bound = ctx.caps.redelivery_bound;
    // Every redelivery after a RETRY, per group, with how long after the RETRY it
    // came: a copy another group's retry leaked arrives together with that group's
    // redelivery, which honoured a delay (one redelivered at once leaks nothing; it
    // is a retry delay ignored).
    let mut redeliveries: Vec<(String, String, SystemTime, Duration)> = Vec::new();
    {
        let mut last_retry: HashMap<(String, String), SystemTime> = HashMap::new();
        for record in &history.records {
            match record {
                Record::Answered {
                    key: Some(k),
                    subscriber,
                    at,
                    settled: false,
                    ..
                } => {
                    last_retry.insert((subscriber.clone(), k.clone()), *at);
                }
                Record::Delivered {
                    key: Some(k),
                    subscriber,
                    at,
                    ..
                } => {
                    if let Some(retried) = last_retry.remove(&(subscriber.clone(), k.clone())) {
                        let gap = at.duration_since(retried).unwrap_or_default();
                        redeliveries.push((subscriber.clone(), k.clone(), *at, gap));
                    }
                }
                _ => {}
            }
        }
    }
    let leaked_from = |key: &str, label: &str, at: SystemTime| -> Option<String> {
        redeliveries.iter().find_map(|(group, k, other_at, gap)| {
            let apart = other_at.duration_since(at).unwrap_or_else(|e| e.duration());
            (k == key
                && group != label
                && *gap >= Duration::from_millis(50)
                && apart <= tolerance + Duration::from_millis(150))
            .then(|| group.clone())
        })
    };
    for ((label, delay), keys) in delays.into_iter().zip(&keys_of) {
        let wanted = retries_of(label) + 1;
        outcome.note(format!("group {label}: retry delay {delay:?}"));
        for key in keys {
            // The answer RETRY, then the next delivery to the same group.
            let mut last_retry = None;
            let mut settled = false;
            let mut deliveries = 0;
            for record in &history.records {
                match record {
                    Record::Answered {
                        key: Some(k),
                        subscriber,
                        at,
                        settled: answer_settles,
                        ..
                    } if k == key && subscriber == label => {
                        if *answer_settles {
                            settled = true;
                        } else {
                            last_retry = Some(*at);
                        }
                    }
                    Record::Delivered {
                        key: Some(k),
                        subscriber,
                        at,
                        ..
                    } if k == key && subscriber == label => {
                        deliveries += 1;
                        if settled {
                            match leaked_from(key, label, *at) {
                                Some(other) => outcome.fail(format!("group isolation broken: {key} reached group {label} again after that group answered SUCCESS, together with group {other}'s redelivery of it: a retry in one group leaked a copy to another")),
                                None => outcome.fail(format!("{key} reached group {label} again after that group answered SUCCESS (redelivered after acknowledgement)")),
                            };
                        }
                        if let Some(retried) = last_retry.take() {
                            let gap = at.duration_since(retried).unwrap_or_default();
                            if gap + tolerance < delay {
                                // Arriving together with another group's delivery of
                                // the same message: that group's retry leaked here.
                                match leaked_from(key, label, *at) {
                                    Some(other) => outcome.fail(format!("group isolation broken: {key} reached group {label} {gap:?} after its RETRY, before its retry delay of {delay:?}, together with group {other}'s delivery of it: a retry in one group leaked a copy to another")),
                                    None => outcome.fail(format!("{key} in group {label}: redelivered {gap:?} after RETRY, before its retry delay of {delay:?}")),
                                };
                            }
                            outcome.expect_timely(gap <= delay + bound, || {
                                format!("{key} in group {label}: redelivered {gap:?} after RETRY, later than the retry delay {delay:?} + redelivery bound {bound:?}")
                            });
                        }
                    }
                    _ => {}
                }
            }
            outcome.expect_timely(deliveries >= wanted, || {
                format!("{key} in group {label}: delivered {deliveries} times, expected {wanted} (RETRY not redelivered in time)")
            });
        }
    }
    Ok(outcome)
}

pub(super) async fn redelivery(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = Subscription::new(&topic, ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let keys = ctx.publish_numbered(&topic, "m", 10).await?;
    let handler = ctx.recorder.scripted("s1", |event| {
        let index: usize = key_of(event).trim_start_matches("m-").parse().unwrap_or(0);
        if index.is_multiple_of(2) && event.attempt < 3 {
            Status::Retry
        } else {
            Status::Success
        }
    });
    let handle = ctx.subscribe(subscription, handler).await?;
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound * 2);
    let needed = |k: &String| {
        if k.trim_start_matches("m-")
            .parse::<usize>()
            .unwrap_or(0)
            .is_multiple_of(2)
        {
            3
        } else {
            1
        }
    };
    ctx.recorder
        .wait_until(deadline, |h| {
            keys.iter().all(|k| h.delivery_count(k) >= needed(k))
        })
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let events = ctx.recorder.events();
    for key in &keys {
        let attempts: Vec<u32> = events
            .iter()
            .filter(|e| key_of(e) == key)
            .map(|e| e.attempt)
            .collect();
        let want = needed(key);
        outcome.expect(attempts.len() >= want, || {
            format!("{key}: answered RETRY {} times but not redelivered: delivered {} times, expected {want}", want - 1, attempts.len())
        });
        outcome.expect(attempts.windows(2).all(|w| w[1] > w[0]), || {
            format!("{key}: attempt numbers {attempts:?} do not increase")
        });
    }
    Ok(outcome)
}

/// A poison message always answered RETRY, next to healthy ones.
pub(super) async fn exhausted(ctx: CaseContext, with_dead_letter: bool) -> CaseRun {
    let topic = ctx.topic("t");
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, with_dead_letter).await?;
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.max_deliveries = MAX_DELIVERIES;
    subscription.retry_delay = Duration::from_millis(50);
    subscription.dead_letter_topic = with_dead_letter.then(|| dlq_topic.clone());
    ctx.create_group(&subscription).await?;
    let poison = ctx
        .message(&topic, "poison")
        .with_metadata("app-origin", "retry ✓");
    ctx.publish(poison)
        .await
        .doing("publishing the poison message")?;
    // A raw payload with its own content type: no envelope carries it.
    let raw_poison = PublishRequest::new(&topic, b"poison-raw".to_vec())
        .with_content_type(RAW_CONTENT_TYPE)
        .with_metadata(KEY, "poison-raw")
        .with_metadata("rawPayload", "true")
        .with_metadata("app-origin", "retry ✓");
    ctx.publish(raw_poison)
        .await
        .doing("publishing the raw poison message")?;
    let healthy = ctx.publish_numbered(&topic, "ok", 5).await?;
    let handler = ctx.recorder.scripted("s1", |event| {
        if key_of(event).starts_with("poison") {
            Status::Retry
        } else {
            Status::Success
        }
    });
    let handle = ctx.subscribe(subscription, handler).await?;
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound * MAX_DELIVERIES);
    ctx.recorder
        .wait_until(deadline, |h| {
            h.delivery_count("poison") >= MAX_DELIVERIES as usize
                && h.delivery_count("poison-raw") >= MAX_DELIVERIES as usize
                && healthy.iter().all(|k| h.delivery_count(k) > 0)
        })
        .await;
    if with_dead_letter {
        dlq.wait_for_keys(
            &["poison".to_string(), "poison-raw".to_string()],
            ctx.delivery_deadline(),
        )
        .await;
    }
    // It must not come back after the last attempt.
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| {
            h.delivery_count("poison") > MAX_DELIVERIES as usize
        })
        .await;
    handle.stop().await;
    if let Some(h) = dlq_handle {
        h.stop().await;
    }
    let mut outcome = ctx.check(&ctx.criteria());
    for key in ["poison", "poison-raw"] {
        let count = ctx.recorder.history().delivery_count(key);
        outcome.expect(count == MAX_DELIVERIES as usize, || {
            format!("{key}, always answered RETRY, was delivered {count} times; maxDeliveries is {MAX_DELIVERIES}")
        });
    }
    if with_dead_letter {
        outcome = outcome.merge(check_dead_letter(
            &dlq,
            "poison",
            &topic,
            "maxDeliveries",
            "retry ✓",
            super::Crossing::of(&ctx.runtime),
        ));
        // The dead-lettered copy is the same event: it keeps its CloudEvent id.
        let original = ctx
            .recorder
            .events()
            .into_iter()
            .find(|e| key_of(e) == "poison")
            .and_then(|e| e.cloud_event.map(|_| e.id));
        let copy = dlq
            .events()
            .into_iter()
            .find(|e| key_of(e) == "poison")
            .map(|e| e.id);
        if let (Some(original), Some(copy)) = (original, copy) {
            outcome.expect(original == copy, || {
                format!("poison: the dead letter has CloudEvent id {copy}, the original {original}; a dead-lettered copy keeps its id")
            });
        }
        outcome = outcome.merge(check_dead_letter(
            &dlq,
            "poison-raw",
            &topic,
            "maxDeliveries",
            "retry ✓",
            super::Crossing::of(&ctx.runtime),
        ));
    }
    Ok(outcome)
}

/// Checks the dead-lettered copy of `key`; over Dapr's HTTP API a raw dead letter
/// reaches its subscriber wrapped as octet-stream, and an SDK's handler sees no
/// content type at all.
pub(super) fn check_dead_letter(
    dlq: &Recorder,
    key: &str,
    topic: &str,
    reason: &str,
    origin: &str,
    crossing: super::Crossing,
) -> Outcome {
    let over_the_wire = crossing.over_the_wire;
    let mut outcome = Outcome::new();
    let events = dlq.events();
    let Some(event) = events.iter().find(|e| key_of(e) == key) else {
        outcome.fail(format!("{key} never reached the dead-letter topic"));
        return outcome;
    };
    let field = |name: &str| event.metadata.get(name).map(String::as_str);
    outcome.expect(field("originalTopic") == Some(topic), || {
        format!(
            "dead letter names original topic {:?}, expected {topic}",
            field("originalTopic")
        )
    });
    outcome.expect(field("deadLetterReason") == Some(reason), || {
        format!(
            "dead letter reason {:?}, expected {reason}",
            field("deadLetterReason")
        )
    });
    outcome.expect(event.data == key.as_bytes(), || {
        format!(
            "dead letter payload changed: {:?}",
            String::from_utf8_lossy(&event.data)
        )
    });
    let content_type = if event.cloud_event.is_none() && key.ends_with("-raw") {
        RAW_CONTENT_TYPE
    } else {
        "text/plain"
    };
    // Over Dapr's HTTP API a raw dead letter reaches its (non-raw) subscriber
    // wrapped as application/octet-stream, as daprd delivers it.
    let wrapped_raw = over_the_wire
        && key.ends_with("-raw")
        && event.content_type.as_deref() == Some("application/octet-stream");
    outcome.expect(
        crossing.data_only || wrapped_raw || event.content_type.as_deref() == Some(content_type),
        || {
            format!(
                "{key}: dead letter content type {:?}, expected {content_type:?}",
                event.content_type
            )
        },
    );

    outcome.expect(field("app-origin") == Some(origin), || {
        format!("dead letter lost metadata: {:?}", event.metadata)
    });
    outcome
}
