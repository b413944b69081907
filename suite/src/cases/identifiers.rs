//! Identifiers across their space: topic names, and consumer group names, that
//! differ only in case or in the punctuation the contract allows, or only in their
//! last character at the longest length, are distinct topics and distinct groups.

use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::{History, Record};
use crate::outcome::{is_beyond_remote_api, CaseError, CaseRun};
use pubsub_components::runtime::controls::MAX_TOPIC_LEN;
use pubsub_components::runtime::Subscription;
use pubsub_components::ErrorKind;
use std::collections::{BTreeMap, BTreeSet};

pub fn cases() -> Vec<Case> {
    vec![Case {
        id: "topics.distinct-names",
        must: "Topic names that differ only in case, only in the punctuation the contract allows (. _ - / :), or only in the last character at the longest length (249) MUST be distinct topics: each subscriber receives exactly what was published to its own topic; a component whose broker cannot represent a name MUST refuse it clearly (InvalidRequest or Unsupported naming it) at subscribe or publish, never fold it into another.",
        requires: &[],
        level: Level::Core,
        injects: &[],
        bound: Bound::new("2 x delivery bound + redelivery bound", |c| {
            c.delivery_bound * 2 + c.redelivery_bound
        }),
        run: |ctx| Box::pin(distinct_names(ctx)),
    },
    Case {
        id: "groups.distinct-names",
        must: "Consumer group names that differ only in case, only in punctuation (. _ - / :), or only in the last character at the longest length (249) MUST be distinct groups: each receives every message of the topic, none shares its deliveries with another; a component whose broker cannot represent a group name MUST refuse it clearly (InvalidRequest or Unsupported naming it) at subscribe, never fold it into another.",
        requires: &[],
        level: Level::Core,
        injects: &[],
        bound: Bound::new("2 x delivery bound + redelivery bound", |c| {
            c.delivery_bound * 2 + c.redelivery_bound
        }),
        run: |ctx| Box::pin(distinct_groups(ctx)),
    }]
}

/// How many messages the group case publishes: a folded pair of groups splits them.
const GROUP_MESSAGES: usize = 6;

async fn distinct_groups(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let base = ctx.group("g");
    let groups = names(&base);
    let mut subscribed: Vec<(String, String)> = Vec::new();
    let mut refused = Vec::new();
    let mut handles = Vec::new();
    for (label, group) in &groups {
        let subscription = Subscription::new(&topic, group.clone());
        let handler = ctx.recorder.handler(label);
        ctx.recorder.assign_group(&handler, group);
        // The group exists before anything is published (queue and session brokers
        // keep messages only for groups that do), then a member joins it.
        let joined = match ctx
            .acknowledged(ctx.runtime.create_group(&subscription))
            .await
        {
            Ok(()) => {
                ctx.acknowledged(ctx.runtime.subscribe(subscription, handler))
                    .await
            }
            Err(e) => Err(e),
        };
        match joined {
            Ok(handle) => {
                handles.push((label.clone(), handle));
                subscribed.push((label.clone(), group.clone()));
            }
            // A path with one group per topic (an attached sidecar, one app id) says
            // so for the second name: a limit of the path, not a refusal of the name.
            Err(e) if is_beyond_remote_api(&e) => {
                return Err(CaseError::CannotProvoke(format!(
                    "subscribing group {group} ({label}) after {} other name(s) on the topic: {e}",
                    subscribed.len()
                )))
            }
            Err(e) if clear_refusal(&e, group) => refused.push(format!("{label} ({group}): {e}")),
            Err(e) => {
                return Err(CaseError::Component(format!(
                    "subscribing group {group} ({label}) failed without saying the name is refused: {e}"
                )))
            }
        }
    }
    let keys = ctx.publish_numbered(&topic, "m", GROUP_MESSAGES).await?;
    let got = |h: &History, label: &str| -> BTreeSet<String> {
        received(h)
            .filter(|(_, s)| s == label)
            .map(|(k, _)| k)
            .collect()
    };
    let has_all = |h: &History, label: &str, keys: &[String]| {
        let got = got(h, label);
        keys.iter().all(|k| got.contains(k))
    };
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            subscribed.iter().all(|(label, _)| has_all(h, label, &keys))
        })
        .await;
    let history = ctx.recorder.history();
    let mut outcome = ctx.check(&ctx.expectation());
    // What each name received, and what it is missing, read once.
    let received_by: BTreeMap<&str, BTreeSet<String>> = subscribed
        .iter()
        .map(|(label, _)| (label.as_str(), got(&history, label)))
        .collect();
    let missing_of = |label: &str| -> Vec<&String> {
        keys.iter()
            .filter(|k| !received_by[label].contains(*k))
            .collect()
    };
    // Names short of messages that every other name received: their group was never
    // delivered to, or shares a broker group with another name whose member took them
    // all. Stopping every complete name's member and publishing again tells which: a
    // shared broker group now delivers to the member left.
    let short: Vec<&(String, String)> = subscribed
        .iter()
        .filter(|(label, _)| !missing_of(label).is_empty())
        .collect();
    let silent: Vec<&(String, String)> = short
        .iter()
        .copied()
        .filter(|(label, _)| {
            let missing = missing_of(label);
            subscribed.len() > 1
                && subscribed
                    .iter()
                    .filter(|(other, _)| other != label)
                    .all(|(other, _)| {
                        missing
                            .iter()
                            .all(|k| received_by[other.as_str()].contains(*k))
                    })
        })
        .collect();
    let mut probe = Vec::new();
    for (label, handle) in handles {
        if short.iter().any(|(l, _)| *l == label) {
            probe.push(handle);
        } else {
            handle.stop().await;
        }
    }
    let mut probe_keys = Vec::new();
    if !silent.is_empty() {
        probe_keys = ctx
            .publish_numbered(&topic, "probe", GROUP_MESSAGES)
            .await?;
        ctx.recorder
            .wait_until(ctx.delivery_deadline(), |h| {
                silent
                    .iter()
                    .all(|(label, _)| has_all(h, label, &probe_keys))
            })
            .await;
    }
    for handle in probe {
        handle.stop().await;
    }
    let after = ctx.recorder.history();
    for (label, group) in &short {
        let mine = &received_by[label.as_str()];
        let missing = missing_of(label);
        // Missing here but delivered to another name that misses some too: the two
        // names share one broker group, whose members split the messages.
        let shared_with: Vec<&str> = short
            .iter()
            .filter(|(other, _)| other != label)
            .filter(|(other, _)| {
                missing
                    .iter()
                    .any(|k| received_by[other.as_str()].contains(*k))
            })
            .map(|(other, _)| other.as_str())
            .collect();
        let probed_got = got(&after, label);
        let probed = probe_keys
            .iter()
            .filter(|k| probed_got.contains(*k))
            .count();
        if silent.iter().any(|(l, _)| l == label) {
            if probed > 0 {
                outcome.fail(format!(
                    "group names folded: group {group} ({label}) received {} of the {} messages while every other group received all of them, and {probed} of the {} published once the other groups' members stopped: one broker group under two names, whose other member took them",
                    mine.len(),
                    keys.len(),
                    probe_keys.len()
                ));
            } else {
                outcome.fail(format!(
                    "never delivered: group {group} ({label}) received {} of the {} messages while every other group received all of them, and none of the {} published once the other groups' members stopped (not a name shared with another group: that group's member was gone)",
                    mine.len(),
                    keys.len(),
                    probe_keys.len()
                ));
            }
        } else if !shared_with.is_empty() {
            outcome.fail(format!(
                "group names folded: group {group} ({label}) received {} of the {} messages, and the rest went to {} (one broker group under several names, its members splitting the messages)",
                mine.len(),
                keys.len(),
                shared_with.join(", ")
            ));
        } else {
            outcome.fail(format!(
                "lost: group {group} ({label}) never received {} of the {} messages",
                missing.len(),
                keys.len()
            ));
        }
    }
    for note in refused {
        outcome.note(format!("refused clearly: {note}"));
    }
    outcome.note(format!(
        "{} group names on one topic, {} accepted, {} messages",
        groups.len(),
        subscribed.len(),
        keys.len()
    ));
    Ok(outcome)
}

/// The names of the case: labels and topics, every one distinct from every other
/// only by what its label says.
fn names(base: &str) -> Vec<(String, String)> {
    let mut names: Vec<(String, String)> = [
        ("lower", format!("{base}-a")),
        ("upper", format!("{base}-A")),
        ("dot", format!("{base}.a")),
        ("underscore", format!("{base}_a")),
        ("slash", format!("{base}/a")),
        ("colon", format!("{base}:a")),
        ("none", format!("{base}a")),
    ]
    .into_iter()
    .map(|(label, topic)| (label.to_string(), topic))
    .collect();
    let long = format!("{base}-{}", "x".repeat(MAX_TOPIC_LEN - base.len() - 2));
    names.push(("longest-x".into(), format!("{long}x")));
    names.push(("longest-y".into(), format!("{long}y")));
    names
}

/// Whether a refusal names the problem as the contract asks (an invalid or
/// unsupported name, saying which), from the component: a remote path's own limit
/// is not one.
fn clear_refusal(error: &pubsub_components::PubSubError, topic: &str) -> bool {
    let text = error.to_string();
    !is_beyond_remote_api(error)
        && matches!(
            error.kind(),
            ErrorKind::InvalidRequest | ErrorKind::Unsupported
        )
        && (text.contains(topic) || text.contains(&topic[..topic.len().min(32)]))
}

async fn distinct_names(ctx: CaseContext) -> CaseRun {
    let base = ctx.topic("n");
    let names = names(&base);
    let mut subscribed: Vec<(String, String)> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut handles = Vec::new();
    'names: for (label, topic) in &names {
        // Each name in a group of its own (two names folded into one broker topic
        // both reach it), and in one group shared by every name (two names folded
        // into one broker consumer show there).
        for (subscriber, group) in [
            (label.clone(), ctx.group(label)),
            (format!("{label}{SHARED}"), ctx.group("shared")),
        ] {
            let subscription = Subscription::new(topic, group);
            let handler = ctx.recorder.handler(&subscriber);
            ctx.recorder.assign_group(&handler, &subscription.group);
            match ctx.acknowledged(ctx.runtime.subscribe(subscription, handler)).await {
                Ok(handle) => handles.push(handle),
                // A path with one group per topic (an attached sidecar, one app id)
                // cannot hold a name's own group beside the shared one: a limit of the
                // path, not a refusal of the name.
                Err(e) if is_beyond_remote_api(&e) => {
                    return Err(CaseError::CannotProvoke(format!(
                        "subscribing to {topic} ({label}) in group {} as well: {e}",
                        ctx.group("shared")
                    )))
                }
                Err(e) if clear_refusal(&e, topic) => {
                    refused.push(format!("{label} ({topic}): {e}"));
                    continue 'names;
                }
                Err(e) => {
                    return Err(CaseError::Component(format!(
                        "subscribing to {topic} ({label}) failed without saying the name is refused: {e}"
                    )))
                }
            }
        }
        subscribed.push((label.clone(), topic.clone()));
    }
    let mut published: BTreeMap<String, String> = BTreeMap::new();
    let mut publish_refusals = Vec::new();
    for (label, topic) in &subscribed {
        match ctx.publish(ctx.message(topic, label)).await {
            Ok(_) => {
                published.insert(label.clone(), topic.clone());
            }
            Err(e) if clear_refusal(&e, topic) => publish_refusals.push(format!(
                "{label} ({topic}): subscribing was accepted but publishing refused: {e}"
            )),
            Err(e) => {
                return Err(CaseError::Component(format!(
                    "publishing to {topic} ({label}): {e}"
                )))
            }
        }
    }
    let expected: BTreeSet<(String, String)> = published
        .keys()
        .flat_map(|key| {
            [
                (key.clone(), key.clone()),
                (key.clone(), format!("{key}{SHARED}")),
            ]
        })
        .collect();
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            expected
                .iter()
                .all(|pair| received(h).any(|got| got == *pair))
        })
        .await;
    // What was published to one name must not reach another's subscriber: watched
    // for the redelivery window after everything arrived.
    ctx.recorder
        .wait_until(ctx.quiet_window(), |h| crossed(h).next().is_some())
        .await;
    for handle in handles {
        handle.stop().await;
    }
    let history = ctx.recorder.history();
    let mut outcome = ctx.check(&ctx.expectation());
    for refusal in publish_refusals {
        outcome.fail(refusal);
    }
    let got: BTreeSet<(String, String)> = received(&history).collect();
    for (key, subscriber) in expected.difference(&got) {
        outcome.fail(format!(
            "lost: the message published to {} ({key}) never reached its subscriber {subscriber}",
            published.get(key).cloned().unwrap_or_default()
        ));
    }
    for (key, subscriber) in crossed(&history) {
        outcome.fail(format!(
            "topic names folded: the message published to {} ({key}) reached the subscriber of {} ({subscriber})",
            published.get(&key).cloned().unwrap_or_default(),
            names
                .iter()
                .find(|(label, _)| subscriber.trim_end_matches(SHARED) == label)
                .map(|(_, topic)| topic.clone())
                .unwrap_or_default(),
        ));
    }
    for note in refused {
        outcome.note(format!("refused clearly: {note}"));
    }
    outcome.note(format!(
        "{} names, {} published to",
        names.len(),
        published.len()
    ));
    Ok(outcome)
}

/// The suffix of a name's subscriber in the group every name shares.
const SHARED: &str = "@shared";

/// Every delivery: (key, subscriber).
fn received(history: &History) -> impl Iterator<Item = (String, String)> + '_ {
    history.records.iter().filter_map(|record| match record {
        Record::Delivered {
            key: Some(key),
            subscriber,
            ..
        } => Some((key.clone(), subscriber.clone())),
        _ => None,
    })
}

/// Deliveries of one name's message to another name's subscriber: (key, subscriber).
fn crossed(history: &History) -> impl Iterator<Item = (String, String)> + '_ {
    received(history).filter(|(key, subscriber)| subscriber.trim_end_matches(SHARED) != key)
}
