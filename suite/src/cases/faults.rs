//! Certification under faults: the broker killed and restarted or paused, the
//! network cut, black-holed or slowed, a member crashing with messages in hand, a
//! closed subscription, exhausted retries across a reconnect, a large backlog and
//! retries while members come and go. Each is judged from its history: publishes whose
//! outcome is unknown during a fault are indeterminate (never counted as lost), and the
//! time to recover is reported.

use super::keyed_entry;
use crate::catalogue::{Bound, Case, Injects, Level};
use crate::context::CaseContext;
use crate::faults::NetworkFault;
use crate::history::{History, Record, KEY};
use crate::outcome::{CaseRun, Context, Outcome};
use async_trait::async_trait;
use pubsub_components::runtime::{
    BulkPublishRequest, Event, Handler, MessageHandler, Runtime, Status, Subscription,
};
use pubsub_components::{ConsumerSpec, Feature, Metadata, TopicSelector};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a network or pause fault lasts: long enough for clients to notice
/// (time is the property here).
const FAULT_LENGTH: Duration = Duration::from_secs(2);
/// The shortest time between two single publishes of a stream.
const PACE: Duration = Duration::from_millis(1);
/// The most single publishes `certification.network-cut-single-publishes` streams.
const STREAM_LIMIT: usize = 5000;
/// What a broker restart may take on top of the declared bounds (RabbitMQ needs ~10 s).
const RESTART_ALLOWANCE: Duration = Duration::from_secs(60);

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "certification.broker-restart",
            must: "After the broker is killed and restarted, publishers and subscribers MUST work again without being recreated within the declared recovery bound, and where durability is declared nothing acknowledged before the crash may be lost.",
            requires: &[Feature::FanOut],
            level: Level::Certification,
            injects: &[Injects::BrokerRestart],
            bound: Bound::new("60 s restart + 2 x recovery bound + 3 x delivery bound", |c| {
                RESTART_ALLOWANCE + c.recovery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(broker_restart(ctx)),
        },
        Case {
            id: "certification.broker-pause",
            must: "While the broker is frozen and after it thaws, every publish reported successful MUST be delivered, and publishing MUST work again within the declared recovery bound.",
            requires: &[],
            level: Level::Certification,
            injects: &[Injects::BrokerPause],
            bound: Bound::new("2 s pause + 2 x recovery bound + 3 x delivery bound", |c| {
                FAULT_LENGTH + c.recovery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(broker_pause(ctx)),
        },
        Case {
            id: "certification.network-cut",
            must: "When the network is cut during bulk publishing, every entry reported SUCCESS MUST be delivered (nothing is reported SUCCESS that was not stored), and publishing MUST work again within the declared recovery bound once the network is back.",
            requires: &[Feature::BulkPublish],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("2 s cut + 2 x recovery bound + 3 x delivery bound", |c| {
                FAULT_LENGTH + c.recovery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(network_fault(ctx, NetworkFault::Cut)),
        },
        Case {
            id: "certification.network-cut-single-publishes",
            must: "When the network is cut while single publishes stream without pause, every publish that returned success MUST be delivered, including one acknowledged just before the cut (success means the broker has it), and publishing MUST work again within the declared recovery bound once the network is back.",
            requires: &[],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("2 s cut + 2 x recovery bound + 3 x delivery bound", |c| {
                FAULT_LENGTH + c.recovery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(network_cut_single_publishes(ctx)),
        },
        Case {
            id: "certification.network-black-hole",
            must: "When the network silently drops everything during bulk publishing, every entry reported SUCCESS MUST be delivered, and publishing MUST work again within the declared recovery bound once the network is back.",
            requires: &[Feature::BulkPublish],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("2 s black hole + 2 x recovery bound + 3 x delivery bound", |c| {
                FAULT_LENGTH + c.recovery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(network_fault(ctx, NetworkFault::BlackHole)),
        },
        Case {
            id: "certification.slow-network-bulk-subscribe",
            must: "Over a slow network (latency with jitter) bulk subscribe MUST keep its batch bounds (at most maxMessagesCount entries) and lose nothing.",
            requires: &[Feature::BulkSubscribe],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("4 x delivery bound + 10 s", |c| {
                c.delivery_bound * 4 + Duration::from_secs(10)
            }),
            run: |ctx| Box::pin(slow_network_bulk_subscribe(ctx)),
        },
        Case {
            id: "certification.consumer-crash",
            must: "When a member crashes (its connection dies) holding unacknowledged messages, those messages MUST be delivered to another member of the group.",
            requires: &[],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("lease + 2 x redelivery bound + 3 x delivery bound", |c| {
                c.lease + c.redelivery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(consumer_crash(ctx)),
        },
        Case {
            id: "certification.crash-not-dead-lettered",
            must: "Messages a crashed member received but never handled MUST NOT be dead-lettered; with a dead-letter topic and a low maxDeliveries they MUST reach another member.",
            requires: &[Feature::DeadLetter],
            level: Level::Certification,
            injects: &[Injects::Network],
            bound: Bound::new("lease + 2 x redelivery bound + 3 x delivery bound", |c| {
                c.lease + c.redelivery_bound * 2 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(crash_not_dead_lettered(ctx)),
        },
        Case {
            id: "certification.close-stops-delivery",
            must: "After a subscription stops or a consumer closes, nothing MUST reach its handler or be received through it, and what is published afterwards MUST reach the group's other members.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("3 x delivery bound + redelivery bound", |c| {
                c.delivery_bound * 3 + c.redelivery_bound
            }),
            run: |ctx| Box::pin(close_stops_delivery(ctx)),
        },
        Case {
            id: "certification.exhausted-stays-dead",
            must: "A message whose deliveries are exhausted (no dead-letter topic) MUST NOT come back when its group's consumer reconnects.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("recovery bound + 3 x redelivery bound + 3 x delivery bound", |c| {
                c.recovery_bound + c.redelivery_bound * 3 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(exhausted_stays_dead(ctx, false)),
        },
        Case {
            id: "certification.exhausted-stays-dead-after-restart",
            must: "A message whose deliveries are exhausted (no dead-letter topic) MUST NOT come back after the broker is killed and restarted and its group's consumer reconnects.",
            requires: &[],
            level: Level::Certification,
            injects: &[Injects::BrokerRestart],
            bound: Bound::new("60 s restart + 3 x redelivery bound + 3 x delivery bound + recovery bound", |c| {
                RESTART_ALLOWANCE + c.recovery_bound + c.redelivery_bound * 3 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(exhausted_stays_dead(ctx, true)),
        },
        Case {
            id: "certification.slow-handler",
            must: "A message whose handler works longer than the broker's lease MUST NOT be handed to another member while the first still works on it, unless the component declares that it may; either way it MUST be handled in the end.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("lease + 1 s handler + 2 x redelivery bound + 2 x delivery bound", |c| {
                slow_handler_time(c) + c.redelivery_bound * 2 + c.delivery_bound * 2
            }),
            run: |ctx| Box::pin(slow_handler(ctx)),
        },
        Case {
            id: "certification.backlog",
            must: "A backlog of 10000 messages over 10 topics, each read by 2 groups, MUST be drained completely: every message reaches every group (one group per topic where the component declares no fan-out).",
            requires: &[Feature::BulkPublish],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("2 x delivery bound + 120 s", |c| {
                c.delivery_bound * 2 + Duration::from_secs(120)
            }),
            run: |ctx| Box::pin(backlog(ctx)),
        },
        Case {
            id: "certification.retry-while-members-change",
            must: "Messages retried while another member joins and leaves the group MUST all be handled successfully in the end; none is lost.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("3 x redelivery bound + 3 x delivery bound", |c| {
                c.redelivery_bound * 3 + c.delivery_bound * 3
            }),
            run: |ctx| Box::pin(retry_while_members_change(ctx)),
        },
    ]
}

/// The keys delivered to `subscriber`.
fn delivered_to(history: &History, subscriber: &str) -> BTreeSet<String> {
    history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Delivered {
                key: Some(key),
                subscriber: s,
                ..
            } if s == subscriber => Some(key.clone()),
            _ => None,
        })
        .collect()
}

/// The keys whose publish was acknowledged.
fn acknowledged(history: &History) -> BTreeSet<String> {
    history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Published {
                key,
                outcome: Ok(_),
                ..
            } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

fn listed(keys: &[&String]) -> String {
    let shown: Vec<&str> = keys.iter().take(8).map(|k| k.as_str()).collect();
    match keys.len().saturating_sub(8) {
        0 => shown.join(", "),
        more => format!("{} (+{more} more)", shown.join(", ")),
    }
}

/// Publishes `key` through `runtime`, giving up after `wait` (the outcome is then
/// recorded as unknown, never as published).
async fn publish_bounded(
    ctx: &CaseContext,
    runtime: &Runtime,
    topic: &str,
    key: &str,
    wait: Duration,
) -> bool {
    match tokio::time::timeout(wait, ctx.publish_via(runtime, ctx.message(topic, key))).await {
        Ok(result) => result.is_ok(),
        Err(_) => {
            ctx.recorder.published(
                key,
                topic,
                Err(format!(
                    "outcome unknown: no answer within {wait:?} during a fault"
                )),
                None,
                None,
            );
            false
        }
    }
}

/// Publishes `key` through `runtime` until it succeeds or `deadline` passes; returns
/// when it first succeeded.
async fn publish_until_recovered(
    ctx: &CaseContext,
    runtime: &Runtime,
    topic: &str,
    key: &str,
    deadline: Instant,
) -> Option<Instant> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let wait = left.min(ctx.caps.delivery_bound);
        if publish_bounded(ctx, runtime, topic, key, wait).await {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100).min(left)).await;
    }
}

/// Bulk-publishes `keys` through `runtime`, giving up after `wait` (every entry is
/// then recorded as unknown). Returns the keys reported SUCCESS.
async fn bulk_publish_bounded(
    ctx: &CaseContext,
    runtime: &Runtime,
    topic: &str,
    keys: &[String],
    wait: Duration,
) -> Vec<String> {
    let request = BulkPublishRequest {
        topic: topic.to_string(),
        entries: keys.iter().map(|k| keyed_entry(k)).collect(),
        metadata: Metadata::new(),
    };
    match tokio::time::timeout(wait, ctx.bulk_publish_via(runtime, request)).await {
        Ok(Ok(response)) => keys
            .iter()
            .filter(|k| !response.failed(k))
            .cloned()
            .collect(),
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            for key in keys {
                ctx.recorder.published(
                    key,
                    topic,
                    Err(format!(
                        "outcome unknown: the bulk call did not return within {wait:?} during a fault"
                    )),
                    None,
                    None,
                );
            }
            Vec::new()
        }
    }
}

/// Subscribes until the component accepts or `deadline` passes (a broker just back
/// may refuse at first, e.g. Redis while it loads its data); the last refusal fails
/// the case.
async fn subscribe_until_recovered(
    ctx: &CaseContext,
    subscription: impl Fn() -> Subscription,
    handler: impl Fn() -> Handler,
    deadline: Instant,
) -> Result<pubsub_components::runtime::SubscriptionHandle, crate::outcome::CaseError> {
    loop {
        match ctx.runtime.subscribe(subscription(), handler()).await {
            Ok(handle) => return Ok(handle),
            Err(e) if Instant::now() >= deadline => {
                return Err(e)
                    .doing("subscribing after the broker came back (within the recovery bound)")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn numbered(label: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{label}-{i}")).collect()
}

async fn broker_restart(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let topic = ctx.topic("t");
    let backlog = Subscription::new(topic.clone(), ctx.group("backlog"));
    ctx.create_group(&backlog).await?;
    let live = ctx.subscribe_recorded(&topic).await?;
    let before = ctx.publish_numbered(&topic, "before", 20).await?;
    ctx.recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;

    faults.kill_broker().await?;
    for key in numbered("during", 3) {
        publish_bounded(&ctx, &ctx.runtime, &topic, &key, Duration::from_millis(500)).await;
    }
    let restart = faults.restart_broker().await?;
    let back = Instant::now();
    let recovery_deadline = ctx.within(ctx.caps.recovery_bound);
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} killed and restarted; the restart took {} ms",
        faults.broker().describe(),
        restart.as_millis()
    ));
    let Some(recovered) =
        publish_until_recovered(&ctx, &ctx.runtime, &topic, "after-0", recovery_deadline).await
    else {
        live.stop().await;
        outcome.fail(format!(
            "the publisher did not recover: no publish succeeded within the declared recovery bound of {:?} after the broker was back",
            ctx.caps.recovery_bound
        ));
        return Ok(outcome.with_history(&ctx.recorder.history()));
    };
    outcome.note(format!(
        "the publisher recovered {} ms after the broker was back",
        (recovered - back).as_millis()
    ));
    let mut after = Vec::new();
    if ctx.caps.durable {
        // The broker kept the group's subscription: what it acknowledged since it is
        // back must reach the running subscriber.
        after.push("after-0".to_string());
    } else {
        // A broker that keeps nothing across a crash forgets the subscription too:
        // only what is published once the subscriber has subscribed again must
        // arrive. Probes find that moment.
        let mut probes = 0;
        let subscribed_again = loop {
            probes += 1;
            let probe = format!("probe-{probes}");
            publish_bounded(&ctx, &ctx.runtime, &topic, &probe, ctx.caps.delivery_bound).await;
            let seen = ctx
                .recorder
                .wait_until(ctx.within(Duration::from_millis(200)), |h| {
                    delivered_to(h, "s1")
                        .iter()
                        .any(|k| k.starts_with("probe-"))
                })
                .await;
            if seen || Instant::now() >= recovery_deadline {
                break seen;
            }
        };
        if subscribed_again {
            outcome.note(format!(
                "declared not durable: the subscriber subscribed again {} ms after the broker was back ({probes} probes; what was published before that is not required)",
                back.elapsed().as_millis()
            ));
        } else {
            live.stop().await;
            outcome.fail(format!(
                "the subscriber did not recover: no probe published after the restart reached it within the declared recovery bound of {:?}",
                ctx.caps.recovery_bound
            ));
            return Ok(outcome.with_history(&ctx.recorder.history()));
        }
    }
    for key in numbered("after", 20).into_iter().skip(1) {
        if publish_bounded(&ctx, &ctx.runtime, &topic, &key, ctx.caps.delivery_bound).await {
            after.push(key);
        }
    }
    let subscriber_deadline = ctx.within(ctx.caps.recovery_bound + ctx.caps.delivery_bound);
    let live_recovered = ctx
        .recorder
        .wait_for_keys(&after, subscriber_deadline)
        .await;
    outcome.note(format!(
        "the running subscriber {} ms after the broker was back",
        if live_recovered {
            format!("had every later message {}", back.elapsed().as_millis())
        } else {
            "still missed messages".to_string()
        }
    ));
    live.stop().await;
    let history = ctx.recorder.history();
    let got = delivered_to(&history, "s1");
    let acked = acknowledged(&history);
    let lied: Vec<&String> = acked
        .iter()
        .filter(|k| k.starts_with("during-") && !got.contains(*k))
        .collect();
    outcome.expect(lied.is_empty(), || {
        format!(
            "lost: {} publishes reported successful while the broker was down never arrived: {}",
            lied.len(),
            listed(&lied)
        )
    });
    let missed: Vec<&String> = after.iter().filter(|k| !got.contains(*k)).collect();
    outcome.expect(missed.is_empty(), || {
        format!(
            "the subscriber did not recover: {} messages acknowledged after the restart never reached it within the recovery and delivery bounds: {}",
            missed.len(),
            listed(&missed)
        )
    });

    // The group that had no member during the crash: what it stored must survive.
    let stored = subscribe_until_recovered(
        &ctx,
        || backlog.clone(),
        || ctx.recorder.handler("s2"),
        ctx.within(ctx.caps.recovery_bound),
    )
    .await?;
    ctx.recorder
        .wait_until(ctx.within(ctx.caps.delivery_bound), |h| {
            let got = delivered_to(h, "s2");
            before.iter().all(|k| got.contains(k))
        })
        .await;
    stored.stop().await;
    let got = delivered_to(&ctx.recorder.history(), "s2");
    let lost: Vec<&String> = before.iter().filter(|k| !got.contains(*k)).collect();
    if ctx.caps.durable {
        outcome.expect(lost.is_empty(), || {
            format!(
                "lost across the restart: {} messages acknowledged before the crash, stored for a group with no member, never came back (the component declares the broker durable): {}",
                lost.len(),
                listed(&lost)
            )
        });
    } else {
        outcome.note(format!(
            "declared not durable: {} of {} messages stored before the crash came back (not required)",
            before.len() - lost.len(),
            before.len()
        ));
    }
    Ok(outcome.with_history(&ctx.recorder.history()))
}

async fn broker_pause(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    ctx.publish_numbered(&topic, "before", 10).await?;
    faults.pause_broker().await?;
    let during = async {
        for key in numbered("during", 5) {
            publish_bounded(&ctx, &ctx.runtime, &topic, &key, FAULT_LENGTH * 2).await;
        }
    };
    let thaw = async {
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.resume_broker().await
    };
    let ((), resumed) = tokio::join!(during, thaw);
    resumed?;
    let back = Instant::now();
    let mut outcome = Outcome::new();
    let recovered = publish_until_recovered(
        &ctx,
        &ctx.runtime,
        &topic,
        "after-0",
        ctx.within(ctx.caps.recovery_bound),
    )
    .await;
    match recovered {
        Some(at) => {
            outcome.note(format!(
                "publishing worked again {} ms after the broker thawed",
                (at - back).as_millis()
            ));
            for key in numbered("after", 10).into_iter().skip(1) {
                publish_bounded(&ctx, &ctx.runtime, &topic, &key, ctx.caps.delivery_bound).await;
            }
        }
        None => {
            outcome.fail(format!(
                "the publisher did not recover within the declared recovery bound of {:?} after the broker thawed",
                ctx.caps.recovery_bound
            ));
        }
    }
    let expected: Vec<String> = acknowledged(&ctx.recorder.history()).into_iter().collect();
    ctx.recorder
        .wait_for_keys(
            &expected,
            ctx.within(ctx.caps.recovery_bound + ctx.caps.delivery_bound),
        )
        .await;
    handle.stop().await;
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}

async fn network_fault(ctx: CaseContext, fault: NetworkFault) -> CaseRun {
    let faults = ctx.faults()?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    // The subscriber is not behind the proxy: it sees what the broker stored.
    let handle = ctx.subscribe_recorded(&topic).await?;
    bulk_publish_bounded(
        &ctx,
        &proxied,
        &topic,
        &numbered("a", 20),
        ctx.caps.delivery_bound,
    )
    .await;

    faults.network(&proxy, fault);
    let during_keys = numbered("b", 20);
    let during = bulk_publish_bounded(
        &ctx,
        &proxied,
        &topic,
        &during_keys,
        FAULT_LENGTH + ctx.caps.recovery_bound,
    );
    let restore = async {
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.network(&proxy, NetworkFault::Pass);
    };
    let (during_ok, ()) = tokio::join!(during, restore);
    let back = Instant::now();

    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} of 20 entries published during the fault were reported SUCCESS",
        during_ok.len()
    ));
    let recovery_deadline = ctx.within(ctx.caps.recovery_bound);
    let mut pending = numbered("c", 20);
    let mut recovered_at = None;
    while !pending.is_empty() && Instant::now() < recovery_deadline {
        let wait = recovery_deadline
            .saturating_duration_since(Instant::now())
            .min(ctx.caps.delivery_bound);
        let done = bulk_publish_bounded(&ctx, &proxied, &topic, &pending, wait).await;
        if !done.is_empty() && recovered_at.is_none() {
            recovered_at = Some(Instant::now());
        }
        pending.retain(|k| !done.contains(k));
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    match recovered_at {
        Some(at) => outcome.note(format!(
            "bulk publishing worked again {} ms after the network was back",
            (at - back).as_millis()
        )),
        None => outcome.fail(format!(
            "the publisher did not recover: no entry was published within the declared recovery bound of {:?} after the network was back",
            ctx.caps.recovery_bound
        )),
    };
    outcome.expect(pending.is_empty(), || {
        format!(
            "{} entries could not be published within the recovery bound after the network was back",
            pending.len()
        )
    });
    let expected: Vec<String> = acknowledged(&ctx.recorder.history()).into_iter().collect();
    ctx.recorder
        .wait_for_keys(&expected, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    proxied.retire().await;
    drop(proxy);
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}

async fn network_cut_single_publishes(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    // The subscriber is not behind the proxy: it sees what the broker stored.
    let handle = ctx.subscribe_recorded(&topic).await?;
    let each_wait = FAULT_LENGTH + ctx.caps.recovery_bound;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acknowledged_count = std::sync::atomic::AtomicUsize::new(0);
    let recovered: Mutex<Option<Instant>> = Mutex::new(None);
    let back: Mutex<Option<Instant>> = Mutex::new(None);
    let progress = Notify::new();
    // Publishes back to back, each bounded, until the schedule stops it (or a
    // component that answers without waiting for the broker has been sent enough).
    let publisher = async {
        let mut sent = 0usize;
        while !stop.load(std::sync::atomic::Ordering::Acquire) && sent < STREAM_LIMIT {
            // A publish that answers at once never suspends: yield so the schedule
            // (polled in the same task) runs.
            tokio::task::yield_now().await;
            let key = format!("s-{sent:05}");
            let began = Instant::now();
            let published = publish_bounded(&ctx, &proxied, &topic, &key, each_wait).await;
            if began.elapsed() < PACE {
                // At most about one publish a millisecond: a stream, not a flood.
                tokio::time::sleep(PACE).await;
            }
            if published {
                acknowledged_count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                let restored = *back.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(restored) = restored {
                    recovered
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert_with(|| Instant::now().max(restored));
                }
            } else {
                // A refused publish during the cut: do not spin.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            progress.notify_waiters();
            sent += 1;
        }
        sent
    };
    let schedule = async {
        // The cut lands while publishes are streaming: after 50 of them.
        let started = Instant::now();
        while acknowledged_count.load(std::sync::atomic::Ordering::Acquire) < 50
            && started.elapsed() < ctx.caps.delivery_bound
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), progress.notified()).await;
        }
        faults.network(&proxy, NetworkFault::Cut);
        tokio::time::sleep(FAULT_LENGTH).await;
        faults.network(&proxy, NetworkFault::Pass);
        *back.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let deadline = ctx.within(ctx.caps.recovery_bound);
        while recovered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
            && Instant::now() < deadline
        {
            let _ = tokio::time::timeout(Duration::from_millis(50), progress.notified()).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
    };
    let (sent, ()) = tokio::join!(publisher, schedule);
    let mut outcome = Outcome::new();
    let acknowledged_keys: Vec<String> =
        acknowledged(&ctx.recorder.history()).into_iter().collect();
    outcome.note(format!(
        "{sent} single publishes streamed across the cut, {} acknowledged",
        acknowledged_keys.len()
    ));
    let back = back.into_inner().unwrap_or_else(|p| p.into_inner());
    match (recovered.into_inner().unwrap_or_else(|p| p.into_inner()), back) {
        (Some(at), Some(back)) => outcome.note(format!(
            "publishing worked again {} ms after the network was back",
            (at - back).as_millis()
        )),
        _ => outcome.fail(format!(
            "the publisher did not recover: no publish succeeded within the declared recovery bound of {:?} after the network was back",
            ctx.caps.recovery_bound
        )),
    };
    ctx.recorder
        .wait_for_keys(&acknowledged_keys, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    proxied.retire().await;
    drop(proxy);
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}

async fn slow_network_bulk_subscribe(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    faults.network(
        &proxy,
        NetworkFault::Latency {
            base: Duration::from_millis(20),
            jitter: Duration::from_millis(20),
        },
    );
    let max = 10;
    let mut subscription = Subscription::new(topic.clone(), ctx.group("g"));
    subscription.bulk = Some(pubsub_components::runtime::BulkSubscribeOptions {
        max_messages_count: max,
        max_await_duration: Duration::from_millis(300),
    });
    let handler = ctx.recorder.bulk("s1", |_| Some(Status::Success), |_| None);
    let handle = proxied
        .subscribe(subscription, handler)
        .await
        .doing("bulk subscribing over a slow network")?;
    let mut keys = Vec::new();
    for burst in 0..3 {
        keys.extend(
            ctx.publish_numbered(&topic, &format!("m{burst}"), 20)
                .await?,
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound * 3))
        .await;
    handle.stop().await;
    faults.network(&proxy, NetworkFault::Pass);
    proxied.retire().await;
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new();
    let oversize: Vec<String> = history
        .batches()
        .filter(|(_, _, _, size)| *size > max)
        .map(|(id, _, _, size)| format!("{} ({size} entries)", &id[..8.min(id.len())]))
        .collect();
    outcome.expect(oversize.is_empty(), || {
        format!(
            "batches exceed maxMessagesCount {max} over a slow network: {}",
            oversize.join(", ")
        )
    });
    outcome.note(format!(
        "{} batches over a link with 20-40 ms latency each way",
        history.batches().count()
    ));
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}

async fn consumer_crash(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 30).await?;
    let crashing = proxied
        .component()
        .consumer(spec.clone())
        .await
        .doing("opening the member that will crash")?;
    let mut held = Vec::new();
    let deadline = ctx.delivery_deadline();
    while held.len() < 10 && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        held.extend(
            crashing
                .receive(10 - held.len(), wait)
                .await
                .doing("receiving before the crash")?,
        );
    }
    let held_keys: Vec<String> = held
        .iter()
        .filter_map(|m| m.metadata.get(KEY).cloned())
        .collect();
    // The crash: its connections die with a reset and stay dead; it never acks or closes.
    faults.network(&proxy, NetworkFault::Cut);
    let survivor = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("opening the surviving member")?;
    let mut done = BTreeSet::new();
    let deadline =
        ctx.within(ctx.caps.lease + ctx.caps.redelivery_bound * 2 + ctx.caps.delivery_bound);
    while done.len() < keys.len() && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        for message in survivor
            .receive(30, wait)
            .await
            .doing("receiving at the surviving member")?
        {
            survivor.ack(&message.id).await.doing("acking")?;
            let key = message.metadata.get(KEY).cloned().unwrap_or_default();
            ctx.recorder.note(format!("survivor got {key}"));
            done.insert(key);
        }
    }
    let _ = survivor.close().await;
    drop(crashing);
    proxied.retire().await;
    drop(proxy);
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the crashed member held {} messages unacknowledged: {}",
        held_keys.len(),
        held_keys.join(", ")
    ));
    let lost: Vec<&String> = keys.iter().filter(|k| !done.contains(*k)).collect();
    let lost_held: Vec<&&String> = lost.iter().filter(|k| held_keys.contains(k)).collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages never reached the surviving member ({} of them held by the crashed member): {}",
            lost.len(),
            lost_held.len(),
            listed(&lost)
        )
    });
    Ok(outcome.with_history(&ctx.recorder.history()))
}

/// A handler that records each delivery and never answers (a member busy when it
/// crashes).
struct Hangs {
    recorder: crate::history::Recorder,
}

#[async_trait]
impl MessageHandler for Hangs {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.recorder.delivered(&event, "crashing", None);
        std::future::pending().await
    }
}

async fn crash_not_dead_lettered(ctx: CaseContext) -> CaseRun {
    let faults = ctx.faults()?;
    let (proxied, proxy) = faults.proxied_runtime().await?;
    let topic = ctx.topic("t");
    let dead = ctx.topic("dlq");
    let subscription = || {
        let mut s = Subscription::new(topic.clone(), ctx.group("g"));
        s.dead_letter_topic = Some(dead.clone());
        s.max_deliveries = 2;
        s
    };
    ctx.create_group(&subscription()).await?;
    let dead_letters = ctx
        .subscribe(
            Subscription::new(dead.clone(), ctx.group("dlq")),
            ctx.recorder.handler("dead-letters"),
        )
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 10).await?;
    let crashing = proxied
        .subscribe(
            subscription(),
            Handler::Single(Arc::new(Hangs {
                recorder: ctx.recorder.clone(),
            })),
        )
        .await
        .doing("subscribing the member that will crash")?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            !delivered_to(h, "crashing").is_empty()
        })
        .await;
    faults.network(&proxy, NetworkFault::Cut);
    let survivor = ctx
        .subscribe(subscription(), ctx.recorder.handler("survivor"))
        .await?;
    let deadline =
        ctx.within(ctx.caps.lease + ctx.caps.redelivery_bound * 2 + ctx.caps.delivery_bound);
    ctx.recorder
        .wait_until(deadline, |h| {
            let got = delivered_to(h, "survivor");
            keys.iter().all(|k| got.contains(k))
        })
        .await;
    // Anything on its way to the dead-letter topic has had the same time to get there.
    ctx.recorder
        .wait_until(ctx.within(ctx.caps.delivery_bound / 2), |h| {
            !delivered_to(h, "dead-letters").is_empty()
        })
        .await;
    survivor.stop().await;
    dead_letters.stop().await;
    drop(crashing);
    proxied.retire().await;
    drop(proxy);
    let history = ctx.recorder.history();
    let crashed_held = delivered_to(&history, "crashing");
    let survived = delivered_to(&history, "survivor");
    let dead_lettered = delivered_to(&history, "dead-letters");
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the crashed member was handed {} messages and handled none",
        crashed_held.len()
    ));
    let wrongly: Vec<&String> = dead_lettered.iter().collect();
    outcome.expect(wrongly.is_empty(), || {
        format!(
            "dead-lettered though never handled (maxDeliveries 2, the only failure was a member's crash): {}",
            listed(&wrongly)
        )
    });
    let lost: Vec<&String> = keys
        .iter()
        .filter(|k| !survived.contains(*k) && !dead_lettered.contains(*k))
        .collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages reached neither the surviving member nor the dead-letter topic: {}",
            lost.len(),
            listed(&lost)
        )
    });
    Ok(outcome.with_history(&history))
}

async fn close_stops_delivery(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let group = ctx.group("g");
    let mut outcome = Outcome::new();

    // The runtime: a stopped subscription's handler hears nothing more.
    let first = ctx.subscribe_recorded(&topic).await?;
    let before = ctx.publish_numbered(&topic, "before", 10).await?;
    ctx.recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;
    first.stop().await;
    let stopped_at = std::time::SystemTime::now();
    let second = ctx
        .subscribe(
            Subscription::new(topic.clone(), group.clone()),
            ctx.recorder.handler("s2"),
        )
        .await?;
    let after = ctx.publish_numbered(&topic, "after", 10).await?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            let got = delivered_to(h, "s2");
            after.iter().all(|k| got.contains(k))
        })
        .await;
    // A quiet window for stragglers to the stopped handler.
    tokio::time::sleep_until(
        ctx.quiet_window()
            .min(Instant::now() + Duration::from_millis(500)),
    )
    .await;
    second.stop().await;
    let history = ctx.recorder.history();
    let late: Vec<String> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Delivered {
                key,
                subscriber,
                at,
                ..
            } if subscriber == "s1" && *at > stopped_at => key.clone(),
            _ => None,
        })
        .collect();
    outcome.expect(late.is_empty(), || {
        format!(
            "delivered to a stopped subscription's handler: {}",
            late.join(", ")
        )
    });
    let got = delivered_to(&history, "s2");
    let missed: Vec<&String> = after.iter().filter(|k| !got.contains(*k)).collect();
    outcome.expect(missed.is_empty(), || {
        format!(
            "lost: published after the first member stopped, never reached the remaining member: {}",
            listed(&missed)
        )
    });

    // The component: a closed consumer hands out nothing more.
    let component = ctx.runtime.component().clone();
    let topic = ctx.topic("c");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("c"));
    ctx.create_consumer_group(&spec).await?;
    let closing = component
        .consumer(spec.clone())
        .await
        .doing("opening a consumer")?;
    closing.close().await.doing("closing the consumer")?;
    let more = ctx.publish_numbered(&topic, "closed", 5).await?;
    match closing.receive(5, Duration::from_millis(500)).await {
        Ok(messages) if !messages.is_empty() => {
            let keys: Vec<String> = messages
                .iter()
                .filter_map(|m| m.metadata.get(KEY).cloned())
                .collect();
            outcome.fail(format!(
                "a closed consumer still received {} messages: {}",
                keys.len(),
                keys.join(", ")
            ));
        }
        _ => {}
    }
    let other = component
        .consumer(spec)
        .await
        .doing("opening another member")?;
    let mut got = BTreeSet::new();
    let deadline = ctx.within(ctx.caps.redelivery_bound + ctx.caps.delivery_bound);
    while got.len() < more.len() && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        for message in other.receive(10, wait).await.doing("receiving")? {
            other.ack(&message.id).await.doing("acking")?;
            got.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
        }
    }
    let _ = other.close().await;
    let missed: Vec<&String> = more.iter().filter(|k| !got.contains(*k)).collect();
    outcome.expect(missed.is_empty(), || {
        format!(
            "lost: published after a consumer closed, never reached the group's other member: {}",
            listed(&missed)
        )
    });
    Ok(outcome.with_history(&ctx.recorder.history()))
}

async fn exhausted_stays_dead(ctx: CaseContext, restart: bool) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = || {
        let mut s = Subscription::new(topic.clone(), ctx.group("g"));
        s.max_deliveries = 2;
        s
    };
    let mut outcome = Outcome::new();
    let doomed = ctx
        .subscribe(
            subscription(),
            ctx.recorder.scripted("s1", |event| {
                if event.metadata.get(KEY).is_some_and(|k| k == "doomed") {
                    Status::Retry
                } else {
                    Status::Success
                }
            }),
        )
        .await?;
    ctx.publish(ctx.message(&topic, "doomed"))
        .await
        .doing("publishing the doomed message")?;
    ctx.recorder
        .wait_until(
            ctx.within(ctx.caps.redelivery_bound * 2 + ctx.caps.delivery_bound),
            |h| h.delivery_count("doomed") >= 2,
        )
        .await;
    // A sentinel published now arrives after any third delivery would have.
    ctx.publish(ctx.message(&topic, "sentinel-1"))
        .await
        .doing("publishing a sentinel")?;
    ctx.recorder
        .wait_for_keys(&["sentinel-1".to_string()], ctx.delivery_deadline())
        .await;
    doomed.stop().await;
    let exhausted_after = ctx.recorder.history().delivery_count("doomed");
    outcome.expect(exhausted_after == 2, || {
        format!("the doomed message was delivered {exhausted_after} times; maxDeliveries is 2")
    });
    if restart {
        let faults = ctx.faults()?;
        faults.kill_broker().await?;
        faults.restart_broker().await?;
        outcome.note("the broker was killed and restarted after the retries were exhausted");
    }
    let recovery = ctx.within(ctx.caps.recovery_bound);
    let back =
        subscribe_until_recovered(&ctx, subscription, || ctx.recorder.handler("s2"), recovery)
            .await?;
    if publish_until_recovered(&ctx, &ctx.runtime, &topic, "sentinel-2", recovery)
        .await
        .is_none()
    {
        outcome.fail("could not publish after the reconnect within the declared recovery bound");
    }
    ctx.recorder
        .wait_for_keys(
            &["sentinel-2".to_string()],
            ctx.within(ctx.caps.recovery_bound + ctx.caps.delivery_bound),
        )
        .await;
    // Anything that would come back has had the redelivery bound to do so.
    let quiet = ctx.quiet_window();
    ctx.recorder
        .wait_until(quiet, |h| h.delivery_count("doomed") > 2)
        .await;
    back.stop().await;
    let total = ctx.recorder.history().delivery_count("doomed");
    outcome.expect(total == exhausted_after, || {
        format!(
            "an exhausted message came back: delivered {total} times in all, {} of them after the consumer reconnected{}",
            total - exhausted_after,
            if restart { " and the broker restarted" } else { "" }
        )
    });
    Ok(outcome.with_history(&ctx.recorder.history()))
}

/// How long the slow handler works: past the lease (2 s where there is none).
fn slow_handler_time(caps: &pubsub_components::Capabilities) -> Duration {
    if caps.lease.is_zero() {
        Duration::from_secs(2)
    } else {
        caps.lease + Duration::from_secs(1)
    }
}

/// Records each delivery and works `hold` on the message `slow` before answering
/// SUCCESS.
struct Slow {
    recorder: crate::history::Recorder,
    member: &'static str,
    hold: Duration,
}

#[async_trait]
impl MessageHandler for Slow {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.recorder.delivered(&event, self.member, None);
        if event.metadata.get(KEY).is_some_and(|k| k == "slow") {
            tokio::time::sleep(self.hold).await;
            self.recorder
                .note(format!("{} finished working on slow", self.member));
        }
        Ok(Status::Success)
    }
}

async fn slow_handler(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let hold = slow_handler_time(&ctx.caps);
    let subscription = || Subscription::new(topic.clone(), ctx.group("g"));
    ctx.create_group(&subscription()).await?;
    let mut members = Vec::new();
    for member in ["a", "b"] {
        members.push(
            ctx.subscribe(
                subscription(),
                Handler::Single(Arc::new(Slow {
                    recorder: ctx.recorder.clone(),
                    member,
                    hold,
                })),
            )
            .await?,
        );
    }
    ctx.publish(ctx.message(&topic, "slow"))
        .await
        .doing("publishing the slow message")?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| h.delivery_count("slow") >= 1)
        .await;
    let first = ctx.recorder.history().records.iter().find_map(|r| match r {
        Record::Delivered {
            key: Some(k),
            at,
            subscriber,
            ..
        } if k == "slow" => Some((*at, subscriber.clone())),
        _ => None,
    });
    // The first handler works `hold`; a second delivery meanwhile is what is judged.
    tokio::time::sleep(hold + ctx.caps.redelivery_bound).await;
    ctx.publish(ctx.message(&topic, "sentinel"))
        .await
        .doing("publishing a sentinel")?;
    ctx.recorder
        .wait_for_keys(&["sentinel".to_string()], ctx.delivery_deadline())
        .await;
    for member in members {
        member.stop().await;
    }
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new();
    let Some((first_at, first_member)) = first else {
        outcome.fail("lost: the slow message was never delivered");
        return Ok(outcome.with_history(&history));
    };
    let while_working: Vec<String> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Delivered {
                key: Some(k),
                at,
                subscriber,
                ..
            } if k == "slow"
                && *at > first_at
                && at.duration_since(first_at).unwrap_or_default() < hold =>
            {
                Some(format!(
                    "to {subscriber} {} ms after {first_member} got it",
                    at.duration_since(first_at).unwrap_or_default().as_millis()
                ))
            }
            _ => None,
        })
        .collect();
    outcome.note(format!(
        "the handler worked {} ms on the message (declared lease {} ms)",
        hold.as_millis(),
        ctx.caps.lease.as_millis()
    ));
    if while_working.is_empty() {
        outcome.note("nobody else got the message while its handler worked");
    } else if ctx.caps.redelivers_slow_handlers {
        outcome.note(format!(
            "handed to another member while the first still worked (declared: the lease expires): {}",
            while_working.join("; ")
        ));
    } else {
        outcome.fail(format!(
            "handed to another member while the first still worked on it, though the component does not declare that it may: {}",
            while_working.join("; ")
        ));
    }
    Ok(outcome.with_history(&history))
}

/// Counts deliveries per group without recording each (10000s of them).
struct Tally {
    group: usize,
    seen: Arc<Mutex<Vec<HashSet<String>>>>,
    changed: Arc<Notify>,
}

#[async_trait]
impl MessageHandler for Tally {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        let key = event.metadata.get(KEY).cloned().unwrap_or_default();
        self.seen.lock().unwrap()[self.group].insert(key);
        self.changed.notify_waiters();
        Ok(Status::Success)
    }
}

async fn backlog(ctx: CaseContext) -> CaseRun {
    const TOPICS: usize = 10;
    const PER_TOPIC: usize = 1000;
    // Two groups per topic, one on a work queue (no fan-out).
    let groups: usize = if ctx.caps.fan_out { 2 } else { 1 };
    let topics: Vec<String> = (0..TOPICS).map(|t| ctx.topic(&format!("t{t}"))).collect();
    let mut subscriptions = Vec::new();
    for topic in &topics {
        for group in 0..groups {
            let subscription = Subscription::new(topic.clone(), ctx.group(&format!("g{group}")));
            ctx.create_group(&subscription).await?;
            subscriptions.push((group, subscription));
        }
    }
    let started = Instant::now();
    let mut published: BTreeMap<String, usize> = BTreeMap::new();
    for (t, topic) in topics.iter().enumerate() {
        for chunk in 0..PER_TOPIC / 100 {
            let keys: Vec<String> = (0..100)
                .map(|i| format!("t{t}-{}", chunk * 100 + i))
                .collect();
            let response = ctx
                .runtime
                .bulk_publish(BulkPublishRequest {
                    topic: topic.clone(),
                    entries: keys.iter().map(|k| keyed_entry(k)).collect(),
                    metadata: Metadata::new(),
                })
                .await
                .doing("bulk publishing the backlog")?;
            for key in keys.iter().filter(|k| !response.failed(k)) {
                published.insert(key.clone(), t);
            }
        }
    }
    let publish_time = started.elapsed();
    let seen: Arc<Mutex<Vec<HashSet<String>>>> = Arc::new(Mutex::new(vec![HashSet::new(); groups]));
    let changed = Arc::new(Notify::new());
    let drain_started = Instant::now();
    let mut handles = Vec::new();
    for (group, subscription) in subscriptions {
        let handler = Handler::Single(Arc::new(Tally {
            group,
            seen: seen.clone(),
            changed: changed.clone(),
        }));
        handles.push(ctx.subscribe(subscription, handler).await?);
    }
    let expected = published.len();
    let deadline = ctx.deadline();
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if seen.lock().unwrap().iter().all(|s| s.len() >= expected) {
            break;
        }
        if tokio::time::timeout_at(
            deadline.min(Instant::now() + Duration::from_millis(500)),
            notified,
        )
        .await
        .is_err()
            && Instant::now() >= deadline
        {
            break;
        }
    }
    let drain_time = drain_started.elapsed();
    for handle in handles {
        handle.stop().await;
    }
    let seen = seen.lock().unwrap().clone();
    let mut outcome = Outcome::new();
    let delivered: usize = seen.iter().map(HashSet::len).sum();
    outcome.note(format!(
        "published {expected} messages over {TOPICS} topics in {} ms ({:.0} msg/s, bulk x100); drained {delivered} deliveries to {} groups in {} ms ({:.0} msg/s)",
        publish_time.as_millis(),
        expected as f64 / publish_time.as_secs_f64().max(0.001),
        TOPICS * groups,
        drain_time.as_millis(),
        delivered as f64 / drain_time.as_secs_f64().max(0.001)
    ));
    outcome.expect(expected == TOPICS * PER_TOPIC, || {
        format!(
            "{} of {} backlog entries were refused at publish",
            TOPICS * PER_TOPIC - expected,
            TOPICS * PER_TOPIC
        )
    });
    for (group, got) in seen.iter().enumerate() {
        let missing: Vec<&String> = published.keys().filter(|k| !got.contains(*k)).collect();
        outcome.expect(missing.is_empty(), || {
            format!(
                "lost: group g{group} never got {} of {expected} backlog messages: {}",
                missing.len(),
                listed(&missing)
            )
        });
        let unexpected: Vec<&String> = got.iter().filter(|k| !published.contains_key(*k)).collect();
        outcome.expect(unexpected.is_empty(), || {
            format!(
                "unexpected: group g{group} got messages never published: {}",
                listed(&unexpected)
            )
        });
    }
    Ok(outcome)
}

async fn retry_while_members_change(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = || {
        let mut s = Subscription::new(topic.clone(), ctx.group("g"));
        s.max_deliveries = 10;
        s
    };
    // Every message fails its first delivery and succeeds after.
    let script = |event: &Event| {
        if event.attempt <= 1 {
            Status::Retry
        } else {
            Status::Success
        }
    };
    ctx.create_group(&subscription()).await?;
    let staying = ctx
        .subscribe(subscription(), ctx.recorder.scripted("staying", script))
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 40).await?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            h.records
                .iter()
                .filter(|r| matches!(r, Record::Delivered { .. }))
                .count()
                >= 10
        })
        .await;
    let visiting = ctx
        .subscribe(subscription(), ctx.recorder.scripted("visiting", script))
        .await?;
    ctx.recorder
        .wait_until(ctx.within(Duration::from_millis(1500)), |h| {
            !delivered_to(h, "visiting").is_empty()
        })
        .await;
    ctx.recorder.note("the visiting member leaves");
    visiting.stop().await;
    let handled = |h: &History| -> BTreeSet<String> {
        h.records
            .iter()
            .filter_map(|r| match r {
                Record::Delivered {
                    key: Some(key),
                    attempt,
                    ..
                } if *attempt >= 2 => Some(key.clone()),
                _ => None,
            })
            .collect()
    };
    ctx.recorder
        .wait_until(
            ctx.within(ctx.caps.redelivery_bound * 3 + ctx.caps.delivery_bound * 2),
            |h| {
                let done = handled(h);
                keys.iter().all(|k| done.contains(k))
            },
        )
        .await;
    staying.stop().await;
    let history = ctx.recorder.history();
    let done = handled(&history);
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the visiting member was handed {} messages before it left",
        delivered_to(&history, "visiting").len()
    ));
    let lost: Vec<&String> = keys.iter().filter(|k| !done.contains(*k)).collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages were never handled successfully (every message succeeds on its second delivery): {}",
            lost.len(),
            listed(&lost)
        )
    });
    Ok(outcome.with_history(&history))
}
