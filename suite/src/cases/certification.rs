//! Certification under faults and load: members leaving a group, concurrent
//! publishers, a long drain whose rate must stay flat.

use super::keyed_entry;
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseRun, Context, Outcome};
use async_trait::async_trait;
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, Event, Handler, MessageHandler, Status, Subscription,
};
use pubsub_components::{ConsumerSpec, Feature, Metadata, TopicSelector};
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Messages `certification.long-drain` publishes and drains.
const DRAIN_MESSAGES: usize = 100_000;
/// What a tenth of the drain may take beyond twice the first tenth's time before it
/// counts as a slowdown: scheduling noise on a loaded machine, which on a fast broker
/// (a tenth in tens of milliseconds) would otherwise decide the verdict.
const DRAIN_NOISE: Duration = Duration::from_millis(250);

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "certification.consumer-leaves",
            must: "When a consumer leaves its group with messages received but not acknowledged, those messages MUST be delivered to another member (within the redelivery bound, or the lease where the component declares that a closed member's messages return only then); nothing is lost.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("2 x delivery bound + redelivery bound (+ lease where messages return only after it)", |c| {
                c.delivery_bound * 2 + c.redelivery_bound + returned_after(c)
            }),
            run: |ctx| Box::pin(consumer_leaves(ctx)),
        },
        Case {
            id: "certification.concurrent-publishers",
            must: "Under concurrent single and bulk publishers every acknowledged message MUST be delivered, and nothing unpublished may appear.",
            requires: &[],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("4 x delivery bound", |c| c.delivery_bound * 4),
            run: |ctx| Box::pin(concurrent_publishers(ctx)),
        },
        Case {
            id: "certification.long-drain",
            must: "A group draining a topic of 100000 messages MUST receive every one, and reading MUST NOT cost more as the group advances: the last tenth of the drain takes at most twice as long as the first (plus 250 ms of scheduling noise).",
            requires: &[Feature::BulkPublish],
            level: Level::Certification,
            injects: &[],
            bound: Bound::new("2 x delivery bound + 240 s", |c| {
                c.delivery_bound * 2 + Duration::from_secs(240)
            }),
            run: |ctx| Box::pin(long_drain(ctx)),
        },
    ]
}

/// When each distinct message was first delivered, in delivery order.
struct Timeline {
    state: Mutex<TimelineState>,
    changed: Notify,
}

struct TimelineState {
    seen: HashSet<String>,
    firsts: Vec<Instant>,
    repeats: usize,
}

impl Timeline {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Timeline {
            state: Mutex::new(TimelineState {
                seen: HashSet::with_capacity(capacity),
                firsts: Vec::with_capacity(capacity),
                repeats: 0,
            }),
            changed: Notify::new(),
        })
    }

    fn distinct(&self) -> usize {
        self.state.lock().unwrap().seen.len()
    }
}

#[async_trait]
impl MessageHandler for Timeline {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        let key = event.metadata.get(KEY).cloned().unwrap_or_default();
        {
            let mut state = self.state.lock().unwrap();
            if state.seen.insert(key) {
                state.firsts.push(Instant::now());
            } else {
                state.repeats += 1;
            }
        }
        self.changed.notify_waiters();
        Ok(Status::Success)
    }
}

async fn long_drain(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = Subscription::new(topic.clone(), ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let started = Instant::now();
    let mut refused = 0;
    for chunk in 0..DRAIN_MESSAGES / 100 {
        let keys: Vec<String> = (0..100).map(|i| format!("m{}", chunk * 100 + i)).collect();
        let response = ctx
            .runtime
            .bulk_publish(BulkPublishRequest {
                topic: topic.clone(),
                entries: keys.iter().map(|k| keyed_entry(k)).collect(),
                metadata: Metadata::new(),
            })
            .await
            .doing("bulk publishing the topic to drain")?;
        refused += keys.iter().filter(|k| response.failed(k)).count();
    }
    let publish_time = started.elapsed();
    let expected = DRAIN_MESSAGES - refused;
    let timeline = Timeline::new(DRAIN_MESSAGES);
    let drain_started = Instant::now();
    let handle = ctx
        .subscribe(subscription, Handler::Single(timeline.clone()))
        .await?;
    let deadline = ctx.deadline();
    loop {
        let notified = timeline.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if timeline.distinct() >= expected
            || tokio::time::timeout_at(deadline, notified).await.is_err()
        {
            break;
        }
    }
    let drain_time = drain_started.elapsed();
    handle.stop().await;
    let state = timeline.state.lock().unwrap();
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "published {expected} messages in {} ms (bulk x100); one group read {} of them in {} ms, {} delivered again",
        publish_time.as_millis(),
        state.seen.len(),
        drain_time.as_millis(),
        state.repeats
    ));
    outcome.expect(refused == 0, || {
        format!("{refused} of {DRAIN_MESSAGES} entries were refused at publish")
    });
    outcome.expect(state.seen.len() >= expected, || {
        format!(
            "lost: {} of {expected} messages were not delivered within the bound",
            expected - state.seen.len().min(expected)
        )
    });
    let tenth = state.firsts.len() / 10;
    if tenth >= 2 {
        let span = |from: usize| state.firsts[from + tenth - 1] - state.firsts[from];
        let spans: Vec<Duration> = (0..10).map(|k| span(k * tenth)).collect();
        let rate = |d: Duration| tenth as f64 / d.as_secs_f64().max(1e-6);
        outcome.note(format!(
            "consume rate per tenth of the drain (msg/s): {}",
            spans
                .iter()
                .map(|d| format!("{:.0}", rate(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let (first, last) = (spans[0], spans[9]);
        outcome.expect(last <= first * 2 + DRAIN_NOISE, || {
            format!(
                "reading slowed down as the group advanced: the last tenth took {} ms ({:.0} msg/s), the first {} ms ({:.0} msg/s), {:.1}x slower (at most 2x allowed)",
                last.as_millis(),
                rate(last),
                first.as_millis(),
                rate(first),
                last.as_secs_f64() / first.as_secs_f64().max(1e-6)
            )
        });
    }
    Ok(outcome)
}

/// How long a closed member's unacknowledged messages may take to return beyond the
/// redelivery bound: its lease, where the component declares they return only then.
fn returned_after(caps: &pubsub_components::Capabilities) -> Duration {
    if caps.returns_on_close {
        Duration::ZERO
    } else {
        caps.lease
    }
}

async fn consumer_leaves(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    let component = ctx.runtime.component().clone();
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 40).await?;
    let leaving = component
        .consumer(spec.clone())
        .await
        .doing("opening the first member")?;
    let mut received = Vec::new();
    while received.len() < 20 && Instant::now() < ctx.delivery_deadline() {
        let wait = ctx
            .delivery_deadline()
            .saturating_duration_since(Instant::now());
        received.extend(
            leaving
                .receive(20 - received.len(), wait)
                .await
                .doing("receiving")?,
        );
    }
    let mut done = BTreeSet::new();
    for message in received.iter().take(10) {
        leaving.ack(&message.id).await.doing("acking")?;
        done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
    }
    leaving.close().await.doing("closing the first member")?;
    let staying = component
        .consumer(spec)
        .await
        .doing("opening the second member")?;
    let deadline =
        ctx.within(ctx.caps.redelivery_bound + ctx.caps.delivery_bound + returned_after(&ctx.caps));
    while done.len() < keys.len() && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        for message in staying.receive(40, wait).await.doing("receiving")? {
            staying.ack(&message.id).await.doing("acking")?;
            done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
        }
    }
    let _ = staying.close().await;
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the first member received {} and acked 10 before leaving",
        received.len()
    ));
    if !ctx.caps.returns_on_close {
        outcome.note(format!(
            "declared: a closed member's messages return only after the lease ({:?}), so they were waited for that long too",
            ctx.caps.lease
        ));
    }
    let lost: Vec<&String> = keys.iter().filter(|k| !done.contains(*k)).collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages never reached a member after the first left: {lost:?}",
            lost.len()
        )
    });
    Ok(outcome)
}

async fn concurrent_publishers(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let labels: Vec<String> = (0..4).map(|p| format!("p{p}")).collect();
    let singles = labels
        .iter()
        .map(|label| ctx.publish_numbered(&topic, label, 50));
    let bulks = (0..2).map(|b| {
        let entries: Vec<BulkPublishEntry> = (0..50)
            .map(|i| {
                let key = format!("b{b}-{i}");
                super::keyed_entry(&key)
            })
            .collect();
        ctx.bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata: Metadata::new(),
        })
    });
    let (single_results, bulk_results) = futures::join!(
        futures::future::join_all(singles),
        futures::future::join_all(bulks)
    );
    let mut keys = Vec::new();
    for result in single_results {
        keys.extend(result?);
    }
    for result in bulk_results {
        let response = result.doing("bulk publishing concurrently")?;
        keys.extend(
            (0..2)
                .flat_map(|b| (0..50).map(move |i| format!("b{b}-{i}")))
                .filter(|k| !response.failed(k)),
        );
    }
    keys.sort();
    keys.dedup();
    ctx.recorder
        .wait_for_keys(&keys, ctx.within(ctx.caps.delivery_bound * 2))
        .await;
    handle.stop().await;
    Ok(ctx.check(&ctx.expectation()))
}
