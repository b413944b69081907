//! The component: topics and groups mapped onto omniqueue queues, deliveries kept
//! until they are settled, and what the backends declare.

use crate::backend::{self, broker_error, Sender};
use crate::settings::Backend;
use async_trait::async_trait;
use omniqueue::{Delivery, DynConsumer};
use pubsub_components::component::{random_position, receive_limit, stable_hash, TopicSelector};
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, Metadata, OutgoingMessage,
    PubSubError, ReceivedMessage, Result, Support,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The shortest wait handed to omniqueue's receive_all: its Redis backend reads a
/// zero deadline as "wait for ever".
const MIN_RECEIVE_WAIT: Duration = Duration::from_millis(1);

/// omniqueue over one backend.
pub struct OmniqueueComponent {
    backend: Backend,
    /// The producer of each topic, built on first use; dropped after a failed send,
    /// so that the next send builds one again (a reconnect).
    senders: tokio::sync::Mutex<HashMap<String, Arc<Sender>>>,
    /// In memory: each topic's single consumer, shared by the members of its group.
    memory_consumers: tokio::sync::Mutex<HashMap<String, Shared>>,
    attempts: Attempts,
    positions: Arc<AtomicU64>,
}

/// A consumer that several members share.
type Shared = Arc<tokio::sync::Mutex<Option<DynConsumer>>>;

impl OmniqueueComponent {
    /// Checks that the backend answers and returns the component.
    pub async fn connect(backend: Backend) -> Result<Self> {
        let component = OmniqueueComponent {
            backend,
            senders: Default::default(),
            memory_consumers: Default::default(),
            attempts: Attempts::default(),
            positions: Arc::new(AtomicU64::new(random_position() >> 16)),
        };
        component.broker_version().await?;
        Ok(component)
    }

    async fn sender(&self, topic: &str) -> Result<Arc<Sender>> {
        let mut senders = self.senders.lock().await;
        if let Some(sender) = senders.get(topic) {
            return Ok(sender.clone());
        }
        let sender = match &self.backend {
            Backend::Redis(settings) => backend::redis_streams::sender(settings, topic).await?,
            Backend::Rabbit(settings) => backend::rabbitmq::sender(settings, topic).await?,
            Backend::Memory => {
                let (sender, consumer) = backend::memory::pair().await?;
                self.memory_consumers.lock().await.insert(
                    topic.to_string(),
                    Arc::new(tokio::sync::Mutex::new(Some(consumer))),
                );
                sender
            }
        };
        let sender = Arc::new(sender);
        senders.insert(topic.to_string(), sender.clone());
        Ok(sender)
    }

    /// Forgets a topic's producer after a failed send (not in memory: the channel
    /// is the queue).
    async fn forget_sender(&self, topic: &str) {
        if !matches!(self.backend, Backend::Memory) {
            self.senders.lock().await.remove(topic);
        }
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<()> {
        let sender = self.sender(&message.topic).await?;
        let delay = message
            .deliver_at
            .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
        let sent = match delay {
            Some(delay) if !delay.is_zero() => sender.send_delayed(&message.payload, delay).await,
            _ => sender.send(&message.payload).await,
        };
        if sent.is_err() {
            self.forget_sender(&message.topic).await;
        }
        sent.map_err(broker_error("sending through omniqueue"))
    }

    fn single_topic(spec: &ConsumerSpec) -> Result<String> {
        match &spec.topics {
            TopicSelector::Single(topic) => Ok(topic.clone()),
            other => Err(PubSubError::Unsupported {
                component: "omniqueue".into(),
                feature: format!("multi-topic consumers ({})", other.describe()),
            }),
        }
    }
}

#[async_trait]
impl Component for OmniqueueComponent {
    fn kind(&self) -> &str {
        match self.backend {
            Backend::Redis(_) => "omniqueue-redis",
            Backend::Rabbit(_) => "omniqueue-rabbitmq",
            Backend::Memory => "omniqueue-memory",
        }
    }

    fn capabilities(&self) -> Capabilities {
        // What omniqueue 0.3 offers: one queue per producer and consumer, bytes only
        // (no headers), scheduled sends on Redis and in memory (RabbitMQ's needs the
        // delayed-message plugin), a batch receive (receive_all), no batch send of its
        // own beyond a loop.
        let (delayed, fan_out, lease, durable, slow) = match &self.backend {
            Backend::Redis(s) => (Support::Native, true, s.ack_deadline, true, true),
            Backend::Rabbit(_) => (Support::Emulated, true, Duration::ZERO, true, false),
            Backend::Memory => (Support::Native, false, Duration::ZERO, false, false),
        };
        Capabilities {
            bulk_publish: Support::Emulated,
            // receive_all(max, deadline) is omniqueue's batch receive.
            bulk_subscribe: Support::Native,
            delayed_delivery: delayed,
            multi_topic: false,
            fan_out,
            headers: false,
            seek: false,
            delivery_bound: Duration::from_secs(1),
            redelivery_bound: Duration::from_secs(1),
            delay_precision: Duration::from_secs(1),
            durable,
            lease,
            redelivers_slow_handlers: slow,
            // omniqueue's Redis consumer cannot hand back what it read: another
            // member reclaims it once ack_deadline_ms (the lease) has passed.
            returns_on_close: !matches!(self.backend, Backend::Redis(_)),
            ..Capabilities::default()
        }
    }

    async fn broker_version(&self) -> Result<String> {
        let broker = match &self.backend {
            Backend::Redis(settings) => backend::redis_streams::version(settings).await?,
            Backend::Rabbit(settings) => backend::rabbitmq::version(settings).await?,
            Backend::Memory => "in process".to_string(),
        };
        Ok(format!("{} ({}) on {broker}", crate::ADAPTS, self.kind()))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.send(&message).await?;
        Ok(MessageId::new(
            message.topic,
            None,
            self.positions.fetch_add(1, Ordering::Relaxed),
        ))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        let topic = Self::single_topic(spec)?;
        match &self.backend {
            Backend::Redis(settings) => {
                backend::redis_streams::create_group(settings, &topic, &spec.group, spec.start)
                    .await
            }
            Backend::Rabbit(settings) => {
                backend::rabbitmq::declare(settings, &topic, Some(&spec.group)).await
            }
            Backend::Memory => self.sender(&topic).await.map(|_| ()),
        }
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let topic = Self::single_topic(&spec)?;
        self.create_group(&spec).await?;
        let member = format!("member-{}", random_position() % 1_000_000_000);
        let source = match &self.backend {
            Backend::Redis(settings) => Source::Own {
                backend: self.backend.clone(),
                consumer: tokio::sync::Mutex::new(Some(
                    backend::redis_streams::consumer(settings, &topic, &spec.group, &member)
                        .await?,
                )),
            },
            Backend::Rabbit(settings) => Source::Own {
                backend: self.backend.clone(),
                consumer: tokio::sync::Mutex::new(Some(
                    backend::rabbitmq::consumer(settings, &topic, &spec.group, &member).await?,
                )),
            },
            Backend::Memory => {
                self.sender(&topic).await?;
                let shared = self
                    .memory_consumers
                    .lock()
                    .await
                    .get(&topic)
                    .cloned()
                    .expect("a topic's channel is made with its sender");
                Source::Shared(shared)
            }
        };
        Ok(Box::new(OmniqueueConsumer {
            topic,
            group: spec.group,
            member,
            source,
            closed: AtomicBool::new(false),
            pending: Mutex::new(HashMap::new()),
            attempts: self.attempts.clone(),
            positions: self.positions.clone(),
        }))
    }
}

/// Deliveries counted per group and payload: omniqueue does not tell how often a
/// message was delivered, and the runtime needs it (maxDeliveries). The payload
/// identifies a message (the runtime's frame carries a unique traceparent). The
/// count lives in this process: a restarted component counts again from 1.
#[derive(Clone, Default)]
struct Attempts(Arc<Mutex<HashMap<AttemptKey, u32>>>);

/// A message in a group: topic, group and the payload's hash.
type AttemptKey = (String, String, u64);

impl Attempts {
    fn key(topic: &str, group: &str, payload: &[u8]) -> AttemptKey {
        (topic.to_string(), group.to_string(), stable_hash(payload))
    }

    fn delivered(&self, key: &AttemptKey) -> u32 {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts.entry(key.clone()).or_insert(0);
        *count += 1;
        *count
    }

    fn settled(&self, key: &AttemptKey) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Where a member's deliveries come from.
enum Source {
    /// Its own omniqueue consumer (Redis, RabbitMQ); rebuilt after an error.
    Own {
        backend: Backend,
        consumer: tokio::sync::Mutex<Option<DynConsumer>>,
    },
    /// The topic's one in-memory consumer.
    Shared(Shared),
}

/// A delivery not yet settled.
struct Pending {
    delivery: Delivery,
    key: AttemptKey,
}

/// A member of a group.
struct OmniqueueConsumer {
    topic: String,
    group: String,
    member: String,
    source: Source,
    closed: AtomicBool,
    pending: Mutex<HashMap<u64, Pending>>,
    attempts: Attempts,
    positions: Arc<AtomicU64>,
}

impl Drop for OmniqueueConsumer {
    /// A member dropped without a close hands back what it held, as a close does
    /// (omniqueue's in-memory queue would keep an unsettled delivery for ever).
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let unsettled: Vec<Pending> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, p)| p)
            .collect();
        if let (false, Ok(runtime)) = (unsettled.is_empty(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                for Pending { delivery, .. } in unsettled {
                    let _ = delivery.nack().await;
                }
            });
        }
    }
}

impl OmniqueueConsumer {
    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(PubSubError::Closed(format!(
                "the consumer of {} in group {} is closed",
                self.topic, self.group
            )));
        }
        Ok(())
    }

    async fn receive_from(
        &self,
        slot: &tokio::sync::Mutex<Option<DynConsumer>>,
        rebuild: Option<&Backend>,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut slot = slot.lock().await;
        if slot.is_none() {
            if let Some(backend) = rebuild {
                *slot = Some(self.build(backend).await?);
            }
        }
        let Some(consumer) = slot.as_mut() else {
            return Err(PubSubError::Closed(format!(
                "the consumer of {} is closed",
                self.topic
            )));
        };
        match consumer.receive_all(max, wait).await {
            Ok(deliveries) => Ok(deliveries),
            Err(e) => {
                if rebuild.is_some() {
                    *slot = None;
                }
                Err(broker_error("receiving through omniqueue")(e))
            }
        }
    }

    async fn build(&self, backend: &Backend) -> Result<DynConsumer> {
        match backend {
            Backend::Redis(s) => {
                backend::redis_streams::consumer(s, &self.topic, &self.group, &self.member).await
            }
            Backend::Rabbit(s) => {
                backend::rabbitmq::consumer(s, &self.topic, &self.group, &self.member).await
            }
            Backend::Memory => unreachable!("in-memory consumers are shared, never rebuilt"),
        }
    }

    /// Up to `max` deliveries within `wait` (omniqueue's receive_all), each kept
    /// until it is settled and counted as an attempt.
    async fn receive_all(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.check_open()?;
        // At most 0: none, at once. And no more than RECEIVE_CAP: omniqueue's
        // in-memory receive_all reserves room for `max` deliveries, and panics on
        // capacity overflow for usize::MAX (tests/repro.rs
        // in_memory_receive_all_of_the_largest_count_panics).
        let Some(max) = receive_limit(max) else {
            return Ok(Vec::new());
        };
        // omniqueue's Redis receive_all sends its deadline in whole milliseconds as
        // XREADGROUP BLOCK, and BLOCK 0 waits for ever (tests/repro.rs
        // redis_receive_all_with_a_zero_deadline_waits_for_ever): a wait under a
        // millisecond ("what is there now") blocked the subscriber, and the delayed
        // messages the runtime held were never released.
        let wait = wait.max(MIN_RECEIVE_WAIT);
        let deliveries = match &self.source {
            Source::Own { backend, consumer } => {
                self.receive_from(consumer, Some(backend), max, wait)
                    .await?
            }
            Source::Shared(shared) => self.receive_from(shared, None, max, wait).await?,
        };
        let now = SystemTime::now();
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        Ok(deliveries
            .into_iter()
            .map(|delivery| {
                let payload = delivery.borrow_payload().unwrap_or_default().to_vec();
                let key = Attempts::key(&self.topic, &self.group, &payload);
                let attempt = self.attempts.delivered(&key);
                let position = self.positions.fetch_add(1, Ordering::Relaxed);
                pending.insert(position, Pending { delivery, key });
                ReceivedMessage {
                    id: MessageId::new(self.topic.clone(), None, position),
                    payload,
                    content_type: None,
                    metadata: Metadata::new(),
                    partition_key: None,
                    attempt,
                    publish_time: now,
                }
            })
            .collect())
    }

    fn take(&self, id: &MessageId) -> Result<Pending> {
        if id.topic.as_deref().is_some_and(|t| t != self.topic) {
            return Err(PubSubError::NotAllowed(format!(
                "{id} is not a message of {}",
                self.topic
            )));
        }
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id.position)
            .ok_or_else(|| {
                PubSubError::NotFound(format!(
                    "{id} is not a message this consumer holds unsettled"
                ))
            })
    }
}

#[async_trait]
impl Consumer for OmniqueueConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        self.receive_all(max, wait).await
    }

    /// A batch is what omniqueue's receive_all(max, deadline) gives.
    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        self.receive_all(max, max_await).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        let Pending { delivery, key } = self.take(id)?;
        delivery
            .ack()
            .await
            .map_err(|(e, _)| broker_error("acknowledging through omniqueue")(e))?;
        self.attempts.settled(&key);
        Ok(())
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        let Pending { delivery, .. } = self.take(id)?;
        // omniqueue's nack has no delay: the delivery is held here until it is due.
        if !delay.is_zero() {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = delivery.nack().await;
            });
            return Ok(());
        }
        delivery
            .nack()
            .await
            .map_err(|(e, _)| broker_error("nacking through omniqueue")(e))
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        // Unsettled deliveries go back for the other members.
        let unsettled: Vec<Pending> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, p)| p)
            .collect();
        for Pending { delivery, .. } in unsettled {
            let _ = delivery.nack().await;
        }
        if let Source::Own { consumer, .. } = &self.source {
            consumer.lock().await.take();
        }
        Ok(())
    }
}
