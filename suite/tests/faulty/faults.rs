//! Deliberately faulty components: the in-memory component with one contract
//! violation each, declared as if it were fine. Each must make the cases it breaks FAIL.

use async_trait::async_trait;
use pubsub_components::memory::MemoryComponent;
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, DeliveryGuarantee, MessageId, OutgoingMessage,
    PartitionWatch, ReceivedMessage, Result, Support, TopicSelector,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// One contract violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Silently acks and discards every third message it receives.
    Drops,
    /// Delivers every message twice while claiming exactly-once.
    Duplicates,
    /// Hands each received batch over in reverse order.
    Reorders,
    /// Claims native delayed delivery and delivers at once.
    DeliversEarly,
    /// Claims native TTL and ignores it.
    IgnoresTtl,
    /// Claims native dead letters and never routes any (drops what it rejects).
    NeverDeadLetters,
    /// Reports entries the broker refused as published.
    LiesInBulkStatuses,
    /// Returns more than maxMessagesCount entries per native batch.
    OverfillsBatches,
    /// In a batch of a multi-topic subscription, delivers the entries of every topic
    /// but the first as attempt 2 on their first delivery (a consumer that puts back
    /// entries of other topics to batch topics apart, and counts the put-back as a
    /// delivery).
    CountsPutBackEntries,
    /// Holds partial native batches long past maxAwaitDuration.
    HoldsPartialBatches,
    /// Delivers ids without their owner topic.
    LosesOwnerTopic,
    /// A seek rewinds every subscribed topic.
    SeeksEverything,
    /// Acks the same position on every subscribed topic.
    AcksEveryTopic,
    /// Accepts acks for ids it cannot own.
    AcceptsForeignAcks,
    /// Repeats each id in `last_message_ids`.
    DuplicatesLastIds,
    /// Answers partition updates with success and changes nothing.
    IgnoresPartitionUpdates,
    /// Ignores the partition key when routing.
    MisroutesKeys,
    /// Hands the messages of non-ASCII partition keys out in reverse within each
    /// receive (a component whose key hashing sends them to a LIFO side queue).
    ReordersNonAsciiKeys,
    /// Drops the trace context of every message.
    DropsTraceContext,
    /// Turns negative acks into acks: nothing is redelivered.
    NoRedelivery,
    /// Acks what a consumer still holds when it leaves its group.
    LosesUnackedOnLeave,
    /// Drops the content type of enveloped messages, the envelope's marker, so the
    /// envelope reaches the app as data.
    StripsEnvelope,
    /// Drops the runtime's `x-rt-raw` marker, so a CloudEvent sent rawPayload reaches
    /// the app unwrapped.
    StripsRawMarker,
    /// Truncates payloads over 4 KiB.
    TruncatesLargePayloads,
    /// Drops the last byte of a payload of exactly the maximum size (an off-by-one
    /// in a length prefix).
    TruncatesAtMaximum,
    /// Refuses a payload of exactly the maximum size (`>=` where `>` was meant).
    RefusesExactMaximum,
    /// Delivers a message that stayed in the broker over 2 s without its empty
    /// metadata values (a cold read path that skips empty fields).
    LosesEmptyValuesAfterWait,
    /// Gives every consumer its own group, so group members do not share.
    IgnoresGroups,
    /// Puts every consumer in one group, so groups do not each get every message.
    MergesGroups,
    /// Declares partitions unsupported but does not refuse them with Unsupported.
    HidesPartitions,
    /// Keeps messages only for consumers already open, like a queue broker whose
    /// `create_group` does nothing: what was published for a group created ahead of
    /// its first member is lost.
    ForgetsCreatedGroups,
    /// Claims native TTL and expires messages at half their TTL.
    HalvesTtl,
    /// Redelivers a retried message at once, whatever the retry delay.
    IgnoresRetryDelay,
    /// Loses what is published to a group while it has no connected member.
    ForgetsWhileEmpty,
    /// Gives one message in 100 the CloudEvent id of the message before it.
    RepeatsEnvelopeIds,
    /// Reports partition versions the topic never had (1, 3, 5 for 1, 2, 3).
    PhantomVersions,
    /// Hands a partial batch over halfway through maxAwaitDurationMs.
    HandsPartialBatchesEarly,
    /// Takes no notice of partition notifications the client rejects.
    IgnoresRejectedPartitionUpdates,
    /// Dead-letters a raw payload without its content type.
    LosesDeadLetterContentType,
    /// Skips 1 acknowledgement in 100: the message comes back a moment later.
    SkipsAcks,
    /// Wraps an app-supplied CloudEvent in a second envelope.
    WrapsAppEvents,
    /// Claims native delayed delivery and counts receiverDelay from when the member
    /// first received the message, not from its publish time.
    DelaysFromReceipt,
    /// Claims native delayed delivery and serves messages strictly in order: a
    /// delayed message at the head holds back everything behind it.
    BlocksBehindDelayed,
    /// Claims native delayed delivery with a 1 s lease, and hands a message delayed
    /// longer out again when the lease expires.
    DelaysCappedAtLease,
    /// Claims native delayed delivery and delivers each delayed message two delay
    /// precisions after its due time.
    DeliversLate,
    /// A retry in one group also hands a copy to every other group of the topic when
    /// its retry delay ends.
    LeaksRetriesToOtherGroups,
    /// Takes messages off the queue, then works on them for 20 ms before handing
    /// them out: a receive dropped in that time strands them (not cancel-safe).
    StrandsDroppedReceives,
    /// Stores a topic name's `:` as `_` (a broker that cannot spell `:`): `a:b` and
    /// `a_b` become one topic.
    FoldsColons,
    /// Stores a group name in lower case (a broker whose group names ignore case):
    /// `g-a` and `g-A` become one group, sharing its deliveries.
    FoldsGroupCase,
    /// Delivers nothing to one group name in nine (those ending in `ga`, as
    /// `groups.distinct-names` spells `<base>a`), as tansu 0.6.0 does to a group whose
    /// first member left before it was assigned: its members read an empty topic.
    StarvesOneGroup,
    /// Stores metadata keys in lower case (a broker whose header names ignore case):
    /// of `app-Case` and `app-case` one value survives, under the lower-case key.
    FoldsMetadataKeyCase,
    /// Delivers 1 message in 100 without its metadata (its payload intact).
    StripsMetadata,
    /// Delivers 1 message in 100 with the metadata of the message it received before.
    BorrowsMetadata,
    /// Counts a message's attempts across groups: a retry in one group raises the
    /// attempt another group sees (its first delivery there comes as attempt 2).
    CountsAttemptsAcrossGroups,
    /// No violation: declares a 1 s lease, after which the broker takes back what a
    /// member has not settled, and cannot extend it (`extend_lease` refuses): the
    /// runtime must defer delayed messages rather than hold them past the lease.
    LeaseWithoutExtension,
    /// Declares a 1 s lease and answers `extend_lease` with `Ok` without extending
    /// anything: a message held past the lease is handed out again.
    PretendsToExtendLease,
    /// Accepts a seek to an id without an owner topic (and moves nothing).
    AcceptsForeignSeeks,
    /// Seeking to earliest or latest moves only the first topic.
    SeeksOneTopic,
    /// `ack_many` acknowledges the ids it can before refusing a foreign one.
    AcksManyPartially,
    /// A watcher over several topics carries only the topic that changed.
    WatchesChangedTopicOnly,
    /// Gives a dead-lettered copy a CloudEvent id of its own.
    RenamesDeadLetters,
    /// A cumulative ack acknowledges up to the position on every subscribed topic.
    AcksCumulativeEverywhere,
    /// Every read rechecks what the group read before (as a queue table read from its
    /// start would): a read costs 150 ns per message already read.
    RescansWhatItRead,
    /// No violation: declares exactly-once, which the in-memory component keeps
    /// (for the test that exactly-once is judged by what is declared).
    DeclaresExactlyOnce,
    /// A correct component that declares no maximum message size (it has none).
    DeclaresNoSizeLimit,
    /// A correct component that delays on the producer side only.
    DeclaresNoReceiverDelay,
    /// A correct work queue: one group per topic.
    DeclaresNoFanOut,
}

/// Groups and their connected members, for [`Fault::ForgetsWhileEmpty`].
#[derive(Default)]
struct Membership {
    /// group -> (members connected, when it last became empty)
    groups: HashMap<String, (usize, Option<SystemTime>)>,
}

/// The in-memory component with `fault`.
pub struct Faulty {
    inner: MemoryComponent,
    fault: Fault,
    /// For [`Fault::LeaksRetriesToOtherGroups`]: retried messages, due to leak.
    leaks: Arc<Mutex<Vec<Leak>>>,
    /// For [`Fault::CountsAttemptsAcrossGroups`]: retries per message, per group.
    retries: Arc<Mutex<RetriesByGroup>>,
    consumers: AtomicU64,
    published: AtomicU64,
    last_envelope_id: Mutex<Option<String>>,
    acks: Arc<AtomicU64>,
    membership: Arc<Mutex<Membership>>,
}

impl Faulty {
    pub fn shared(inner: MemoryComponent, fault: Fault) -> Arc<dyn Component> {
        Arc::new(Faulty {
            inner,
            fault,
            leaks: Arc::default(),
            retries: Arc::default(),
            consumers: AtomicU64::new(0),
            published: AtomicU64::new(0),
            last_envelope_id: Mutex::new(None),
            acks: Arc::new(AtomicU64::new(0)),
            membership: Arc::new(Mutex::new(Membership::default())),
        })
    }

    /// For [`Fault::RefusesExactMaximum`]: refuses a payload of exactly the maximum.
    fn refuse_exact_maximum(&self, message: &OutgoingMessage) -> Result<()> {
        let max = self.inner.capabilities().max_message_bytes;
        if self.fault == Fault::RefusesExactMaximum && Some(message.payload.len()) == max {
            return Err(pubsub_components::PubSubError::InvalidRequest(format!(
                "message of {} bytes reaches the maximum message size",
                message.payload.len()
            )));
        }
        Ok(())
    }

    fn corrupt(&self, mut message: OutgoingMessage) -> OutgoingMessage {
        match self.fault {
            Fault::FoldsColons => message.topic = message.topic.replace(':', "_"),
            Fault::FoldsMetadataKeyCase => {
                message.metadata = std::mem::take(&mut message.metadata)
                    .into_iter()
                    .map(|(key, value)| (key.to_lowercase(), value))
                    .collect();
            }
            Fault::MisroutesKeys => {
                message.partition_key = Some(uuid_like(&self.consumers));
            }
            Fault::DropsTraceContext => {
                // Wherever it travels: the header, or the envelope's attribute (a
                // component that rewrites envelopes with the attributes it knows).
                message
                    .metadata
                    .remove(pubsub_components::runtime::controls::HEADER_TRACEPARENT);
                if enveloped(&message) {
                    if let Ok(mut envelope) =
                        serde_json::from_slice::<serde_json::Value>(&message.payload)
                    {
                        if let Some(attributes) = envelope.as_object_mut() {
                            attributes.remove("traceparent");
                        }
                        message.payload = serde_json::to_vec(&envelope).unwrap();
                    }
                }
            }
            Fault::StripsEnvelope if enveloped(&message) => {
                message.content_type = None;
            }
            Fault::StripsRawMarker => {
                message
                    .metadata
                    .remove(pubsub_components::runtime::controls::HEADER_RAW);
            }
            Fault::TruncatesLargePayloads => message.payload.truncate(4096),
            Fault::TruncatesAtMaximum => {
                let max = self.inner.capabilities().max_message_bytes;
                if Some(message.payload.len()) == max {
                    message.payload.pop();
                }
            }
            Fault::DelaysFromReceipt
            | Fault::BlocksBehindDelayed
            | Fault::DelaysCappedAtLease
            | Fault::DeliversLate => {
                if let Some(due) = message.deliver_at {
                    message.metadata.insert(
                        DUE_HEADER.into(),
                        pubsub_components::component::millis_since_epoch(due).to_string(),
                    );
                }
            }
            Fault::HalvesTtl => {
                if let Some(expires) = message.expires_at {
                    message.metadata.insert(
                        EXPIRES_HEADER.into(),
                        pubsub_components::component::millis_since_epoch(expires).to_string(),
                    );
                }
            }
            Fault::RepeatsEnvelopeIds if enveloped(&message) => {
                let n = self.published.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut envelope) =
                    serde_json::from_slice::<serde_json::Value>(&message.payload)
                {
                    let own = envelope["id"].as_str().map(str::to_string);
                    let mut last = self.last_envelope_id.lock().unwrap();
                    if n % 100 == 99 {
                        if let Some(previous) = last.clone() {
                            envelope["id"] = serde_json::Value::String(previous);
                            message.payload = serde_json::to_vec(&envelope).unwrap();
                        }
                    }
                    *last = own;
                }
            }
            Fault::LosesDeadLetterContentType
                if message.metadata.contains_key("deadLetterReason") && !enveloped(&message) =>
            {
                message.content_type = None;
            }
            Fault::RenamesDeadLetters if message.metadata.contains_key("deadLetterReason") => {
                if let Ok(mut envelope) =
                    serde_json::from_slice::<serde_json::Value>(&message.payload)
                {
                    envelope["id"] = serde_json::Value::String("renamed-dead-letter".into());
                    message.payload = serde_json::to_vec(&envelope).unwrap();
                }
            }
            Fault::WrapsAppEvents => {
                let app_event = serde_json::from_slice::<serde_json::Value>(&message.payload)
                    .ok()
                    .filter(|e| e["type"] != "com.dapr.event.sent" && e["specversion"] == "1.0");
                if app_event.is_some() {
                    let fields = pubsub_components::runtime::envelope::EnvelopeFields {
                        id: "wrapped-again",
                        source: "faulty",
                        topic: &message.topic,
                        pubsub_name: "faulty",
                        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        content_type: Some("application/cloudevents+json"),
                        expiration: None,
                        time: "2026-01-01T00:00:00Z",
                    };
                    message.payload =
                        pubsub_components::runtime::envelope::encode(&fields, &message.payload)
                            .unwrap();
                }
            }
            _ => {}
        }
        message
    }
}

#[async_trait]
impl Component for Faulty {
    fn kind(&self) -> &str {
        "faulty"
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        // In-process: short bounds keep the suite's own tests quick.
        caps.delivery_bound = Duration::from_secs(2);
        caps.redelivery_bound = Duration::from_secs(1);
        match self.fault {
            Fault::Duplicates => caps.delivery = DeliveryGuarantee::ExactlyOnce,
            Fault::DeliversEarly => {
                caps.delayed_delivery = Support::Native;
                caps.receiver_delay = Support::Native;
            }
            Fault::IgnoresTtl => caps.ttl = Support::Native,
            Fault::NeverDeadLetters => caps.dead_letter = Support::Native,
            Fault::HidesPartitions => caps.partitions = None,
            Fault::HalvesTtl => caps.ttl = Support::Native,
            Fault::DelaysFromReceipt => caps.receiver_delay = Support::Native,
            Fault::BlocksBehindDelayed | Fault::DeliversLate => {
                caps.delayed_delivery = Support::Native
            }
            Fault::LeaseWithoutExtension | Fault::PretendsToExtendLease => {
                caps.lease = FAULTY_LEASE
            }
            Fault::DelaysCappedAtLease => {
                caps.delayed_delivery = Support::Native;
                caps.lease = Duration::from_secs(1);
            }
            Fault::DeclaresExactlyOnce => caps.delivery = DeliveryGuarantee::ExactlyOnce,
            Fault::DeclaresNoSizeLimit => caps.max_message_bytes = None,
            Fault::DeclaresNoReceiverDelay => caps.receiver_delay = Support::Unsupported,
            Fault::DeclaresNoFanOut => caps.fan_out = false,
            _ => {}
        }
        caps
    }

    async fn broker_version(&self) -> Result<String> {
        Ok(format!("faulty ({:?})", self.fault))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.refuse_exact_maximum(&message)?;
        self.inner.publish(self.corrupt(message)).await
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        if self.fault == Fault::RefusesExactMaximum {
            let mut results = Vec::new();
            for message in messages {
                results.push(match self.refuse_exact_maximum(&message) {
                    Ok(()) => self.inner.publish(message).await,
                    Err(e) => Err(e),
                });
            }
            return Ok(results);
        }
        let messages: Vec<OutgoingMessage> =
            messages.into_iter().map(|m| self.corrupt(m)).collect();
        let topic = messages
            .first()
            .map(|m| m.topic.clone())
            .unwrap_or_default();
        let results = self.inner.publish_batch(messages).await?;
        if self.fault == Fault::LiesInBulkStatuses {
            return Ok(results
                .into_iter()
                .map(|r| r.or_else(|_| Ok(MessageId::new(topic.clone(), Some(0), u64::MAX))))
                .collect());
        }
        Ok(results)
    }

    async fn consumer(&self, mut spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let n = self.consumers.fetch_add(1, Ordering::Relaxed);
        match self.fault {
            Fault::IgnoresGroups => spec.group = format!("{}-{n}", spec.group),
            Fault::MergesGroups => spec.group = "everyone".into(),
            Fault::FoldsGroupCase => spec.group = spec.group.to_lowercase(),
            Fault::StarvesOneGroup if spec.group.ends_with("ga") => {
                if let TopicSelector::Single(topic) = &spec.topics {
                    spec.topics = TopicSelector::Single(format!("{topic}-nothing"));
                }
            }
            Fault::FoldsColons => {
                if let TopicSelector::Single(topic) = &spec.topics {
                    spec.topics = TopicSelector::Single(topic.replace(':', "_"));
                }
            }
            _ => {}
        }
        let inner = self.inner.consumer(spec.clone()).await?;
        let opened_at = SystemTime::now();
        let forget_since = {
            let mut membership = self.membership.lock().unwrap();
            let entry = membership.groups.entry(spec.group.clone()).or_default();
            entry.0 += 1;
            if entry.0 == 1 {
                entry.1.take()
            } else {
                None
            }
        };
        Ok(Box::new(FaultyConsumer {
            inner,
            fault: self.fault,
            topics: spec.topics,
            group: spec.group,
            received: AtomicU64::new(0),
            held: Mutex::new(HashSet::new()),
            opened_at,
            forget_since,
            acks: self.acks.clone(),
            membership: self.membership.clone(),
            receiver_delay: spec.receiver_delay,
            first_seen: Mutex::new(HashMap::new()),
            blocked_until: Mutex::new(None),
            leaks: self.leaks.clone(),
            retries: self.retries.clone(),
            last_metadata: Mutex::new(None),
            retried: Mutex::new(HashMap::new()),
            leaked: Mutex::new(HashSet::new()),
            handed_at: Mutex::new(HashMap::new()),
        }))
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.inner.create_topic(topic, partitions).await
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        if self.fault == Fault::IgnoresPartitionUpdates {
            return Ok(());
        }
        self.inner.update_partitions(topic, partitions).await
    }

    async fn watch_partitions_of(
        &self,
        topics: &[String],
    ) -> Result<pubsub_components::PartitionsWatch> {
        let mut merged = self.inner.watch_partitions_of(topics).await?;
        if self.fault != Fault::WatchesChangedTopicOnly {
            return Ok(merged);
        }
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(mut state) = merged.next_within(Duration::from_secs(3600)).await {
                let changed = state.changed.clone();
                state.topics.retain(|topic, _| *topic == changed);
                if sender.send(state).is_err() {
                    break;
                }
            }
        });
        Ok(pubsub_components::PartitionsWatch::new(receiver))
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        let watch = self.inner.watch_partitions(topic).await?;
        match self.fault {
            Fault::PhantomVersions => {
                let (mut updates, rejections) = watch.into_parts();
                let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
                let (phantom_rejections, mut rejected) =
                    tokio::sync::mpsc::unbounded_channel::<pubsub_components::PartitionUpdate>();
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            update = updates.recv() => {
                                let Some(mut update) = update else { break };
                                update.version = update.version * 2 - 1;
                                if sender.send(update).is_err() {
                                    break;
                                }
                            }
                            Some(mut update) = rejected.recv() => {
                                update.version = update.version.div_ceil(2);
                                if let Some(rejections) = &rejections {
                                    let _ = rejections.send(update);
                                }
                            }
                        }
                    }
                });
                Ok(PartitionWatch::with_rejections(
                    receiver,
                    phantom_rejections,
                ))
            }
            // Takes no notice of rejected notifications: the client never gets the
            // state it could not apply again.
            Fault::IgnoresRejectedPartitionUpdates => {
                let (updates, _rejections) = watch.into_parts();
                Ok(PartitionWatch::new(updates))
            }
            _ => Ok(watch),
        }
    }
}

struct FaultyConsumer {
    inner: Box<dyn Consumer>,
    fault: Fault,
    topics: TopicSelector,
    received: AtomicU64,
    /// Ids handed out and not yet settled.
    held: Mutex<HashSet<MessageId>>,
    opened_at: SystemTime,
    group: String,
    /// For [`Fault::ForgetsWhileEmpty`]: the group was empty from then until this
    /// consumer opened.
    forget_since: Option<SystemTime>,
    acks: Arc<AtomicU64>,
    membership: Arc<Mutex<Membership>>,
    receiver_delay: Option<Duration>,
    /// When each message was first received, for [`Fault::DelaysFromReceipt`].
    first_seen: Mutex<HashMap<MessageId, SystemTime>>,
    /// For [`Fault::BlocksBehindDelayed`]: nothing is served before this time (the
    /// due time of the delayed message that reached the head of the line).
    blocked_until: Mutex<Option<SystemTime>>,
    /// For [`Fault::LeaksRetriesToOtherGroups`]: the component's leaks, what this
    /// member handed out (to copy when retried), and the ids of leaked copies it
    /// handed out (settled here, they exist in no queue).
    leaks: Arc<Mutex<Vec<Leak>>>,
    /// For [`Fault::CountsAttemptsAcrossGroups`]: the component's retry counts.
    retries: Arc<Mutex<RetriesByGroup>>,
    /// For [`Fault::BorrowsMetadata`]: the metadata of the last message handed out.
    last_metadata: Mutex<Option<pubsub_components::Metadata>>,
    retried: Mutex<HashMap<MessageId, ReceivedMessage>>,
    leaked: Mutex<HashSet<MessageId>>,
    /// For the lease faults: when each unsettled message was handed out.
    handed_at: Mutex<HashMap<MessageId, Instant>>,
}

/// Retries of each message, by the group that answered them.
type RetriesByGroup = HashMap<MessageId, HashMap<String, u32>>;

/// The lease the lease faults declare.
const FAULTY_LEASE: Duration = Duration::from_secs(1);

/// A retried message leaking to the other groups of its topic once `due`.
struct Leak {
    due: SystemTime,
    from_group: String,
    message: ReceivedMessage,
    taken_by: HashSet<String>,
}

impl FaultyConsumer {
    /// How late [`Fault::DeliversLate`] delivers: two delay precisions.
    fn late_by(&self) -> Duration {
        MemoryComponent::default().capabilities().delay_precision * 2
    }

    /// Settles a leaked copy here (it is in no queue); false for any other id.
    fn settles_leaked(&self, id: &MessageId) -> bool {
        self.leaked.lock().unwrap().remove(id)
    }

    async fn distort(&self, mut messages: Vec<ReceivedMessage>) -> Result<Vec<ReceivedMessage>> {
        match self.fault {
            Fault::Drops => {
                let mut kept = Vec::new();
                for message in messages {
                    if self.received.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            Fault::Duplicates => {
                messages = messages.into_iter().flat_map(|m| [m.clone(), m]).collect();
            }
            Fault::Reorders => messages.reverse(),
            Fault::ReordersNonAsciiKeys => {
                let odd: Vec<usize> = (0..messages.len())
                    .filter(|&i| {
                        messages[i]
                            .partition_key
                            .as_deref()
                            .is_some_and(|key| !key.is_ascii())
                    })
                    .collect();
                let reversed: Vec<ReceivedMessage> =
                    odd.iter().rev().map(|&i| messages[i].clone()).collect();
                for (slot, message) in odd.into_iter().zip(reversed) {
                    messages[slot] = message;
                }
            }
            Fault::ForgetsCreatedGroups => {
                let mut kept = Vec::new();
                for message in messages {
                    if message.publish_time < self.opened_at {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            Fault::LosesOwnerTopic => {
                for message in &mut messages {
                    message.id.topic = None;
                }
            }
            Fault::ForgetsWhileEmpty => {
                let mut kept = Vec::new();
                for message in messages {
                    let forgotten = self.forget_since.is_some_and(|since| {
                        message.publish_time >= since && message.publish_time < self.opened_at
                    });
                    if forgotten {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            Fault::LosesEmptyValuesAfterWait => {
                let now = SystemTime::now();
                for message in &mut messages {
                    let waited = now.duration_since(message.publish_time).unwrap_or_default();
                    if waited > Duration::from_secs(2) {
                        message.metadata.retain(|_, value| !value.is_empty());
                    }
                }
            }
            Fault::StripsMetadata => {
                for message in &mut messages {
                    if self.received.fetch_add(1, Ordering::Relaxed) % 100 == 37 {
                        message.metadata.clear();
                    }
                }
            }
            Fault::BorrowsMetadata => {
                let mut last = self.last_metadata.lock().unwrap();
                for message in &mut messages {
                    let own = message.metadata.clone();
                    if self.received.fetch_add(1, Ordering::Relaxed) % 100 == 37 {
                        if let Some(previous) = last.clone() {
                            message.metadata = previous;
                        }
                    }
                    *last = Some(own);
                }
            }
            Fault::CountsAttemptsAcrossGroups => {
                let retries = self.retries.lock().unwrap();
                for message in &mut messages {
                    let elsewhere: u32 = retries
                        .get(&message.id)
                        .map(|by_group| {
                            by_group
                                .iter()
                                .filter(|(group, _)| **group != self.group)
                                .map(|(_, n)| n)
                                .sum()
                        })
                        .unwrap_or(0);
                    message.attempt += elsewhere;
                }
            }
            Fault::LeaksRetriesToOtherGroups => {
                let now = SystemTime::now();
                {
                    let mut retried = self.retried.lock().unwrap();
                    for message in &messages {
                        retried.insert(message.id.clone(), message.clone());
                    }
                }
                let mut leaks = self.leaks.lock().unwrap();
                for leak in leaks.iter_mut() {
                    if leak.due <= now
                        && leak.from_group != self.group
                        && leak.taken_by.insert(self.group.clone())
                    {
                        let mut copy = leak.message.clone();
                        copy.id.position +=
                            1_000_000_000 + self.received.fetch_add(1, Ordering::Relaxed);
                        self.leaked.lock().unwrap().insert(copy.id.clone());
                        messages.push(copy);
                    }
                }
            }
            Fault::DelaysFromReceipt
            | Fault::BlocksBehindDelayed
            | Fault::DelaysCappedAtLease
            | Fault::DeliversLate => {
                let now = SystemTime::now();
                let mut kept = Vec::new();
                // Strictly in line: once a delayed message reached the head, what
                // comes after waits until it is due.
                let mut blocked = self
                    .blocked_until
                    .lock()
                    .unwrap()
                    .is_some_and(|until| until > now);
                for message in messages {
                    let mut due = message
                        .metadata
                        .get(DUE_HEADER)
                        .and_then(|ms| ms.parse::<u64>().ok())
                        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
                    if let Some(delay) = self.receiver_delay {
                        let from = match self.fault {
                            Fault::DelaysFromReceipt => *self
                                .first_seen
                                .lock()
                                .unwrap()
                                .entry(message.id.clone())
                                .or_insert(now),
                            _ => message.publish_time,
                        };
                        due = Some(due.map_or(from + delay, |d| d.max(from + delay)));
                    }
                    if self.fault == Fault::DeliversLate {
                        due = due.map(|d| d + self.late_by());
                    }
                    let wait = due.and_then(|d| d.duration_since(now).ok());
                    match (self.fault, wait) {
                        (Fault::BlocksBehindDelayed, _) if blocked => {
                            self.inner
                                .nack(&message.id, Duration::from_millis(50))
                                .await?;
                        }
                        (Fault::BlocksBehindDelayed, Some(wait)) => {
                            blocked = true;
                            {
                                let mut until = self.blocked_until.lock().unwrap();
                                *until = Some(until.map_or(now + wait, |u| u.max(now + wait)));
                            }
                            self.inner
                                .nack(&message.id, wait.min(Duration::from_millis(50)))
                                .await?;
                        }
                        // Held for one lease; back after it, it goes out as it is.
                        (Fault::DelaysCappedAtLease, Some(_)) if message.attempt > 1 => {
                            kept.push(message)
                        }
                        (Fault::DelaysCappedAtLease, Some(wait)) => {
                            self.inner
                                .nack(&message.id, wait.min(Duration::from_secs(1)))
                                .await?;
                        }
                        (_, Some(wait)) => self.inner.nack(&message.id, wait).await?,
                        (_, None) => kept.push(message),
                    }
                }
                messages = kept;
            }
            Fault::HalvesTtl => {
                let now = SystemTime::now();
                let mut kept = Vec::new();
                for message in messages {
                    let expires = message
                        .metadata
                        .get(EXPIRES_HEADER)
                        .and_then(|ms| ms.parse::<u64>().ok())
                        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
                    let half_life = expires.map(|at| {
                        let life = at.duration_since(message.publish_time).unwrap_or_default();
                        message.publish_time + life / 2
                    });
                    if half_life.is_some_and(|at| at <= now) {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            _ => {}
        }
        let mut held = self.held.lock().unwrap();
        held.extend(messages.iter().map(|m| m.id.clone()));
        if matches!(
            self.fault,
            Fault::LeaseWithoutExtension | Fault::PretendsToExtendLease
        ) {
            let mut handed = self.handed_at.lock().unwrap();
            for message in &messages {
                handed.insert(message.id.clone(), Instant::now());
            }
        }
        Ok(messages)
    }

    /// The broker's side of a lease: what a member has held unsettled for longer
    /// than the lease goes back to the group.
    async fn expire_leases(&self) -> Result<()> {
        let expired: Vec<MessageId> = {
            let mut handed = self.handed_at.lock().unwrap();
            let expired: Vec<MessageId> = handed
                .iter()
                .filter(|(_, at)| at.elapsed() >= FAULTY_LEASE)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                handed.remove(id);
            }
            expired
        };
        for id in expired {
            self.inner.nack(&id, Duration::ZERO).await?;
        }
        Ok(())
    }

    fn settled(&self, id: &MessageId) {
        self.held.lock().unwrap().remove(id);
        self.handed_at.lock().unwrap().remove(id);
    }
}

#[async_trait]
impl Consumer for FaultyConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.expire_leases().await?;
        let messages = self.inner.receive(max, wait).await?;
        if self.fault == Fault::StrandsDroppedReceives && !messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.fault == Fault::RescansWhatItRead && !messages.is_empty() {
            let read = self
                .received
                .fetch_add(messages.len() as u64, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_nanos(read * 150)).await;
        }
        self.distort(messages).await
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let batch = match self.fault {
            Fault::OverfillsBatches => self.inner.receive_batch(max + 3, max_await).await?,
            Fault::HoldsPartialBatches => {
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
            Fault::HandsPartialBatchesEarly => self.inner.receive_batch(max, max_await / 2).await?,
            Fault::CountsPutBackEntries => {
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
        self.settled(id);
        if self.settles_leaked(id) {
            return Ok(());
        }
        if self.fault == Fault::SkipsAcks && self.acks.fetch_add(1, Ordering::Relaxed) % 100 == 57 {
            // The ack is lost on the way; the broker hands the message out again.
            return self.inner.nack(id, Duration::from_millis(300)).await;
        }
        match (self.fault, &self.topics) {
            (Fault::AcksEveryTopic, TopicSelector::List(topics)) => {
                for topic in topics {
                    let _ = self
                        .inner
                        .ack(&MessageId {
                            topic: Some(topic.clone()),
                            ..id.clone()
                        })
                        .await;
                }
                Ok(())
            }
            (Fault::AcceptsForeignAcks, selector) => match &id.topic {
                Some(topic) if selector.matches(topic) => self.inner.ack(id).await,
                _ => Ok(()),
            },
            _ => self.inner.ack(id).await,
        }
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.settled(id);
        if self.settles_leaked(id) {
            return Ok(());
        }
        if self.fault == Fault::CountsAttemptsAcrossGroups {
            *self
                .retries
                .lock()
                .unwrap()
                .entry(id.clone())
                .or_default()
                .entry(self.group.clone())
                .or_insert(0) += 1;
        }
        if self.fault == Fault::LeaksRetriesToOtherGroups {
            if let Some(message) = self.retried.lock().unwrap().get(id).cloned() {
                self.leaks.lock().unwrap().push(Leak {
                    due: SystemTime::now() + delay,
                    from_group: self.group.clone(),
                    message,
                    taken_by: HashSet::new(),
                });
            }
        }
        match self.fault {
            Fault::NoRedelivery => self.inner.ack(id).await,
            Fault::IgnoresRetryDelay => self.inner.nack(id, Duration::ZERO).await,
            _ => self.inner.nack(id, delay).await,
        }
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        match self.fault {
            Fault::PretendsToExtendLease => Ok(()),
            _ => self.inner.extend_lease(ids).await,
        }
    }

    async fn reject(&self, id: &MessageId, _reason: &str) -> Result<()> {
        self.settled(id);
        self.inner.ack(id).await
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        if self.fault == Fault::AcksManyPartially {
            for id in ids {
                self.ack(id).await?;
            }
            return Ok(());
        }
        pubsub_components::component::ack_each(self, ids, &self.topics).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.inner.ack_cumulative(id).await?;
        if let (Fault::AcksCumulativeEverywhere, TopicSelector::List(topics)) =
            (self.fault, &self.topics)
        {
            for topic in topics {
                let _ = self
                    .inner
                    .ack_cumulative(&MessageId {
                        topic: Some(topic.clone()),
                        ..id.clone()
                    })
                    .await;
            }
        }
        Ok(())
    }

    async fn seek_all(&self, position: pubsub_components::StartPosition) -> Result<()> {
        if self.fault != Fault::SeeksOneTopic {
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
        if self.fault == Fault::AcceptsForeignSeeks && id.topic.is_none() {
            return Ok(());
        }
        self.inner.seek(id).await?;
        if self.fault == Fault::SeeksEverything {
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
        if self.fault == Fault::DuplicatesLastIds {
            return Ok(ids.into_iter().flat_map(|id| [id.clone(), id]).collect());
        }
        Ok(ids)
    }

    async fn close(&self) -> Result<()> {
        {
            let mut membership = self.membership.lock().unwrap();
            if let Some(entry) = membership.groups.get_mut(&self.group) {
                entry.0 = entry.0.saturating_sub(1);
                if entry.0 == 0 {
                    entry.1 = Some(SystemTime::now());
                }
            }
        }
        if self.fault == Fault::LosesUnackedOnLeave {
            let held: Vec<MessageId> = self.held.lock().unwrap().drain().collect();
            for id in held {
                let _ = self.inner.ack(&id).await;
            }
        }
        self.inner.close().await
    }
}

/// Where [`Fault::HalvesTtl`] keeps a message's expiry (ms since the epoch).
const EXPIRES_HEADER: &str = "x-faulty-expires-ms";
/// Where the delaying faults keep a message's due time (ms since the epoch).
const DUE_HEADER: &str = "x-faulty-due-ms";
/// True for a message the runtime put in a CloudEvents envelope (its content type says
/// so, and it was not sent `rawPayload`).
fn enveloped(message: &OutgoingMessage) -> bool {
    pubsub_components::runtime::envelope::is_cloudevents(message.content_type.as_deref())
        && !message
            .metadata
            .contains_key(pubsub_components::runtime::controls::HEADER_RAW)
}

/// A different key on every call.
fn uuid_like(counter: &AtomicU64) -> String {
    format!("misrouted-{}", counter.fetch_add(7919, Ordering::Relaxed))
}
