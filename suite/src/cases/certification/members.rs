//! certification.* as members come and go: a member that leaves, crashes or closes
//! hands its messages on, and nothing reaches a closed consumer.

use super::{delivered_to, listed};
use crate::cases::returned_after;
use crate::context::CaseContext;
use crate::fault_injection::Faults;
use crate::fault_proxy::NetworkFault;
use crate::history::{History, Record, KEY};
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use async_trait::async_trait;
use pubsub_components::runtime::{Event, Handler, MessageHandler, Status, Subscription};
use pubsub_components::{Consumer, ConsumerSpec, TopicSelector};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// When the member that must get what a leaving member held joins its group.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::cases) enum Staying {
    /// After the first member left.
    Later,
    /// After the first member received, before it leaves.
    Meanwhile,
    /// Before the first member joined.
    Throughout,
}

/// How the member that leaves goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::cases) enum Leaving {
    /// It is closed.
    Closed,
    /// Its handle is dropped without a close (as a crashed member's, what it held may
    /// come back only after the lease).
    Dropped,
}

/// A member leaves holding messages, as `leaving` says, and another member of its
/// group, joined as `staying` says, must get them.
pub(in crate::cases) async fn consumer_leaves(
    ctx: CaseContext,
    staying: Staying,
    leaving_as: Leaving,
) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    let component = ctx.runtime.component().clone();
    ctx.create_consumer_group(&spec).await?;
    let mut done = BTreeSet::new();
    // Where the member that stays is there first, the messages come once both are
    // (else the first would take them all).
    let (first, leaving, keys) = if staying == Staying::Throughout {
        let first = join_staying(&ctx, &spec, &mut done).await?;
        let leaving = ctx
            .open_consumer(spec.clone(), "opening the member that leaves")
            .await?;
        let keys = ctx.publish_numbered(&topic, "m", 40).await?;
        (Some(first), leaving, keys)
    } else {
        let keys = ctx.publish_numbered(&topic, "m", 40).await?;
        let leaving = ctx
            .open_consumer(spec.clone(), "opening the member that leaves")
            .await?;
        (None, leaving, keys)
    };
    // Up to 20 messages, within one delivery bound; once some came, until a receive
    // of half a second brings no more (the member there first may hold the rest).
    let until = ctx.delivery_deadline();
    let mut received = Vec::new();
    while received.len() < 20 && Instant::now() < until {
        let mut wait = until.saturating_duration_since(Instant::now());
        if !received.is_empty() {
            wait = wait.min(Duration::from_millis(500));
        }
        let more = leaving
            .receive(20 - received.len(), wait)
            .await
            .doing("receiving")?;
        if more.is_empty() && !received.is_empty() {
            break;
        }
        received.extend(more);
    }
    for message in received.iter().take(10) {
        leaving.ack(&message.id).await.doing("acking")?;
        done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
    }
    let first = match (first, staying) {
        (None, Staying::Meanwhile) => Some(join_staying(&ctx, &spec, &mut done).await?),
        (first, _) => first,
    };
    match leaving_as {
        Leaving::Closed => leaving
            .close()
            .await
            .doing("closing the member that leaves")?,
        Leaving::Dropped => drop(leaving),
    }
    let staying_member = match first {
        Some(member) => member,
        None => component
            .consumer(spec)
            .await
            .doing("opening the member that stays")?,
    };
    let staying_label = match staying {
        Staying::Later => "after it left",
        Staying::Meanwhile => "before it left",
        Staying::Throughout => "before it joined",
    };
    let returned = match leaving_as {
        Leaving::Closed => returned_after(&ctx.caps),
        Leaving::Dropped => ctx.caps.lease + ctx.caps.redelivery_bound,
    };
    let deadline = ctx.within(ctx.caps.redelivery_bound + ctx.caps.delivery_bound + returned);
    while done.len() < keys.len() && Instant::now() < deadline {
        let wait = deadline.saturating_duration_since(Instant::now());
        for message in staying_member.receive(40, wait).await.doing("receiving")? {
            staying_member.ack(&message.id).await.doing("acking")?;
            done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
        }
    }
    let _ = staying_member.close().await;
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the member that left ({}) received {} and acked {} before leaving; the member that stayed joined {staying_label}",
        match leaving_as {
            Leaving::Closed => "closed",
            Leaving::Dropped => "dropped without a close",
        },
        received.len(),
        received.len().min(10),
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

/// Opens the member that stays, and receives once (so that a component whose members
/// join on their first receive has joined), at most one message, acknowledged.
async fn join_staying(
    ctx: &CaseContext,
    spec: &ConsumerSpec,
    done: &mut BTreeSet<String>,
) -> Result<Box<dyn Consumer>, CaseError> {
    let staying = ctx
        .open_consumer(spec.clone(), "opening the member that stays")
        .await?;
    for message in staying
        .receive(1, Duration::ZERO)
        .await
        .doing("receiving")?
    {
        staying.ack(&message.id).await.doing("acking")?;
        done.insert(message.metadata.get(KEY).cloned().unwrap_or_default());
    }
    Ok(staying)
}

pub(in crate::cases) async fn consumer_crash(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
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
        .open_consumer(spec, "opening the surviving member")
        .await?;
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

pub(in crate::cases) async fn crash_not_dead_lettered(ctx: CaseContext) -> CaseRun {
    let faults = Faults::of(&ctx)?;
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

/// How long the member whose subscription is dropped works on each message.
pub(in crate::cases) const PACE: Duration = Duration::from_millis(100);

/// Records each delivery and works [`PACE`] on it before answering SUCCESS.
struct Paced {
    recorder: crate::history::Recorder,
    member: &'static str,
}

#[async_trait]
impl MessageHandler for Paced {
    async fn handle(&self, event: pubsub_components::runtime::Event) -> Result<Status, String> {
        self.recorder.delivered(&event, self.member, None);
        tokio::time::sleep(PACE).await;
        Ok(Status::Success)
    }
}

/// A subscription's handle is dropped, without a stop, while its member works
/// through what it received and another member of its group is subscribed: no
/// handler call starts after the drop, and what it had not handled reaches the other.
pub(in crate::cases) async fn subscription_dropped_others_stay(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = || Subscription::new(topic.clone(), ctx.group("g"));
    ctx.create_group(&subscription()).await?;
    let keys = ctx.publish_numbered(&topic, "m", 40).await?;
    let paced = Paced {
        recorder: ctx.recorder.clone(),
        member: "s1",
    };
    let leaving = ctx
        .subscribe(subscription(), Handler::Single(Arc::new(paced)))
        .await?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            delivered_to(h, "s1").len() >= 3
        })
        .await;
    let subscribed_at = std::time::SystemTime::now();
    let staying = ctx
        .subscribe(subscription(), ctx.recorder.handler("s2"))
        .await?;
    drop(leaving);
    let dropped_at = std::time::SystemTime::now();
    let returned = returned_after(&ctx.caps) + PACE;
    let all_by = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound + returned);
    ctx.recorder.wait_for_keys(&keys, all_by).await;
    // A quiet window for calls the dropped subscription should not have started.
    tokio::time::sleep_until(ctx.quiet_window().min(Instant::now() + 4 * PACE)).await;
    staying.stop().await;
    let history = ctx.recorder.history();
    let after_drop = delivered_after(&history, "s1", dropped_at);
    let before_drop = delivered_to(&history, "s1")
        .len()
        .saturating_sub(after_drop.len());
    if before_drop >= keys.len() {
        return Err(CaseError::CannotProvoke(format!(
            "the member handled all {} messages before its handle was dropped (the other member took {:?} to subscribe): nothing was left mid-work",
            keys.len(),
            dropped_at.duration_since(subscribed_at).unwrap_or_default()
        )));
    }
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "the dropped subscription's handler was called for {} messages, {} of them after the drop",
        delivered_to(&history, "s1").len(),
        after_drop.len()
    ));
    // One call may have started as the handle was dropped.
    outcome.expect(after_drop.len() <= 1, || {
        format!(
            "handler calls started after the subscription's handle was dropped: {} ({})",
            after_drop.len(),
            after_drop.join(", ")
        )
    });
    let delivered = history.delivered_keys();
    let lost: Vec<&String> = keys.iter().filter(|k| !delivered.contains(*k)).collect();
    outcome.expect(lost.is_empty(), || {
        format!(
            "lost: {} messages never reached a member after a subscription's handle was dropped: {}",
            lost.len(),
            listed(&lost)
        )
    });
    Ok(outcome.with_history(&history))
}

pub(in crate::cases) async fn close_stops_delivery(ctx: CaseContext) -> CaseRun {
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
    let late = delivered_after(&history, "s1", stopped_at);
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

pub(in crate::cases) async fn retry_while_members_change(ctx: CaseContext) -> CaseRun {
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
    // What the visiting member held returns with the redelivery bound, or its lease
    // where the component declares that a closed member's messages return only then
    // (reads still in flight when it closed included).
    let window =
        ctx.caps.redelivery_bound * 3 + ctx.caps.delivery_bound * 2 + returned_after(&ctx.caps);
    ctx.recorder
        .wait_until(ctx.within(window), |h| {
            let done = handled(h);
            keys.iter().all(|k| done.contains(k))
        })
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
            "not handled within {window:?} of the visiting member leaving: {} messages (every message succeeds on its second delivery): {}",
            lost.len(),
            listed(&lost)
        )
    });
    Ok(outcome.with_history(&history))
}

/// The keys whose deliveries to `subscriber` began after `since`, in order.
fn delivered_after(
    history: &History,
    subscriber: &str,
    since: std::time::SystemTime,
) -> Vec<String> {
    history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Delivered {
                key,
                subscriber: s,
                at,
                ..
            } if s == subscriber && *at > since => key.clone(),
            _ => None,
        })
        .collect()
}
