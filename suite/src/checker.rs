//! Judges delivery from a recorded history, in the manner of Jepsen's queue checkers:
//! lost, unexpected, duplicated, out of declared order, early and late.

use crate::criteria::{Criteria, Timing};
use crate::history::{is_control, History, Record};
use crate::load::MachineLoad;
use crate::outcome::Outcome;
use pubsub_components::{DeliveryGuarantee, OrderingScope};

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

/// How many examples of each kind a finding lists.
const EXAMPLES: usize = 8;

/// Everything the checker found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    pub lost: Vec<String>,
    pub unexpected: Vec<String>,
    pub duplicated: Vec<(String, usize)>,
    pub reordered: Vec<String>,
    pub early: Vec<String>,
    pub late: Vec<String>,
    pub over_reported: Vec<String>,
    /// Deliveries after the handler's SUCCESS or DROP in the same group.
    pub redelivered_after_ack: Vec<String>,
    /// CloudEvent ids carried by more than one published message.
    pub shared_event_ids: Vec<String>,
    /// Deliveries recognised by their payload that came without their metadata.
    pub stripped: Vec<String>,
    /// Deliveries whose payload is one message's and whose metadata another's.
    pub swapped: Vec<String>,
    /// Whether the history records an injected fault.
    pub under_faults: bool,
    /// The machine's load while the case ran, where a timing probe ran beside it
    /// (timed cases): lateness is judged beyond what its control messages took, and
    /// a loss in such a case is a timing finding (every wait in it has a bound).
    pub load: Option<MachineLoad>,
    /// How much lateness the machine explained (the controls' latency).
    pub allowance: std::time::Duration,
    pub published_ok: usize,
    pub delivered: usize,
}

/// `head` (given how many there are) and the first few of `items`; `None` when there
/// are none.
fn finding(items: &[String], head: impl FnOnce(usize) -> String) -> Option<String> {
    (!items.is_empty()).then(|| format!("{}: {}", head(items.len()), examples(items)))
}

/// The first few of `items`, and how many more there are.
pub fn examples(items: &[String]) -> String {
    let shown: Vec<&str> = items.iter().take(EXAMPLES).map(String::as_str).collect();
    let more = items.len().saturating_sub(EXAMPLES);
    if more > 0 {
        format!("{} (+{more} more)", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

impl Findings {
    /// Turns the findings into an outcome: what the guarantee forbids fails the case.
    pub fn outcome(&self, criteria: &Criteria) -> Outcome {
        let mut outcome = Outcome::new();
        outcome.note(format!(
            "{} publishes acknowledged, {} deliveries recorded",
            self.published_ok, self.delivered
        ));
        if !self.lost.is_empty() {
            let text = format!(
                "lost: {} acknowledged publishes were never delivered: {}",
                self.lost.len(),
                examples(&self.lost)
            );
            // In a timed case "never" means "not within the case's bound".
            if self.load.is_some() {
                outcome.fail_timing(format!("{text} (within the case's bound)"));
            } else {
                outcome.fail(text);
            }
        }
        if let Some(text) = finding(&self.stripped, |n| {
            format!("delivered without its metadata: {n} deliveries recognised by their payload carried no key")
        }) {
            outcome.fail(text);
        }
        if let Some(text) = finding(&self.swapped, |n| {
            format!("carries another message's metadata: {n} deliveries")
        }) {
            outcome.fail(text);
        }
        if let Some(text) = finding(&self.unexpected, |n| {
            format!("unexpected: {n} deliveries of messages never published")
        }) {
            outcome.fail(text);
        }
        if !self.redelivered_after_ack.is_empty() {
            let text = format!(
                "redelivered after acknowledgement (duplicated): {} deliveries came after the handler's SUCCESS or DROP in the same group: {}",
                self.redelivered_after_ack.len(),
                examples(&self.redelivered_after_ack)
            );
            if !self.under_faults {
                outcome.fail(format!(
                    "{text} (no fault was injected: an acknowledged message is settled)"
                ));
            } else if criteria.guarantee == DeliveryGuarantee::ExactlyOnce {
                outcome.fail(format!("{text} (the component claims exactly-once)"));
            } else {
                outcome.warn(format!("{text} (allowed under faults for at-least-once)"));
            }
        }
        if let Some(text) = finding(&self.shared_event_ids, |n| {
            format!(
                "envelope ids not unique: {n} CloudEvent ids were carried by different messages"
            )
        }) {
            outcome.fail(text);
        }
        if !self.duplicated.is_empty() {
            let listed: Vec<String> = self
                .duplicated
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            let text = format!(
                "duplicated: {} messages delivered again before their first delivery was answered: {}",
                listed.len(),
                examples(&listed)
            );
            if criteria.guarantee == DeliveryGuarantee::ExactlyOnce {
                outcome.fail(format!("{text} (the component claims exactly-once)"));
            } else {
                outcome.warn(format!("{text} (allowed: at-least-once)"));
            }
        }
        if !self.reordered.is_empty() {
            outcome.fail(format!(
                "reordered: {} deliveries out of {:?} order: {}",
                self.reordered.len(),
                criteria.ordering.unwrap_or(OrderingScope::None),
                examples(&self.reordered)
            ));
        }
        if let Some(text) = finding(&self.early, |n| {
            format!("early: {n} messages delivered before their due time")
        }) {
            outcome.fail(text);
        }
        if !self.late.is_empty() {
            let beyond = if self.allowance.is_zero() {
                String::new()
            } else {
                format!(
                    " and the {} ms undelayed control messages took then",
                    self.allowance.as_millis()
                )
            };
            outcome.fail_timing(format!(
                "late: {} messages delivered after their due time plus the declared precision{beyond}: {}",
                self.late.len(),
                examples(&self.late)
            ));
        }

        if !self.over_reported.is_empty() && criteria.note_over_reported {
            outcome.warn(format!(
                "over-reported failure: {} entries reported failed were delivered (allowed; the app retries): {}",
                self.over_reported.len(),
                examples(&self.over_reported)
            ));
        }
        outcome
    }
}

struct Publish {
    index: usize,
    ok: bool,
    /// Publish attempts of this key (an app may publish a key again after a
    /// reported failure).
    attempts: usize,
    partition_key: Option<String>,
    due: Option<SystemTime>,
    /// The payload's fingerprint, where the publish recorded one.
    payload: Option<String>,
}

/// What one group has seen of one key.
#[derive(Default)]
struct Seen {
    deliveries: usize,
    /// The last delivery's answer: `None` while it is unanswered.
    last_settled: Option<bool>,
    settled: usize,
}

/// Checks `history` against `criteria`.
pub fn check(history: &History, criteria: &Criteria) -> Findings {
    let mut published: HashMap<&str, Publish> = HashMap::new();
    // Payload fingerprint -> the one key published with it (None: several were).
    let mut by_payload: HashMap<&str, Option<&str>> = HashMap::new();
    for record in &history.records {
        if let Record::Published {
            key,
            outcome,
            partition_key,
            due,
            payload,
            ..
        } = record
        {
            if is_control(key) {
                continue;
            }
            if let Some(payload) = payload.as_deref() {
                let owner = by_payload.entry(payload).or_insert(Some(key.as_str()));
                if *owner != Some(key.as_str()) {
                    *owner = None;
                }
            }
            let index = published.len();
            let entry = published.entry(key.as_str()).or_insert(Publish {
                index,
                ok: false,
                attempts: 0,
                partition_key: partition_key.clone(),
                due: *due,
                payload: payload.clone(),
            });
            entry.ok |= outcome.is_ok();
            entry.attempts += 1;
        }
    }
    let load = MachineLoad::of(history);
    let allowance = match (&load, criteria.timing) {
        (Some(load), Some(timing)) => load.allowance(timing.late_precision),
        _ => std::time::Duration::ZERO,
    };
    let mut findings = Findings {
        load,
        allowance,
        published_ok: published.values().filter(|p| p.ok).count(),
        under_faults: history
            .records
            .iter()
            .any(|r| matches!(r, Record::Fault { .. })),
        ..Findings::default()
    };
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen: HashMap<(String, &str), Seen> = HashMap::new();
    let mut duplicates: BTreeMap<&str, usize> = BTreeMap::new();
    let mut event_ids: HashMap<&str, &str> = HashMap::new();
    // scope -> (publish index, key) of the latest first delivery seen
    let mut last_in_scope: HashMap<String, (usize, &str)> = HashMap::new();
    for record in &history.records {
        if let Record::Answered {
            key: Some(key),
            subscriber,
            group,
            settled,
            ..
        } = record
        {
            if is_control(key) {
                continue;
            }
            let who = group.clone().unwrap_or_else(|| subscriber.clone());
            let state = seen.entry((who, key.as_str())).or_default();
            state.last_settled = Some(*settled);
            state.settled += usize::from(*settled);
            continue;
        }
        let Record::Delivered {
            key,
            topic,
            id,
            at,
            subscriber,
            group,
            event_id,
            payload,
            ..
        } = record
        else {
            continue;
        };
        if key.as_deref().is_some_and(is_control) {
            continue;
        }
        findings.delivered += 1;
        // The message the payload identifies, where only one was published with it.
        let owner = payload
            .as_deref()
            .and_then(|p| by_payload.get(p).copied().flatten());
        let key = match (key.as_deref(), owner) {
            (None, Some(owner)) => {
                findings
                    .stripped
                    .push(format!("{owner} ({id} from {topic})"));
                owner
            }
            (None, None) => {
                findings
                    .unexpected
                    .push(format!("{id} from {topic} (no key: metadata lost?)"));
                continue;
            }
            (Some(key), Some(owner))
                if owner != key
                    && match published.get(key) {
                        // A key published with another payload than the one delivered.
                        Some(own) => own.payload.is_some() && own.payload != *payload,
                        // A key never published.
                        None => true,
                    } =>
            {
                let whose = if published.contains_key(key) {
                    format!("{key}'s metadata")
                } else {
                    format!("metadata of no published message (key {key})")
                };
                findings
                    .swapped
                    .push(format!("{owner}'s payload delivered with {whose} ({id})"));
                owner
            }
            (Some(key), _) => key,
        };
        let Some(publish) = published.get(key) else {
            findings.unexpected.push(format!("{key} ({id})"));
            continue;
        };
        if let Some(event_id) = event_id.as_deref() {
            match event_ids.get(event_id) {
                Some(other) if *other != key => findings
                    .shared_event_ids
                    .push(format!("{event_id} on {other} and {key}")),
                Some(_) => {}
                None => {
                    event_ids.insert(event_id, key);
                }
            }
        }
        let who = group.clone().unwrap_or_else(|| subscriber.clone());
        let state = seen.entry((who.clone(), key)).or_default();
        if state.deliveries > 0 {
            match state.last_settled {
                // Every published copy was settled: this delivery is one too many.
                Some(true) if state.settled >= publish.attempts => {
                    findings.redelivered_after_ack.push(format!(
                        "{key} to {subscriber} in {who} (attempt {})",
                        record_attempt(record)
                    ));
                }
                // Asked again by the handler (RETRY, missing status, error), or
                // another published copy.
                Some(_) => {}
                // Delivered again while the previous delivery was unanswered.
                None => *duplicates.entry(key).or_insert(1) += 1,
            }
        }
        state.deliveries += 1;
        state.last_settled = None;
        let count = counts.entry(key).or_insert(0);
        *count += 1;
        if *count > 1 {
            continue;
        }
        if !publish.ok {
            findings.over_reported.push(key.to_string());
        }
        if let (Some(timing), Some(due)) = (criteria.timing, publish.due) {
            if *at + timing.early_tolerance < due {
                let early = due.duration_since(*at).unwrap_or_default();
                findings.early.push(format!("{key} by {early:?}"));
            } else {
                let stalled = harness_lag(&findings.load, *at, timing);
                if let Ok(late) =
                    at.duration_since(due + timing.late_precision + allowance + stalled)
                {
                    if !late.is_zero() && stalled.is_zero() {
                        findings
                            .late
                            .push(format!("{key} by {late:?} beyond the precision"));
                    } else if !late.is_zero() {
                        findings.late.push(format!(
                            "{key} by {late:?} beyond the precision and the {stalled:?} the suite itself stalled then"
                        ));
                    }
                }
            }
        }
        let scope = match criteria.ordering {
            None | Some(OrderingScope::None) => None,
            Some(_) if criteria.unordered_keys.contains(key) => None,
            Some(OrderingScope::PerTopic) => Some(topic.clone()),
            Some(OrderingScope::PerPartition) => Some(id.owner().unwrap_or_else(|| topic.clone())),
            Some(OrderingScope::PerKey) => Some(
                publish
                    .partition_key
                    .clone()
                    .unwrap_or_else(|| format!("{topic} (no key)")),
            ),
        };
        if let Some(scope) = scope {
            if let Some((previous, previous_key)) = last_in_scope.get(&scope) {
                if *previous > publish.index {
                    findings.reordered.push(format!(
                        "in {scope}: {key} (published #{}) after {previous_key} (published #{previous})",
                        publish.index
                    ));
                    continue;
                }
            }
            last_in_scope.insert(scope, (publish.index, key));
        }
    }
    for (key, publish) in &published {
        if publish.ok && !counts.contains_key(key) {
            findings.lost.push(key.to_string());
        }
    }
    findings.lost.sort_by_key(|k| published[k.as_str()].index);
    findings.duplicated = duplicates
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    findings
}

/// How much later than it happened a delivery at `at` may have been recorded: the
/// suite's own stall around it (see [`MachineLoad::harness_lag_at`]), at most the
/// precision being judged (a stall beyond that leaves the lateness to the controls'
/// verdict: a real defect late by more than twice the precision still shows).
fn harness_lag(load: &Option<MachineLoad>, at: SystemTime, timing: Timing) -> Duration {
    load.as_ref().map_or(Duration::ZERO, |load| {
        load.harness_lag_at(at).min(timing.late_precision)
    })
}

fn record_attempt(record: &Record) -> u32 {
    match record {
        Record::Delivered { attempt, .. } => *attempt,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::MessageId;

    fn published(key: &str, ok: bool) -> Record {
        Record::Published {
            key: key.into(),
            topic: "t".into(),
            at: SystemTime::now(),
            outcome: if ok { Ok(None) } else { Err("refused".into()) },
            partition_key: None,
            due: None,
            started: None,
            payload: Some(crate::history::fingerprint(key.as_bytes())),
        }
    }

    fn delivered(key: &str, partition: u32) -> Record {
        Record::Delivered {
            key: Some(key.into()),
            topic: "t".into(),
            id: MessageId::new("t", Some(partition), 0),
            at: SystemTime::now(),
            attempt: 1,
            batch: None,
            subscriber: "s".into(),
            group: None,
            event_id: None,
            payload: Some(crate::history::fingerprint(key.as_bytes())),
        }
    }

    fn answered(key: &str, settled: bool) -> Record {
        Record::Answered {
            key: Some(key.into()),
            at: SystemTime::now(),
            subscriber: "s".into(),
            group: None,
            settled,
            answer: if settled { "SUCCESS" } else { "RETRY" }.into(),
        }
    }

    #[test]
    fn finds_lost_unexpected_duplicated_and_reordered() {
        let history = History {
            records: vec![
                published("a", true),
                published("b", true),
                published("c", true),
                published("d", false),
                delivered("b", 0),
                delivered("a", 0),
                delivered("a", 0),
                delivered("x", 0),
                delivered("d", 0),
            ],
        };
        let mut criteria = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        criteria.ordering = Some(OrderingScope::PerPartition);
        let findings = check(&history, &criteria);
        assert_eq!(findings.lost, vec!["c"]);
        assert_eq!(findings.unexpected, vec!["x (t#0@0)"]);
        assert_eq!(findings.duplicated, vec![("a".to_string(), 2)]);
        assert_eq!(findings.reordered.len(), 1);
        assert!(findings.reordered[0].contains("a (published #0) after b"));
        assert_eq!(findings.over_reported, vec!["d"]);
        let outcome = findings.outcome(&criteria);
        assert_eq!(outcome.findings.len(), 3, "{:?}", outcome.findings);
        assert_eq!(outcome.warnings.len(), 2, "{:?}", outcome.warnings);
    }

    #[test]
    fn duplicates_fail_only_under_exactly_once() {
        let history = History {
            records: vec![published("a", true), delivered("a", 0), delivered("a", 0)],
        };
        let once = Criteria::delivery(DeliveryGuarantee::ExactlyOnce);
        assert!(!check(&history, &once).outcome(&once).passed());
        let least = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        assert!(check(&history, &least).outcome(&least).passed());
    }

    #[test]
    fn order_is_judged_per_scope() {
        let history = History {
            records: vec![
                published("a", true),
                published("b", true),
                delivered("b", 1),
                delivered("a", 0),
            ],
        };
        let mut criteria = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        criteria.ordering = Some(OrderingScope::PerPartition);
        assert!(check(&history, &criteria).reordered.is_empty());
        criteria.ordering = Some(OrderingScope::PerTopic);
        assert_eq!(check(&history, &criteria).reordered.len(), 1);
    }

    #[test]
    fn redeliveries_the_handler_asked_for_are_not_duplicates() {
        let history = History {
            records: vec![
                published("a", true),
                delivered("a", 0),
                answered("a", false),
                delivered("a", 0),
                answered("a", true),
            ],
        };
        let once = Criteria::delivery(DeliveryGuarantee::ExactlyOnce);
        let findings = check(&history, &once);
        assert!(findings.duplicated.is_empty(), "{findings:?}");
        assert!(findings.outcome(&once).passed());
    }

    #[test]
    fn a_redelivery_after_success_fails_without_faults_and_warns_under_them() {
        let mut records = vec![
            published("a", true),
            delivered("a", 0),
            answered("a", true),
            delivered("a", 0),
        ];
        let least = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        let history = History {
            records: records.clone(),
        };
        let outcome = check(&history, &least).outcome(&least);
        assert!(!outcome.passed());
        assert!(outcome
            .findings
            .iter()
            .any(|f| f.contains("after acknowledgement")));
        records.insert(
            0,
            Record::Fault {
                at: SystemTime::now(),
                what: "network cut".into(),
            },
        );
        let history = History { records };
        assert!(check(&history, &least).outcome(&least).passed());
        let once = Criteria::delivery(DeliveryGuarantee::ExactlyOnce);
        assert!(!check(&history, &once).outcome(&once).passed());
    }

    #[test]
    fn a_key_published_twice_may_be_settled_twice() {
        let history = History {
            records: vec![
                published("a", false),
                published("a", true),
                delivered("a", 0),
                answered("a", true),
                delivered("a", 0),
                answered("a", true),
            ],
        };
        let once = Criteria::delivery(DeliveryGuarantee::ExactlyOnce);
        let findings = check(&history, &once);
        assert!(findings.redelivered_after_ack.is_empty(), "{findings:?}");
        assert!(findings.duplicated.is_empty(), "{findings:?}");
    }

    #[test]
    fn envelope_ids_shared_by_two_messages_fail() {
        let with_id = |key: &str, id: &str| {
            let mut record = delivered(key, 0);
            if let Record::Delivered {
                event_id, payload, ..
            } = &mut record
            {
                *event_id = Some(id.into());
                *payload = None;
            }
            record
        };
        let history = History {
            records: vec![
                published("a", true),
                published("b", true),
                with_id("a", "ce-1"),
                with_id("b", "ce-1"),
                with_id("a", "ce-1"),
            ],
        };
        let least = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        let findings = check(&history, &least);
        assert_eq!(findings.shared_event_ids, vec!["ce-1 on a and b"]);
        assert!(!findings.outcome(&least).passed());
    }

    /// A delivery is recognised by its payload where its metadata was damaged: the
    /// finding names that, not a loss.
    #[test]
    fn a_delivery_with_damaged_metadata_is_named_by_what_broke() {
        let with_key = |key: Option<&str>, payload: &str| Record::Delivered {
            key: key.map(str::to_string),
            topic: "t".into(),
            id: MessageId::new("t", None, 0),
            at: SystemTime::now(),
            attempt: 1,
            batch: None,
            subscriber: "s".into(),
            group: None,
            event_id: None,
            payload: Some(crate::history::fingerprint(payload.as_bytes())),
        };
        let history = History {
            records: vec![
                published("a", true),
                published("b", true),
                published("c", true),
                published("d", true),
                with_key(None, "a"),
                with_key(Some("c"), "b"),
                with_key(Some("b"), "c"),
                with_key(Some("d"), "d"),
            ],
        };
        let criteria = Criteria::delivery(DeliveryGuarantee::AtLeastOnce);
        let findings = check(&history, &criteria);
        assert!(findings.lost.is_empty(), "{findings:?}");
        assert_eq!(findings.stripped.len(), 1, "{findings:?}");
        assert!(findings.stripped[0].starts_with("a "), "{findings:?}");
        assert_eq!(findings.swapped.len(), 2, "{findings:?}");
        assert!(
            findings.swapped[0].starts_with("b's payload delivered with c's metadata"),
            "{findings:?}"
        );
        let outcome = findings.outcome(&criteria);
        let text = outcome.findings.join(" | ");
        assert!(text.contains("delivered without its metadata"), "{text}");
        assert!(
            text.contains("carries another message's metadata"),
            "{text}"
        );
        assert!(!text.contains("lost"), "{text}");
    }
}
