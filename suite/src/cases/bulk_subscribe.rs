//! Bulk subscribe: batch size and wait limits, per-entry SUCCESS/RETRY/DROP, handler errors.

use super::{expect_dead_letter_reasons, outlive_one_second_ttl, record_dead_letters};
use super::{generate, key_of};
use crate::context::{CaseContext, SUBSCRIBED_MARKER};
use crate::history::Record;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkSubscribeOptions, Status, Subscription};
use pubsub_components::{Feature, Support, TopicSelector};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Between the messages of a trickle.
const TRICKLE_GAP: Duration = Duration::from_millis(40);

/// Expired and live entries published together, read in one batch after the TTL.
pub(super) async fn expired_entries(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let dlq_topic = ctx.topic("dlq");
    let dead_letters = ctx.caps.dead_letter.is_available();
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(50, 300);
    subscription.dead_letter_topic = dead_letters.then(|| dlq_topic.clone());
    if dead_letters {
        ctx.create_group(&dlq_subscription).await?;
    }
    ctx.create_group(&subscription).await?;
    let mut expiring = Vec::new();
    let mut live = Vec::new();
    for i in 0..10 {
        let key = format!("entry-{i}");
        let mut request = ctx.message(&topic, &key);
        if i % 2 == 0 {
            request = request.with_metadata("ttlInSeconds", "1");
            expiring.push(key.clone());
        } else {
            live.push(key.clone());
        }
        ctx.publish(request)
            .await
            .doing(&format!("publishing {key}"))?;
    }
    outlive_one_second_ttl(&ctx).await;
    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, dead_letters).await?;
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None),
        )
        .await?;
    ctx.recorder
        .wait_for_keys(&live, ctx.delivery_deadline())
        .await;
    if dead_letters {
        dlq.wait_for_keys(&expiring, ctx.delivery_deadline()).await;
    }
    handle.stop().await;
    if let Some(h) = dlq_handle {
        h.stop().await;
    }
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new().with_history(&history);
    for key in &expiring {
        outcome.expect(history.delivery_count(key) == 0, || {
            format!("{key} was handed over in a batch after its 1 s TTL had passed")
        });
    }
    for key in &live {
        outcome.expect_timely(history.delivery_count(key) > 0, || {
            format!("lost: live entry {key} was not delivered within the delivery bound")
        });
    }
    let empty = history.batches().filter(|b| b.3 == 0).count();
    outcome.expect(empty == 0, || {
        format!("{empty} empty batches were handed over")
    });
    if dead_letters {
        expect_dead_letter_reasons(&mut outcome, &dlq, &expiring, "expired");
    } else {
        outcome.note(
            "dead letters are unsupported: expired entries are only checked not to be delivered",
        );
    }
    Ok(outcome)
}

/// One poison entry among healthy ones, always answered RETRY in its batch.
pub(super) async fn exhausted_dead_lettered(ctx: CaseContext) -> CaseRun {
    const MAX: u32 = 3;
    let topic = ctx.topic("t");
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, true).await?;
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(10, 200);
    subscription.max_deliveries = MAX;
    subscription.retry_delay = Duration::from_millis(50);
    subscription.dead_letter_topic = Some(dlq_topic.clone());
    ctx.create_group(&subscription).await?;
    let mut keys = ctx.publish_numbered(&topic, "ok", 4).await?;
    keys.extend(ctx.publish_numbered(&topic, "poison", 1).await?);
    let handler = ctx.recorder.bulk(
        "s1",
        |event| {
            Some(if key_of(event) == "poison-0" {
                Status::Retry
            } else {
                Status::Success
            })
        },
        |_| None,
    );
    let handle = ctx.subscribe(subscription, handler).await?;
    ctx.recorder
        .wait_until(
            ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound * MAX),
            |h| h.delivery_count("poison-0") >= MAX as usize,
        )
        .await;
    dlq.wait_for_keys(&["poison-0".to_string()], ctx.delivery_deadline())
        .await;
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| {
            h.delivery_count("poison-0") > MAX as usize
        })
        .await;
    handle.stop().await;
    if let Some(handle) = dlq_handle {
        handle.stop().await;
    }
    let mut outcome = ctx.check(&ctx.criteria());
    let count = ctx.recorder.history().delivery_count("poison-0");
    outcome.expect(count == MAX as usize, || {
        format!("the entry always answered RETRY was delivered {count} times in batches; maxDeliveries is {MAX}")
    });
    let dead = dlq.events();
    match dead.iter().find(|e| key_of(e) == "poison-0") {
        None => {
            outcome.fail("poison-0 never reached the dead-letter topic from the bulk path");
        }
        Some(event) => {
            let reason = event.metadata.get("deadLetterReason").cloned();
            outcome.expect(reason.as_deref() == Some("maxDeliveries"), || {
                format!("dead-letter reason {reason:?}, expected maxDeliveries")
            });
        }
    }
    Ok(outcome)
}

fn bulk(max_messages_count: usize, max_await_ms: u64) -> Option<BulkSubscribeOptions> {
    Some(BulkSubscribeOptions {
        max_messages_count,
        max_await_duration: Duration::from_millis(max_await_ms),
    })
}

pub(super) async fn max_messages(ctx: CaseContext) -> CaseRun {
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
        // Every entry is answered SUCCESS: its first delivery is attempt 1, also when
        // the component put back entries of the other topic to batch them apart.
        let mut first_attempts: BTreeMap<&str, u32> = BTreeMap::new();
        for record in &history.records {
            if let Record::Delivered {
                key: Some(key),
                attempt,
                subscriber: s,
                ..
            } = record
            {
                if *s == subscriber {
                    first_attempts.entry(key.as_str()).or_insert(*attempt);
                }
            }
        }
        let miscounted: Vec<String> = first_attempts
            .iter()
            .filter(|(_, attempt)| **attempt != 1)
            .map(|(key, attempt)| format!("{key} (attempt {attempt})"))
            .collect();
        outcome.expect(miscounted.is_empty(), || {
            format!(
                "run {run}: first delivered as a later attempt, never delivered before: {}",
                crate::checker::examples(&miscounted)
            )
        });
    }
    let checked = ctx.check(&ctx.criteria());
    Ok(outcome.merge(checked))
}

pub(super) async fn max_await(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let max_await = Duration::from_millis(500);
    let max_messages = 100;
    let mut subscription = Subscription::new(&topic, ctx.group("g"));
    subscription.bulk = bulk(max_messages, max_await.as_millis() as u64);
    let handle = ctx
        .subscribe(
            subscription,
            ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None),
        )
        .await?;
    // The subscriber receives before the clock starts: a member still joining its
    // group (behind a sidecar, a group every subscription shares) is bounded by the
    // delivery bound, not by maxAwaitDurationMs. The marker's own batch is not judged.
    ctx.await_subscribed(&topic, Duration::ZERO).await?;
    // A trickle: a batch that closes early, at the first arrival or before its
    // window ended, shows as a partial batch handed over too soon.
    let mut keys = Vec::new();
    for i in 0..5 {
        if i > 0 {
            tokio::time::sleep(TRICKLE_GAP).await;
        }
        keys.extend(ctx.publish_numbered(&topic, &format!("m{i}"), 1).await?);
    }
    let mut outcome = ctx.conclude(&keys, handle).await;
    let history = ctx.recorder.history();
    // A message reached the broker between its publish call's start and return: a
    // batch is judged late from the return, early from the start (a publish
    // acknowledged after a slow disk write may be delivered before it returns).
    let published: HashMap<&String, (SystemTime, SystemTime)> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Published {
                key, at, started, ..
            } => Some((key, (started.unwrap_or(*at), *at))),
            _ => None,
        })
        .collect();
    let mut first_of_batch: HashMap<&String, (SystemTime, SystemTime)> = HashMap::new();
    for record in &history.records {
        if let Record::Delivered {
            key: Some(key),
            batch: Some(batch),
            attempt: 1,
            ..
        } = record
        {
            if key == SUBSCRIBED_MARKER {
                continue;
            }
            if let Some((started, at)) = published.get(key) {
                let first = first_of_batch.entry(batch).or_insert((*started, *at));
                *first = (first.0.min(*started), first.1.min(*at));
            }
        }
    }
    // Lateness the machine explains (what undelayed control messages took meanwhile)
    // is not the component's.
    let allowance = ctx.lateness_allowance(ctx.caps.delay_precision);
    let late_allowed = max_await + ctx.caps.delay_precision + allowance;
    let early_allowed = max_await.saturating_sub(ctx.caps.clock_tolerance);
    for (id, _, at, size) in history.batches() {
        let Some((first_started, first)) = first_of_batch.get(id) else {
            continue;
        };
        let waited = at.duration_since(*first).unwrap_or_default();
        let waited_since_start = at.duration_since(*first_started).unwrap_or_default();
        outcome.note(format!(
            "a batch of {size} handed over {waited:?} after its first entry was published"
        ));
        outcome.expect_timely(waited <= late_allowed, || {
            format!("a batch of {size} handed over {waited:?} after its first entry was published; maxAwaitDurationMs {max_await:?} + precision {:?} + control latency {allowance:?} allows {late_allowed:?}", ctx.caps.delay_precision)
        });
        outcome.expect(size >= max_messages || waited_since_start >= early_allowed, || {
            format!("a partial batch of {size} (maxMessagesCount {max_messages}) handed over early: {waited_since_start:?} after its first entry's publish started, before maxAwaitDurationMs {max_await:?} (less the clock tolerance {:?})", ctx.caps.clock_tolerance)
        });
    }
    Ok(outcome)
}

pub(super) async fn statuses(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let dead_letters = ctx.runtime.mode(Feature::DeadLetter) != Support::Unsupported;
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let (dlq, dlq_handle) = record_dead_letters(&ctx, dlq_subscription, dead_letters).await?;
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
    let mut outcome = ctx.check(&ctx.criteria());
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

pub(super) async fn handler_error(ctx: CaseContext) -> CaseRun {
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
    let mut outcome = ctx.check(&ctx.criteria());
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
