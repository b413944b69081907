//! topics.*: every character class a topic name may hold names its own topic.

use crate::context::CaseContext;
use crate::history::{History, Record};
use crate::outcome::{is_beyond_remote_api, CaseError, CaseRun};
use pubsub_components::runtime::controls::MAX_TOPIC_LEN;
use pubsub_components::runtime::Subscription;
use pubsub_components::ErrorKind;
use std::collections::{BTreeMap, BTreeSet};

/// The names of the case: labels and topics, every one distinct from every other
/// only by what its label says.
pub(super) fn names(base: &str) -> Vec<(String, String)> {
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

/// What keeps an error from being the clear refusal of a name the contract asks for
/// (an invalid or unsupported name, from the component, saying which); `None` when it
/// is one. A remote path's own limit is not one.
pub(super) fn refusal_flaw(error: &pubsub_components::PubSubError, name: &str) -> Option<String> {
    let text = error.to_string();
    if is_beyond_remote_api(error) {
        return Some("it is a limit of the remote path, not a refusal of the name".into());
    }
    if !matches!(
        error.kind(),
        ErrorKind::InvalidRequest | ErrorKind::Unsupported
    ) {
        return Some(format!(
            "its error kind is {:?}; a refused name is InvalidRequest or Unsupported",
            error.kind()
        ));
    }
    if !(text.contains(name) || text.contains(&name[..name.len().min(32)])) {
        return Some(format!("its error does not name {name}"));
    }
    None
}

pub(super) async fn distinct_names(ctx: CaseContext) -> CaseRun {
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
                Err(e) => match refusal_flaw(&e, topic) {
                    None => {
                        refused.push(format!("{label} ({topic}): {e}"));
                        continue 'names;
                    }
                    Some(flaw) => {
                        return Err(CaseError::Component(format!(
                            "subscribing to {topic} ({label}) failed, but not as a clear refusal of the name ({flaw}): {e}"
                        )))
                    }
                },
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
            Err(e) if refusal_flaw(&e, topic).is_none() => publish_refusals.push(format!(
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
    // Two subscriptions a name, stopped at once: leaving a group is a call to the
    // broker, as subscribing is, and its time is not the delivery's.
    ctx.acknowledged(futures::future::join_all(
        handles.into_iter().map(|handle| handle.stop()),
    ))
    .await;
    let history = ctx.recorder.history();
    let mut outcome = ctx.check(&ctx.criteria());
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
pub(super) fn received(history: &History) -> impl Iterator<Item = (String, String)> + '_ {
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
