//! Feature pairs, a dimension of the catalogue: an all-pairs matrix over the features a
//! component may declare. Each row is a case that turns several features on at once,
//! and the rows together make every two features meet in at least one ([`rows`]). A
//! component runs each row with the features it declares, the others left out with a
//! note, so every pair it supports meets somewhere. What a row expects composes what
//! the contract says of each feature alone; no rule is a row's own.

use super::bound::Bound;
use super::case::{Case, Lane, Level};
use super::{
    expect_dead_letter_reasons, key_of, keyed_entry, outlive_one_second_ttl, record_dead_letters,
    returned_after,
};
use crate::context::CaseContext;
use crate::history::{History, Record};
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::controls::format_time;
use pubsub_components::runtime::{
    BulkPublishRequest, BulkSubscribeOptions, Event, Handler, Status, Subscription,
};
use pubsub_components::{Capabilities, Feature, Metadata, Support, TopicSelector};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// A feature of the matrix: a declared capability, or a behaviour every component has
/// (retries, members joining and leaving).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    Ttl,
    Retry,
    DeadLetter,
    ReceiverDelay,
    DeliverAt,
    BulkPublish,
    BulkSubscribe,
    Partitions,
    MultiTopic,
    MemberChurn,
}

impl Part {
    /// Every feature of the matrix, in the order of the rows' ids.
    pub const ALL: [Part; 10] = [
        Part::Ttl,
        Part::Retry,
        Part::DeadLetter,
        Part::ReceiverDelay,
        Part::DeliverAt,
        Part::BulkPublish,
        Part::BulkSubscribe,
        Part::Partitions,
        Part::MultiTopic,
        Part::MemberChurn,
    ];

    /// The kebab-case name, as in the rows' ids.
    pub fn name(self) -> &'static str {
        match self {
            Part::Ttl => "ttl",
            Part::Retry => "retry",
            Part::DeadLetter => "dead-letter",
            Part::ReceiverDelay => "receiver-delay",
            Part::DeliverAt => "deliver-at",
            Part::BulkPublish => "bulk-publish",
            Part::BulkSubscribe => "bulk-subscribe",
            Part::Partitions => "partitions",
            Part::MultiTopic => "multi-topic",
            Part::MemberChurn => "member-churn",
        }
    }

    /// The capability it needs, if any.
    pub fn feature(self) -> Option<Feature> {
        match self {
            Part::Ttl => Some(Feature::Ttl),
            Part::DeadLetter => Some(Feature::DeadLetter),
            Part::ReceiverDelay => Some(Feature::ReceiverDelay),
            Part::DeliverAt => Some(Feature::DelayedDelivery),
            Part::BulkPublish => Some(Feature::BulkPublish),
            Part::BulkSubscribe => Some(Feature::BulkSubscribe),
            Part::Partitions => Some(Feature::Partitions),
            Part::MultiTopic => Some(Feature::MultiTopic),
            Part::Retry | Part::MemberChurn => None,
        }
    }

    /// What the contract says of it alone, as a row's MUST statement cites it.
    fn rule(self) -> &'static str {
        match self {
            Part::Ttl => "a message whose TTL ran out is never delivered (and is dead-lettered as expired where a dead-letter topic is set), one whose TTL has not is delivered (TTL-1 to TTL-3)",
            Part::Retry => "a message answered RETRY comes back no sooner than the retry delay and within the redelivery bound, its attempt one higher, and one answered RETRY every time is delivered exactly the delivery limit times (RT-1 to RT-3)",
            Part::DeadLetter => "a message answered DROP or out of deliveries goes to the dead-letter topic with its reason and original topic, and no other does (DL-1, DL-2)",
            Part::ReceiverDelay => "no message is delivered before its publish time plus receiverDelay, and each is by then plus the precision (DLY-3)",
            Part::DeliverAt => "no message is delivered before its deliverAt, and each is by then plus the precision (DLY-1)",
            Part::BulkPublish => "entries published in bulk, with their own TTL, deliverAt and partition key, behave as single messages do (BP-8)",
            Part::BulkSubscribe => "batches hold at most maxMessagesCount entries of one topic, each settled on its own (BS-1, BS-3)",
            Part::Partitions => "on topics of 4 partitions, each message comes from the topic it was published to (MSG-1)",
            Part::MultiTopic => "one subscription over two topics delivers each message from its own topic (MT-1)",
            Part::MemberChurn => "a member that leaves while messages are delivered and retried, another joining meanwhile, loses none and starts no attempt count over (RT-5)",
        }
    }
}

/// How many features a row turns on.
const ROW_SIZE: usize = 5;

/// The rows of the matrix, each a set of features, every two features together in at
/// least one row. Built greedily: each row starts from the first pair still apart and
/// adds, one at a time, the feature that meets most of the row's features for the
/// first time (the lowest on a tie), so the rows are the same on every run.
pub fn rows() -> Vec<Vec<Part>> {
    let n = Part::ALL.len();
    let pair = |a: usize, b: usize| (a.min(b), a.max(b));
    let mut apart: BTreeSet<(usize, usize)> = (0..n)
        .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
        .collect();
    let mut rows = Vec::new();
    while let Some(&(a, b)) = apart.iter().next() {
        let mut row = vec![a, b];
        while row.len() < ROW_SIZE {
            let gain = |c: usize| row.iter().filter(|&&r| apart.contains(&pair(r, c))).count();
            let Some(next) = (0..n)
                .filter(|c| !row.contains(c))
                .max_by_key(|&c| (gain(c), std::cmp::Reverse(c)))
            else {
                break;
            };
            row.push(next);
        }
        for (i, &x) in row.iter().enumerate() {
            for &y in &row[i + 1..] {
                apart.remove(&pair(x, y));
            }
        }
        row.sort_unstable();
        rows.push(row.into_iter().map(|i| Part::ALL[i]).collect());
    }
    rows
}

/// The family of the rows' ids.
pub const FAMILY: &str = "pairs";

/// The id of the row of `parts`: `pairs.` and the features' names joined by `+`.
pub fn id_of(parts: &[Part]) -> String {
    format!("{FAMILY}.{}", names(parts))
}

/// The features of the row named `id`.
fn row_of(id: &str) -> Option<Vec<Part>> {
    id.strip_prefix(FAMILY)?
        .strip_prefix('.')?
        .split('+')
        .map(|name| Part::ALL.into_iter().find(|p| p.name() == name))
        .collect()
}

fn names(parts: &[Part]) -> String {
    parts.iter().map(|p| p.name()).collect::<Vec<_>>().join("+")
}

/// The bound of every row, as the catalogue shows it.
const BOUND_RULE: &str = "1.2 s TTL + 1 s receiverDelay + 2 s deliverAt + delay precision + 2 x delivery bound + 4 x (300 ms retry delay + redelivery bound) + lease + 2 s";

fn bound(caps: &Capabilities) -> Duration {
    Duration::from_millis(1200)
        + RECEIVER_DELAY
        + DELIVER_AT
        + caps.delay_precision
        + caps.delivery_bound * 2
        + (RETRY_DELAY + caps.redelivery_bound) * 4
        + caps.lease
        + Duration::from_secs(2)
}

/// The rows as cases. (Built once per catalogue: their texts live as long as the
/// program.)
pub(super) fn cases() -> Vec<Case> {
    rows()
        .iter()
        .map(|row| {
            let rules: Vec<&str> = row.iter().map(|p| p.rule()).collect();
            let must = format!(
                "Where {} meet (those of them the component declares, two at least), each MUST hold as it does alone: {}.",
                row.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "),
                rules.join("; ")
            );
            Case {
                id: Box::leak(id_of(row).into_boxed_str()),
                must: Box::leak(must.into_boxed_str()),
                requires: &[],
                level: Level::Feature,
                injects: &[],
                lane: Lane::Timed,
                bystander: false,
                partitions: None,
                bound: Bound::custom(BOUND_RULE, bound),
                run: |ctx| Box::pin(run(ctx)),
            }
        })
        .collect()
}

/// Deliveries a subscription of a row allows.
const MAX_DELIVERIES: u32 = 3;
/// The retry delay of a row with retries.
const RETRY_DELAY: Duration = Duration::from_millis(300);
/// The receiverDelay of a row's subscription.
const RECEIVER_DELAY: Duration = Duration::from_millis(1000);
/// How far ahead of its publish a message's deliverAt is: beyond the receiverDelay, so
/// that where both meet a lost deliverAt still shows.
const DELIVER_AT: Duration = Duration::from_millis(2000);
/// The member there first that leaves, where the row has member churn.
const LEAVING: &str = "s2";
/// The partitions of a row's topics, where it has partitions.
const PARTITIONS: u32 = 4;
/// The maxMessagesCount of a row's bulk subscription.
const BATCH: usize = 3;

/// What a message of a row is for: its handler's answer, and what must become of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Answered SUCCESS: delivered once.
    Settled,
    /// Answered RETRY until the last attempt the subscription allows, then SUCCESS.
    Retried,
    /// Answered RETRY every time: delivered the limit times, then dead-lettered or
    /// dropped.
    Exhausted,
    /// Answered DROP: delivered once, then dead-lettered.
    Dropped,
    /// Published with a TTL of 1 s and subscribed to after it: never delivered.
    Expired,
}

impl Role {
    const ALL: [Role; 5] = [
        Role::Settled,
        Role::Retried,
        Role::Exhausted,
        Role::Dropped,
        Role::Expired,
    ];

    fn label(self) -> &'static str {
        match self {
            Role::Settled => "settled",
            Role::Retried => "retried",
            Role::Exhausted => "exhausted",
            Role::Dropped => "dropped",
            Role::Expired => "expired",
        }
    }

    /// The role of the message with `key` (`<role>-...`).
    fn of(key: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| {
            key.strip_prefix(r.label())
                .is_some_and(|rest| rest.starts_with('-'))
        })
    }
}

/// A row's handler's answer to `event`.
fn answer(event: &Event) -> Status {
    match Role::of(key_of(event)) {
        Some(Role::Retried) if event.attempt < MAX_DELIVERIES => Status::Retry,
        Some(Role::Exhausted) => Status::Retry,
        Some(Role::Dropped) => Status::Drop,
        _ => Status::Success,
    }
}

/// A message a row published.
struct Published {
    key: String,
    role: Role,
    topic: String,
    /// When its publish call started and returned.
    sent: SystemTime,
    returned: SystemTime,
    /// Its deliverAt.
    due: Option<SystemTime>,
}

/// The features a row runs with.
struct Mix(BTreeSet<Part>);

impl Mix {
    fn has(&self, part: Part) -> bool {
        self.0.contains(&part)
    }

    /// The metadata of the message `key` (with the TTL `ttl` in seconds where the row
    /// has TTLs), and its deliverAt.
    fn decorations(&self, key: &str, ttl: &str) -> (Metadata, Option<SystemTime>) {
        let mut metadata = Metadata::new();
        if self.has(Part::Ttl) {
            metadata.insert("ttlInSeconds".into(), ttl.into());
        }
        let due = self
            .has(Part::DeliverAt)
            .then(|| SystemTime::now() + DELIVER_AT);
        if let Some(due) = due {
            metadata.insert("deliverAt".into(), format_time(due));
        }
        if self.has(Part::Partitions) {
            metadata.insert("partitionKey".into(), key.into());
        }
        (metadata, due)
    }

    fn handler(&self, ctx: &CaseContext, member: &str) -> Handler {
        if self.has(Part::BulkSubscribe) {
            ctx.recorder.bulk(member, |e| Some(answer(e)), |_| None)
        } else {
            ctx.recorder.scripted(member, answer)
        }
    }
}

/// Whether the component declares `part`.
fn declared(ctx: &CaseContext, part: Part) -> bool {
    part.feature()
        .is_none_or(|f| ctx.runtime.mode(f) != Support::Unsupported)
}

/// One row: a subscription with every feature of the row, messages of every role the
/// row's features give (published after the subscriber runs, but for those that must
/// expire first), then each message judged by the rules of every feature it met.
async fn run(ctx: CaseContext) -> CaseRun {
    let planned = row_of(&ctx.case_id).ok_or_else(|| {
        CaseError::Harness(format!("{} names no row of feature pairs", ctx.case_id))
    })?;
    let (mut parts, left_out): (Vec<Part>, Vec<Part>) =
        planned.iter().partition(|p| declared(&ctx, **p));
    // Where each app counts its own attempts, a member that joins counts from 1: the
    // handlers' answers and RT-1 across members would judge the path, not the
    // component (the other rows, and the row in process, pair churn with retries).
    let mut churn_out = None;
    if let Some(why) = ctx.runtime.counts_attempts_per_app() {
        let attempts_matter = parts.contains(&Part::Retry) || parts.contains(&Part::DeadLetter);
        if attempts_matter && parts.contains(&Part::MemberChurn) {
            parts.retain(|p| *p != Part::MemberChurn);
            churn_out = Some(format!("left out, member churn beside retries: {why}"));
        }
    }
    if parts.len() < 2 {
        return Err(CaseError::CannotProvoke(format!(
            "of {} the component declares {}: no two of them meet here (the other rows pair them)",
            names(&planned),
            if parts.is_empty() {
                "none".into()
            } else {
                names(&parts)
            }
        )));
    }
    let mut notes: Vec<String> = churn_out.into_iter().collect();
    if !left_out.is_empty() {
        notes.push(format!(
            "left out, not declared: {}; {} meet",
            names(&left_out),
            names(&parts)
        ));
    }
    let mix = Mix(parts.into_iter().collect());

    let mut topics = Vec::new();
    for i in 0..if mix.has(Part::MultiTopic) { 2 } else { 1 } {
        let topic = ctx.topic(&format!("t{i}"));
        if mix.has(Part::Partitions) {
            ctx.create_topic(&topic, PARTITIONS).await?;
        }
        topics.push(topic);
    }
    let selector = match topics.as_slice() {
        [one] => TopicSelector::Single(one.clone()),
        _ => TopicSelector::List(topics.clone()),
    };
    let dlq_topic = ctx.topic("dlq");
    let dlq_subscription = Subscription::new(&dlq_topic, ctx.group("dlq"));
    let mut subscription = Subscription::selecting(selector, ctx.group("g"));
    subscription.max_deliveries = MAX_DELIVERIES;
    if mix.has(Part::Retry) {
        subscription.retry_delay = RETRY_DELAY;
    }
    if mix.has(Part::DeadLetter) {
        subscription.dead_letter_topic = Some(dlq_topic.clone());
        ctx.create_group(&dlq_subscription).await?;
    }
    if mix.has(Part::ReceiverDelay) {
        subscription.receiver_delay = Some(RECEIVER_DELAY);
    }
    if mix.has(Part::BulkSubscribe) {
        subscription.bulk = Some(BulkSubscribeOptions {
            max_messages_count: BATCH,
            max_await_duration: Duration::from_millis(100),
        });
    }
    ctx.create_group(&subscription).await?;

    // The expired messages, one per topic, outlive their TTL before anyone reads.
    let mut expired = Vec::new();
    if mix.has(Part::Ttl) {
        for (i, topic) in topics.iter().enumerate() {
            let key = format!("{}-t{i}", Role::Expired.label());
            let (metadata, _) = mix.decorations(&key, "1");
            publish_unrecorded(&ctx, &mix, topic, &key, metadata).await?;
            expired.push((key, topic.clone()));
        }
        outlive_one_second_ttl(&ctx).await;
    }

    let (dlq, dlq_handle) =
        record_dead_letters(&ctx, dlq_subscription, mix.has(Part::DeadLetter)).await?;
    // Under member churn the member that leaves is there first, alone, so that it
    // surely gets messages (a member joining second may get none: the first may hold
    // them all); the member that stays joins while they are on their way.
    let churn = mix.has(Part::MemberChurn);
    let leaving = match churn {
        true => Some(
            ctx.subscribe(subscription.clone(), mix.handler(&ctx, LEAVING))
                .await?,
        ),
        false => None,
    };
    let staying = match churn {
        true => None,
        false => Some(
            ctx.subscribe(subscription.clone(), mix.handler(&ctx, "s1"))
                .await?,
        ),
    };
    ctx.await_subscribed(&topics[0], subscription.receiver_delay.unwrap_or_default())
        .await?;

    let mut roles = vec![Role::Settled; 3];
    if mix.has(Part::Retry) {
        roles.extend([Role::Retried, Role::Exhausted]);
    }
    if mix.has(Part::DeadLetter) {
        roles.push(Role::Dropped);
    }
    let mut outcome = Outcome::new();
    let mut published = Vec::new();
    for (i, topic) in topics.iter().enumerate() {
        let keyed: Vec<(String, Role)> = roles
            .iter()
            .enumerate()
            .map(|(n, role)| (format!("{}-{n}-t{i}", role.label()), *role))
            .collect();
        published.extend(publish_recorded(&ctx, &mix, topic, keyed, &mut outcome).await?);
    }

    // The member there first, alone until it has answered one (a RETRY, where the row
    // retries); then the member that stays joins, and the first leaves at once: what
    // it retried and what it held, still on their way, go to the member that stays.
    let mut left = None;
    if let Some(second) = leaving {
        let wanted = if mix.has(Part::Retry) { "RETRY" } else { "" };
        left = Some((
            second,
            ctx.recorder
                .wait_until(ctx.within(DELIVER_AT + ctx.caps.delivery_bound * 2), |h| {
                    answered_by(h, LEAVING, wanted)
                })
                .await,
        ));
    }
    let first = match staying {
        Some(handle) => handle,
        None => {
            ctx.subscribe(subscription.clone(), mix.handler(&ctx, "s1"))
                .await?
        }
    };
    if let Some((second, answered)) = left {
        second.stop().await;
        notes.push(if answered {
            "the member there first left after answering a message".to_string()
        } else {
            "the member there first answered no message before it left".to_string()
        });
    }

    let done = |h: &History| {
        published.iter().all(|p| match p.role {
            Role::Settled | Role::Dropped => h.delivery_count(&p.key) > 0,
            Role::Retried | Role::Exhausted => {
                attempts(h, &p.key).iter().any(|a| *a >= MAX_DELIVERIES)
            }
            Role::Expired => true,
        })
    };
    ctx.recorder.wait_until(ctx.deadline(), done).await;
    let dead: Vec<String> = published
        .iter()
        .filter(|p| matches!(p.role, Role::Exhausted | Role::Dropped))
        .map(|p| p.key.clone())
        .chain(expired.iter().map(|(k, _)| k.clone()))
        .collect();
    if mix.has(Part::DeadLetter) {
        dlq.wait_for_keys(&dead, ctx.deadline()).await;
    }
    // What must not come (an expired message, a delivery past the limit) is given
    // a retry delay and a redelivery bound to show.
    if mix.has(Part::Ttl) || mix.has(Part::Retry) {
        ctx.recorder
            .wait_until(ctx.within(RETRY_DELAY + ctx.caps.redelivery_bound), |h| {
                expired.iter().any(|(k, _)| h.delivery_count(k) > 0)
                    || published.iter().any(|p| {
                        p.role == Role::Exhausted
                            && h.delivery_count(&p.key) > MAX_DELIVERIES as usize
                    })
            })
            .await;
    }
    first.stop().await;
    if let Some(handle) = dlq_handle {
        handle.stop().await;
    }

    let mut checked = ctx.check(&ctx.criteria());
    checked.findings.append(&mut outcome.findings);
    checked.notes.extend(notes);
    let mut outcome = checked;
    let history = ctx.recorder.history();
    let judge = Judge {
        ctx: &ctx,
        mix: &mix,
        history: &history,
    };
    for message in &published {
        judge.message(message, &mut outcome);
    }
    for (key, _) in &expired {
        outcome.expect(history.delivery_count(key) == 0, || {
            format!("TTL-1: {key} was delivered though its 1 s TTL ran out before it was due")
        });
    }
    if mix.has(Part::DeadLetter) {
        judge.dead_letters(&dlq.events(), &published, &expired, &mut outcome);
        for (role, reason) in [
            (Role::Exhausted, "maxDeliveries"),
            (Role::Dropped, "dropped"),
        ] {
            let keys: Vec<String> = published
                .iter()
                .filter(|p| p.role == role)
                .map(|p| p.key.clone())
                .collect();
            expect_dead_letter_reasons(&mut outcome, &dlq, &keys, reason);
        }
        let expired_keys: Vec<String> = expired.iter().map(|(k, _)| k.clone()).collect();
        expect_dead_letter_reasons(&mut outcome, &dlq, &expired_keys, "expired");
    }
    if mix.has(Part::BulkSubscribe) {
        judge.batches(&mut outcome);
    }
    Ok(outcome)
}

/// Publishes `key` without recording it (a message that must never be delivered).
async fn publish_unrecorded(
    ctx: &CaseContext,
    mix: &Mix,
    topic: &str,
    key: &str,
    metadata: Metadata,
) -> Result<(), CaseError> {
    if mix.has(Part::BulkPublish) {
        let mut entry = keyed_entry(key);
        entry.metadata.extend(metadata);
        let response = ctx
            .runtime
            .bulk_publish(BulkPublishRequest::new(topic, vec![entry]))
            .await
            .doing(&format!("bulk publishing {key}"))?;
        if !response.failed_entries.is_empty() {
            return Err(CaseError::Component(format!(
                "bulk publishing {key}: failed entries {:?}",
                response.failed_entries
            )));
        }
    } else {
        let mut request = ctx.message(topic, key);
        request.metadata.extend(metadata);
        ctx.runtime
            .publish(request)
            .await
            .doing(&format!("publishing {key}"))?;
    }
    Ok(())
}

/// Publishes `keyed` to `topic` and records it: in one bulk request where the row
/// publishes in bulk, one by one otherwise.
async fn publish_recorded(
    ctx: &CaseContext,
    mix: &Mix,
    topic: &str,
    keyed: Vec<(String, Role)>,
    outcome: &mut Outcome,
) -> Result<Vec<Published>, CaseError> {
    let mut published = Vec::new();
    if mix.has(Part::BulkPublish) {
        let sent = SystemTime::now();
        let mut entries = Vec::new();
        let mut dues = Vec::new();
        for (key, _) in &keyed {
            let (metadata, due) = mix.decorations(key, "60");
            let mut entry = keyed_entry(key);
            entry.metadata.extend(metadata);
            entries.push(entry);
            dues.push(due);
        }
        let response = ctx
            .bulk_publish(BulkPublishRequest::new(topic, entries))
            .await
            .doing(&format!(
                "bulk publishing {} entries to {topic}",
                keyed.len()
            ))?;
        outcome.expect_no_failed_entries(&response);
        let returned = SystemTime::now();
        for ((key, role), due) in keyed.into_iter().zip(dues) {
            published.push(Published {
                key,
                role,
                topic: topic.to_string(),
                sent,
                returned,
                due,
            });
        }
    } else {
        for (key, role) in keyed {
            let (metadata, due) = mix.decorations(&key, "60");
            let mut request = ctx.message(topic, &key);
            request.metadata.extend(metadata);
            let sent = SystemTime::now();
            ctx.publish(request)
                .await
                .doing(&format!("publishing {key}"))?;
            published.push(Published {
                key,
                role,
                topic: topic.to_string(),
                sent,
                returned: SystemTime::now(),
                due,
            });
        }
    }
    Ok(published)
}

/// Whether `member` answered a message `answer` (any answer when empty).
fn answered_by(history: &History, member: &str, answer: &str) -> bool {
    history.records.iter().any(|r| {
        matches!(r, Record::Answered { subscriber, answer: given, key: Some(key), .. }
            if subscriber == member
                && Role::of(key).is_some()
                && (answer.is_empty() || given == answer))
    })
}

/// The attempt numbers `key` was delivered with, in order.
fn attempts(history: &History, key: &str) -> Vec<u32> {
    deliveries(history, key).map(|d| d.attempt).collect()
}

/// One delivery of a key.
struct Delivery<'a> {
    at: SystemTime,
    attempt: u32,
    topic: &'a str,
    member: &'a str,
}

fn deliveries<'a>(history: &'a History, key: &'a str) -> impl Iterator<Item = Delivery<'a>> {
    history.deliveries_of(key).filter_map(|r| match r {
        Record::Delivered {
            at,
            attempt,
            topic,
            subscriber,
            ..
        } => Some(Delivery {
            at: *at,
            attempt: *attempt,
            topic,
            member: subscriber,
        }),
        _ => None,
    })
}

/// Judges a row's history by the rules of the features each message met.
struct Judge<'a> {
    ctx: &'a CaseContext,
    mix: &'a Mix,
    history: &'a History,
}

impl Judge<'_> {
    fn message(&self, message: &Published, outcome: &mut Outcome) {
        let caps = &self.ctx.caps;
        let key = &message.key;
        let mut seen: Vec<Delivery> = deliveries(self.history, key).collect();
        for delivery in &seen {
            outcome.expect(delivery.topic == message.topic, || {
                format!(
                    "MT-1: {key}, published to {}, was delivered from {}",
                    message.topic, delivery.topic
                )
            });
        }
        // A delivery again to the same member under the same attempt is a duplicate,
        // not a redelivery: the checker judges duplicates by the declared guarantee;
        // the rules of retries below count redeliveries. (The same attempt at another
        // member is a count started over, which RT-1 judges.)
        seen.dedup_by(|next, last| next.attempt == last.attempt && next.member == last.member);
        let Some(first) = seen.first() else {
            return; // lost: the checker says so
        };
        self.first_delivery(message, first.at, outcome);
        let attempts: Vec<u32> = seen.iter().map(|d| d.attempt).collect();
        let churn = self.mix.has(Part::MemberChurn);
        let counted = if churn {
            attempts.windows(2).all(|w| w[1] > w[0])
        } else {
            attempts.iter().zip(1..).all(|(a, n)| *a == n)
        };
        outcome.expect(counted, || {
            let how = if churn {
                "each must be higher than the last, whichever member got it"
            } else {
                "they must count 1, 2, 3"
            };
            format!("RT-1: {key} was delivered as attempts {attempts:?}: {how}")
        });
        let slack = self.lateness() + self.churn_allowance();
        for pair in seen.windows(2) {
            let gap = pair[1].at.duration_since(pair[0].at).unwrap_or_default();
            // What a leaving member held goes back at once, a message waiting out its
            // retry delay included (RT-2's exception).
            let left = pair[0].member == LEAVING;
            outcome.expect(left || gap + caps.clock_tolerance >= RETRY_DELAY, || {
                format!(
                    "RT-2: {key} came back {gap:?} after its previous attempt, sooner than the retry delay {RETRY_DELAY:?}"
                )
            });
            outcome.expect_timely(gap <= RETRY_DELAY + caps.redelivery_bound + slack, || {
                format!(
                    "RT-2: {key} came back {gap:?} after its previous attempt, later than the retry delay {RETRY_DELAY:?} plus the redelivery bound {:?}",
                    caps.redelivery_bound
                )
            });
        }
        let limit = MAX_DELIVERIES as usize;
        match message.role {
            Role::Retried if !churn => outcome.expect(seen.len() == limit, || {
                format!("RT-1: {key}, answered RETRY until attempt {MAX_DELIVERIES}, was delivered {} times, not {limit}", seen.len())
            }),
            Role::Exhausted => outcome.expect(
                seen.len() <= limit && (churn || seen.len() == limit),
                || {
                    format!(
                        "RT-3: {key}, answered RETRY every time, was delivered {} times; the delivery limit is {limit}",
                        seen.len()
                    )
                },
            ),
            _ => outcome,
        };
    }

    /// A first delivery is neither before the message's delays nor later than them
    /// plus the precision (the delivery bound for an undelayed message).
    fn first_delivery(&self, message: &Published, at: SystemTime, outcome: &mut Outcome) {
        let caps = &self.ctx.caps;
        let key = &message.key;
        let receiver = self.mix.has(Part::ReceiverDelay).then(|| {
            (
                message.sent + RECEIVER_DELAY,
                message.returned + RECEIVER_DELAY,
            )
        });
        let mut waits: Vec<(&str, SystemTime, SystemTime)> = Vec::new();
        if let Some((earliest, latest)) = receiver {
            waits.push(("its publish time plus receiverDelay", earliest, latest));
        }
        if let Some(due) = message.due {
            waits.push(("its deliverAt", due, due));
        }
        for (what, earliest, _) in &waits {
            if let Ok(early) = earliest.duration_since(at) {
                outcome.expect(early <= caps.clock_tolerance, || {
                    let rule = if what.contains("receiverDelay") {
                        "DLY-3"
                    } else {
                        "DLY-1"
                    };
                    format!("{rule}: {key} was delivered {early:?} before {what}")
                });
            }
        }
        let slack = self.lateness() + self.churn_allowance();
        let (what, latest) = match waits.iter().max_by_key(|(_, _, latest)| *latest) {
            Some((what, _, latest)) => (*what, *latest + caps.delay_precision + slack),
            None => (
                "its publish",
                message.returned + caps.delivery_bound + slack,
            ),
        };
        if let Ok(late) = at.duration_since(latest) {
            outcome.expect_timely(late.is_zero(), || {
                format!("late: {key} was first delivered {late:?} after {what} plus its precision or bound")
            });
        }
    }

    /// What the machine's load explains of a lateness, and a batch's await.
    fn lateness(&self) -> Duration {
        let batch = if self.mix.has(Part::BulkSubscribe) {
            Duration::from_millis(100)
        } else {
            Duration::ZERO
        };
        self.ctx.lateness_allowance(self.ctx.caps.delay_precision) + batch
    }

    /// What member churn may add to a delivery: the group taking in the member that
    /// joins (a rebalance, up to a delivery bound), and a message the leaving member
    /// held returning.
    fn churn_allowance(&self) -> Duration {
        if self.mix.has(Part::MemberChurn) {
            self.ctx.caps.delivery_bound
                + returned_after(&self.ctx.caps)
                + self.ctx.caps.redelivery_bound
        } else {
            Duration::ZERO
        }
    }

    /// The dead-letter topic got only what was dropped, exhausted or expired, each
    /// naming the topic it came from.
    fn dead_letters(
        &self,
        dead: &[Event],
        published: &[Published],
        expired: &[(String, String)],
        outcome: &mut Outcome,
    ) {
        let topics: BTreeMap<&str, &str> = published
            .iter()
            .map(|p| (p.key.as_str(), p.topic.as_str()))
            .chain(expired.iter().map(|(k, t)| (k.as_str(), t.as_str())))
            .collect();
        for event in dead {
            let key = key_of(event);
            let role = Role::of(key);
            outcome.expect(!matches!(role, Some(Role::Settled | Role::Retried)), || {
                format!("DL-2: {key} was dead-lettered though it was answered SUCCESS in the end")
            });
            if let Some(topic) = topics.get(key) {
                let original = event.metadata.get("originalTopic");
                outcome.expect(original.map(String::as_str) == Some(*topic), || {
                    format!("DL-1: the dead-lettered copy of {key} names the original topic {original:?}, not {topic}")
                });
            }
        }
    }

    /// Every batch holds at most maxMessagesCount entries, all of one topic.
    fn batches(&self, outcome: &mut Outcome) {
        for (_, topic, _, size) in self.history.batches() {
            outcome.expect(size <= BATCH, || {
                format!("BS-1: a batch of {size} entries from {topic}; maxMessagesCount is {BATCH}")
            });
        }
        let mut topics: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for record in &self.history.records {
            if let Record::Delivered {
                batch: Some(batch),
                topic,
                ..
            } = record
            {
                topics.entry(batch).or_default().insert(topic);
            }
        }
        for (batch, topics) in topics {
            outcome.expect(topics.len() == 1, || {
                format!("BS-1: batch {batch} mixed the topics {topics:?}")
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_two_features_meet_in_a_row() {
        let rows = rows();
        for (i, a) in Part::ALL.iter().enumerate() {
            for b in &Part::ALL[i + 1..] {
                assert!(
                    rows.iter().any(|r| r.contains(a) && r.contains(b)),
                    "{} and {} never meet",
                    a.name(),
                    b.name()
                );
            }
        }
        assert!(rows.iter().all(|r| r.len() <= ROW_SIZE));
        // Ten features five at a time need six rows at least; greedy stays near.
        assert!(rows.len() <= 8, "{} rows", rows.len());
    }

    #[test]
    fn a_row_is_read_back_from_its_id() {
        for row in rows() {
            assert_eq!(row_of(&id_of(&row)), Some(row));
        }
        assert_eq!(row_of("pairs.ttl+nothing"), None);
        assert_eq!(row_of("ttl.expired"), None);
    }

    #[test]
    fn roles_are_read_from_keys_and_answered() {
        assert_eq!(Role::of("retried-3-t0"), Some(Role::Retried));
        assert_eq!(Role::of("expired-t1"), Some(Role::Expired));
        assert_eq!(Role::of("retriedx-1"), None);
        assert_eq!(Role::of("subscribed-marker"), None);
    }
}
