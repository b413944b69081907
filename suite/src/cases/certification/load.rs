//! certification.* under load: concurrent publishers, long drains, backlogs and slow
//! handlers.

use crate::cases::keyed_entry;
use crate::context::CaseContext;
use crate::history::{Record, KEY};
use crate::outcome::{CaseRun, Context, Outcome};
use async_trait::async_trait;
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, Event, Handler, MessageHandler, Status, Subscription,
};
use std::collections::HashSet;
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

pub(in crate::cases) async fn long_drain(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = Subscription::new(topic.clone(), ctx.group("g"));
    ctx.create_group(&subscription).await?;
    let started = Instant::now();
    let mut refused = 0;
    for chunk in 0..DRAIN_MESSAGES / 100 {
        let keys: Vec<String> = (0..100).map(|i| format!("m{}", chunk * 100 + i)).collect();
        let response = ctx
            .runtime
            .bulk_publish(BulkPublishRequest::new(
                &topic,
                keys.iter().map(|k| keyed_entry(k)).collect(),
            ))
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

pub(in crate::cases) async fn concurrent_publishers(ctx: CaseContext) -> CaseRun {
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
        ctx.bulk_publish(BulkPublishRequest::new(&topic, entries))
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
    Ok(ctx.check(&ctx.criteria()))
}

/// How long the slow handler works: past the lease (2 s where there is none).
pub(in crate::cases) fn slow_handler_time(caps: &pubsub_components::Capabilities) -> Duration {
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

pub(in crate::cases) async fn slow_handler(ctx: CaseContext) -> CaseRun {
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
