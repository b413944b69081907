//! Defects of a member: its batches, acknowledgements, retries, leases, seeks and
//! leaving its group. What its receives hand out is changed in delivered.rs.

use super::component::Membership;
use super::Defect;
use async_trait::async_trait;
use pubsub_components::{Consumer, MessageId, ReceivedMessage, Result, TopicSelector};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// A member of a [`super::Faulty`] component: the in-memory consumer, with the
/// component's defect.
pub(super) struct FaultyConsumer {
    pub(super) inner: Arc<dyn Consumer>,
    pub(super) defect: Defect,
    pub(super) topics: TopicSelector,
    pub(super) received: AtomicU64,
    /// Ids handed out and not yet settled.
    pub(super) held: Mutex<HashSet<MessageId>>,
    pub(super) opened_at: SystemTime,
    pub(super) group: String,
    /// For [`Defect::ForgetsWhileEmpty`]: the group was empty from then until this
    /// consumer opened.
    pub(super) forget_since: Option<SystemTime>,
    pub(super) acks: Arc<AtomicU64>,
    pub(super) membership: Arc<Mutex<Membership>>,
    pub(super) idle: Arc<Mutex<IdleGroups>>,
    pub(super) receiver_delay: Option<Duration>,
    /// When each message was first received, for [`Defect::DelaysFromReceipt`].
    pub(super) first_seen: Mutex<HashMap<MessageId, SystemTime>>,
    /// For [`Defect::BlocksBehindDelayed`]: nothing is served before this time (the
    /// due time of the delayed message that reached the head of the line).
    pub(super) blocked_until: Mutex<Option<SystemTime>>,
    /// For [`Defect::LeaksRetriesToOtherGroups`]: the component's leaks, what this
    /// member handed out (to copy when retried), and the ids of leaked copies it
    /// handed out (settled here, they exist in no queue).
    pub(super) leaks: Arc<Mutex<Vec<Leak>>>,
    /// For [`Defect::CountsAttemptsAcrossGroups`]: the component's retry counts.
    pub(super) retries: Arc<Mutex<RetriesByGroup>>,
    /// For [`Defect::BorrowsMetadata`]: the metadata of the last message handed out.
    pub(super) last_metadata: Mutex<Option<pubsub_components::Metadata>>,
    pub(super) retried: Mutex<HashMap<MessageId, ReceivedMessage>>,
    pub(super) leaked: Mutex<HashSet<MessageId>>,
    /// For the lease defects: when each unsettled message was handed out.
    pub(super) handed_at: Mutex<HashMap<MessageId, Instant>>,
    /// For [`Defect::ResetsAttemptsAcrossMembers`]: how often this member received
    /// each message.
    pub(super) own_attempts: Mutex<HashMap<MessageId, u32>>,
    /// For [`Defect::AcksAhead`]: ids acknowledged before they were handed out.
    pub(super) acked_ahead: Mutex<HashSet<MessageId>>,
    /// For [`Defect::ListsPartitionsAtOpen`]: the partitions of each listed
    /// partitioned topic when the consumer opened.
    pub(super) partitions_at_open: HashMap<String, u32>,
    /// For [`Defect::SeeksEveryGroup`] and [`Defect::AcksCumulativelyForEveryGroup`]:
    /// the component's moves.
    pub(super) group_moves: Arc<Mutex<Vec<GroupMove>>>,
}

/// The groups of each topic and what the defects that reach idle groups did to them
/// ([`Defect::SettlesDeadLettersForIdleGroups`],
/// [`Defect::CountsDelayedRetriesForIdleGroups`]).
#[derive(Default)]
pub(super) struct IdleGroups {
    /// topic -> the groups created or subscribed on it
    pub(super) groups: HashMap<String, HashSet<String>>,
    /// message -> the groups it was settled for while they had no member
    pub(super) settled: HashMap<MessageId, HashSet<String>>,
    /// (message, group) -> retries counted for the group while it had no member
    pub(super) retries: HashMap<(MessageId, String), u32>,
    /// topic -> dead letters published of its messages whose originals have not been
    /// acknowledged yet
    pub(super) dead_letters_pending: HashMap<String, usize>,
}

/// Retries of each message, by the group that answered them.
pub(super) type RetriesByGroup = HashMap<MessageId, HashMap<String, u32>>;

/// The deferral of [`Defect::DefersZeroByDefault`] and [`Defect::EmptyDeferManyDefersAll`].
const DEFAULT_DEFERRAL: Duration = Duration::from_secs(30);

/// The lease the lease defects declare.
pub(super) const FAULTY_LEASE: Duration = Duration::from_secs(1);

/// A seek or cumulative acknowledgement of one group, which reaches the other groups
/// of its topic.
pub(super) struct GroupMove {
    pub(super) from_group: String,
    pub(super) to: MessageId,
    pub(super) taken_by: HashSet<String>,
}

/// A retried message leaking to the other groups of its topic once `due`.
pub(super) struct Leak {
    pub(super) due: SystemTime,
    pub(super) from_group: String,
    pub(super) message: ReceivedMessage,
    pub(super) taken_by: HashSet<String>,
}

impl FaultyConsumer {
    /// For [`Defect::SeeksEveryGroup`] and [`Defect::AcksCumulativelyForEveryGroup`]:
    /// records a move this member's group made.
    fn move_every_group(&self, to: &MessageId) {
        self.group_moves.lock().unwrap().push(GroupMove {
            from_group: self.group.clone(),
            to: to.clone(),
            taken_by: HashSet::new(),
        });
    }

    /// For [`Defect::AcksCumulativelyForEveryGroup`]: whether another group
    /// acknowledged cumulatively up to `id` or past it.
    pub(super) fn settled_by_another_group(&self, id: &MessageId) -> bool {
        self.group_moves.lock().unwrap().iter().any(|m| {
            m.from_group != self.group && m.to.owner() == id.owner() && id.position <= m.to.position
        })
    }

    /// For [`Defect::SeeksEveryGroup`]: makes, in this member's group, the seeks other
    /// groups made on its topics.
    async fn take_group_moves(&self) {
        if self.defect != Defect::SeeksEveryGroup {
            return;
        }
        let taken: Vec<MessageId> = {
            let mut moves = self.group_moves.lock().unwrap();
            moves
                .iter_mut()
                .filter_map(|m| {
                    let theirs = m.from_group != self.group
                        && m.to.topic.as_ref().is_some_and(|t| self.topics.matches(t));
                    (theirs && m.taken_by.insert(self.group.clone())).then(|| m.to.clone())
                })
                .collect()
        };
        for to in taken {
            let _ = self.inner.seek(&to).await;
        }
    }

    /// For [`Defect::SettlesOnPartitionZero`], an id of a partition other than 0 as
    /// the consumer misreads it: on partition 0 of its topic (whose broker takes a
    /// position it does not hold without a word).
    fn misread(&self, id: &MessageId) -> Option<MessageId> {
        match (self.defect, id.partition) {
            (Defect::SettlesOnPartitionZero, Some(p)) if p != 0 => Some(MessageId {
                partition: Some(0),
                ..id.clone()
            }),
            _ => None,
        }
    }

    /// `id` as the consumer reads it: for [`Defect::PartitionlessAsFirst`], one naming
    /// no partition is on partition 0.
    fn partitioned(&self, id: &MessageId) -> MessageId {
        match id.partition {
            None if self.defect == Defect::PartitionlessAsFirst => MessageId {
                partition: Some(0),
                ..id.clone()
            },
            _ => id.clone(),
        }
    }

    /// For [`Defect::SeeksLastAsLatest`] and [`Defect::SeeksPastEndToEarliest`]: where
    /// a seek to `id` goes instead, when it is at or past the last id of its owner.
    async fn seek_edge(&self, id: &MessageId) -> Result<Option<MessageId>> {
        if !matches!(
            self.defect,
            Defect::SeeksLastAsLatest | Defect::SeeksPastEndToEarliest
        ) {
            return Ok(None);
        }
        let lasts = self.inner.last_message_ids().await?;
        let Some(last) = lasts.iter().find(|last| last.owner() == id.owner()) else {
            return Ok(None);
        };
        let position = match self.defect {
            Defect::SeeksLastAsLatest if id.position >= last.position => last.position + 1,
            Defect::SeeksPastEndToEarliest if id.position > last.position => 0,
            _ => return Ok(None),
        };
        Ok(Some(MessageId {
            position,
            ..id.clone()
        }))
    }

    /// Settles a leaked copy here (it is in no queue); false for any other id.
    fn settles_leaked(&self, id: &MessageId) -> bool {
        self.leaked.lock().unwrap().remove(id)
    }

    fn settled(&self, id: &MessageId) {
        self.held.lock().unwrap().remove(id);
        self.handed_at.lock().unwrap().remove(id);
    }

    /// The other groups of `id`'s topic with no member connected now.
    fn idle_groups(&self, id: &MessageId) -> Vec<String> {
        let Some(topic) = &id.topic else {
            return Vec::new();
        };
        let membership = self.membership.lock().unwrap();
        let idle = self.idle.lock().unwrap();
        idle.groups
            .get(topic)
            .into_iter()
            .flatten()
            .filter(|g| **g != self.group)
            .filter(|g| {
                membership
                    .groups
                    .get(*g)
                    .is_none_or(|(members, _)| *members == 0)
            })
            .cloned()
            .collect()
    }

    /// What the idle-group defects make of an ack (`retry_delay` `None`) or a retry of
    /// `id` here.
    fn reach_idle_groups(&self, id: &MessageId, retry_delay: Option<Duration>) {
        let groups = self.idle_groups(id);
        let mut idle = self.idle.lock().unwrap();
        match (self.defect, retry_delay) {
            // The runtime acknowledges a dead-lettered message right after publishing
            // its dead letter.
            (Defect::SettlesDeadLettersForIdleGroups, None) => {
                let topic = id.topic.clone().unwrap_or_default();
                let pending = idle.dead_letters_pending.entry(topic).or_default();
                if *pending > 0 {
                    *pending -= 1;
                    idle.settled.entry(id.clone()).or_default().extend(groups)
                }
            }
            (Defect::CountsDelayedRetriesForIdleGroups, Some(delay))
                if delay >= Duration::from_secs(1) =>
            {
                for group in groups {
                    *idle.retries.entry((id.clone(), group)).or_insert(0) += 1;
                }
            }
            _ => {}
        }
    }
}

/// `id`'s position on each of `topics`: what the defects that apply one topic's
/// position to every subscribed topic settle.
fn on_every_topic<'a>(
    id: &'a MessageId,
    topics: &'a [String],
) -> impl Iterator<Item = MessageId> + 'a {
    topics.iter().map(move |topic| MessageId {
        topic: Some(topic.clone()),
        ..id.clone()
    })
}

impl Drop for FaultyConsumer {
    fn drop(&mut self) {
        if self.defect == Defect::KeepsWhatDroppedMembersHeld {
            std::mem::forget(self.inner.clone());
        }
    }
}

#[async_trait]
impl Consumer for FaultyConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        if max == 0 && self.defect == Defect::ReceiveZeroTakesOne {
            for message in self.inner.receive(1, wait).await? {
                self.inner.ack(&message.id).await?;
            }
            return Ok(Vec::new());
        }
        self.expire_leases().await?;
        self.take_group_moves().await;
        let messages = self.inner.receive(max, wait).await?;
        if self.defect == Defect::StrandsDroppedReceives && !messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.defect == Defect::RescansWhatItRead && !messages.is_empty() {
            let read = self
                .received
                .fetch_add(messages.len() as u64, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_nanos(read * 150)).await;
        }
        self.distort(messages).await
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        if max == 0 && self.defect == Defect::BatchOfZeroTakesOne {
            for message in self.inner.receive_batch(1, max_await).await? {
                self.inner.ack(&message.id).await?;
            }
            return Ok(Vec::new());
        }
        self.take_group_moves().await;
        let batch = match self.defect {
            Defect::OverfillsBatches => self.inner.receive_batch(max + 3, max_await).await?,
            Defect::HoldsPartialBatches => {
                let mut batch = self.inner.receive_batch(max, max_await).await?;
                let deadline = Instant::now() + max_await * 2;
                while !batch.is_empty() && batch.len() < max && Instant::now() < deadline {
                    batch.extend(
                        self.inner
                            .receive_batch(max - batch.len(), max_await)
                            .await?,
                    );
                }
                batch
            }
            // Closes a batch halfway through its window, as a receive that returns
            // what it has as soon as it has something.
            Defect::HandsPartialBatchesEarly => {
                self.inner.receive_batch(max, max_await / 2).await?
            }
            Defect::CountsPutBackEntries => {
                let mut batch = self.inner.receive_batch(max, max_await).await?;
                if let TopicSelector::List(topics) = &self.topics {
                    for message in &mut batch {
                        if message.attempt == 1
                            && topics.first() != Some(&message.topic().to_string())
                        {
                            message.attempt = 2;
                        }
                    }
                }
                batch
            }
            _ => self.inner.receive_batch(max, max_await).await?,
        };
        self.distort(batch).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        let id = &self.partitioned(id);
        if self.defect == Defect::AcksAhead && !self.held.lock().unwrap().contains(id) {
            self.acked_ahead.lock().unwrap().insert(id.clone());
            return Ok(());
        }
        if let Some(misread) = self.misread(id) {
            let _ = self.inner.ack(&misread).await;
            return Ok(());
        }
        self.settled(id);
        self.reach_idle_groups(id, None);
        if self.settles_leaked(id) {
            return Ok(());
        }
        if self.defect == Defect::SkipsAcks && self.acks.fetch_add(1, Ordering::Relaxed) % 100 == 57
        {
            // The ack is lost on the way; the broker hands the message out again.
            return self.inner.nack(id, Duration::from_millis(300)).await;
        }
        match (self.defect, &self.topics) {
            (Defect::AcksEveryTopic, TopicSelector::List(topics)) => {
                for position in on_every_topic(id, topics) {
                    let _ = self.inner.ack(&position).await;
                }
                Ok(())
            }
            (Defect::AcceptsForeignAcks, selector) => match &id.topic {
                Some(topic) if selector.matches(topic) => self.inner.ack(id).await,
                _ => Ok(()),
            },
            _ => self.inner.ack(id).await,
        }
    }

    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        if delay.is_zero() && self.defect == Defect::DefersZeroByDefault {
            return self.nack(id, DEFAULT_DEFERRAL).await;
        }
        self.nack(id, delay).await
    }

    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        let all: Vec<(MessageId, Duration)>;
        let deferrals = if deferrals.is_empty() && self.defect == Defect::EmptyDeferManyDefersAll {
            let held = self.held.lock().unwrap().clone();
            all = held.into_iter().map(|id| (id, DEFAULT_DEFERRAL)).collect();
            &all
        } else {
            deferrals
        };
        let mut first_error = None;
        for (id, delay) in deferrals {
            if let Err(e) = self.defer(id, *delay).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.settled(id);
        self.reach_idle_groups(id, Some(delay));
        if self.settles_leaked(id) {
            return Ok(());
        }
        if self.defect == Defect::CountsAttemptsAcrossGroups {
            *self
                .retries
                .lock()
                .unwrap()
                .entry(id.clone())
                .or_default()
                .entry(self.group.clone())
                .or_insert(0) += 1;
        }
        if self.defect == Defect::LeaksRetriesToOtherGroups {
            if let Some(message) = self.retried.lock().unwrap().get(id).cloned() {
                self.leaks.lock().unwrap().push(Leak {
                    due: SystemTime::now() + delay,
                    from_group: self.group.clone(),
                    message,
                    taken_by: HashSet::new(),
                });
            }
        }
        match self.defect {
            Defect::NoRedelivery => self.inner.ack(id).await,
            Defect::IgnoresRetryDelay => self.inner.nack(id, Duration::ZERO).await,
            _ => self.inner.nack(id, delay).await,
        }
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        match self.defect {
            Defect::PretendsToExtendLease => Ok(()),
            _ => self.inner.extend_lease(ids).await,
        }
    }

    async fn reject(&self, id: &MessageId, _reason: &str) -> Result<()> {
        self.settled(id);
        self.inner.ack(id).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        if self.defect == Defect::CannotAckMany {
            return Err(pubsub_components::PubSubError::unsupported(
                "consumer",
                "acknowledging several ids",
            ));
        }
        if ids.is_empty() && self.defect == Defect::EmptyAckManyAcksAll {
            let held: Vec<MessageId> = self.held.lock().unwrap().iter().cloned().collect();
            for id in held {
                self.ack(&id).await?;
            }
            return Ok(());
        }
        if self.defect == Defect::AcksManyPartially {
            for id in ids {
                self.ack(id).await?;
            }
            return Ok(());
        }
        pubsub_components::component::ack_each(self, ids, &self.topics).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        if let Some(misread) = self.misread(id) {
            let _ = self.inner.ack_cumulative(&misread).await;
            return Ok(());
        }
        self.inner.ack_cumulative(id).await?;
        if self.defect == Defect::AcksCumulativelyForEveryGroup {
            self.move_every_group(id);
        }
        if let (Defect::AcksCumulativeEverywhere, TopicSelector::List(topics)) =
            (self.defect, &self.topics)
        {
            for position in on_every_topic(id, topics) {
                let _ = self.inner.ack_cumulative(&position).await;
            }
        }
        Ok(())
    }

    async fn seek_all(&self, position: pubsub_components::StartPosition) -> Result<()> {
        if self.defect != Defect::SeeksOneTopic {
            return self.inner.seek_all(position).await;
        }
        let Some(first) = self.inner.last_message_ids().await?.into_iter().next() else {
            return Ok(());
        };
        let position = match position {
            pubsub_components::StartPosition::Earliest => 0,
            pubsub_components::StartPosition::Latest => first.position + 1,
        };
        self.inner.seek(&MessageId { position, ..first }).await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        let id = &self.partitioned(id);
        if let Some(misread) = self.misread(id) {
            let _ = self.inner.seek(&misread).await;
            return Ok(());
        }
        if self.defect == Defect::AcceptsForeignSeeks && id.topic.is_none() {
            return Ok(());
        }
        if let Some(moved) = self.seek_edge(id).await? {
            return self.inner.seek(&moved).await;
        }
        self.inner.seek(id).await?;
        if self.defect == Defect::SeeksEveryGroup {
            self.move_every_group(id);
        }
        if self.defect == Defect::SeeksEverything {
            for last in self.inner.last_message_ids().await? {
                if last.owner() != id.owner() {
                    self.inner
                        .seek(&MessageId {
                            position: 0,
                            ..last
                        })
                        .await?;
                }
            }
        }
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        let ids = self.inner.last_message_ids().await?;
        if self.defect == Defect::DuplicatesLastIds {
            return Ok(ids.into_iter().flat_map(|id| [id.clone(), id]).collect());
        }
        if self.defect == Defect::LastIdsPerTopic {
            // One per topic: the id furthest along, whichever partition holds it.
            let mut per_topic: std::collections::BTreeMap<Option<String>, MessageId> =
                Default::default();
            for id in ids {
                let slot = per_topic.entry(id.topic.clone()).or_insert(id.clone());
                if id.position > slot.position {
                    *slot = id;
                }
            }
            return Ok(per_topic.into_values().collect());
        }
        Ok(ids)
    }

    async fn close(&self) -> Result<()> {
        {
            let mut membership = self.membership.lock().unwrap();
            let mut others_stay = false;
            if let Some(entry) = membership.groups.get_mut(&self.group) {
                entry.0 = entry.0.saturating_sub(1);
                others_stay = entry.0 > 0;
                if entry.0 == 0 {
                    entry.1 = Some(SystemTime::now());
                }
            }
            if self.defect == Defect::StrandsHeldWhileOthersStay
                && others_stay
                && !self.held.lock().unwrap().is_empty()
            {
                let leavers = membership.stranded.entry(self.group.clone());
                leavers.or_default().push(self.inner.clone());
                return Ok(());
            }
        }
        if self.defect == Defect::LosesUnackedOnLeave {
            let held: Vec<MessageId> = self.held.lock().unwrap().drain().collect();
            for id in held {
                let _ = self.inner.ack(&id).await;
            }
        }
        self.inner.close().await
    }
}
