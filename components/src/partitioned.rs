//! Partitioned topics emulated on brokers that have none: partition `p` of topic `t`
//! is the broker topic `t--p<p>`, and a record in the broker itself (a
//! [`PartitionStore`]: a Redis hash, a NATS key-value entry, a PostgreSQL row) holds
//! the topic's partition count and version. Publishers route by `partitionKey` over
//! the count they read (re-read at most every poll interval); a consumer of a
//! partitioned topic covers `t--p*`, so it picks up partitions added later; watchers
//! poll the record and report each version change (merged when several fell within one
//! poll, as the contract allows).

use crate::capability::{Capabilities, OrderingScope, PartitionSupport};
use crate::component::{
    stable_hash, Component, Consumer, ConsumerSpec, PartitionUpdate, PartitionWatch, StartPosition,
    TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage, ReceivedMessage};
use crate::runtime::controls::keys;
use crate::typed_settings::Connecting;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How often watchers and publishers read the partition record.
pub const POLL: Duration = Duration::from_millis(100);
/// The declared discovery bound: a poll, the broker's round trip and slack.
pub const DISCOVERY_BOUND: Duration = Duration::from_secs(1);
/// The partitions a list of topics covers of each partitioned topic, at the least, on
/// a broker that keeps no log: what is published to partitions added beyond them
/// before the consumer sees them (within a poll) is not the group's.
pub const LIST_HEADROOM: u32 = 16;
/// How often watchers ask whether the broker restarted.
const INCARNATION_CHECK: Duration = Duration::from_millis(500);
/// Between a topic and its partition number in the broker's topic names.
const SEPARATOR: &str = "--p";

/// Where a component keeps each partitioned topic's record.
#[async_trait]
pub trait PartitionStore: Send + Sync {
    /// The topic's record, `None` when the topic is not partitioned.
    async fn read_partitions(&self, topic: &str) -> Result<Option<PartitionUpdate>>;

    /// Writes the topic's record.
    async fn write_partitions(&self, topic: &str, record: PartitionUpdate) -> Result<()>;

    /// What names the broker's current run (a server id, a start time): when it
    /// changes, the broker restarted and watchers report the current state again.
    /// Empty where unknown.
    async fn incarnation(&self) -> Result<String> {
        Ok(String::new())
    }
}

/// A component with partitioned topics emulated on its own broker, which keeps the
/// partition records.
pub fn wrap<C>(component: Arc<C>) -> Arc<dyn Component>
where
    C: Component + PartitionStore,
{
    Arc::new(Partitioned::new(component.clone(), component))
}

/// Connects a component whose partitioned topics are emulated on its broker and wraps
/// it (see [`wrap`]): its settings' [`TypedSettings::connect`].
///
/// [`TypedSettings::connect`]: crate::registry::TypedSettings::connect
pub fn connect_wrapped<C>(
    connecting: impl Future<Output = Result<C>> + Send + 'static,
) -> Connecting
where
    C: Component + PartitionStore,
{
    Box::pin(async move { Ok(wrap(Arc::new(connecting.await?))) })
}

/// A component with emulated partitioned topics.
pub struct Partitioned {
    inner: Arc<dyn Component>,
    store: Arc<dyn PartitionStore>,
    /// Counts read recently, by topic (`None`: not partitioned).
    counts: Mutex<HashMap<String, (Instant, Option<u32>)>>,
    round_robin: AtomicU64,
}

impl Partitioned {
    /// Wraps `inner`, keeping records in `store` (usually the same broker client).
    pub fn new(inner: Arc<dyn Component>, store: Arc<dyn PartitionStore>) -> Self {
        Partitioned {
            inner,
            store,
            counts: Mutex::new(HashMap::new()),
            round_robin: AtomicU64::new(0),
        }
    }

    /// The topic's partition count, read again once the cached one is a poll old.
    async fn count(&self, topic: &str) -> Result<Option<u32>> {
        if let Some((at, count)) = self.lock_counts().get(topic) {
            if at.elapsed() < POLL {
                return Ok(*count);
            }
        }
        let count = self
            .store
            .read_partitions(topic)
            .await?
            .map(|r| r.partitions);
        self.lock_counts()
            .insert(topic.to_string(), (Instant::now(), count));
        Ok(count)
    }

    fn lock_counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Option<u32>)>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The message routed to its partition's broker topic, and that partition.
    async fn route(&self, mut message: OutgoingMessage) -> Result<(OutgoingMessage, Option<u32>)> {
        let Some(count) = self.count(&message.topic).await? else {
            return Ok((message, None));
        };
        let partition = match &message.partition_key {
            Some(key) => (stable_hash(key.as_bytes()) % u64::from(count)) as u32,
            None => (self.round_robin.fetch_add(1, Ordering::Relaxed) % u64::from(count)) as u32,
        };
        message.topic = partition_topic(&message.topic, partition);
        Ok((message, Some(partition)))
    }
}

impl Partitioned {
    /// The spec as the broker sees it: a partitioned topic covers its partitions'
    /// topics (a group is created and consumed under the same selector).
    ///
    /// A list names each partitioned topic's partitions as they are now (a list has no
    /// wildcard to cover partitions added later); a pattern covers partitions' topics
    /// as it covers any topic.
    async fn broker_spec(&self, mut spec: ConsumerSpec) -> Result<ConsumerSpec> {
        match &spec.topics {
            TopicSelector::Single(topic) => {
                if self.count(topic).await?.is_some() {
                    spec.topics = TopicSelector::Pattern(format!("{topic}{SEPARATOR}*"));
                }
            }
            TopicSelector::List(topics) => {
                // A broker that keeps no log (no seek) hands a group only what is
                // published once the group covers a topic, so there a list covers
                // partitions not added yet as well.
                let least = if self.inner.capabilities().seek {
                    0
                } else {
                    LIST_HEADROOM
                };
                let mut broker_topics = Vec::with_capacity(topics.len());
                for topic in topics {
                    match self.count(topic).await? {
                        Some(count) => broker_topics
                            .extend((0..count.max(least)).map(|p| partition_topic(topic, p))),
                        None => broker_topics.push(topic.clone()),
                    }
                }
                spec.topics = TopicSelector::List(broker_topics);
            }
            TopicSelector::Pattern(_) => {}
        }
        Ok(spec)
    }
}

/// The broker topic of one partition.
fn partition_topic(topic: &str, partition: u32) -> String {
    format!("{topic}{SEPARATOR}{partition}")
}

/// The topic and partition a broker topic stands for.
fn split(broker_topic: &str) -> Option<(&str, u32)> {
    let (topic, partition) = broker_topic.rsplit_once(SEPARATOR)?;
    Some((topic, partition.parse().ok()?))
}

/// The id the application sees: the logical topic with the partition.
fn outward(mut id: MessageId) -> MessageId {
    if let Some((topic, partition)) = id.topic.as_deref().and_then(split) {
        let topic = topic.to_string();
        id.topic = Some(topic);
        id.partition = Some(partition);
    }
    id
}

/// The id the broker knows: the partition's topic, no partition.
fn inward(id: &MessageId) -> MessageId {
    match (&id.topic, id.partition) {
        (Some(topic), Some(partition)) => MessageId {
            topic: Some(partition_topic(topic, partition)),
            partition: None,
            position: id.position,
        },
        _ => id.clone(),
    }
}

#[async_trait]
impl Component for Partitioned {
    fn kind(&self) -> &str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        // Each partition is a broker topic: order holds per partition (an unpartitioned
        // topic is one partition).
        if caps.ordering == OrderingScope::PerTopic {
            caps.ordering = OrderingScope::PerPartition;
        }
        caps.partitions = Some(PartitionSupport {
            discovery_bound: DISCOVERY_BOUND,
            emulated: true,
        });
        caps
    }

    async fn broker_version(&self) -> Result<String> {
        self.inner.broker_version().await
    }

    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        self.inner.unmet_broker_requirement().await
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        let (message, partition) = self.route(message).await?;
        let id = self.inner.publish(message).await?;
        Ok(match partition {
            Some(_) => outward(id),
            None => id,
        })
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let partitioned = match messages.first() {
            Some(first) => self.count(&first.topic).await?.is_some(),
            None => false,
        };
        if !partitioned {
            return self.inner.publish_batch(messages).await;
        }
        let mut results = Vec::with_capacity(messages.len());
        for message in messages {
            results.push(self.publish(message).await);
        }
        Ok(results)
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let asked = spec.clone();
        let spec = self.broker_spec(spec).await?;
        // Ids name the logical topic and partition wherever a partition's topic may
        // be covered: any pattern, and the selectors broker_spec expanded.
        let partitioned = match &spec.topics {
            TopicSelector::Single(_) => false,
            TopicSelector::List(topics) => topics.iter().any(|t| split(t).is_some()),
            TopicSelector::Pattern(_) => true,
        };
        // A list names the partitions there are now: follow its partitioned topics.
        let growth = match (&asked.topics, &spec.topics) {
            (TopicSelector::List(_), TopicSelector::List(broker_topics)) if partitioned => {
                let mut counts = BTreeMap::new();
                for (topic, partition) in broker_topics.iter().filter_map(|t| split(t)) {
                    let count = counts.entry(topic.to_string()).or_insert(0);
                    *count = (*count).max(partition + 1);
                }
                Some(Growth {
                    inner: self.inner.clone(),
                    store: self.store.clone(),
                    spec: asked,
                    counts: tokio::sync::Mutex::new((Instant::now(), counts)),
                })
            }
            _ => None,
        };
        let first = Part {
            consumer: Arc::from(self.inner.consumer(spec).await?),
            topics: None,
        };
        Ok(Box::new(PartitionedConsumer {
            parts: Mutex::new(vec![first]),
            partitioned,
            growth,
            closed: AtomicBool::new(false),
            turns: AtomicUsize::new(0),
        }))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        let spec = self.broker_spec(spec.clone()).await?;
        self.inner.create_group(&spec).await
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        if partitions == 0 {
            return Err(PubSubError::InvalidRequest(format!(
                "topic '{topic}' needs at least one partition"
            )));
        }
        match self.store.read_partitions(topic).await? {
            Some(record) if record.partitions == partitions => Ok(()),
            Some(record) => Err(PubSubError::InvalidRequest(format!(
                "topic '{topic}' exists with {} partitions, not {partitions}",
                record.partitions
            ))),
            None => {
                self.store
                    .write_partitions(
                        topic,
                        PartitionUpdate {
                            version: 1,
                            partitions,
                        },
                    )
                    .await?;
                self.lock_counts().remove(topic);
                Ok(())
            }
        }
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        let Some(record) = self.store.read_partitions(topic).await? else {
            return Err(PubSubError::NotFound(format!(
                "topic '{topic}' is not a partitioned topic"
            )));
        };
        if partitions < record.partitions {
            return Err(PubSubError::InvalidRequest(format!(
                "topic '{topic}' has {} partitions; a count can only grow, not go to {partitions}",
                record.partitions
            )));
        }
        if partitions == record.partitions {
            return Ok(());
        }
        self.store
            .write_partitions(
                topic,
                PartitionUpdate {
                    version: record.version + 1,
                    partitions,
                },
            )
            .await?;
        self.lock_counts().remove(topic);
        Ok(())
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        let Some(first) = self.store.read_partitions(topic).await? else {
            return Err(PubSubError::NotFound(format!(
                "topic '{topic}' is not a partitioned topic; nothing to watch"
            )));
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        let (rejections, mut rejected) = mpsc::unbounded_channel::<PartitionUpdate>();
        let store = self.store.clone();
        let topic = topic.to_string();
        let mut incarnation = self.store.incarnation().await.unwrap_or_default();
        tokio::spawn(async move {
            let mut last = first;
            if sender.send(first).is_err() {
                return;
            }
            // Set when the broker was away or restarted: the next state read is
            // reported even if its version did not change (the contract's "current
            // state again after a reconnect").
            let mut resend = false;
            let mut checked = Instant::now();
            loop {
                tokio::time::sleep(POLL).await;
                if sender.is_closed() {
                    return;
                }
                // A rejected notification is answered with the state read next, unless
                // a newer one was already sent.
                while let Ok(update) = rejected.try_recv() {
                    resend |= update.version >= last.version;
                }
                if checked.elapsed() >= INCARNATION_CHECK {
                    checked = Instant::now();
                    match store.incarnation().await {
                        Ok(now) if now != incarnation => {
                            incarnation = now;
                            resend = true;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "partition watcher: cannot tell whether the broker restarted");
                            resend = true
                        }
                    }
                }
                let record = match store.read_partitions(&topic).await {
                    Ok(Some(record)) => record,
                    // Retried at the next poll.
                    Ok(None) => {
                        resend = true;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "partition watcher: cannot read the partition record");
                        resend = true;
                        continue;
                    }
                };
                if record.version > last.version || resend {
                    resend = false;
                    last = record;
                    if sender.send(record).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(PartitionWatch::with_rejections(receiver, rejections))
    }
}

/// A consumer whose ids name the logical topic and partition.
///
/// A list of topics names the partitions its partitioned topics have when it opens;
/// when one of them gains partitions, the consumer opens a further broker consumer, in
/// the same group, for the added partitions (from their first message: all of it
/// came after the growth), and receives from all of its parts.
struct PartitionedConsumer {
    /// The broker consumers: the one opened first, then one per growth seen.
    parts: Mutex<Vec<Part>>,
    /// Whether it covers a partitioned topic (else ids pass unchanged).
    partitioned: bool,
    /// Set for a list naming partitioned topics.
    growth: Option<Growth>,
    /// Set by close: no part is opened after it.
    closed: AtomicBool,
    /// Turns taken over the parts.
    turns: AtomicUsize,
}

/// One broker consumer of a [`PartitionedConsumer`].
#[derive(Clone)]
struct Part {
    consumer: Arc<dyn Consumer>,
    /// The partitions' broker topics it was opened for; `None` for the first part,
    /// which covers every topic the others do not.
    topics: Option<Vec<String>>,
}

/// What a list consumer needs to open parts for partitions added to its topics.
struct Growth {
    inner: Arc<dyn Component>,
    store: Arc<dyn PartitionStore>,
    /// The spec as the application gave it.
    spec: ConsumerSpec,
    /// When the records were last read, and the partitions covered, by topic.
    counts: tokio::sync::Mutex<(Instant, BTreeMap<String, u32>)>,
}

impl Growth {
    /// A part for the partitions added since the last read (at most one read per
    /// poll), or `None` when none were.
    async fn added_part(&self) -> Result<Option<Part>> {
        let mut counts = self.counts.lock().await;
        if counts.0.elapsed() < POLL {
            return Ok(None);
        }
        let mut added = Vec::new();
        let mut now = counts.1.clone();
        for (topic, covered) in now.iter_mut() {
            let Some(record) = self.store.read_partitions(topic).await? else {
                continue;
            };
            added.extend((*covered..record.partitions).map(|p| partition_topic(topic, p)));
            *covered = (*covered).max(record.partitions);
        }
        counts.0 = Instant::now();
        if added.is_empty() {
            return Ok(None);
        }
        let mut spec = self.spec.clone();
        spec.topics = TopicSelector::List(added.clone());
        // Every message of an added partition came after the consumer opened.
        spec.start = StartPosition::Earliest;
        let consumer = self.inner.consumer(spec).await?;
        counts.1 = now;
        Ok(Some(Part {
            consumer: Arc::from(consumer),
            topics: Some(added),
        }))
    }
}

impl PartitionedConsumer {
    fn lock_parts(&self) -> std::sync::MutexGuard<'_, Vec<Part>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The parts as they are now.
    fn parts(&self) -> Vec<Part> {
        self.lock_parts().clone()
    }

    /// The first part, which answers for an empty list of ids as it would alone.
    fn first(&self) -> Arc<dyn Consumer> {
        self.lock_parts()[0].consumer.clone()
    }

    /// Opens a part for partitions added since the last look; true when it did.
    async fn follow_growth(&self) -> Result<bool> {
        let Some(growth) = &self.growth else {
            return Ok(false);
        };
        if self.closed.load(Ordering::SeqCst) {
            return Ok(false);
        }
        match growth.added_part().await? {
            Some(part) => {
                self.lock_parts().push(part);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The part that covers the broker topic of `id` (an id as the broker knows it).
    fn part_of(&self, id: &MessageId) -> Arc<dyn Consumer> {
        let parts = self.lock_parts();
        let covering = id.topic.as_ref().and_then(|topic| {
            parts
                .iter()
                .find(|p| p.topics.as_ref().is_some_and(|t| t.contains(topic)))
        });
        covering.unwrap_or(&parts[0]).consumer.clone()
    }

    /// The ids as the broker knows them, grouped by the part that covers each: the
    /// first part's group first (it also takes the ids no part covers, and refuses
    /// them, so a refusal comes before any other part settled anything), the others
    /// in the order of their first appearance.
    fn by_part<T: Clone>(
        &self,
        items: &[T],
        id: impl Fn(&T) -> &MessageId,
    ) -> Vec<(Arc<dyn Consumer>, Vec<T>)> {
        let first = self.first();
        let mut groups: Vec<(Arc<dyn Consumer>, Vec<T>)> = vec![(first, Vec::new())];
        for item in items {
            let part = self.part_of(&inward(id(item)));
            match groups.iter_mut().find(|(p, _)| Arc::ptr_eq(p, &part)) {
                Some((_, group)) => group.push(item.clone()),
                None => groups.push((part, vec![item.clone()])),
            }
        }
        groups.retain(|(_, group)| !group.is_empty());
        groups
    }

    /// What one receive (or batch receive) gets. A consumer that follows growth looks
    /// for added partitions first. With one broker consumer it waits there; with more,
    /// it asks each in turn for at most a poll, starting one further on each time, and
    /// returns what the first with messages gave (so a batch holds what one broker
    /// consumer gathered: one topic where a broker's batches take one). It never
    /// abandons a receive: SUB-6 allows it, but a broker may then hold the messages
    /// until the lease runs out.
    async fn receive_from_parts(
        &self,
        max: usize,
        wait: Duration,
        batch: bool,
    ) -> Result<Vec<ReceivedMessage>> {
        let deadline = Instant::now() + wait;
        loop {
            if max > 0 {
                self.follow_growth().await?;
            }
            let mut parts = self.parts();
            let first = self.turns.fetch_add(1, Ordering::Relaxed) % parts.len();
            parts.rotate_left(first);
            let alone = parts.len() == 1 || max == 0;
            for part in &parts {
                let left = deadline.saturating_duration_since(Instant::now());
                let turn = if alone { left } else { left.min(POLL) };
                let got = if batch {
                    part.consumer.receive_batch(max, turn).await?
                } else {
                    part.consumer.receive(max, turn).await?
                };
                if alone || !got.is_empty() {
                    return Ok(self.outward_all(got));
                }
            }
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    /// The messages as the application sees them: ids with the logical topic and
    /// partition, and, on any topic (a dead-letter topic is not partitioned), the
    /// original topic a component that dead-letters natively named as the partition's
    /// broker topic given as the partitioned topic it belongs to.
    fn outward_all(&self, messages: Vec<ReceivedMessage>) -> Vec<ReceivedMessage> {
        messages
            .into_iter()
            .map(|mut m| {
                if self.partitioned {
                    m.id = outward(m.id);
                }
                if let Some(original) = m.metadata.get_mut(keys::ORIGINAL_TOPIC) {
                    if let Some((topic, _)) = split(original) {
                        *original = topic.to_string();
                    }
                }
                m
            })
            .collect()
    }
}

#[async_trait]
impl Consumer for PartitionedConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.receive_from_parts(max, wait, false).await
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        self.receive_from_parts(max, max_await, true).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).ack(&id).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        if ids.is_empty() {
            return self.first().ack_many(&[]).await;
        }
        for (part, ids) in self.by_part(ids, |id| id) {
            let ids: Vec<MessageId> = ids.iter().map(inward).collect();
            part.ack_many(&ids).await?;
        }
        Ok(())
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).ack_cumulative(&id).await
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).nack(&id, delay).await
    }

    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).defer(&id, delay).await
    }

    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        if deferrals.is_empty() {
            return self.first().defer_many(&[]).await;
        }
        // Like the trait's default: every part is tried, the first error returned.
        let mut first_error = None;
        for (part, deferrals) in self.by_part(deferrals, |(id, _)| id) {
            let deferrals: Vec<(MessageId, Duration)> =
                deferrals.iter().map(|(id, d)| (inward(id), *d)).collect();
            if let Err(e) = part.defer_many(&deferrals).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        if ids.is_empty() {
            return self.first().extend_lease(&[]).await;
        }
        // Every part keeps what it can, the first error returned.
        let mut first_error = None;
        for (part, ids) in self.by_part(ids, |id| id) {
            let ids: Vec<MessageId> = ids.iter().map(inward).collect();
            if let Err(e) = part.extend_lease(&ids).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        if ids.is_empty() {
            return self.first().handed_back(&[]).await;
        }
        let mut gone_all = Vec::new();
        for (part, ids) in self.by_part(ids, |id| id) {
            let inner: Vec<MessageId> = ids.iter().map(inward).collect();
            let gone = part.handed_back(&inner).await?;
            gone_all.extend(
                ids.iter()
                    .zip(&inner)
                    .filter(|(_, i)| gone.contains(i))
                    .map(|(id, _)| id.clone()),
            );
        }
        Ok(ids
            .iter()
            .filter(|id| gone_all.contains(id))
            .cloned()
            .collect())
    }

    async fn reject(&self, id: &MessageId, reason: &str) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).reject(&id, reason).await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        let id = inward(id);
        self.part_of(&id).seek(&id).await
    }

    async fn seek_all(&self, position: StartPosition) -> Result<()> {
        for part in self.parts() {
            part.consumer.seek_all(position).await?;
        }
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        let mut ids = Vec::new();
        for part in self.parts() {
            ids.extend(part.consumer.last_message_ids().await?);
        }
        Ok(if self.partitioned {
            ids.into_iter().map(outward).collect()
        } else {
            ids
        })
    }

    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        let mut first_error = Ok(());
        for part in self.parts() {
            if let Err(e) = part.consumer.close().await {
                if first_error.is_ok() {
                    first_error = Err(e);
                }
            }
        }
        first_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_between_partition_topics_and_partitions() {
        let broker = MessageId::new("orders--p3", None, 17);
        let seen = outward(broker.clone());
        assert_eq!(seen.topic.as_deref(), Some("orders"));
        assert_eq!(seen.partition, Some(3));
        assert_eq!(inward(&seen), broker);
        let plain = MessageId::new("orders", None, 1);
        assert_eq!(outward(plain.clone()), plain);
    }

    /// A broker consumer that covers `topics`, refuses ids of any other topic whole,
    /// fails every deferral when `broken`, and records what it settled.
    struct Recorder {
        topics: Vec<String>,
        broken: bool,
        settled: Mutex<Vec<MessageId>>,
    }

    impl Recorder {
        fn new(topics: &[&str], broken: bool) -> Arc<Self> {
            Arc::new(Recorder {
                topics: topics.iter().map(|t| t.to_string()).collect(),
                broken,
                settled: Mutex::new(Vec::new()),
            })
        }

        fn settled(&self) -> Vec<MessageId> {
            self.settled.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl Consumer for Recorder {
        async fn receive(&self, _: usize, _: Duration) -> Result<Vec<ReceivedMessage>> {
            Ok(Vec::new())
        }
        async fn ack(&self, id: &MessageId) -> Result<()> {
            self.ack_many(std::slice::from_ref(id)).await
        }
        async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
            if ids
                .iter()
                .any(|id| !self.topics.contains(id.topic.as_ref().unwrap()))
            {
                return Err(PubSubError::NotAllowed("a topic not covered".into()));
            }
            self.settled.lock().unwrap().extend_from_slice(ids);
            Ok(())
        }
        async fn nack(&self, id: &MessageId, _: Duration) -> Result<()> {
            if self.broken {
                return Err(PubSubError::broker("deferring", "connection reset"));
            }
            self.settled.lock().unwrap().push(id.clone());
            Ok(())
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    /// A list consumer of `orders` (partitions 0 and 1 in its first part) that saw
    /// partition 2 added (its second part).
    fn grown(first: Arc<Recorder>, added: Arc<Recorder>) -> PartitionedConsumer {
        let part = |consumer: Arc<Recorder>, topics: Option<Vec<String>>| Part { consumer, topics };
        PartitionedConsumer {
            parts: Mutex::new(vec![
                part(first, None),
                part(added, Some(vec!["orders--p2".to_string()])),
            ]),
            partitioned: true,
            growth: None,
            closed: AtomicBool::new(false),
            turns: AtomicUsize::new(0),
        }
    }

    fn id(partition: u32, position: u64) -> MessageId {
        outward(MessageId::new(
            partition_topic("orders", partition),
            None,
            position,
        ))
    }

    #[tokio::test]
    async fn a_refused_ack_many_settles_nothing_on_any_part() {
        let first = Recorder::new(&["orders--p0", "orders--p1"], false);
        let added = Recorder::new(&["orders--p2"], false);
        let consumer = grown(first.clone(), added.clone());
        let foreign = MessageId::new("elsewhere", None, 1);
        // The added partition's id comes first, the foreign one last.
        let ids = [id(2, 5), id(0, 3), foreign];
        let refused = consumer.ack_many(&ids).await.unwrap_err();
        assert_eq!(refused.kind(), crate::error::ErrorKind::NotAllowed);
        assert!(added.settled().is_empty(), "{:?}", added.settled());
        assert!(first.settled().is_empty(), "{:?}", first.settled());
        consumer.ack_many(&ids[..2]).await.unwrap();
        assert_eq!(added.settled(), vec![inward(&ids[0])]);
        assert_eq!(first.settled(), vec![inward(&ids[1])]);
    }

    #[tokio::test]
    async fn defer_many_tries_every_part_and_returns_the_first_error() {
        let first = Recorder::new(&["orders--p0"], true);
        let added = Recorder::new(&["orders--p2"], false);
        let consumer = grown(first.clone(), added.clone());
        let second = Duration::from_secs(1);
        let failed = consumer
            .defer_many(&[(id(0, 1), second), (id(2, 7), second)])
            .await
            .unwrap_err();
        assert_eq!(failed.kind(), crate::error::ErrorKind::Broker);
        assert_eq!(added.settled(), vec![inward(&id(2, 7))]);
    }
}
