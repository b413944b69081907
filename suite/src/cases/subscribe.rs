//! subscribe.*: groups share their messages between members and each group gets
//! every message; acknowledged messages stay acknowledged; a cancelled receive loses
//! nothing.

use super::{generate, received_key, returned_after};
use crate::context::CaseContext;
use crate::history::Record;
use crate::outcome::{CaseRun, Context, Outcome};
use pubsub_components::runtime::Subscription;
use pubsub_components::{
    Consumer, ConsumerSpec, ErrorKind, PubSubError, ReceivedMessage, StartPosition, TopicSelector,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

pub(super) async fn competing_consumers(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let group = ctx.group("shared");
    let first = ctx.subscribe_member(&topic, &group, "member-1").await?;
    let second = ctx.subscribe_member(&topic, &group, "member-2").await?;
    let keys = ctx.publish_numbered(&topic, "m", 100).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    first.stop().await;
    second.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let history = ctx.recorder.history();
    let mut first_deliveries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in &history.records {
        if let Record::Delivered {
            key: Some(key),
            attempt: 1,
            subscriber,
            ..
        } = record
        {
            // A member that gets the same message twice has a duplicate (the
            // checker judges it); sharing is violated only across members.
            let members = first_deliveries.entry(key.clone()).or_default();
            if !members.contains(subscriber) {
                members.push(subscriber.clone());
            }
        }
    }
    let shared: Vec<String> = first_deliveries
        .iter()
        .filter(|(_, members)| members.len() > 1)
        .map(|(key, members)| format!("{key} to {}", members.join(" and ")))
        .collect();
    outcome.expect(shared.is_empty(), || {
        format!(
            "{} messages were first-delivered to more than one member of the group: {}",
            shared.len(),
            shared
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let per_member = |m: &str| {
        first_deliveries
            .values()
            .filter(|v| v.iter().any(|s| s == m))
            .count()
    };
    outcome.note(format!(
        "member-1 got {}, member-2 got {}",
        per_member("member-1"),
        per_member("member-2")
    ));
    Ok(outcome)
}

pub(super) async fn fan_out(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let first = ctx
        .subscribe_member(&topic, &ctx.group("a"), "group-a")
        .await?;
    let second = ctx
        .subscribe_member(&topic, &ctx.group("b"), "group-b")
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 30).await?;
    let all: BTreeSet<String> = keys.iter().cloned().collect();
    let got = |h: &crate::history::History, who: &str| -> BTreeSet<String> {
        h.records
            .iter()
            .filter_map(|r| match r {
                Record::Delivered {
                    key: Some(k),
                    subscriber,
                    ..
                } if subscriber == who => Some(k.clone()),
                _ => None,
            })
            .collect()
    };
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            got(h, "group-a") == all && got(h, "group-b") == all
        })
        .await;
    first.stop().await;
    second.stop().await;
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new().with_history(&history);
    for who in ["group-a", "group-b"] {
        let delivered = got(&history, who);
        let missing: Vec<&String> = all.difference(&delivered).collect();
        outcome.expect(missing.is_empty(), || {
            format!("{who} missed {} messages: {missing:?}", missing.len())
        });
    }
    Ok(outcome)
}

/// Messages published in each phase of the case.
const PER_PHASE: usize = 30;

/// Which phase a key was published in: the drop point it met.
fn phase_of(key: &str) -> &str {
    key.split('-').next().unwrap_or(key)
}

/// Receives what is ready on `member` and acknowledges it, recording the keys.
async fn take_ready(
    member: &dyn Consumer,
    wait: Duration,
    taken: &mut BTreeMap<String, usize>,
) -> Result<(), crate::outcome::CaseError> {
    for message in member.receive(50, wait).await.doing("receiving")? {
        member.ack(&message.id).await.doing("acknowledging")?;
        let key = received_key(&message);
        *taken.entry(key).or_insert(0) += 1;
    }
    Ok(())
}

pub(super) async fn cancelled_receive(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    let component = ctx.runtime.component().clone();
    ctx.create_consumer_group(&spec).await?;
    let member = component
        .consumer(spec.clone())
        .await
        .doing("opening the member")?;
    // Drop points, picked from the case's seed: how long each dropped receive runs.
    let drops: Vec<u64> = generate(0u64..40, ctx.seed(), 24);
    let mut taken: BTreeMap<String, usize> = BTreeMap::new();
    let mut dropped = 0usize;

    // 1. Before anything is ready: receives dropped while they wait.
    for wait in drops.iter().take(6) {
        let receive = member.receive(10, Duration::from_secs(5));
        if tokio::time::timeout(Duration::from_millis(*wait), receive)
            .await
            .is_err()
        {
            dropped += 1;
        }
    }
    let mut keys = ctx.publish_numbered(&topic, "ready", PER_PHASE).await?;

    // 2. As messages become ready: a publisher runs while receives are dropped after
    // a few milliseconds (a receive that completes is taken as it is).
    let publishing = ctx.publish_numbered(&topic, "arriving", PER_PHASE);
    let receiving = async {
        let mut outcome: Result<(), crate::outcome::CaseError> = Ok(());
        for wait in drops.iter().skip(6).take(12) {
            let receive = member.receive(5, Duration::from_millis(200));
            match tokio::time::timeout(Duration::from_millis(*wait), receive).await {
                Err(_) => dropped += 1,
                Ok(Ok(messages)) => {
                    for message in messages {
                        if let Err(e) = member.ack(&message.id).await.doing("acknowledging") {
                            outcome = Err(e);
                        }
                        let key = received_key(&message);
                        *taken.entry(key).or_insert(0) += 1;
                    }
                }
                Ok(Err(e)) => outcome = Err(e).doing("receiving"),
            }
        }
        outcome
    };
    let (published, received) = tokio::join!(publishing, receiving);
    keys.extend(published?);
    received?;

    // 3. Mid-batch: batch receives (native ones; else receives of up to a batch)
    // dropped before their wait ends, with messages already collected.
    keys.extend(ctx.publish_numbered(&topic, "batch", PER_PHASE).await?);
    let native_batches = ctx.caps.bulk_subscribe == pubsub_components::Support::Native;
    for wait in drops.iter().skip(18) {
        let receive = async {
            if native_batches {
                member
                    .receive_batch(PER_PHASE, Duration::from_millis(300))
                    .await
            } else {
                member.receive(PER_PHASE, Duration::from_millis(300)).await
            }
        };
        match tokio::time::timeout(Duration::from_millis(*wait), receive).await {
            Err(_) => dropped += 1,
            Ok(messages) => {
                for message in messages.doing("receiving a batch")? {
                    member.ack(&message.id).await.doing("acknowledging")?;
                    let key = received_key(&message);
                    *taken.entry(key).or_insert(0) += 1;
                }
            }
        }
    }

    // Without a close: the same member and a second one must get everything.
    let other = component
        .consumer(spec)
        .await
        .doing("opening a second member")?;
    // A dropped receive must strand nothing: no lease to wait out, whatever the
    // component declares about members that close.
    let deadline = ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound);
    let all: BTreeSet<&String> = keys.iter().collect();
    while Instant::now() < deadline && !all.iter().all(|k| taken.contains_key(*k)) {
        take_ready(member.as_ref(), Duration::from_millis(100), &mut taken).await?;
        take_ready(other.as_ref(), Duration::from_millis(100), &mut taken).await?;
    }
    let _ = member.close().await;
    let _ = other.close().await;

    let mut outcome = Outcome::new();
    outcome.note(format!(
        "{} messages in three phases; {dropped} receives dropped (drop points {drops:?} ms, from the seed)",
        keys.len()
    ));
    let mut missing: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for key in &keys {
        if !taken.contains_key(key) {
            missing.entry(phase_of(key)).or_default().push(key);
        }
    }
    for (phase, lost) in missing {
        let point = match phase {
            "ready" => "receives dropped while nothing was ready",
            "arriving" => "receives dropped as messages became ready",
            _ => "batch receives dropped mid-batch",
        };
        outcome.fail(format!(
            "lost after a dropped receive: {} messages published around {point} never reached a member: {:?}",
            lost.len(),
            lost.iter().take(8).collect::<Vec<_>>()
        ));
    }
    Ok(outcome)
}

/// Messages of the settlement case: enough that a defect hitting 1 in 100 shows.
const SETTLED_MESSAGES: usize = 300;

/// A member consumes, leaves; messages published while the group is empty must reach
/// the member that returns (the group existed all along).
pub(super) async fn group_without_members(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let group = ctx.group("g");
    let first = ctx.subscribe_member(&topic, &group, "member-1").await?;
    let before = ctx.publish_numbered(&topic, "before", 5).await?;
    let all_before = ctx
        .recorder
        .wait_for_keys(&before, ctx.delivery_deadline())
        .await;
    first.stop().await;
    if !all_before {
        ctx.recorder
            .note("not every message reached the first member before it left");
    }
    // Trickle and burst while nobody is connected.
    let mut while_empty = Vec::new();
    for i in 0..5 {
        let key = format!("while-empty-{i}");
        ctx.publish(ctx.message(&topic, &key))
            .await
            .doing(&format!("publishing {key} while the group has no member"))?;
        while_empty.push(key);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while_empty.extend(ctx.publish_numbered(&topic, "burst", 45).await?);
    let second = ctx.subscribe_member(&topic, &group, "member-2").await?;
    // A read of the first member still in flight when it left may have fetched some:
    // where the component declares that a closed member's messages return only after
    // its lease, they may take that long.
    let deadline = ctx.within(ctx.caps.delivery_bound + returned_after(&ctx.caps));
    ctx.recorder.wait_for_keys(&while_empty, deadline).await;
    second.stop().await;
    let mut outcome = ctx.check(&ctx.criteria());
    let history = ctx.recorder.history();
    let missing: Vec<&String> = while_empty
        .iter()
        .filter(|k| history.delivery_count(k) == 0)
        .collect();
    outcome.expect(missing.is_empty(), || {
        format!(
            "lost while the group had no member: {} of {} messages published between the last member leaving and the next joining never arrived: {:?}",
            missing.len(),
            while_empty.len(),
            missing.iter().take(8).collect::<Vec<_>>()
        )
    });
    Ok(outcome)
}

/// Hundreds of messages answered SUCCESS; then the case waits out the redelivery
/// window: nothing may come back.
pub(super) async fn acked_not_redelivered(ctx: CaseContext) -> CaseRun {
    let topic = ctx.new_topic("t").await?;
    let subscription = Subscription::new(&topic, ctx.group("g"));
    let handle = ctx
        .subscribe(subscription, ctx.recorder.handler("s1"))
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", SETTLED_MESSAGES).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    // The window in which an unsettled message would come back: the lease (claim
    // idle time, ack wait, visibility timeout) plus the redelivery bound.
    let window = ctx.caps.lease + ctx.caps.redelivery_bound;
    ctx.recorder.note(format!(
        "all answered; watching {window:?} (lease {:?} + redelivery bound {:?}) for redeliveries",
        ctx.caps.lease, ctx.caps.redelivery_bound
    ));
    ctx.recorder
        .wait_until(ctx.within(window), |h| {
            keys.iter().any(|k| h.delivery_count(k) > 1)
        })
        .await;
    handle.stop().await;
    Ok(ctx.check(&ctx.criteria()))
}

/// Messages of the isolation case: four of each answer the retrying group gives.
const ISOLATION_MESSAGES: usize = 24;

/// The retrying group's maxDeliveries.
const ISOLATION_MAX_DELIVERIES: u32 = 3;

/// What the retrying group answers for a message: by its number `m-<n>`, `n % 4`.
#[derive(Clone, Copy)]
enum Role {
    /// RETRY until maxDeliveries.
    Exhausts,
    /// RETRY on the first attempt, then SUCCESS.
    RetriesOnce,
    Drops,
    Succeeds,
}

impl Role {
    fn of(key: &str) -> Role {
        match key
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .map(|n| n % 4)
        {
            Some(0) => Role::Exhausts,
            Some(1) => Role::RetriesOnce,
            Some(2) => Role::Drops,
            _ => Role::Succeeds,
        }
    }

    fn answer(self, attempt: u32) -> pubsub_components::runtime::Status {
        use pubsub_components::runtime::Status;
        match self {
            Role::Exhausts => Status::Retry,
            Role::RetriesOnce if attempt == 1 => Status::Retry,
            Role::Drops => Status::Drop,
            _ => Status::Success,
        }
    }

    /// The attempts the retrying group must see.
    fn attempts(self) -> Vec<u32> {
        match self {
            Role::Exhausts => (1..=ISOLATION_MAX_DELIVERIES).collect(),
            Role::RetriesOnce => vec![1, 2],
            _ => vec![1],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Role::Exhausts => "answered RETRY until maxDeliveries",
            Role::RetriesOnce => "answered RETRY once",
            Role::Drops => "answered DROP",
            Role::Succeeds => "answered SUCCESS",
        }
    }
}

/// Two groups of one topic: one answers RETRY (until maxDeliveries, or once) and
/// DROP, the other SUCCESS, joining once the first is done. The quiet group must get
/// each message once, as attempt 1; the retrying group must count its own attempts
/// from 1.
pub(super) async fn group_isolation(ctx: CaseContext) -> CaseRun {
    use crate::history::Record;
    use std::collections::BTreeMap;
    let topic = ctx.topic("t");
    // The quiet group exists from the start but takes its messages only once the
    // retrying group is done: its first delivery of each comes after the other
    // group's retries, where a count shared across groups shows.
    let quiet_subscription = Subscription::new(&topic, ctx.group("quiet"));
    ctx.create_group(&quiet_subscription).await?;
    let mut retrying = Subscription::new(&topic, ctx.group("retrying"));
    retrying.max_deliveries = ISOLATION_MAX_DELIVERIES;
    let retrying = ctx
        .subscribe(
            retrying,
            ctx.recorder.scripted("retrying", |event| {
                Role::of(super::key_of(event)).answer(event.attempt)
            }),
        )
        .await?;
    let keys = ctx
        .publish_numbered(&topic, "m", ISOLATION_MESSAGES)
        .await?;
    // Attempts each subscriber saw, per key.
    let attempts = |h: &crate::history::History, who: &str| -> BTreeMap<String, Vec<u32>> {
        let mut seen: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for record in &h.records {
            if let Record::Delivered {
                key: Some(key),
                subscriber,
                attempt,
                ..
            } = record
            {
                if subscriber == who {
                    seen.entry(key.clone()).or_default().push(*attempt);
                }
            }
        }
        seen
    };
    let retried = |h: &crate::history::History| {
        let retrying = attempts(h, "retrying");
        keys.iter()
            .all(|key| retrying.get(key).map_or(0, Vec::len) >= Role::of(key).attempts().len())
    };
    ctx.recorder
        .wait_until(
            ctx.within(ctx.caps.delivery_bound + ctx.caps.redelivery_bound * 3),
            |h| retried(h),
        )
        .await;
    let quiet = ctx
        .subscribe(quiet_subscription, ctx.recorder.handler("quiet"))
        .await?;
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            let quiet = attempts(h, "quiet");
            keys.iter().all(|key| quiet.contains_key(key))
        })
        .await;
    // What the retrying group still does (a leaked copy, a late retry) must not
    // reach the quiet group: watched for the redelivery window.
    let watch_until = ctx.quiet_window();
    ctx.recorder
        .wait_until(watch_until, |h| {
            attempts(h, "quiet").values().any(|seen| seen.len() > 1)
        })
        .await;
    retrying.stop().await;
    quiet.stop().await;
    let history = ctx.recorder.history();
    let mut outcome = ctx.check(&ctx.criteria()).with_history(&history);
    let quiet = attempts(&history, "quiet");
    let retrying = attempts(&history, "retrying");
    for key in &keys {
        let role = Role::of(key);
        let elsewhere = role.describe();
        match quiet.get(key) {
            None => {
                outcome.fail(format!(
                    "group isolation broken: the quiet group never received {key}, which the other group {elsewhere}"
                ));
            }
            Some(seen) if seen.len() > 1 => {
                outcome.fail(format!(
                    "group isolation broken: the quiet group received {key} {} times (attempts {seen:?}) while the other group {elsewhere}",
                    seen.len()
                ));
            }
            Some(seen) if seen[0] != 1 => {
                outcome.fail(format!(
                    "attempts not counted per group: the quiet group's only delivery of {key} is attempt {} (the other group {elsewhere})",
                    seen[0]
                ));
            }
            Some(_) => {}
        }
        let expected = role.attempts();
        let seen = retrying.get(key).cloned().unwrap_or_default();
        if seen.first().is_some_and(|first| *first != 1) {
            outcome.fail(format!(
                "attempts not counted per group: the retrying group's first delivery of {key} is attempt {}",
                seen[0]
            ));
        } else if seen != expected {
            outcome.fail(format!(
                "the retrying group, which {elsewhere} (maxDeliveries {ISOLATION_MAX_DELIVERIES}), saw {key} as attempts {seen:?}, expected {expected:?}"
            ));
        }
    }
    outcome.note(format!(
        "{ISOLATION_MESSAGES} messages; the retrying group answers RETRY until maxDeliveries ({ISOLATION_MAX_DELIVERIES}), RETRY once, DROP and SUCCESS, a quarter each; the quiet group SUCCESS"
    ));
    Ok(outcome)
}

/// Receives with `max` per call until something comes or `deadline` passes; returns
/// what came.
async fn receive_one_of(
    member: &dyn Consumer,
    max: usize,
    deadline: Instant,
) -> Result<Vec<ReceivedMessage>, crate::outcome::CaseError> {
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let got = member.receive(max, wait).await.doing("receiving")?;
        if !got.is_empty() || wait.is_zero() {
            return Ok(got);
        }
    }
}

/// What a receive (`what`) of at most 0 messages must give: none, or a refusal as an
/// invalid request (or as unsupported, a batch receive the component does not have).
fn expect_none_at_zero(
    outcome: &mut Outcome,
    what: &str,
    result: Result<Vec<ReceivedMessage>, PubSubError>,
) {
    match result {
        Ok(got) => {
            outcome.expect(got.is_empty(), || {
                format!("{what} of at most 0 messages handed out {}", got.len())
            });
        }
        Err(e) if matches!(e.kind(), ErrorKind::InvalidRequest | ErrorKind::Unsupported) => {
            outcome.note(format!("{what} of at most 0 messages is refused: {e}"));
        }
        Err(e) => {
            outcome.fail(format!(
                "{what} of at most 0 messages failed with {:?}, expected none handed out, InvalidRequest or Unsupported (a batch receive the component does not have): {e}",
                e.kind()
            ));
        }
    }
}

/// What a call (`what`) with an empty list must give: `Ok`, or a refusal as an invalid
/// request or as unsupported.
fn expect_done_or_refused(outcome: &mut Outcome, what: &str, result: Result<(), PubSubError>) {
    match result {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), ErrorKind::InvalidRequest | ErrorKind::Unsupported) => {
            outcome.note(format!("{what} is refused: {e}"));
        }
        Err(e) => {
            outcome.fail(format!(
                "{what} failed with {:?}, expected Ok, InvalidRequest or Unsupported: {e}",
                e.kind()
            ));
        }
    }
}

pub(super) async fn method_edges(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("g"));
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 4).await?;
    let member = ctx
        .open_consumer(spec.clone(), "opening the member")
        .await?;
    let mut outcome = Outcome::new();
    // At most zero: nothing handed out, nothing taken, by either receive.
    let short = Duration::from_millis(200);
    let zero = member.receive(0, short).await;
    expect_none_at_zero(&mut outcome, "a receive", zero);
    let zero_batch = member.receive_batch(0, short).await;
    expect_none_at_zero(&mut outcome, "a batch receive", zero_batch);
    // At most one: one.
    let first = receive_one_of(member.as_ref(), 1, ctx.delivery_deadline()).await?;
    outcome.expect(first.len() == 1, || {
        format!("a receive of at most 1 message handed out {}", first.len())
    });
    let mut held: Vec<ReceivedMessage> = first;
    // As many as a call can ask for: the rest.
    let deadline = ctx.delivery_deadline();
    while held.len() < keys.len() && Instant::now() < deadline {
        held.extend(receive_one_of(member.as_ref(), usize::MAX, deadline).await?);
    }
    // An empty list settles nothing (where the consumer acknowledges several at once),
    // nor does extending the lease of no message; the loss check below sees either.
    let acked = member.ack_many(&[]).await;
    expect_done_or_refused(&mut outcome, "acknowledging an empty list", acked);
    let extended = member.extend_lease(&[]).await;
    expect_done_or_refused(&mut outcome, "extending the lease of no message", extended);
    let deferred = member.defer_many(&[]).await;
    expect_done_or_refused(&mut outcome, "deferring no message", deferred);
    // A RETRY, and a deferral, with no delay come back within the redelivery bound.
    for (index, handing_back) in ["answered RETRY with no delay", "deferred with no delay"]
        .into_iter()
        .enumerate()
    {
        let Some(message) = held.get(index) else {
            continue;
        };
        let key = received_key(message);
        let id = message.id.clone();
        match index {
            0 => member.nack(&id, Duration::ZERO).await,
            _ => member.defer(&id, Duration::ZERO).await,
        }
        .doing(handing_back)?;
        let back_by = ctx.within(ctx.caps.redelivery_bound);
        let mut back = false;
        while !back && Instant::now() < back_by {
            let got = receive_one_of(member.as_ref(), 8, back_by).await?;
            back = got.iter().any(|m| received_key(m) == key);
            held.extend(got);
        }
        outcome.expect(back, || {
            format!(
                "{key}, {handing_back}, did not come back within the redelivery bound ({:?})",
                ctx.caps.redelivery_bound
            )
        });
    }
    // Once it closes, what it held, none of it settled by the edge calls, goes to the
    // next member.
    let _ = member.close().await;
    let other = ctx.open_consumer(spec, "opening a second member").await?;
    let returned_by =
        ctx.within(returned_after(&ctx.caps) + ctx.caps.delivery_bound + ctx.caps.redelivery_bound);
    let mut returned: BTreeSet<String> = BTreeSet::new();
    while returned.len() < keys.len() && Instant::now() < returned_by {
        for message in receive_one_of(other.as_ref(), 16, returned_by).await? {
            returned.insert(received_key(&message));
            other.ack(&message.id).await.doing("acknowledging")?;
        }
    }
    let _ = other.close().await;
    let missing: Vec<&String> = keys.iter().filter(|k| !returned.contains(*k)).collect();
    outcome.expect(missing.is_empty(), || {
        format!(
            "lost after the edge calls: {missing:?} never reached the second member once the first closed holding them (an empty acknowledgement or a receive of at most 0 took them)"
        )
    });
    outcome.note(format!(
        "the first member held {} deliveries of {} messages when it closed",
        held.len(),
        keys.len()
    ));
    Ok(outcome)
}

/// A group whose first member opens at the latest position gets what is published
/// after that, and a member that opens later reads on from the group's position.
pub(super) async fn start_latest(ctx: CaseContext) -> CaseRun {
    let topic = ctx.new_topic("t").await?;
    // Published before the group, while another group reads the topic: a group that
    // read from the earliest would get them where the broker keeps a log.
    let mut early = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("early"));
    early.start = StartPosition::Earliest;
    ctx.create_consumer_group(&early).await?;
    let before = ctx.publish_numbered(&topic, "before", 3).await?;
    let mut spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), ctx.group("latest"));
    spec.start = StartPosition::Latest;
    let first = ctx
        .open_consumer(
            spec.clone(),
            "opening the first member of a group that starts at the latest",
        )
        .await?;
    let after = ctx.publish_numbered(&topic, "after", 3).await?;
    let mut got = take_all(&ctx, first.as_ref(), &after).await?;
    let _ = first.close().await;
    // Published while the group has no member: the next member reads on from the
    // group's position, whatever start it asks.
    let meanwhile = ctx.publish_numbered(&topic, "meanwhile", 3).await?;
    let second = ctx
        .open_consumer(spec, "opening a later member of that group")
        .await?;
    got.extend(take_all(&ctx, second.as_ref(), &meanwhile).await?);
    let _ = second.close().await;
    let mut outcome = Outcome::new();
    let old: Vec<&String> = got.iter().filter(|k| before.contains(k)).collect();
    outcome.expect(old.is_empty(), || {
        format!("a group whose first member opened at the latest position got messages published before: {old:?}")
    });
    let missing: Vec<&String> = after.iter().filter(|k| !got.contains(k)).collect();
    outcome.expect(missing.is_empty(), || {
        format!("lost: a group whose first member opened at the latest position never got {missing:?}, published after it opened")
    });
    let skipped: Vec<&String> = meanwhile.iter().filter(|k| !got.contains(k)).collect();
    outcome.expect(skipped.is_empty(), || {
        format!("lost: a later member of a group that started at the latest position never got {skipped:?}, published while the group had no member (it started at the latest again instead of reading on from the group's position)")
    });
    Ok(outcome)
}

/// Receives and acknowledges until every key of `expected` came (or the delivery
/// bound passed), then whatever more comes within a quiet window.
async fn take_all(
    ctx: &CaseContext,
    member: &dyn Consumer,
    expected: &[String],
) -> Result<Vec<String>, crate::outcome::CaseError> {
    let mut got: Vec<String> = Vec::new();
    let deadline = ctx.delivery_deadline();
    while !expected.iter().all(|k| got.contains(k)) && Instant::now() < deadline {
        for message in receive_one_of(member, 16, deadline).await? {
            member.ack(&message.id).await.doing("acknowledging")?;
            got.push(received_key(&message));
        }
    }
    let quiet = ctx.quiet_window();
    while Instant::now() < quiet {
        let more = receive_one_of(member, 16, quiet).await?;
        if more.is_empty() {
            break;
        }
        for message in more {
            member.ack(&message.id).await.doing("acknowledging")?;
            got.push(received_key(&message));
        }
    }
    Ok(got)
}
