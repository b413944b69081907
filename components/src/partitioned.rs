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
    stable_hash, Component, Consumer, ConsumerSpec, PartitionUpdate, PartitionWatch, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage, ReceivedMessage};
use crate::runtime::controls::keys;
use crate::typed_settings::Connecting;
use async_trait::async_trait;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How often watchers and publishers read the partition record.
pub const POLL: Duration = Duration::from_millis(100);
/// The declared discovery bound: a poll, the broker's round trip and slack.
pub const DISCOVERY_BOUND: Duration = Duration::from_secs(1);
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
                let mut broker_topics = Vec::with_capacity(topics.len());
                for topic in topics {
                    match self.count(topic).await? {
                        Some(count) => {
                            broker_topics.extend((0..count).map(|p| partition_topic(topic, p)))
                        }
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
        let spec = self.broker_spec(spec).await?;
        // Ids name the logical topic and partition wherever a partition's topic may
        // be covered: any pattern, and the selectors broker_spec expanded.
        let partitioned = match &spec.topics {
            TopicSelector::Single(_) => false,
            TopicSelector::List(topics) => topics.iter().any(|t| split(t).is_some()),
            TopicSelector::Pattern(_) => true,
        };
        let inner = self.inner.consumer(spec).await?;
        Ok(Box::new(PartitionedConsumer { inner, partitioned }))
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
struct PartitionedConsumer {
    inner: Box<dyn Consumer>,
    /// Whether it covers a partitioned topic (else ids pass unchanged).
    partitioned: bool,
}

impl PartitionedConsumer {
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
        Ok(self.outward_all(self.inner.receive(max, wait).await?))
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        Ok(self.outward_all(self.inner.receive_batch(max, max_await).await?))
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.inner.ack(&inward(id)).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        let ids: Vec<MessageId> = ids.iter().map(inward).collect();
        self.inner.ack_many(&ids).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.inner.ack_cumulative(&inward(id)).await
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.inner.nack(&inward(id), delay).await
    }

    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.inner.defer(&inward(id), delay).await
    }

    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        let deferrals: Vec<(MessageId, Duration)> =
            deferrals.iter().map(|(id, d)| (inward(id), *d)).collect();
        self.inner.defer_many(&deferrals).await
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        let ids: Vec<MessageId> = ids.iter().map(inward).collect();
        self.inner.extend_lease(&ids).await
    }

    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        let inner: Vec<MessageId> = ids.iter().map(inward).collect();
        let gone = self.inner.handed_back(&inner).await?;
        Ok(ids
            .iter()
            .zip(&inner)
            .filter(|(_, i)| gone.contains(i))
            .map(|(id, _)| id.clone())
            .collect())
    }

    async fn reject(&self, id: &MessageId, reason: &str) -> Result<()> {
        self.inner.reject(&inward(id), reason).await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.inner.seek(&inward(id)).await
    }

    async fn seek_all(&self, position: crate::component::StartPosition) -> Result<()> {
        self.inner.seek_all(position).await
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        let ids = self.inner.last_message_ids().await?;
        Ok(if self.partitioned {
            ids.into_iter().map(outward).collect()
        } else {
            ids
        })
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
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
}
