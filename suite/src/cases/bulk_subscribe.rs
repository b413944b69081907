//! Bulk subscribe: batch size and wait limits, per-entry SUCCESS/RETRY/DROP, handler errors.

use super::{generate, key_of};
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::{Record, Recorder};
use crate::outcome::{CaseRun, Outcome};
use pubsub_components::runtime::{BulkSubscribeOptions, Status, Subscription};
use pubsub_components::{Feature, Support, TopicSelector};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const FEATURE: &[Feature] = &[Feature::BulkSubscribe];

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "bulk-subscribe.max-messages",
            must: "A delivered batch MUST hold at least one and at most maxMessagesCount entries, all of one topic, and every message MUST be delivered.",
            requires: FEATURE,
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(max_messages(ctx)),
        },
        Case {
            id: "bulk-subscribe.max-await",
            must: "A partial batch MUST be handed over once maxAwaitDurationMs has passed since its first entry arrived (within the declared precision), not held for more entries.",
            requires: FEATURE,
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(max_await(ctx)),
        },
        Case {
            id: "bulk-subscribe.statuses",
            must: "Per entry, SUCCESS MUST ack it, RETRY MUST redeliver that entry only, DROP MUST ack it (and dead-letter it when a dead-letter topic is set), and a missing status MUST count as RETRY.",
            requires: FEATURE,
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound + 2 x redelivery bound", |c| c.delivery_bound * 2 + c.redelivery_bound * 2),
            run: |ctx| Box::pin(statuses(ctx)),
        },
        Case {
            id: "bulk-subscribe.handler-error",
            must: "When the bulk handler fails, every entry of that batch MUST be redelivered.",
            requires: FEATURE,
            level: Level::Feature,
            injects: &[],
            bound: Bound::new("2 x delivery bound + redelivery bound", |c| c.delivery_bound * 2 + c.redelivery_bound),
            run: |ctx| Box::pin(handler_error(ctx)),
        },
    ]
}

fn bulk(max_messages_count: usize, max_await_ms: u64) -> Option<BulkSubscribeOptions> {
    Some(BulkSubscribeOptions {
        max_messages_count,
        max_await_duration: Duration::from_millis(max_await_ms),
    })
}

async fn max_messages(ctx: CaseContext) -> CaseRun {
    let mut outcome = Outcome::new();
    let runs = generate((1usize..120, 1usize..40), ctx.seed(), 4);
    for (run, (count, max)) in runs.iter().enumerate() {
        // Two topics where multi-topic subscriptions exist, so mixing would show.
        let topics: Vec<String> = if ctx.caps.multi_topic {
            vec![
                ctx.topic(&format!("r{run}-a")),
                ctx.topic(&format!("r{run}-b")),
            ]
        } else {
            vec![ctx.topic(&format!("r{run}-a"))]
        };
        let selector = if topics.len() > 1 {
            TopicSelector::List(topics.clone())
        } else {
            TopicSelector::Single(topics[0].clone())
        };
        let mut subscription = Subscription::selecting(selector, ctx.group(&format!("r{run}")));
        subscription.bulk = bulk(*max, 200);
        ctx.create_group(&subscription).await?;
        let mut keys = Vec::new();
        for (t, topic) in topics.iter().enumerate() {
            keys.extend(
                ctx.publish_numbered(topic, &format!("r{run}-t{t}"), *count)
                    .await?,
            );
        }
        let handle = ctx
            .subscribe(
                subscription,
                ctx.recorder
                    .bulk(&format!("run-{run}"), |_| Some(Status::Success), |_| None),
            )
            .await?;
        ctx.recorder
            .wait_for_keys(&keys, ctx.delivery_deadline())
            .await;
        handle.stop().await;
        outcome.note(format!(
            "run {run}: {count} messages per topic x {} topics, maxMessagesCount {max}",
            topics.len()
        ));
        let history = ctx.recorder.history();
        let subscriber = format!("run-{run}");
        let mut entry_topics: BTreeMap<&String, HashSet<&String>> = BTreeMap::new();
        for record in &history.records {
            if let Record::Delivered {
                batch: Some(batch),
                topic,
                subscriber: s,
                ..
            } = record
            {
                if *s == subscriber {
                    entry_topics.entry(batch).or_default().insert(topic);
                }
            }
        }
        for record in &history.records {
            let Record::Batch {
                id,
                size,
                subscriber: s,
                ..
            } = record
            else {
                continue;
            };
            if *s != subscriber {
                continue;
            }
            outcome.expect(*size > 0, || format!("run {run}: empty batch {id}"));
            outcome.expect(*size <= *max, || {
                format!("run {run}: batch of {size} entries exceeds maxMessagesCount {max}")
            });
            let mixed = entry_topics.get(id).map_or(0, HashSet::len);
            outcome.expect(mixed <= 1, || {
                format!("run {run}: batch {id} mixes {mixed} topics")
            });
        }
    }
    let checked = ctx.check(&ctx.expectation());
    Ok(outcome.merge(checked))
}

async fn max_await(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let max_await = Duration::from_millis(300);
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(100, max_await.as_millis() as u64);
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None),
        )
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 5).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let history = ctx.recorder.history();
    let first_publish = history.records.iter().find_map(|r| match r {
        Record::Published { at, .. } => Some(*at),
        _ => None,
    });
    let allowed = max_await + ctx.caps.delay_precision;
    if let (Some(published), Some((_, _, at, size))) = (first_publish, history.batches().next()) {
        let waited = at.duration_since(published).unwrap_or_default();
        outcome.note(format!(
            "first batch of {size} handed over {waited:?} after the first publish"
        ));
        outcome.expect(waited <= allowed, || {
            format!("first batch handed over {waited:?} after its first entry was published; maxAwaitDurationMs {max_await:?} + precision {:?} allows {allowed:?}", ctx.caps.delay_precision)
        });
    }
    Ok(outcome)
}

async fn statuses(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let dead_letters = ctx.runtime.mode(Feature::DeadLetter) != Support::Unsupported;
    let dlq_topic = ctx.topic("dlq");
    let dlq = Recorder::new();
    let dlq_handle = if dead_letters {
        Some(
            ctx.subscribe(
                Subscription::new(&dlq_topic, ctx.group("dlq")),
                dlq.handler("dead-letters"),
            )
            .await?,
        )
    } else {
        None
    };
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(20, 200);
    subscription.dead_letter_topic = dead_letters.then(|| dlq_topic.clone());
    ctx.create_group(&subscription).await?;
    let mut keys = Vec::new();
    for prefix in ["success", "retry", "drop", "missing"] {
        keys.extend(ctx.publish_numbered(&topic, prefix, 3).await?);
    }
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk(
                "s1",
                |event| match (key_of(event).split('-').next(), event.attempt) {
                    (Some("retry"), 1) => Some(Status::Retry),
                    (Some("missing"), 1) => None,
                    (Some("drop"), _) => Some(Status::Drop),
                    _ => Some(Status::Success),
                },
                |_| None,
            ),
        )
        .await?;
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound);
    ctx.recorder
        .wait_until(deadline, |h| {
            keys.iter().all(|k| {
                let n = h.delivery_count(k);
                if k.starts_with("retry") || k.starts_with("missing") {
                    n >= 2
                } else {
                    n >= 1
                }
            })
        })
        .await;
    if dead_letters {
        let dropped: Vec<String> = (0..3).map(|i| format!("drop-{i}")).collect();
        dlq.wait_for_keys(&dropped, ctx.delivery_deadline()).await;
    }
    // Anything acknowledged must stay acknowledged: allow a redelivery window.
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| {
            keys.iter().any(|k| {
                (k.starts_with("success") || k.starts_with("drop")) && h.delivery_count(k) > 1
            })
        })
        .await;
    handle.stop().await;
    if let Some(h) = dlq_handle {
        h.stop().await;
    }
    let mut outcome = ctx.check(&ctx.expectation());
    let history = ctx.recorder.history();
    for key in &keys {
        let n = history.delivery_count(key);
        match key.split('-').next() {
            Some("success") => outcome.expect(n == 1, || {
                format!("{key} answered SUCCESS but was delivered {n} times")
            }),
            Some("drop") => outcome.expect(n == 1, || {
                format!("{key} answered DROP but was delivered {n} times")
            }),
            Some("retry") => outcome.expect(n >= 2, || {
                format!("{key} answered RETRY but was not redelivered")
            }),
            _ => outcome.expect(n >= 2, || {
                format!("{key} had no status (counts as RETRY) but was not redelivered")
            }),
        };
    }
    if dead_letters {
        let dead = dlq.events();
        for i in 0..3 {
            let key = format!("drop-{i}");
            let event = dead.iter().find(|e| key_of(e) == key);
            let reason = event
                .and_then(|e| e.metadata.get("deadLetterReason"))
                .map(String::as_str);
            outcome.expect(reason == Some("dropped"), || format!("{key} answered DROP but reached the dead-letter topic with reason {reason:?} (event present: {})", event.is_some()));
        }
        let wrong: Vec<String> = dead
            .iter()
            .map(|e| key_of(e).to_string())
            .filter(|k| !k.starts_with("drop"))
            .collect();
        outcome.expect(wrong.is_empty(), || {
            format!("entries dead-lettered without DROP: {wrong:?}")
        });
    } else {
        outcome.note("dead letters unsupported: DROP checked as ack only");
    }
    Ok(outcome)
}

async fn handler_error(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(10, 200);
    ctx.create_group(&subscription).await?;
    let keys = ctx.publish_numbered(&topic, "m", 10).await?;
    let failed_once = Arc::new(AtomicBool::new(false));
    let flag = failed_once.clone();
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk(
                "s1",
                |_| Some(Status::Success),
                move |_| {
                    (!flag.swap(true, Ordering::SeqCst))
                        .then(|| "handler failed on purpose".to_string())
                },
            ),
        )
        .await?;
    let first_batch_keys = |h: &crate::history::History| -> Vec<String> {
        let Some((id, _, _, _)) = h.batches().next() else {
            return Vec::new();
        };
        h.records
            .iter()
            .filter_map(|r| match r {
                Record::Delivered {
                    key: Some(k),
                    batch: Some(b),
                    ..
                } if b == id => Some(k.clone()),
                _ => None,
            })
            .collect()
    };
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound);
    ctx.recorder
        .wait_until(deadline, |h| {
            let first = first_batch_keys(h);
            !first.is_empty()
                && first.iter().all(|k| h.delivery_count(k) >= 2)
                && keys.iter().all(|k| h.delivery_count(k) >= 1)
        })
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let history = ctx.recorder.history();
    let first = first_batch_keys(&history);
    outcome.expect(!first.is_empty(), || "no batch was delivered".into());
    let missing: Vec<&String> = first
        .iter()
        .filter(|k| history.delivery_count(k) < 2)
        .collect();
    outcome.expect(missing.is_empty(), || {
        format!("entries of the failed batch not redelivered: {missing:?}")
    });
    Ok(outcome)
}
