//! The in-memory reference component: in-process, zero set-up, the embedded default.
//!
//! Native: bulk publish and bulk receive, consumer groups with redelivery,
//! partitioned topics with partition-count increases and a versioned watch API,
//! multi-topic consumers with topic-qualified ids, ack and seek per owner topic,
//! `last_message_ids`. TTL, dead letters and delayed delivery are left to the runtime.

mod settings;

pub use settings::MemoryConfig;

use crate::capability::{Capabilities, OrderingScope, PartitionSupport, Support};
use crate::component::{
    check_message_size, member_of, owner_topic, stable_hash, Component, Consumer, ConsumerSpec,
    PartitionUpdate, PartitionWatch, StartPosition, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

/// The in-memory component. Cloning shares the same broker state.
#[derive(Clone)]
pub struct MemoryComponent {
    config: MemoryConfig,
    broker: Arc<Broker>,
}

impl MemoryComponent {
    /// A component with its own, empty broker.
    pub fn new(config: MemoryConfig) -> Self {
        MemoryComponent {
            config,
            broker: Arc::new(Broker::default()),
        }
    }
}

impl Default for MemoryComponent {
    fn default() -> Self {
        MemoryComponent::new(MemoryConfig::default())
    }
}

#[derive(Default)]
struct Broker {
    state: Mutex<State>,
    changed: Notify,
    next_consumer: AtomicU64,
}

impl Broker {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every mutation is
        // a single step), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct State {
    topics: BTreeMap<String, Topic>,
    cursors: HashMap<CursorKey, Cursor>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CursorKey {
    group: String,
    topic: String,
    partition: u32,
}

struct Topic {
    partitions: Vec<Vec<Stored>>,
    version: u64,
    watchers: Vec<mpsc::UnboundedSender<PartitionUpdate>>,
    round_robin: u64,
}

impl Topic {
    fn new(partitions: u32) -> Self {
        Topic {
            partitions: (0..partitions.max(1)).map(|_| Vec::new()).collect(),
            version: 1,
            watchers: Vec::new(),
            round_robin: 0,
        }
    }

    fn choose_partition(&mut self, key: Option<&str>) -> u32 {
        let count = self.partitions.len() as u64;
        let slot = match key {
            Some(key) => stable_hash(key.as_bytes()) % count,
            None => {
                self.round_robin = self.round_robin.wrapping_add(1);
                self.round_robin % count
            }
        };
        slot as u32
    }
}

struct Stored {
    payload: Vec<u8>,
    content_type: Option<String>,
    metadata: Metadata,
    partition_key: Option<String>,
    publish_time: SystemTime,
}

/// A group's position in one partition.
#[derive(Default)]
struct Cursor {
    next: u64,
    redeliver: BTreeMap<u64, Instant>,
    in_flight: HashMap<u64, u64>,
    attempts: HashMap<u64, u32>,
}

impl State {
    fn append(&mut self, message: OutgoingMessage, default_partitions: u32) -> MessageId {
        let topic = self
            .topics
            .entry(message.topic.clone())
            .or_insert_with(|| Topic::new(default_partitions));
        let partition = topic.choose_partition(message.partition_key.as_deref());
        let log = &mut topic.partitions[partition as usize];
        log.push(Stored {
            payload: message.payload,
            content_type: message.content_type,
            metadata: message.metadata,
            partition_key: message.partition_key,
            publish_time: SystemTime::now(),
        });
        MessageId::new(message.topic, Some(partition), log.len() as u64 - 1)
    }

    /// Every (topic, partition) a selector covers now.
    fn covered(&self, selector: &TopicSelector) -> Vec<(String, u32)> {
        self.topics
            .iter()
            .filter(|(name, _)| selector.matches(name))
            .flat_map(|(name, topic)| {
                (0..topic.partitions.len() as u32).map(move |p| (name.clone(), p))
            })
            .collect()
    }
}

fn check_size(config: &MemoryConfig, message: &OutgoingMessage) -> Result<()> {
    check_message_size(message, config.max_message_bytes)
}

#[async_trait]
impl Component for MemoryComponent {
    fn kind(&self) -> &str {
        "in-memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            bulk_subscribe: Support::Native,
            ordering: OrderingScope::PerPartition,
            partitions: Some(PartitionSupport {
                discovery_bound: Duration::from_millis(500),
                emulated: false,
            }),
            max_message_bytes: Some(self.config.max_message_bytes),
            redelivery_bound: Duration::from_secs(1),
            delay_precision: Duration::from_millis(250),
            clock_tolerance: Duration::from_millis(5),
            // In process: nothing outlives the process.
            durable: false,
            recovery_bound: Duration::from_secs(2),
            // No lease: a closed or dropped consumer returns what it held at once.
            ..Capabilities::default()
        }
    }

    async fn broker_version(&self) -> Result<String> {
        Ok(format!("in-memory {}", env!("CARGO_PKG_VERSION")))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        check_size(&self.config, &message)?;
        let id = self
            .broker
            .lock()
            .append(message, self.config.default_partitions);
        self.broker.changed.notify_waiters();
        Ok(id)
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let results = {
            let mut state = self.broker.lock();
            messages
                .into_iter()
                .map(|message| {
                    check_size(&self.config, &message)?;
                    Ok(state.append(message, self.config.default_partitions))
                })
                .collect()
        };
        self.broker.changed.notify_waiters();
        Ok(results)
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        if spec.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "consumer group name is empty".into(),
            ));
        }
        {
            let mut state = self.broker.lock();
            for (topic, partition) in state.covered(&spec.topics) {
                let start = match spec.start {
                    StartPosition::Earliest => 0,
                    StartPosition::Latest => {
                        state.topics[&topic].partitions[partition as usize].len() as u64
                    }
                };
                let key = CursorKey {
                    group: spec.group.clone(),
                    topic,
                    partition,
                };
                state.cursors.entry(key).or_insert_with(|| Cursor {
                    next: start,
                    ..Cursor::default()
                });
            }
        }
        Ok(Box::new(MemoryConsumer {
            broker: self.broker.clone(),
            id: self.broker.next_consumer.fetch_add(1, Ordering::Relaxed),
            spec,
            rotation: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }))
    }

    /// Frees the topic's messages and every group's position in it: the broker is
    /// this process's memory.
    async fn discard_topic(&self, topic: &str) -> Result<()> {
        let mut state = self.broker.lock();
        state.topics.remove(topic);
        state.cursors.retain(|key, _| key.topic != topic);
        Ok(())
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        if partitions == 0 {
            return Err(PubSubError::InvalidRequest(format!(
                "topic '{topic}' needs at least one partition"
            )));
        }
        let mut state = self.broker.lock();
        match state.topics.get(topic) {
            Some(existing) if existing.partitions.len() as u32 != partitions => {
                Err(PubSubError::InvalidRequest(format!(
                    "topic '{topic}' exists with {} partitions, not {partitions}",
                    existing.partitions.len()
                )))
            }
            Some(_) => Ok(()),
            None => {
                state
                    .topics
                    .insert(topic.to_string(), Topic::new(partitions));
                Ok(())
            }
        }
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        {
            let mut state = self.broker.lock();
            let entry = state
                .topics
                .get_mut(topic)
                .ok_or_else(|| PubSubError::NotFound(format!("topic '{topic}' does not exist")))?;
            let current = entry.partitions.len() as u32;
            if partitions <= current {
                return Err(PubSubError::InvalidRequest(format!(
                    "topic '{topic}' has {current} partitions; the count can only increase, not become {partitions}"
                )));
            }
            entry.partitions.resize_with(partitions as usize, Vec::new);
            entry.version += 1;
            let update = PartitionUpdate {
                version: entry.version,
                partitions,
            };
            entry.watchers.retain(|w| w.send(update).is_ok());
        }
        self.broker.changed.notify_waiters();
        Ok(())
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        let mut state = self.broker.lock();
        let entry = state.topics.get_mut(topic).ok_or_else(|| {
            PubSubError::NotFound(format!("cannot watch topic '{topic}': it does not exist"))
        })?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let current = PartitionUpdate {
            version: entry.version,
            partitions: entry.partitions.len() as u32,
        };
        sender
            .send(current)
            .map_err(|_| PubSubError::Closed("partition watcher dropped".into()))?;
        entry.watchers.push(sender.clone());
        drop(state);
        // A rejected notification is answered with the current state, unless a newer
        // one was already sent (which the client has yet to take).
        let (rejections, mut rejected) = mpsc::unbounded_channel::<PartitionUpdate>();
        let broker = self.broker.clone();
        let topic = topic.to_string();
        tokio::spawn(async move {
            while let Some(update) = rejected.recv().await {
                let state = broker.lock();
                let Some(entry) = state.topics.get(&topic) else {
                    return;
                };
                if entry.version > update.version {
                    continue;
                }
                let current = PartitionUpdate {
                    version: entry.version,
                    partitions: entry.partitions.len() as u32,
                };
                if sender.send(current).is_err() {
                    return;
                }
            }
        });
        Ok(PartitionWatch::with_rejections(receiver, rejections))
    }
}

/// A member of a consumer group on the in-memory broker.
struct MemoryConsumer {
    broker: Arc<Broker>,
    id: u64,
    spec: ConsumerSpec,
    rotation: AtomicUsize,
    closed: AtomicBool,
}

impl MemoryConsumer {
    fn ensure_open(&self) -> Result<()> {
        crate::component::ensure_open(&self.closed, || member_of(&self.spec))
    }

    /// Hands out up to `max` deliverable messages (of `only_topic` when given), and
    /// the earliest future redelivery time.
    fn take(
        &self,
        max: usize,
        only_topic: Option<&str>,
    ) -> (Vec<ReceivedMessage>, Option<Instant>) {
        let now = Instant::now();
        let mut state = self.broker.lock();
        let mut covered = state.covered(&self.spec.topics);
        covered.retain(|(topic, _)| only_topic.is_none_or(|only| only == topic));
        if !covered.is_empty() {
            let shift = self.rotation.fetch_add(1, Ordering::Relaxed) % covered.len();
            covered.rotate_left(shift);
        }
        let mut out = Vec::new();
        let mut next_due: Option<Instant> = None;
        let State { topics, cursors } = &mut *state;
        for (topic, partition) in covered {
            let log = &topics[&topic].partitions[partition as usize];
            let cursor = cursors
                .entry(CursorKey {
                    group: self.spec.group.clone(),
                    topic: topic.clone(),
                    partition,
                })
                .or_default();
            let due: Vec<u64> = cursor
                .redeliver
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(pos, _)| *pos)
                .collect();
            let fresh = cursor.next..log.len() as u64;
            for position in due.into_iter().chain(fresh) {
                if out.len() >= max {
                    break;
                }
                cursor.redeliver.remove(&position);
                if position >= cursor.next {
                    cursor.next = position + 1;
                }
                cursor.in_flight.insert(position, self.id);
                let attempt = cursor.attempts.entry(position).or_insert(0);
                *attempt += 1;
                let stored = &log[position as usize];
                out.push(ReceivedMessage {
                    id: MessageId::new(topic.clone(), Some(partition), position),
                    payload: stored.payload.clone(),
                    content_type: stored.content_type.clone(),
                    metadata: stored.metadata.clone(),
                    partition_key: stored.partition_key.clone(),
                    attempt: *attempt,
                    publish_time: stored.publish_time,
                });
            }
            if let Some(at) = cursor.redeliver.values().min() {
                next_due = Some(next_due.map_or(*at, |d| d.min(*at)));
            }
        }
        (out, next_due)
    }

    /// Waits until `take` yields something or `deadline` passes.
    async fn take_until(
        &self,
        max: usize,
        deadline: Instant,
        only_topic: Option<&str>,
    ) -> Result<Vec<ReceivedMessage>> {
        loop {
            self.ensure_open()?;
            let notified = self.broker.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (batch, next_due) = self.take(max, only_topic);
            if !batch.is_empty() {
                return Ok(batch);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wake = next_due.map_or(deadline, |due| due.min(deadline));
            let _ = tokio::time::timeout_at(wake, notified).await;
        }
    }

    /// Resolves an id to the cursor it belongs to, refusing ids this consumer cannot own.
    /// The cursor `id` belongs to; `id` must name a stored message, or (`to_end`) the
    /// position just past the last one, where a seek to latest goes.
    fn cursor_key(&self, id: &MessageId, state: &State, to_end: bool) -> Result<CursorKey> {
        let topic = owner_topic(id, &self.spec.topics)?;
        let entry = state
            .topics
            .get(&topic)
            .ok_or_else(|| PubSubError::NotFound(format!("topic '{topic}' does not exist")))?;
        let partition = match id.partition {
            Some(p) if (p as usize) < entry.partitions.len() => p,
            Some(p) => {
                return Err(PubSubError::InvalidRequest(format!(
                    "message id {id} names partition {p}, but topic '{topic}' has {}",
                    entry.partitions.len()
                )))
            }
            None if entry.partitions.len() == 1 => 0,
            None => {
                return Err(PubSubError::InvalidRequest(format!(
                    "message id {id} names no partition, but topic '{topic}' is partitioned"
                )))
            }
        };
        let end = entry.partitions[partition as usize].len() as u64;
        if id.position > end || (id.position == end && !to_end) {
            return Err(PubSubError::InvalidRequest(format!(
                "message id {id} is past the end of partition {partition} of '{topic}'"
            )));
        }
        Ok(CursorKey {
            group: self.spec.group.clone(),
            topic,
            partition,
        })
    }

    fn with_cursor<T>(
        &self,
        id: &MessageId,
        to_end: bool,
        f: impl FnOnce(&mut Cursor) -> T,
    ) -> Result<T> {
        self.ensure_open()?;
        let result = {
            let mut state = self.broker.lock();
            let key = self.cursor_key(id, &state, to_end)?;
            f(state.cursors.entry(key).or_default())
        };
        self.broker.changed.notify_waiters();
        Ok(result)
    }
}

#[async_trait]
impl Consumer for MemoryConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        self.take_until(max, Instant::now() + wait, None).await
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };

        let mut batch = self.take_until(1, Instant::now() + max_await, None).await?;
        let Some(first) = batch.first() else {
            return Ok(batch);
        };
        let topic = first.topic().to_string();
        // The batch timer starts when its first entry arrived at the broker.
        let since_arrival = SystemTime::now()
            .duration_since(first.publish_time)
            .unwrap_or_default();
        let deadline = Instant::now() + max_await.saturating_sub(since_arrival);
        loop {
            let (more, _) = self.take(max - batch.len(), Some(&topic));
            batch.extend(more);
            if batch.len() >= max || Instant::now() >= deadline {
                return Ok(batch);
            }
            let more = self
                .take_until(max - batch.len(), deadline, Some(&topic))
                .await?;
            batch.extend(more);
        }
    }

    /// Every id checked before any is acknowledged, all under one lock of the broker.
    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        {
            let mut state = self.broker.lock();
            let keys = ids
                .iter()
                .map(|id| self.cursor_key(id, &state, false))
                .collect::<Result<Vec<_>>>()?;
            for (key, id) in keys.into_iter().zip(ids) {
                let cursor = state.cursors.entry(key).or_default();
                cursor.in_flight.remove(&id.position);
                cursor.redeliver.remove(&id.position);
            }
        }
        self.broker.changed.notify_waiters();
        Ok(())
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.with_cursor(id, false, |cursor| {
            cursor.in_flight.remove(&id.position);
            cursor.redeliver.remove(&id.position);
        })
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.with_cursor(id, false, |cursor| {
            cursor.in_flight.retain(|pos, _| *pos > id.position);
            cursor.redeliver.retain(|pos, _| *pos > id.position);
        })
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.with_cursor(id, false, |cursor| {
            if cursor.in_flight.remove(&id.position).is_some() {
                cursor.redeliver.insert(id.position, Instant::now() + delay);
            }
        })
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.with_cursor(id, true, |cursor| {
            cursor.next = id.position;
            cursor.redeliver.retain(|pos, _| *pos < id.position);
            cursor.in_flight.retain(|pos, _| *pos < id.position);
        })
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let state = self.broker.lock();
        Ok(state
            .covered(&self.spec.topics)
            .into_iter()
            .filter_map(|(topic, partition)| {
                let len = state.topics[&topic].partitions[partition as usize].len() as u64;
                (len > 0).then(|| MessageId::new(topic, Some(partition), len - 1))
            })
            .collect())
    }

    async fn close(&self) -> Result<()> {
        self.leave();
        Ok(())
    }
}

impl MemoryConsumer {
    /// Leaves the group, handing back at once what the member held unsettled (on a
    /// close, and on a drop without one: the component declares no lease).
    fn leave(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let now = Instant::now();
            let mut state = self.broker.lock();
            for cursor in state.cursors.values_mut() {
                let mine: Vec<u64> = cursor
                    .in_flight
                    .iter()
                    .filter(|(_, owner)| **owner == self.id)
                    .map(|(pos, _)| *pos)
                    .collect();
                for position in mine {
                    cursor.in_flight.remove(&position);
                    cursor.redeliver.insert(position, now);
                }
            }
        }
        self.broker.changed.notify_waiters();
    }
}

impl Drop for MemoryConsumer {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::TopicSelector;

    /// A component holding three messages on topic `t`.
    async fn with_three_on_t() -> MemoryComponent {
        let component = MemoryComponent::default();
        for i in 0..3 {
            component
                .publish(OutgoingMessage::new("t", vec![i]))
                .await
                .unwrap();
        }
        component
    }

    #[tokio::test]
    async fn a_discarded_topic_holds_nothing_and_can_be_used_again() {
        let component = with_three_on_t().await;
        component.discard_topic("t").await.unwrap();
        assert!(component.broker.lock().topics.is_empty());
        let spec = ConsumerSpec::new(TopicSelector::Single("t".into()), "g");
        let consumer = component.consumer(spec).await.unwrap();
        assert!(consumer
            .receive(10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty());
        component
            .publish(OutgoingMessage::new("t", vec![9]))
            .await
            .unwrap();
        let received = consumer.receive(10, Duration::from_secs(1)).await.unwrap();
        assert_eq!(received.len(), 1);
        assert_eq!(received[0].payload, vec![9]);
    }

    /// No lease is declared: a member dropped without a close, while another member of
    /// its group lives, hands what it held to that member at once.
    #[tokio::test]
    async fn a_dropped_member_hands_back_what_it_held() {
        let component = with_three_on_t().await;
        let spec = ConsumerSpec::new(TopicSelector::Single("t".into()), "g");
        let first = component.consumer(spec.clone()).await.unwrap();
        let second = component.consumer(spec).await.unwrap();
        assert_eq!(first.receive(10, Duration::ZERO).await.unwrap().len(), 3);
        assert!(first.receive(0, Duration::ZERO).await.unwrap().is_empty());
        drop(first);
        let back = second.receive(10, Duration::from_secs(1)).await.unwrap();
        assert_eq!(back.len(), 3);
    }
}
