//! certification.*: behaviour under faults and load, by what each case exercises;
//! what several of them share.

pub(super) mod broker;
pub(super) mod load;
pub(super) mod members;
pub(super) mod network;

use crate::cases::keyed_entry;
use crate::context::CaseContext;
use crate::fault_injection::Faults;
use crate::history::{History, Record, KEY};
use crate::outcome::{CaseRun, Context, Outcome};
use async_trait::async_trait;
use pubsub_components::runtime::{
    BulkPublishRequest, Event, Handler, MessageHandler, Runtime, Status, Subscription,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a network or pause fault lasts: long enough for clients to notice
/// (time is the property here).
const FAULT_LENGTH: Duration = Duration::from_secs(2);

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

pub(super) async fn exhausted_stays_dead(ctx: CaseContext, restart: bool) -> CaseRun {
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
        let faults = Faults::of(&ctx)?;
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

pub(super) async fn backlog(ctx: CaseContext) -> CaseRun {
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
                .bulk_publish(BulkPublishRequest::new(
                    topic.as_str(),
                    keys.iter().map(|k| keyed_entry(k)).collect(),
                ))
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
