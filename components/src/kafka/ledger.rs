//! What a member of a consumer group holds: per topic-partition, the records it was
//! handed and has not committed, and what happens to them when the member gives
//! partitions up (a rebalance, or closing).
//!
//! Kafka commits an offset per partition, covering everything before it; the contract
//! settles each message on its own. The ledger turns one into the other: an answer
//! moves the commit point over every answered record without a gap, and a member that
//! gives a partition up hands its unanswered records back as copies at the
//! partition's end, so that the commit point can pass what was answered after a gap.

use crate::message::ReceivedMessage;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::time::Instant;

/// A topic and one of its partitions.
pub(super) type TopicPartition = (String, i32);

/// A ledger shared by a member and its librdkafka context.
pub(super) type SharedLedger = Arc<Mutex<Ledger>>;

/// The ledger, also after a thread panicked holding it.
pub(super) fn lock(ledger: &SharedLedger) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|p| p.into_inner())
}

/// The ledger of one member.
#[derive(Default)]
pub(super) struct Ledger {
    partitions: HashMap<TopicPartition, BTreeMap<i64, Slot>>,
    /// Negatively acknowledged, to be handed out again when due.
    returning: Vec<(Instant, ReceivedMessage)>,
    /// Received and not yet handed out (a batch takes one topic's; the others wait).
    ready: VecDeque<ReceivedMessage>,
    /// Records handed back unanswered when a rebalance took their partition: a copy
    /// went out, so an answer that comes for one of them cannot take effect.
    handed_back: HashSet<(TopicPartition, i64)>,
    /// Admissions so far: a record admitted again after a rebalance gets a new number,
    /// which tells it from its earlier self.
    admissions: u64,
}

struct Slot {
    /// The attempt of its latest delivery (or, waiting to return, of the next one).
    attempt: u32,
    /// Handed out with `attempt` and not yet asked back: a copy counts one more.
    handed: bool,
    /// Never handed out: the broker still has it as it was, so a member that gives
    /// its partition up can leave it there for the next owner instead of copying it.
    fresh: bool,
    answered: bool,
    admission: u64,
    /// What handing it on needs.
    message: ReceivedMessage,
}

/// An answer for a record of a partition this member no longer owns.
#[derive(Debug, PartialEq)]
pub(super) struct Reassigned;

/// What giving partitions up leaves to do: copies to publish, then offsets to commit.
#[derive(Debug, Default)]
pub(super) struct Released {
    /// Each unanswered record, as its copy.
    pub copies: Vec<HandedBack>,
    /// Per partition, the offset after the last record the member was handed.
    pub ends: Vec<(String, i32, i64)>,
}

/// An unanswered record a member gives up, as the copy it hands its group.
#[derive(Debug)]
pub(super) struct HandedBack {
    pub partition: i32,
    /// The attempt the copy carries.
    pub attempt: u32,
    pub message: ReceivedMessage,
    /// When the copy is due, for a record waiting out a retry delay: the member that
    /// gets it holds it until then.
    pub due: Option<Instant>,
}

fn key_of(message: &ReceivedMessage) -> Option<TopicPartition> {
    Some((message.topic().to_string(), message.id.partition? as i32))
}

impl Ledger {
    /// Records a polled record; returns its admission number.
    pub fn admit(&mut self, message: &ReceivedMessage) -> u64 {
        self.admissions += 1;
        let admission = self.admissions;
        if let Some(key) = key_of(message) {
            self.partitions.entry(key).or_default().insert(
                message.id.position as i64,
                Slot {
                    attempt: message.attempt,
                    handed: false,
                    fresh: true,
                    answered: false,
                    admission,
                    message: message.clone(),
                },
            );
        }
        admission
    }

    fn slot(&self, message: &ReceivedMessage) -> Option<&Slot> {
        self.partitions
            .get(&key_of(message)?)?
            .get(&(message.id.position as i64))
    }

    fn slot_mut(&mut self, message: &ReceivedMessage) -> Option<&mut Slot> {
        self.partitions
            .get_mut(&key_of(message)?)?
            .get_mut(&(message.id.position as i64))
    }

    /// The admission of a record the member still holds.
    pub fn admission_of(&self, message: &ReceivedMessage) -> Option<u64> {
        self.slot(message).map(|slot| slot.admission)
    }

    /// Whether the member still holds `message` as admitted under `admission`: a
    /// rebalance in between hands it back, and it must not be handed out here.
    pub fn holds(&self, message: &ReceivedMessage, admission: u64) -> bool {
        self.slot(message)
            .is_some_and(|slot| slot.admission == admission)
    }

    /// Whether the record at `offset` of `key` was handed back on a rebalance and is
    /// held no more.
    pub fn was_handed_back(&self, key: &TopicPartition, offset: i64) -> bool {
        let held = self
            .partitions
            .get(key)
            .is_some_and(|slots| slots.contains_key(&offset));
        !held && self.handed_back.contains(&(key.clone(), offset))
    }

    /// Marks a held record handed out to the app (or put back, not handed).
    pub fn set_handed(&mut self, message: &ReceivedMessage, handed: bool) {
        if let Some(slot) = self.slot_mut(message) {
            slot.handed = handed;
            slot.fresh &= !handed;
        }
    }

    /// Marks a record answered; returns the partition's new commit point when the
    /// answer moved it. A record handed back on a rebalance is `Reassigned`; one the
    /// member does not hold otherwise (answered already, or forgotten by a seek) needs
    /// nothing.
    pub fn answer(&mut self, key: &TopicPartition, offset: i64) -> Result<Option<i64>, Reassigned> {
        let held = self
            .partitions
            .get_mut(key)
            .filter(|slots| slots.contains_key(&offset));
        let Some(slots) = held else {
            return match self.handed_back.contains(&(key.clone(), offset)) {
                true => Err(Reassigned),
                false => Ok(None),
            };
        };
        if let Some(slot) = slots.get_mut(&offset) {
            slot.answered = true;
        }
        let mut next = None;
        while let Some(entry) = slots.first_entry() {
            if !entry.get().answered {
                break;
            }
            next = Some(*entry.key() + 1);
            entry.remove();
        }
        Ok(next)
    }

    /// The records held of a partition up to `offset`, in order.
    pub fn held_through(&self, key: &TopicPartition, offset: i64) -> Vec<ReceivedMessage> {
        self.partitions
            .get(key)
            .map(|slots| {
                slots
                    .range(..=offset)
                    .map(|(_, slot)| slot.message.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Asks a handed record back: it returns after `due` with the next attempt.
    /// Returns false when the member does not hold it.
    pub fn ask_back(&mut self, key: &TopicPartition, offset: i64, due: Instant) -> bool {
        let Some(slot) = self
            .partitions
            .get_mut(key)
            .and_then(|slots| slots.get_mut(&offset))
        else {
            return false;
        };
        slot.attempt += 1;
        slot.handed = false;
        slot.fresh = false;
        let mut again = slot.message.clone();
        again.attempt = slot.attempt;
        self.returning.push((due, again));
        true
    }

    /// Records a polled copy that waits out its retry delay (handed back by another
    /// member before it was due): held until `due`, then handed out.
    pub fn admit_due(&mut self, message: &ReceivedMessage, due: Instant) -> u64 {
        let admission = self.admit(message);
        if let Some(slot) = self.slot_mut(message) {
            slot.fresh = false;
        }
        self.returning.push((due, message.clone()));
        admission
    }

    /// Puts received records aside for a later receive.
    pub fn set_aside(&mut self, messages: Vec<ReceivedMessage>) {
        for message in &messages {
            self.set_handed(message, false);
        }
        self.ready.extend(messages);
    }

    pub fn has_set_aside(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether a record handed out is still unanswered (its handler at work).
    pub fn has_in_flight(&self) -> bool {
        self.partitions
            .values()
            .flat_map(|slots| slots.values())
            .any(|slot| slot.handed && !slot.answered)
    }

    /// How many records wait set aside.
    pub fn set_aside_count(&self) -> usize {
        self.ready.len()
    }

    /// Records set aside, then those due to return, up to `max`, each with its
    /// admission; and when the next one returns.
    pub fn take_waiting(
        &mut self,
        max: usize,
        now: Instant,
    ) -> (Vec<(u64, ReceivedMessage)>, Option<Instant>) {
        let ready = self.ready.len().min(max);
        let mut taken: Vec<ReceivedMessage> = self.ready.drain(..ready).collect();
        self.returning.sort_by_key(|(due, _)| *due);
        let due = self
            .returning
            .iter()
            .take_while(|(at, _)| *at <= now)
            .count()
            .min(max - taken.len());
        taken.extend(self.returning.drain(..due).map(|(_, m)| m));
        let next = self.returning.first().map(|(at, _)| *at);
        let taken = taken
            .into_iter()
            .filter_map(|m| Some((self.admission_of(&m)?, m)))
            .collect();
        (taken, next)
    }

    /// Forgets what the member holds of a partition (a seek repositions it).
    pub fn forget(&mut self, key: &TopicPartition) {
        self.release(|k| k == key);
    }

    /// Gives up the partitions `which` accepts: everything held of them is dropped,
    /// and what was not answered comes back to be copied, except the fresh records
    /// that end a partition: its commit point stops before them, so the next owner
    /// fetches them in their place (in order, as if this member had never seen them).
    pub fn release(&mut self, which: impl Fn(&TopicPartition) -> bool) -> Released {
        let keys: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|key| which(key))
            .cloned()
            .collect();
        let waiting: HashMap<(TopicPartition, i64), Instant> = self
            .returning
            .iter()
            .filter_map(|(due, m)| Some(((key_of(m)?, m.id.position as i64), *due)))
            .collect();
        let mut released = Released::default();
        for key in keys {
            let Some(slots) = self.partitions.remove(&key) else {
                continue;
            };
            let Some((last, _)) = slots.last_key_value() else {
                continue;
            };
            let fresh_from = slots
                .iter()
                .rev()
                .take_while(|(_, slot)| slot.fresh && !slot.answered)
                .last()
                .map(|(offset, _)| *offset);
            released
                .ends
                .push((key.0.clone(), key.1, fresh_from.unwrap_or(*last + 1)));
            for (offset, slot) in slots {
                if slot.answered || fresh_from.is_some_and(|from| offset >= from) {
                    continue;
                }
                let attempt = slot.attempt + u32::from(slot.handed);
                released.copies.push(HandedBack {
                    partition: key.1,
                    attempt,
                    message: slot.message,
                    due: waiting.get(&(key.clone(), offset)).copied(),
                });
            }
        }
        let kept = |m: &ReceivedMessage| key_of(m).is_none_or(|key| !which(&key));
        self.returning.retain(|(_, m)| kept(m));
        self.ready.retain(kept);
        released
    }

    /// A rebalance takes `partitions` from the member (perhaps to give some back):
    /// everything unanswered of them is handed back.
    pub fn revoke(&mut self, partitions: &[TopicPartition]) -> Released {
        let released = self.release(|key| partitions.contains(key));
        for copy in &released.copies {
            self.handed_back.insert((
                (copy.message.topic().to_string(), copy.partition),
                copy.message.id.position as i64,
            ));
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{MessageId, Metadata};
    use std::time::{Duration, UNIX_EPOCH};

    fn record(offset: u64) -> ReceivedMessage {
        ReceivedMessage {
            id: MessageId::new("t", Some(0), offset),
            payload: format!("m-{offset}").into_bytes(),
            content_type: None,
            metadata: Metadata::new(),
            partition_key: None,
            attempt: 1,
            publish_time: UNIX_EPOCH,
        }
    }

    fn partition() -> TopicPartition {
        ("t".to_string(), 0)
    }

    #[test]
    fn answers_move_the_commit_point_over_answered_records_only() {
        let mut ledger = Ledger::default();
        for offset in 0..3 {
            ledger.admit(&record(offset));
        }
        assert_eq!(ledger.answer(&partition(), 1), Ok(None));
        assert_eq!(ledger.answer(&partition(), 0), Ok(Some(2)));
        assert_eq!(ledger.answer(&partition(), 2), Ok(Some(3)));
    }

    #[test]
    fn a_revoked_partition_hands_back_only_what_was_not_answered_and_refuses_late_answers() {
        let mut ledger = Ledger::default();
        for offset in 0..4 {
            let admission = ledger.admit(&record(offset));
            assert!(ledger.holds(&record(offset), admission));
        }
        // 0 and 2 handed out; 1 handed and asked back; 3 received, not handed.
        for offset in 0..3 {
            ledger.set_handed(&record(offset), true);
        }
        assert!(ledger.ask_back(&partition(), 1, Instant::now() + Duration::from_secs(60)));
        assert_eq!(ledger.answer(&partition(), 2), Ok(None));

        let released = ledger.revoke(&[partition()]);
        let copies: Vec<(u64, u32)> = released
            .copies
            .iter()
            .map(|c| (c.message.id.position, c.attempt))
            .collect();
        // 0 was handed with attempt 1: its copy is attempt 2; 1 waits to return as
        // attempt 2. 2 was answered: no copy. 3 was never handed and ends the
        // partition: the commit point stops before it, for the next owner to fetch.
        assert_eq!(copies, vec![(0, 2), (1, 2)]);
        let dues: Vec<bool> = released.copies.iter().map(|c| c.due.is_some()).collect();
        assert_eq!(
            dues,
            vec![false, true],
            "1 waits out its retry delay: its copy too"
        );
        assert_eq!(released.ends, vec![("t".to_string(), 0, 3)]);
        assert!(!ledger.holds(&record(3), 4), "a revoked record is not held");
        assert_eq!(ledger.take_waiting(10, Instant::now()).0.len(), 0);
        assert_eq!(ledger.answer(&partition(), 0), Err(Reassigned));
        assert_eq!(ledger.answer(&partition(), 1), Err(Reassigned));
        assert_eq!(
            ledger.answer(&partition(), 2),
            Ok(None),
            "answered before the rebalance: nothing to refuse"
        );

        // The partition comes back (eager rebalances revoke everything): the copies
        // are new records; the originals stay handed back.
        ledger.admit(&record(4));
        assert_eq!(ledger.answer(&partition(), 0), Err(Reassigned));
        assert_eq!(ledger.answer(&partition(), 4), Ok(Some(5)));
    }

    #[test]
    fn a_record_admitted_again_after_a_rebalance_is_told_from_its_earlier_self() {
        let mut ledger = Ledger::default();
        let before = ledger.admit(&record(7));
        ledger.revoke(&[partition()]);
        let again = ledger.admit(&record(7));
        assert!(!ledger.holds(&record(7), before));
        assert!(ledger.holds(&record(7), again));
    }

    #[test]
    fn records_set_aside_come_back_first_and_are_not_counted_as_handed() {
        let mut ledger = Ledger::default();
        ledger.admit(&record(0));
        ledger.admit(&record(1));
        ledger.set_handed(&record(0), true);
        ledger.set_handed(&record(1), true);
        ledger.set_aside(vec![record(1)]);
        assert!(ledger.has_set_aside());
        let (taken, next) = ledger.take_waiting(10, Instant::now());
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].1.id.position, 1);
        assert_eq!(next, None);
        let released = ledger.release(|_| true);
        let attempts: Vec<u32> = released.copies.iter().map(|c| c.attempt).collect();
        assert_eq!(attempts, vec![2, 1]);
    }

    #[test]
    fn fresh_records_that_end_a_partition_stay_there_and_earlier_ones_are_copied() {
        let mut ledger = Ledger::default();
        for offset in 0..5 {
            ledger.admit(&record(offset));
        }
        // 0 fresh, 1 handed, 2 answered, 3 and 4 fresh (prefetched, never handed).
        ledger.set_handed(&record(1), true);
        ledger.set_handed(&record(2), true);
        assert_eq!(ledger.answer(&partition(), 2), Ok(None));
        ledger.set_aside(vec![record(3), record(4)]);
        let released = ledger.release(|_| true);
        let copies: Vec<(u64, u32)> = released
            .copies
            .iter()
            .map(|c| (c.message.id.position, c.attempt))
            .collect();
        assert_eq!(copies, vec![(0, 1), (1, 2)]);
        assert_eq!(released.ends, vec![("t".to_string(), 0, 3)]);
        assert!(!ledger.has_set_aside(), "what was set aside goes with it");

        // A partition of nothing but fresh records is left whole.
        let mut ledger = Ledger::default();
        ledger.admit(&record(7));
        ledger.admit(&record(8));
        let released = ledger.release(|_| true);
        assert!(released.copies.is_empty());
        assert_eq!(released.ends, vec![("t".to_string(), 0, 7)]);
    }
}
