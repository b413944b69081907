//! One member of a consumer group: it receives through librdkafka, answers through its
//! [`Ledger`], and gives partitions up (a rebalance, or closing) by handing back what
//! it did not answer, so that nothing it acknowledged is delivered again in its group.

use super::intake::admit;
use super::ledger::{lock, HandedBack, Ledger, Reassigned, Released, SharedLedger, TopicPartition};
use super::poller::{self, PollTurn};
use super::{broker, delivered, named_topics, record, CopyHeaders, Quiet, REQUEST_TIMEOUT};
use crate::component::{member_of, millis_since_epoch, owner_topic, Consumer, ConsumerSpec};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer as RdConsumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The message a copy of an unanswered record publishes, and its copy header values
/// (the attempt it carries, when the original was published, when it is due).
fn copy_of(copy: HandedBack) -> (OutgoingMessage, CopyHeaders) {
    let message = copy.message;
    let headers = CopyHeaders {
        attempt: copy.attempt,
        published_ms: millis_since_epoch(message.publish_time),
        due_ms: copy.due.map(|due| {
            millis_since_epoch(SystemTime::now() + due.saturating_duration_since(Instant::now()))
        }),
    };
    let outgoing = OutgoingMessage {
        topic: message.topic().to_string(),
        payload: message.payload,
        content_type: message.content_type,
        metadata: message.metadata,
        partition_key: message.partition_key,
        expires_at: None,
        deliver_at: None,
    };
    (outgoing, headers)
}

/// A member's librdkafka context: quiet like the component's clients, and when a
/// rebalance takes partitions away, it hands back what the member did not answer of
/// them and commits their ends before they go.
pub(super) struct Member {
    ledger: SharedLedger,
    producer: FutureProducer<Quiet>,
}

impl Member {
    /// Gives up what `released` holds (a revoke, or closing): publishes the copies of
    /// the unanswered records, then commits the ends of the partitions whose copies
    /// all arrived, and stores them too, since librdkafka commits the stored offsets
    /// of the partitions it removes next (they cannot take the commit point back to a
    /// gap). A partition with a failed copy keeps its commit point: what follows it is
    /// delivered again (at least once). Blocks: each delivery report comes within the
    /// producer's message timeout, the commit within its request timeout. Returns the
    /// first failure, after doing all it could.
    fn hand_back(&self, consumer: &impl RdConsumer<Self>, released: Released) -> Result<()> {
        let mut first_error = None;
        let mut failed: HashSet<TopicPartition> = HashSet::new();
        let mut pending = Vec::new();
        for copy in released.copies {
            let partition = copy.partition;
            let (outgoing, copy) = copy_of(copy);
            let key = (outgoing.topic.clone(), partition);
            match self
                .producer
                .send_result(record(&outgoing, Some(partition), Some(copy)))
            {
                Ok(delivery) => pending.push((key, delivery)),
                Err((e, _)) => {
                    first_error.get_or_insert(PubSubError::broker("handing a record back", e));
                    failed.insert(key);
                }
            }
        }
        for ((topic, partition), delivery) in pending {
            // The producer's own thread resolves deliveries.
            let result = futures::executor::block_on(delivery)
                .map_err(|_| PubSubError::broker("handing a record back", "the producer closed"))
                .and_then(|result| delivered(&topic, result));
            if let Err(e) = result {
                first_error.get_or_insert(e);
                failed.insert((topic, partition));
            }
        }
        let mut ends = TopicPartitionList::new();
        for (topic, partition, next) in released.ends {
            if failed.contains(&(topic.clone(), partition)) {
                continue;
            }
            if let Err(e) = ends.add_partition_offset(&topic, partition, Offset::Offset(next)) {
                first_error
                    .get_or_insert(PubSubError::broker("committing handed-back partitions", e));
            }
        }
        if ends.count() > 0 {
            let committed = consumer
                .commit(&ends, CommitMode::Sync)
                .and_then(|()| consumer.store_offsets(&ends));
            if let Err(e) = committed {
                first_error
                    .get_or_insert(PubSubError::broker("committing handed-back partitions", e));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl ClientContext for Member {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        Quiet.log(level, facility, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        Quiet.error(error, reason)
    }
}

impl ConsumerContext for Member {
    /// Runs inside the member's receive (librdkafka serves rebalances from the poll),
    /// before the partitions are taken away.
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let partitions = |list: &TopicPartitionList| -> Vec<TopicPartition> {
            list.elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect()
        };
        match rebalance {
            Rebalance::Revoke(list) => {
                let released = lock(&self.ledger).revoke(&partitions(list));
                tracing::debug!(
                    copies = released.copies.len(),
                    ends = ?released.ends,
                    "kafka member gives partitions up"
                );
                if let Err(e) = self.hand_back(consumer, released) {
                    tracing::warn!(error = %e, "a member giving partitions up on a rebalance");
                }
            }
            Rebalance::Assign(_) | Rebalance::Error(_) => {}
        }
    }
}

/// Tells the background poller once an answer is recorded (when dropped, on every
/// path out of the answer).
struct Answered<'a>(&'a PollTurn);

impl Drop for Answered<'_> {
    fn drop(&mut self) {
        self.0.answered();
    }
}

/// One member of a consumer group.
pub(super) struct KafkaConsumer {
    /// Taken out and dropped on close: dropping is what makes librdkafka leave the
    /// group at once (an unsubscribed member stays until its session times out).
    consumer: Mutex<Option<Arc<StreamConsumer<Member>>>>,
    spec: ConsumerSpec,
    ledger: SharedLedger,
    closed: AtomicBool,
    /// Who polls the consumer: a receive, a seek, or the background task that keeps
    /// the member serving its group's rebalances between receives.
    turn: Arc<PollTurn>,
    /// The background task, aborted on close and drop.
    poller: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        if let Some(poller) = self.take_poller() {
            poller.abort();
        }
    }
}

impl KafkaConsumer {
    /// The context a member's librdkafka consumer is created with, and the ledger it
    /// shares with the member.
    pub(super) fn context(producer: &FutureProducer<Quiet>) -> Member {
        Member {
            ledger: SharedLedger::default(),
            producer: producer.clone(),
        }
    }

    /// The member of `spec`'s group that `consumer` (created with [`Self::context`]) is;
    /// a member that `joined` its group is polled between receives.
    pub(super) fn new(
        consumer: Arc<StreamConsumer<Member>>,
        spec: ConsumerSpec,
        joined: bool,
    ) -> Self {
        let ledger = consumer.context().ledger.clone();
        let turn = Arc::new(PollTurn::default());
        let poller = joined.then(|| poller::spawn(consumer.clone(), turn.clone(), ledger.clone()));
        KafkaConsumer {
            consumer: Mutex::new(Some(consumer)),
            spec,
            ledger,
            closed: AtomicBool::new(false),
            turn,
            poller: Mutex::new(poller),
        }
    }

    fn take_poller(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.poller.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    fn ensure_open(&self) -> Result<()> {
        self.client().map(drop)
    }

    /// The librdkafka consumer, while open.
    fn client(&self) -> Result<Arc<StreamConsumer<Member>>> {
        match &*self.consumer.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(consumer) if !self.closed.load(Ordering::Acquire) => Ok(consumer.clone()),
            _ => Err(PubSubError::Closed(format!(
                "{} was closed",
                member_of(&self.spec)
            ))),
        }
    }

    /// The ledger slot of a delivered message.
    fn locate(&self, id: &MessageId) -> Result<(TopicPartition, i64)> {
        let topic = owner_topic(id, &self.spec.topics)?;
        let partition = id.partition.ok_or_else(|| {
            PubSubError::InvalidRequest(format!("message id {id} names no partition"))
        })?;
        Ok(((topic, partition as i32), id.position as i64))
    }

    /// Marks a delivery answered and stores the offset below which everything is
    /// answered (committed with the next automatic commit, or when the partition goes).
    fn answer(&self, id: &MessageId) -> Result<()> {
        let (key, offset) = self.locate(id)?;
        let _wake = Answered(&self.turn);
        let next = self
            .ledger()
            .answer(&key, offset)
            .map_err(|Reassigned| {
                PubSubError::NotAllowed(format!(
                    "{id} was not acknowledged: a rebalance gave partition {} of '{}' to another member of group '{}' first, and a copy of it goes there",
                    key.1, key.0, self.spec.group
                ))
            })?;
        if let Some(next) = next {
            let mut offsets = TopicPartitionList::new();
            offsets
                .add_partition_offset(&key.0, key.1, Offset::Offset(next))
                .map_err(broker("storing an offset"))?;
            self.client()?
                .store_offsets(&offsets)
                .map_err(broker("storing an offset"))?;
        }
        Ok(())
    }
}

#[async_trait]
impl Consumer for KafkaConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        let deadline = Instant::now() + wait;
        let consumer = self.client()?;
        let _turn = self.turn.share().await;
        let (mut out, mut next_return) = self.ledger().take_waiting(max, Instant::now());
        self.turn
            .resume_if_drained(&consumer, self.ledger().set_aside_count());
        while out.len() < max {
            let now = Instant::now();
            let until = if out.is_empty() {
                next_return.map_or(deadline, |due| due.min(deadline))
            } else {
                now
            };
            match tokio::time::timeout_at(until, consumer.recv()).await {
                Ok(Ok(record)) => out.extend(admit(&self.ledger, &record)),
                Ok(Err(e)) => {
                    if out.is_empty() {
                        // Topics that do not exist yet (a pattern's) and transient
                        // broker errors: logged, and the wait goes on.
                        tracing::debug!(error = %e, "kafka consumer error");
                        if Instant::now() >= deadline {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    break;
                }
                Err(_) => {
                    if !out.is_empty() || Instant::now() >= deadline {
                        break;
                    }
                    let (due, next) = self.ledger().take_waiting(max - out.len(), Instant::now());
                    out.extend(due);
                    next_return = next;
                }
            }
        }
        // A rebalance served by a later poll of this receive may have taken the
        // partitions of records received before it: those went back to their
        // partition, and the member no longer holds them.
        let mut ledger = self.ledger();
        let handed: Vec<ReceivedMessage> = out
            .into_iter()
            .filter(|(admission, message)| ledger.holds(message, *admission))
            .map(|(_, message)| message)
            .collect();
        for message in &handed {
            ledger.set_handed(message, true);
        }
        Ok(handed)
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let mut batch = self.receive(max, max_await).await?;
        let Some(first) = batch.first() else {
            return Ok(batch);
        };
        // One topic per batch: the others' messages wait for the next call.
        let topic = first.topic().to_string();
        let full_by = Instant::now() + max_await;
        loop {
            let (mine, others): (Vec<_>, Vec<_>) =
                batch.into_iter().partition(|m| m.topic() == topic);
            batch = mine;
            let waiting = {
                let mut ledger = self.ledger();
                ledger.set_aside(others);
                ledger.has_set_aside()
            };
            let now = Instant::now();
            if batch.len() >= max || now >= full_by || waiting {
                return Ok(batch);
            }
            let more = self.receive(max - batch.len(), full_by - now).await?;
            if more.is_empty() {
                return Ok(batch);
            }
            batch.extend(more);
        }
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        self.answer(id)
    }

    /// A record stays with its member for as long as the member lives (heartbeats
    /// keep the session), however long it is held: nothing to extend.
    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        let _ = ids;
        Ok(())
    }

    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        let ledger = self.ledger();
        Ok(ids
            .iter()
            .filter(|id| {
                self.locate(id)
                    .is_ok_and(|(key, offset)| ledger.was_handed_back(&key, offset))
            })
            .cloned()
            .collect())
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        for id in ids {
            self.locate(id)?;
        }
        // Every id that can still be acknowledged is; those a rebalance handed back
        // are refused together.
        let mut refused = Vec::new();
        for id in ids {
            match self.answer(id) {
                Ok(()) => {}
                Err(PubSubError::NotAllowed(why)) => refused.push(why),
                Err(e) => return Err(e),
            }
        }
        match refused.is_empty() {
            true => Ok(()),
            false => Err(PubSubError::NotAllowed(refused.join("; "))),
        }
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let (key, offset) = self.locate(id)?;
        let earlier = self.ledger().held_through(&key, offset);
        if earlier.is_empty() {
            // Nothing held up to it: answered already, or a partition that moved on.
            return self.answer(id);
        }
        for message in &earlier {
            self.answer(&message.id)?;
        }
        Ok(())
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.ensure_open()?;
        let (key, offset) = self.locate(id)?;
        // A record the member no longer holds (its partition went to another member)
        // was handed back there, which delivers it again.
        self.ledger().ask_back(&key, offset, Instant::now() + delay);
        self.turn.answered();
        Ok(())
    }

    /// Repositions the owner topic-partition of `id` (assigned to this member) so that
    /// `id` is the next record delivered from it: what the member holds of it is
    /// forgotten, and librdkafka drops what it fetched before the seek.
    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let ((topic, partition), offset) = self.locate(id)?;
        let consumer = self.client()?;
        let assigned = consumer
            .assignment()
            .map_err(broker("reading the member's assignment"))?
            .elements_for_topic(&topic)
            .iter()
            .any(|element| element.partition() == partition);
        if !assigned {
            return Err(PubSubError::NotAllowed(format!(
                "cannot seek to {id}: partition {partition} of '{topic}' is not assigned to this member of group '{}' (receive from it first)",
                self.spec.group
            )));
        }
        // Nothing polls from before the seek while it is made.
        let _turn = self.turn.alone().await;
        self.ledger().forget(&(topic.clone(), partition));
        tokio::task::spawn_blocking(move || {
            consumer.seek(&topic, partition, Offset::Offset(offset), REQUEST_TIMEOUT)
        })
        .await
        .map_err(|e| PubSubError::broker("seeking", e))?
        .map_err(broker("seeking"))
    }

    /// The last record of each partition of the topics this member covers (its
    /// assignment, else the subscription's named topics): the high watermark less one.
    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let consumer = self.client()?;
        let named: Vec<String> = named_topics(&self.spec.topics)
            .into_iter()
            .map(str::to_string)
            .collect();
        tokio::task::spawn_blocking(move || -> Result<Vec<MessageId>> {
            let mut covered: Vec<(String, i32)> = consumer
                .assignment()
                .map_err(broker("reading the member's assignment"))?
                .elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect();
            if covered.is_empty() {
                for topic in &named {
                    let metadata = consumer
                        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                        .map_err(broker("reading topic metadata"))?;
                    for found in metadata.topics() {
                        covered.extend(
                            found
                                .partitions()
                                .iter()
                                .map(|p| (found.name().to_string(), p.id())),
                        );
                    }
                }
            }
            covered.sort();
            covered.dedup();
            let mut last = Vec::new();
            for (topic, partition) in covered {
                let (low, high) = consumer
                    .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
                    .map_err(broker("reading a partition's watermarks"))?;
                if high > low {
                    last.push(MessageId::new(
                        &topic,
                        Some(partition as u32),
                        (high - 1) as u64,
                    ));
                }
            }
            Ok(last)
        })
        .await
        .map_err(|e| PubSubError::broker("reading last message ids", e))?
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // The background task holds the consumer too: it ends first.
        if let Some(poller) = self.take_poller() {
            poller.abort();
            let _ = poller.await;
        }
        // What is still unanswered goes back to the end of its partition as a copy,
        // then everything handed to this member is committed.
        let released = self.ledger().release(|_| true);
        tracing::debug!(copies = released.copies.len(), ends = ?released.ends, "kafka member closing");
        let consumer = self
            .consumer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(consumer) = consumer else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || {
            let handed_back = consumer.context().hand_back(consumer.as_ref(), released);
            // The last handle: dropping it closes the consumer and leaves the group.
            drop(consumer);
            handed_back
        })
        .await
        .map_err(broker("committing on close"))?
    }
}
