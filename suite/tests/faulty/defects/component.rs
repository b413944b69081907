//! The defective component: what it declares, and where each of its calls goes
//! wrong (the publish path in published.rs, the partitions in partitions.rs, each
//! consumer in consumer.rs).

use super::consumer::{FaultyConsumer, GroupMove, IdleGroups, Leak, RetriesByGroup, FAULTY_LEASE};
use super::{partitions, Defect};
use async_trait::async_trait;
use pubsub_components::memory::MemoryComponent;
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, DeliveryGuarantee, MessageId, OutgoingMessage,
    PartitionWatch, Result, Support, TopicSelector,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Groups and their connected members, for [`Defect::ForgetsWhileEmpty`].
#[derive(Default)]
pub(super) struct Membership {
    /// group -> (members connected, when it last became empty)
    pub(super) groups: HashMap<String, (usize, Option<SystemTime>)>,
    /// For [`Defect::StrandsHeldWhileOthersStay`]: group -> members that left holding
    /// messages, not closed yet.
    pub(super) stranded: HashMap<String, Vec<Arc<dyn Consumer>>>,
}

/// The delivery bound every faulty component declares.
pub(super) const FAULTY_DELIVERY_BOUND: Duration = Duration::from_secs(2);

/// The in-memory component with `defect`.
pub struct Faulty {
    pub(super) inner: MemoryComponent,
    pub(super) defect: Defect,
    /// For [`Defect::LeaksRetriesToOtherGroups`]: retried messages, due to leak.
    leaks: Arc<Mutex<Vec<Leak>>>,
    /// For [`Defect::CountsAttemptsAcrossGroups`]: retries per message, per group.
    retries: Arc<Mutex<RetriesByGroup>>,
    /// For [`Defect::SeeksEveryGroup`] and [`Defect::AcksCumulativelyForEveryGroup`]:
    /// the moves made, for the other groups to take.
    group_moves: Arc<Mutex<Vec<GroupMove>>>,
    /// For [`Defect::DroppedWatcherStopsOthers`]: by topic, its watchers.
    dropped_watchers: Mutex<HashMap<String, partitions::Siblings>>,
    pub(super) consumers: AtomicU64,
    pub(super) published: AtomicU64,
    pub(super) last_envelope_id: Mutex<Option<String>>,
    acks: Arc<AtomicU64>,
    membership: Arc<Mutex<Membership>>,
    idle: Arc<Mutex<IdleGroups>>,
}

impl Faulty {
    pub fn shared(inner: MemoryComponent, defect: Defect) -> Arc<dyn Component> {
        Arc::new(Faulty {
            inner,
            defect,
            leaks: Arc::default(),
            retries: Arc::default(),
            group_moves: Arc::default(),
            dropped_watchers: Mutex::default(),
            consumers: AtomicU64::new(0),
            published: AtomicU64::new(0),
            last_envelope_id: Mutex::new(None),
            acks: Arc::new(AtomicU64::new(0)),
            membership: Arc::new(Mutex::new(Membership::default())),
            idle: Arc::default(),
        })
    }
}

impl Faulty {
    /// Notes that `spec`'s group exists on its topic.
    fn note_group(&self, spec: &ConsumerSpec) {
        if let TopicSelector::Single(topic) = &spec.topics {
            let mut idle = self.idle.lock().unwrap();
            let groups = idle.groups.entry(topic.clone()).or_default();
            groups.insert(spec.group.clone());
        }
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
        caps.delivery_bound = FAULTY_DELIVERY_BOUND;
        caps.redelivery_bound = Duration::from_secs(1);
        match self.defect {
            Defect::Duplicates => caps.delivery = DeliveryGuarantee::ExactlyOnce,
            Defect::DeliversEarly => {
                caps.delayed_delivery = Support::Native;
                caps.receiver_delay = Support::Native;
            }
            Defect::IgnoresTtl => caps.ttl = Support::Native,
            Defect::NeverDeadLetters => caps.dead_letter = Support::Native,
            Defect::HidesPartitions => caps.partitions = None,
            Defect::HalvesTtl => caps.ttl = Support::Native,
            Defect::DelaysFromReceipt => caps.receiver_delay = Support::Native,
            Defect::BlocksBehindDelayed | Defect::DeliversLate | Defect::DropsDueTimesInBulk => {
                caps.delayed_delivery = Support::Native
            }
            Defect::LeaseWithoutExtension | Defect::PretendsToExtendLease => {
                caps.lease = FAULTY_LEASE
            }
            Defect::DelaysCappedAtLease => {
                caps.delayed_delivery = Support::Native;
                caps.lease = Duration::from_secs(1);
            }
            Defect::DeclaresExactlyOnce => caps.delivery = DeliveryGuarantee::ExactlyOnce,
            Defect::DeclaresNoSizeLimit => caps.max_message_bytes = None,
            Defect::DeclaresNoReceiverDelay => caps.receiver_delay = Support::Unsupported,
            Defect::DeclaresNoFanOut => caps.fan_out = false,
            _ => {}
        }
        caps
    }

    async fn broker_version(&self) -> Result<String> {
        Ok(format!("faulty ({:?})", self.defect))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.refuse_exact_maximum(&message)?;
        if let Some(original) = message.metadata.get("originalTopic") {
            let mut idle = self.idle.lock().unwrap();
            *idle
                .dead_letters_pending
                .entry(original.clone())
                .or_default() += 1;
        }
        self.inner.publish(self.corrupt(message)).await
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        if self.defect == Defect::RefusesExactMaximum {
            let mut results = Vec::new();
            for message in messages {
                results.push(match self.refuse_exact_maximum(&message) {
                    Ok(()) => self.inner.publish(message).await,
                    Err(e) => Err(e),
                });
            }
            return Ok(results);
        }
        let messages: Vec<OutgoingMessage> = messages
            .into_iter()
            .map(|mut m| {
                if self.defect == Defect::RoutesBulkEntriesInTurn {
                    m.partition_key = None;
                }
                if self.defect == Defect::DropsDueTimesInBulk {
                    m.deliver_at = None;
                }
                self.corrupt(m)
            })
            .collect();
        let topic = messages
            .first()
            .map(|m| m.topic.clone())
            .unwrap_or_default();
        let results = self.inner.publish_batch(messages).await?;
        if self.defect == Defect::LiesInBulkStatuses {
            return Ok(results
                .into_iter()
                .map(|r| r.or_else(|_| Ok(MessageId::new(topic.clone(), Some(0), u64::MAX))))
                .collect());
        }
        Ok(results)
    }

    async fn consumer(&self, mut spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let n = self.consumers.fetch_add(1, Ordering::Relaxed);
        match self.defect {
            Defect::IgnoresGroups => spec.group = format!("{}-{n}", spec.group),
            Defect::MergesGroups => spec.group = "everyone".into(),
            Defect::IgnoresStartLatest => spec.start = Default::default(),
            Defect::FoldsGroupCase => spec.group = spec.group.to_lowercase(),
            Defect::StarvesOneGroup if spec.group.ends_with("ga") => {
                if let TopicSelector::Single(topic) = &spec.topics {
                    spec.topics = TopicSelector::Single(format!("{topic}-nothing"));
                }
            }
            Defect::FoldsColons => {
                if let TopicSelector::Single(topic) = &spec.topics {
                    spec.topics = TopicSelector::Single(topic.replace(':', "_"));
                }
            }
            _ => {}
        }
        let mut partitions_at_open = HashMap::new();
        if let (Defect::ListsPartitionsAtOpen, TopicSelector::List(topics)) =
            (self.defect, &spec.topics)
        {
            for topic in topics {
                // A watcher first reports the current count; a topic without
                // partitions refuses one.
                if let Ok(mut watch) = self.inner.watch_partitions(topic).await {
                    if let Some(update) = watch.next().await {
                        partitions_at_open.insert(topic.clone(), update.partitions);
                    }
                }
            }
        }
        let inner: Arc<dyn Consumer> = Arc::from(self.inner.consumer(spec.clone()).await?);
        if self.defect == Defect::StartsLatestPerMember
            && spec.start == pubsub_components::StartPosition::Latest
        {
            inner
                .seek_all(pubsub_components::StartPosition::Latest)
                .await?;
        }
        self.note_group(&spec);
        let stranded = self.membership.lock().unwrap().stranded.remove(&spec.group);
        for leaver in stranded.into_iter().flatten() {
            leaver.close().await?;
        }
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
            defect: self.defect,
            topics: spec.topics,
            group: spec.group,
            received: AtomicU64::new(0),
            held: Mutex::new(HashSet::new()),
            opened_at,
            forget_since,
            acks: self.acks.clone(),
            membership: self.membership.clone(),
            idle: self.idle.clone(),
            receiver_delay: spec.receiver_delay,
            first_seen: Mutex::new(HashMap::new()),
            blocked_until: Mutex::new(None),
            leaks: self.leaks.clone(),
            retries: self.retries.clone(),
            last_metadata: Mutex::new(None),
            retried: Mutex::new(HashMap::new()),
            leaked: Mutex::new(HashSet::new()),
            handed_at: Mutex::new(HashMap::new()),
            own_attempts: Mutex::new(HashMap::new()),
            acked_ahead: Mutex::new(HashSet::new()),
            partitions_at_open,
            group_moves: self.group_moves.clone(),
        }))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.note_group(spec);
        let mut spec = spec.clone();
        if self.defect == Defect::IgnoresStartLatest {
            spec.start = Default::default();
        }
        self.inner.create_group(&spec).await
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        let result = self.inner.create_topic(topic, partitions).await;
        // A topic that exists refuses another count; these defects do not say so.
        let exists = result.is_err() && partitions > 0;
        match self.defect {
            Defect::GrowsOnCreate if exists => {
                self.inner.update_partitions(topic, partitions).await
            }
            Defect::IgnoresCountOnCreate if exists => Ok(()),
            _ => result,
        }
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        if self.defect == Defect::IgnoresPartitionUpdates {
            return Ok(());
        }
        self.inner.update_partitions(topic, partitions).await
    }

    async fn watch_partitions_of(
        &self,
        topics: &[String],
    ) -> Result<pubsub_components::PartitionsWatch> {
        let merged = self.inner.watch_partitions_of(topics).await?;
        Ok(match self.defect {
            Defect::WatchesChangedTopicOnly => partitions::changed_topic_only(merged),
            _ => merged,
        })
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        let watch = self.inner.watch_partitions(topic).await?;
        Ok(match self.defect {
            Defect::PhantomVersions => partitions::phantom_versions(watch),
            Defect::IgnoresRejectedPartitionUpdates => partitions::ignoring_rejections(watch),
            Defect::DroppedWatcherStopsOthers => {
                let dropped = self
                    .dropped_watchers
                    .lock()
                    .unwrap()
                    .entry(topic.to_string())
                    .or_default()
                    .clone();
                partitions::stopped_by_dropped_watchers(watch, dropped)
            }
            _ => watch,
        })
    }
}
