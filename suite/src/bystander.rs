//! The bystander group, a dimension of the per-group cases: beside each topic a case
//! creates a group on, a second group, created with it and subscribed only once the
//! case is over, answering SUCCESS to everything. Alone, that group would get every
//! message published after it was created, once and as its first attempt; nothing the
//! case's own groups do (acknowledge, RETRY, DROP, dead-letter, count attempts) may
//! change that.

use crate::history::{History, Record, Recorder};
use crate::outcome::Outcome;
use pubsub_components::runtime::{Runtime, Subscription};
use pubsub_components::{DeliveryGuarantee, TopicSelector};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The label of the bystander's deliveries.
const SUBSCRIBER: &str = "bystander";

/// A bystander group of one run of one case.
pub struct Bystander {
    group: String,
    recorder: Recorder,
    /// The topics watched, each with when the bystander's group was created on it.
    topics: Mutex<BTreeMap<String, SystemTime>>,
    /// Keys published with a TTL: alone, the bystander may rightly never see them.
    expiring: Mutex<BTreeSet<String>>,
    /// Why a topic has no bystander.
    notes: Mutex<Vec<String>>,
}

impl Bystander {
    /// A bystander whose group is named `group`.
    pub fn new(group: String) -> Self {
        Bystander {
            group,
            recorder: Recorder::new(),
            topics: Mutex::default(),
            expiring: Mutex::default(),
            notes: Mutex::default(),
        }
    }

    /// Creates the bystander's group on each topic `topics` names (one, or each of a
    /// list; a pattern names none), the first time a case creates a group of its own,
    /// `group`, there. A path that refuses a second group (a work queue, one app per
    /// topic) leaves the topic without one, and a note says so.
    pub async fn join(&self, runtime: &Runtime, topics: &TopicSelector, group: &str) {
        if group == self.group {
            return;
        }
        let named = match topics {
            TopicSelector::Single(topic) => std::slice::from_ref(topic),
            TopicSelector::List(topics) => topics.as_slice(),
            TopicSelector::Pattern(_) => &[],
        };
        for topic in named {
            if lock(&self.topics).contains_key(topic) {
                continue;
            }
            lock(&self.topics).insert(topic.clone(), SystemTime::now());
            let created = Subscription::new(topic.clone(), &self.group);
            if let Err(e) = runtime.create_group(&created).await {
                lock(&self.topics).remove(topic);
                lock(&self.notes).push(format!("no bystander group on {topic}: {e}"));
            }
        }
    }

    /// Notes that `key` was published with a TTL.
    pub fn expiring(&self, key: &str) {
        lock(&self.expiring).insert(key.to_string());
    }

    /// Subscribes the bystander's group on every topic it watches, waits up to `within`
    /// for what it must get (`history` says what the case published), and stops; what
    /// it saw, as findings, warnings and notes.
    pub async fn conclude(
        &self,
        runtime: &Runtime,
        history: &History,
        guarantee: DeliveryGuarantee,
        within: Duration,
    ) -> Outcome {
        let mut seen = Outcome {
            notes: lock(&self.notes).clone(),
            ..Outcome::default()
        };
        let topics = lock(&self.topics).clone();
        if topics.is_empty() {
            return seen;
        }
        let expected = self.expected(history, &topics);
        let mut handles = Vec::new();
        for topic in topics.keys() {
            let subscription = Subscription::new(topic.clone(), &self.group);
            match runtime
                .subscribe(subscription, self.recorder.handler(SUBSCRIBER))
                .await
            {
                Ok(handle) => handles.push(handle),
                Err(e) => seen.findings.push(format!(
                    "the bystander group could not subscribe to {topic}: {e}"
                )),
            }
        }
        // Each key from its own topic: a dead letter of it, on a dead-letter topic the
        // bystander also watches, is not it.
        self.recorder
            .wait_until(Instant::now() + within, |h| {
                expected
                    .iter()
                    .all(|(topic, keys)| keys.iter().all(|key| delivered_from(h, topic, key)))
            })
            .await;
        for handle in handles {
            handle.stop().await;
        }
        self.judge(&expected, guarantee, within, &mut seen);
        seen
    }

    /// Per topic, the keys the bystander must get: published successfully after its
    /// group was created, without a TTL, due by the end of the case.
    fn expected(
        &self,
        history: &History,
        topics: &BTreeMap<String, SystemTime>,
    ) -> BTreeMap<String, Vec<String>> {
        let expiring = lock(&self.expiring).clone();
        let now = SystemTime::now();
        let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for record in &history.records {
            let Record::Published {
                key,
                topic,
                at,
                outcome: Ok(_),
                due,
                ..
            } = record
            else {
                continue;
            };
            let watched_since = topics.get(topic);
            if record.is_probe()
                || expiring.contains(key)
                || watched_since.is_none_or(|since| at < since)
                || due.is_some_and(|due| due > now)
            {
                continue;
            }
            expected.entry(topic.clone()).or_default().push(key.clone());
        }
        expected
    }

    fn judge(
        &self,
        expected: &BTreeMap<String, Vec<String>>,
        guarantee: DeliveryGuarantee,
        within: Duration,
        seen: &mut Outcome,
    ) {
        let got = self.recorder.history();
        // The attempts of each delivery of `key` from `topic` (a dead letter of it, on
        // a dead-letter topic the bystander also watches, is another message).
        let attempts_of = |topic: &str, key: &str| -> Vec<u32> {
            got.deliveries_of(key)
                .filter_map(|r| match r {
                    Record::Delivered {
                        topic: from,
                        attempt,
                        ..
                    } if from == topic => Some(*attempt),
                    _ => None,
                })
                .collect()
        };
        let mut delivered = 0;
        for (topic, keys) in expected {
            let missing: Vec<&String> = keys
                .iter()
                .filter(|k| attempts_of(topic, k).is_empty())
                .collect();
            delivered += keys.len() - missing.len();
            // Not within a bound: a busy machine can cause it, as other lateness.
            if !missing.is_empty() {
                seen.fail_timing(format!(
                    "bystander group: {} of {} messages published to {topic} after a second group was created there never reached that group within {within:?} of its subscribing (it answered SUCCESS to everything; alone it gets each once), so what the case's own groups did changed another group's messages: {}",
                    missing.len(),
                    keys.len(),
                    examples(&missing)
                ));
            }
            let mut counted_elsewhere = Vec::new();
            let mut twice = Vec::new();
            for key in keys {
                let attempts = attempts_of(topic, key);
                if attempts.first().is_some_and(|a| *a > 1) {
                    counted_elsewhere.push(format!("{key} (attempt {})", attempts[0]));
                }
                if attempts.len() > 1 {
                    twice.push(format!("{key} ({} times)", attempts.len()));
                }
            }
            if !counted_elsewhere.is_empty() {
                seen.findings.push(format!(
                    "bystander group: messages of {topic} reached a second group, on their first delivery to it, as a later attempt: delivery attempts are counted across groups, not per group: {}",
                    examples(&counted_elsewhere)
                ));
            }
            if !twice.is_empty() {
                let text = format!(
                    "bystander group: messages of {topic} reached a second group more than once though it answered SUCCESS: {}",
                    examples(&twice)
                );
                match guarantee {
                    DeliveryGuarantee::ExactlyOnce => seen.findings.push(text),
                    _ => seen.warnings.push(text),
                }
            }
        }
        let total: usize = expected.values().map(Vec::len).sum();
        seen.notes.push(format!(
            "a bystander group on {} topic(s), subscribed after the case, got {delivered} of the {total} messages it had to",
            expected.len(),
        ));
    }
}

/// Whether `key` was delivered from `topic`.
fn delivered_from(history: &History, topic: &str, key: &str) -> bool {
    history
        .deliveries_of(key)
        .any(|r| matches!(r, Record::Delivered { topic: from, .. } if from == topic))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn examples<T: std::fmt::Display>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(8).map(ToString::to_string).collect();
    if items.len() > shown.len() {
        format!("{}, ... ({} in all)", shown.join(", "), items.len())
    } else {
        shown.join(", ")
    }
}
