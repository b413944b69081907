//! Partitioned topics: key routing, partition-count updates seen without restart,
//! versioned watchers, watching unknown topics.

use crate::context::CaseContext;
use crate::fault_injection::Faults;
use crate::history::Record;
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use pubsub_components::runtime::{BulkPublishRequest, Subscription};
use pubsub_components::{ErrorKind, Feature, PartitionUpdate, PartitionWatch, TopicSelector};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

fn discovery(c: &pubsub_components::Capabilities) -> Duration {
    c.partitions.map_or(Duration::ZERO, |p| p.discovery_bound)
}

fn partitions_of(history: &crate::history::History) -> BTreeMap<String, BTreeSet<u32>> {
    let mut partitions: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let keys: BTreeMap<&String, &Option<String>> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Published {
                key, partition_key, ..
            } => Some((key, partition_key)),
            _ => None,
        })
        .collect();
    for record in &history.records {
        if let Record::Delivered {
            key: Some(key), id, ..
        } = record
        {
            if let Some(Some(partition_key)) = keys.get(key) {
                partitions
                    .entry(partition_key.clone())
                    .or_default()
                    .insert(id.partition.unwrap_or(0));
            }
        }
    }
    partitions
}

/// How many keys [`key_routing`] generates beside the odd ones of `ordering.key-space`.
const GENERATED_KEYS: usize = 16;

pub(super) async fn key_routing(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    ctx.create_topic(&topic, 4).await?;
    let handle = ctx.subscribe_recorded(&topic).await?;
    // Keys across their space: the odd ones (case, punctuation, spaces, non-ASCII,
    // one character, 1024 characters differing in the last, wildcards) and generated
    // ones from every Unicode plane, from the case seed.
    let mut partition_keys = super::ordering::odd_keys();
    partition_keys.extend(super::generate("\\PC{1,40}", ctx.seed(), GENERATED_KEYS));
    partition_keys.sort();
    partition_keys.dedup();
    // Each key twice in a row on the single path, so that a router placing messages in
    // turn cannot keep a key on one partition by chance, then once more in one bulk
    // request holding every key.
    let mut keys = Vec::new();
    for (k, partition_key) in partition_keys.iter().enumerate() {
        for copy in ["a", "b"] {
            let key = format!("m-{k}-{copy}");
            ctx.publish(
                ctx.message(&topic, &key)
                    .with_metadata("partitionKey", partition_key.as_str()),
            )
            .await
            .doing(&format!(
                "publishing {key} with partitionKey {}",
                short(partition_key)
            ))?;
            keys.push(key);
        }
    }
    let bulk = ctx.runtime.mode(Feature::BulkPublish).is_available();
    if bulk {
        let entries = partition_keys
            .iter()
            .enumerate()
            .map(|(k, partition_key)| {
                let mut entry = super::keyed_entry(&format!("m-{k}-bulk"));
                entry
                    .metadata
                    .insert("partitionKey".into(), partition_key.clone());
                entry
            })
            .collect::<Vec<_>>();
        keys.extend(entries.iter().map(|e| e.entry_id.clone()));
        let response = ctx
            .bulk_publish(BulkPublishRequest::new(&topic, entries))
            .await
            .doing("bulk-publishing one entry per partition key")?;
        if !response.failed_entries.is_empty() {
            return Err(CaseError::Component(format!(
                "the bulk publish of one entry per partition key failed {} entries: {:?}",
                response.failed_entries.len(),
                response.failed_entries
            )));
        }
    }
    let mut outcome = ctx.conclude(&keys, handle).await;
    let partitions = partitions_of(&ctx.recorder.history());
    for (partition_key, seen) in &partitions {
        outcome.expect(seen.len() == 1, || {
            format!(
                "partitionKey {} landed on partitions {seen:?} (published twice singly{})",
                short(partition_key),
                if bulk {
                    " and once in a bulk request"
                } else {
                    ""
                }
            )
        });
    }
    let used: BTreeSet<u32> = partitions.values().flatten().copied().collect();
    outcome.note(format!(
        "{} keys (seed {}) spread over partitions {used:?}{}",
        partition_keys.len(),
        ctx.seed(),
        if bulk {
            ""
        } else {
            "; bulk publish unsupported: the single path only"
        }
    ));
    Ok(outcome)
}

/// A partition key as a finding shows it: quoted, long ones cut after 24 characters.
fn short(key: &str) -> String {
    let count = key.chars().count();
    if count <= 24 {
        format!("{key:?}")
    } else {
        let head: String = key.chars().take(24).collect();
        format!("{head:?}... ({count} characters)")
    }
}

pub(super) async fn update_seen(ctx: CaseContext) -> CaseRun {
    partitions_added(ctx, Subscribed::Alone).await
}

pub(super) async fn update_seen_in_list(ctx: CaseContext) -> CaseRun {
    partitions_added(ctx, Subscribed::InList).await
}

/// How the subscriber names the topic that gains partitions.
#[derive(Clone, Copy)]
enum Subscribed {
    /// As its one topic.
    Alone,
    /// In a list beside a topic without partitions, which a consumer may resolve
    /// into the partitions there are when it opens.
    InList,
}

async fn partitions_added(ctx: CaseContext, subscribed: Subscribed) -> CaseRun {
    let topic = ctx.topic("t");
    let component = ctx.runtime.component().clone();
    let mut watcher = watched_topic(&ctx, &topic, 2).await?;
    let mut keys = Vec::new();
    let handle = match subscribed {
        Subscribed::Alone => ctx.subscribe_recorded(&topic).await?,
        Subscribed::InList => {
            let other = ctx.topic("other");
            let selector = TopicSelector::List(vec![topic.clone(), other.clone()]);
            let handle = ctx
                .subscribe(
                    Subscription::selecting(selector, ctx.group("g")),
                    ctx.recorder.handler("s1"),
                )
                .await?;
            keys.extend(ctx.publish_numbered(&other, "beside", 4).await?);
            handle
        }
    };
    keys.extend(ctx.publish_numbered(&topic, "before", 8).await?);
    let bound = discovery(&ctx.caps);
    component
        .update_partitions(&topic, 4)
        .await
        .doing("raising the partition count to 4")?;
    let updated_at = SystemTime::now();
    let update_deadline = ctx.within(bound + ctx.caps.delivery_bound);
    // Keep publishing (no key: spread over partitions) until the new partitions carry
    // deliveries, or the bound has passed.
    let mut round = 0;
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    let new_partition_used = |h: &crate::history::History| {
        h.records
            .iter()
            .any(|r| matches!(r, Record::Delivered { id, .. } if id.partition.unwrap_or(0) >= 2))
    };
    while tokio::time::Instant::now() < update_deadline
        && !new_partition_used(&ctx.recorder.history())
    {
        ticker.tick().await;
        keys.extend(
            ctx.publish_numbered(&topic, &format!("after-{round}"), 4)
                .await?,
        );
        round += 1;
    }
    // The watcher first reports the current count, then the update.
    let mut seen = Vec::new();
    while let Some(update) = watcher.next_within(bound).await {
        seen.push(update);
        if update.partitions == 4 {
            break;
        }
    }
    let mut outcome = ctx.conclude(&keys, handle).await;
    outcome.expect(seen.iter().any(|u| u.partitions == 4), || {
        format!("the watcher never saw the update to 4 partitions; saw {seen:?}")
    });
    let history = ctx.recorder.history();
    let first_new = history.records.iter().find_map(|r| match r {
        Record::Delivered { id, at, .. } if id.partition.unwrap_or(0) >= 2 => Some(*at),
        _ => None,
    });
    match first_new {
        None => {
            outcome.fail(format!(
                "no message went through the new partitions 2 and 3 within {:?} of the update",
                bound + ctx.caps.delivery_bound
            ));
        }
        Some(at) => {
            let after = at.duration_since(updated_at).unwrap_or_default();
            outcome.note(format!(
                "first delivery from a new partition {after:?} after the update"
            ));
            outcome.expect(after <= bound + ctx.caps.delivery_bound, || {
                format!("new partitions first used {after:?} after the update; discovery bound {bound:?} + delivery bound {:?}", ctx.caps.delivery_bound)
            });
        }
    }
    Ok(outcome)
}

pub(super) async fn watch(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let component = ctx.runtime.component().clone();
    let bound = discovery(&ctx.caps);
    let mut first = watched_topic(&ctx, &topic, 1).await?;
    component
        .update_partitions(&topic, 3)
        .await
        .doing("raising the count to 3")?;
    let mut second = component
        .watch_partitions(&topic)
        .await
        .doing("watching partitions again")?;
    // A watcher dropped while the others live on ends nothing but itself.
    let dropped = component
        .watch_partitions(&topic)
        .await
        .doing("watching partitions a third time")?;
    drop(dropped);
    component
        .update_partitions(&topic, 5)
        .await
        .doing("raising the count to 5")?;
    let reached =
        |updates: &[PartitionUpdate], last: u32| updates.last().map(|u| u.partitions) == Some(last);
    let mut seen_first = Vec::new();
    while let Some(update) = first.next_within(bound).await {
        seen_first.push(update);
        if reached(&seen_first, 5) {
            break;
        }
    }
    let mut seen_second = Vec::new();
    while let Some(update) = second.next_within(bound).await {
        seen_second.push(update);
        if reached(&seen_second, 5) {
            break;
        }
    }
    // Anything after the last update would be a repeat.
    let extra = first
        .next_within(bound.min(Duration::from_millis(200)))
        .await;
    let mut outcome = Outcome::new();
    outcome.note(format!(
        "first watcher saw {seen_first:?}; second watcher saw {seen_second:?}"
    ));
    // The topic's states: the first watcher's first notification names the version
    // of the starting count; each update adds one. Updates may be merged (a version
    // skipped) but every notification must carry the state of its version, and
    // never a stale one or a repeat.
    let states: Vec<u32> = vec![1, 3, 5];
    match seen_first.first() {
        None => {
            outcome.fail("the first watcher got no notification at all");
        }
        Some(start) => {
            outcome.expect(start.partitions == 1, || {
                format!(
                    "the first watcher's first notification carries {} partitions, expected the current count 1",
                    start.partitions
                )
            });
            let base = start.version;
            let history = states
                .iter()
                .enumerate()
                .map(|(i, n)| format!("v{}={n}", base + i as u64))
                .collect::<Vec<_>>()
                .join(", ");
            for (name, seen, starting) in
                [("first", &seen_first, 1u32), ("second", &seen_second, 3u32)]
            {
                for update in seen.iter() {
                    let state = update
                        .version
                        .checked_sub(base)
                        .and_then(|i| states.get(i as usize));
                    outcome.expect(state == Some(&update.partitions), || {
                        format!(
                            "{name} watcher: version {} with {} partitions is a version the topic never had (its versions: {history})",
                            update.version, update.partitions
                        )
                    });
                }
                outcome.expect(seen.windows(2).all(|w| w[1].version > w[0].version), || {
                    format!("{name} watcher: a stale or repeated notification (versions must increase): {seen:?}")
                });
                outcome.expect(seen.last().map(|u| u.partitions) == Some(5), || {
                    format!("{name} watcher never saw the final count 5: {seen:?}")
                });
                outcome.expect(
                    seen.first().is_some_and(|u| u.partitions >= starting),
                    || format!("{name} watcher started from a stale count: {seen:?}"),
                );
            }
        }
    }
    outcome.expect(extra.is_none(), || {
        format!("the first watcher saw an extra update {extra:?}")
    });
    Ok(outcome)
}

pub(super) async fn invalid_updates(ctx: CaseContext) -> CaseRun {
    let component = ctx.runtime.component().clone();
    let mut outcome = Outcome::new();
    let missing = ctx.topic("never-created");
    match component.watch_partitions(&missing).await {
        Ok(_) => {
            outcome.fail(format!(
                "watching {missing}, which does not exist, was accepted"
            ));
        }
        Err(e) => {
            outcome.note(format!("watch of a missing topic: {e}"));
        }
    }
    let topic = ctx.topic("t");
    component
        .create_topic(&topic, 3)
        .await
        .doing("creating a topic")?;
    ctx.create_group(&Subscription::new(topic.clone(), ctx.group("g")))
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 6).await?;
    match component.update_partitions(&topic, 2).await {
        Ok(()) => {
            outcome.fail("lowering the partition count from 3 to 2 was accepted");
        }
        Err(e) => {
            outcome.note(format!("lowering: {e}"));
        }
    }
    // Created again: with the count it has, nothing happens; with another, or none,
    // refused as an invalid request (partitions are added by an update).
    if let Err(e) = component.create_topic(&topic, 3).await {
        outcome.fail(format!(
            "creating {topic} again with the 3 partitions it has was refused: {e}"
        ));
    }
    let none = ctx.topic("no-partitions");
    for (name, count, what) in [
        (&topic, 5, "again with 5 partitions where it has 3"),
        (&topic, 1, "again with 1 partition where it has 3"),
        (&none, 0, "with no partition"),
    ] {
        match component.create_topic(name, count).await {
            Ok(()) => {
                outcome.fail(format!("creating {name} {what} was accepted"));
            }
            Err(e) if e.kind() == ErrorKind::InvalidRequest => {
                outcome.note(format!("creating {name} {what}: {e}"));
            }
            Err(e) => {
                outcome.fail(format!(
                    "creating {name} {what} was refused with {:?}, expected InvalidRequest: {e}",
                    e.kind()
                ));
            }
        }
    }
    // The refused calls changed nothing: 3 partitions, every message there.
    let mut watch = component
        .watch_partitions(&topic)
        .await
        .doing("watching the topic")?;
    let wait = discovery(&ctx.caps) + ctx.caps.delivery_bound;
    match watch.next_within(wait).await {
        Some(update) => {
            outcome.expect(update.partitions == 3, || {
                format!(
                    "after the refused calls {topic} has {} partitions, not the 3 it was created with",
                    update.partitions
                )
            });
        }
        None => {
            outcome.fail(format!(
                "a watcher of {topic} reported no count within {wait:?}"
            ));
        }
    }
    drop(watch);
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let delivered = ctx.conclude(&keys, subscription).await;
    outcome.findings.extend(delivered.findings);
    outcome.notes.extend(delivered.notes);
    Ok(outcome)
}

pub(super) async fn watch_resend(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let component = ctx.runtime.component().clone();
    let bound = discovery(&ctx.caps);
    // Long enough for a component that re-sends on its own to do it, short enough to
    // keep the case quick where the bound is long.
    let quiet = bound.min(Duration::from_millis(400));
    let mut watch = watched_topic(&ctx, &topic, 2).await?;
    let mut outcome = Outcome::new();
    let Some(first) = watch.next_within(bound).await else {
        outcome.fail(format!(
            "the watcher got no notification within the {bound:?} discovery bound"
        ));
        return Ok(outcome);
    };
    // 1. Rejected: the same state comes back.
    watch.reject(first);
    let again = watch.next_within(bound).await;
    outcome.note(format!("took {first:?}, rejected it, then got {again:?}"));
    outcome.expect(again == Some(first), || {
        format!(
            "the rejected notification {first:?} was not sent again within the {bound:?} discovery bound (got {again:?})"
        )
    });

    // 2. Accepted: not sent again.
    component
        .update_partitions(&topic, 4)
        .await
        .doing("raising the count to 4")?;
    let second = watch.next_within(bound).await;
    outcome.expect(second.map(|u| u.partitions) == Some(4), || {
        format!("after raising the count to 4 the watcher got {second:?}")
    });
    let repeat = watch.next_within(quiet).await;
    outcome.expect(repeat.is_none(), || {
        format!("an accepted notification was sent again: {repeat:?} after {second:?}")
    });

    // 3. A rejection of an older notification than the last sent brings no repeat.
    watch.reject(first);
    let stale = watch.next_within(quiet).await;
    outcome.expect(stale.is_none(), || {
        format!(
            "rejecting the older {first:?} after {second:?} was sent brought {stale:?}: a repeat"
        )
    });

    // 4. Rejected while a newer update is on its way: the newer state comes, once.
    component
        .update_partitions(&topic, 5)
        .await
        .doing("raising the count to 5")?;
    if let Some(second) = second {
        watch.reject(second);
    }
    let mut after = Vec::new();
    while let Some(update) = watch.next_within(bound).await {
        after.push(update);
        if update.partitions == 5 {
            break;
        }
    }
    let extra = watch.next_within(quiet).await;
    outcome.note(format!(
        "rejected {second:?} as the count went to 5, then got {after:?}, then {extra:?}"
    ));
    let states = [
        (first.version, 2),
        (first.version + 1, 4),
        (first.version + 2, 5),
    ];
    for update in &after {
        outcome.expect(
            states.contains(&(update.version, update.partitions)),
            || format!("{update:?} is a state the topic never had (its states: {states:?})"),
        );
    }
    outcome.expect(after.last().map(|u| u.partitions) == Some(5), || {
        format!("the watcher never saw the count 5 after rejecting the update to 4: {after:?}")
    });
    outcome.expect(
        after.windows(2).all(|w| w[1].version > w[0].version),
        || format!("a stale or repeated notification after the rejection: {after:?}"),
    );
    outcome.expect(extra.is_none(), || {
        format!("the watcher saw an extra notification {extra:?} after the final count")
    });
    Ok(outcome)
}

pub(super) async fn watch_several(ctx: CaseContext) -> CaseRun {
    let (one, two) = (ctx.topic("one"), ctx.topic("two"));
    let component = ctx.runtime.component().clone();
    let bound = discovery(&ctx.caps);
    component
        .create_topic(&one, 1)
        .await
        .doing("creating a topic")?;
    component
        .create_topic(&two, 2)
        .await
        .doing("creating a second topic")?;
    let mut watch = component
        .watch_partitions_of(&[one.clone(), two.clone()])
        .await
        .doing("watching two topics with one watcher")?;
    let mut seen = Vec::new();
    if let Some(first) = watch.next_within(bound).await {
        seen.push(first);
    }
    for (topic, count) in [(&one, 3), (&two, 4), (&one, 5)] {
        component
            .update_partitions(topic, count)
            .await
            .doing(&format!("raising {topic} to {count}"))?;
    }
    let target = [(one.clone(), 5u32), (two.clone(), 4u32)];
    let reached = |state: &pubsub_components::PartitionsState| {
        target
            .iter()
            .all(|(t, n)| state.topics.get(t).map(|u| u.partitions) == Some(*n))
    };
    while !seen.last().is_some_and(reached) {
        match watch.next_within(bound).await {
            Some(state) => seen.push(state),
            None => break,
        }
    }
    let extra = watch
        .next_within(bound.min(Duration::from_millis(200)))
        .await;
    let mut outcome = Outcome::new();
    let summary: Vec<String> = seen
        .iter()
        .map(|s| {
            s.topics
                .iter()
                .map(|(t, u)| {
                    format!(
                        "{}=v{}:{}",
                        t.rsplit('-').next().unwrap_or(t),
                        u.version,
                        u.partitions
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    outcome.note(format!("notifications: {summary:?}"));
    match seen.first() {
        None => {
            outcome.fail("the watcher over two topics got no notification");
        }
        Some(first) => {
            let counts: Vec<Option<u32>> = [&one, &two]
                .iter()
                .map(|t| first.topics.get(*t).map(|u| u.partitions))
                .collect();
            outcome.expect(counts == [Some(1), Some(2)], || {
                format!(
                    "the first notification carries counts {counts:?}, expected the current [1, 2]"
                )
            });
        }
    }
    for (i, state) in seen.iter().enumerate() {
        outcome.expect(
            state.topics.contains_key(&one) && state.topics.contains_key(&two),
            || {
                format!(
                    "notification {i} carries only {:?}, not the state of every watched topic",
                    state.topics.keys().collect::<Vec<_>>()
                )
            },
        );
    }
    for pair in seen.windows(2) {
        for topic in [&one, &two] {
            let (before, after) = (pair[0].topics.get(topic), pair[1].topics.get(topic));
            if let (Some(b), Some(a)) = (before, after) {
                outcome.expect(
                    a.version >= b.version
                        && (a.version > b.version || a.partitions == b.partitions),
                    || format!("{topic}: version went from {b:?} to {a:?}: a stale state"),
                );
            }
        }
        outcome.expect(pair[0].topics != pair[1].topics, || {
            format!("a repeated notification: {:?}", pair[1].topics)
        });
    }
    outcome.expect(seen.last().is_some_and(reached), || {
        "the watcher never carried the final counts (5 and 4)".into()
    });
    outcome.expect(extra.is_none(), || {
        format!("an extra notification after the last update: {extra:?}")
    });
    Ok(outcome)
}

pub(super) async fn watch_after_restart(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let component = ctx.runtime.component().clone();
    let bound = discovery(&ctx.caps);
    let mut watch = watched_topic(&ctx, &topic, 2).await?;
    let mut outcome = Outcome::new();
    let first = watch.next_within(bound).await;
    outcome.expect(first.map(|u| u.partitions) == Some(2), || {
        format!("the first notification was {first:?}, expected the current count 2")
    });
    let faults = Faults::of(&ctx)?;
    faults.kill_broker().await?;
    faults.restart_broker().await?;
    let again = watch.next_within(ctx.caps.recovery_bound + bound * 2).await;
    outcome.expect(again.map(|u| u.partitions) == Some(2), || {
        format!("after the restart the watcher reported {again:?}, not the current state (2 partitions) again")
    });
    // The component may need a moment to reconnect: retried until the recovery bound.
    let deadline = ctx.within(ctx.caps.recovery_bound);
    let updated = loop {
        match component.update_partitions(&topic, 3).await {
            Ok(()) => break true,
            Err(e) if Instant::now() < deadline => {
                ctx.recorder
                    .note(format!("update after the restart: {e}; retrying"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => {
                outcome.fail(format!(
                    "raising the count after the restart failed until the recovery bound: {e}"
                ));
                break false;
            }
        }
    };
    if updated {
        let mut later = None;
        while let Some(update) = watch.next_within(bound * 2).await {
            if update.partitions == 3 {
                later = Some(update);
                break;
            }
        }
        outcome.expect(
            later.is_some_and(|u| first.is_some_and(|f| u.version > f.version)),
            || format!("after the restart the update to 3 partitions was not reported with a newer version (got {later:?})"),
        );
    }
    Ok(outcome.with_history(&ctx.recorder.history()))
}

/// Creates `topic` with `partitions` partitions and watches its partition count.
async fn watched_topic(
    ctx: &CaseContext,
    topic: &str,
    partitions: u32,
) -> Result<PartitionWatch, CaseError> {
    let component = ctx.runtime.component();
    component
        .create_topic(topic, partitions)
        .await
        .doing(&format!("creating a topic with {partitions} partitions"))?;
    component
        .watch_partitions(topic)
        .await
        .doing("watching partitions")
}
