//! groups.*: every character class a group name may hold names its own group.

use super::topics::{names, received, refusal_flaw};
use crate::context::CaseContext;
use crate::history::History;
use crate::outcome::{is_beyond_remote_api, CaseError, CaseRun};
use pubsub_components::runtime::Subscription;
use std::collections::{BTreeMap, BTreeSet};

/// How many messages the group case publishes: a folded pair of groups splits them.
const GROUP_MESSAGES: usize = 6;

pub(super) async fn distinct_groups(ctx: CaseContext) -> CaseRun {
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
            Err(e) => match refusal_flaw(&e, group) {
                None => refused.push(format!("{label} ({group}): {e}")),
                Some(flaw) => {
                    return Err(CaseError::Component(format!(
                        "subscribing group {group} ({label}) failed, but not as a clear refusal of the name ({flaw}): {e}"
                    )))
                }
            },
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
    let mut outcome = ctx.check(&ctx.criteria());
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
