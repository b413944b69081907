//! A member of a group on RabbitMQ: consumes from the group's quorum queue on a
//! channel of its own (subscribing again when the channel died), settles deliveries
//! by their tags, and defers a message by moving a copy to one of the group's wait
//! queues, which expire back into the group's queue.

use super::routing::topic_of;
use super::{
    amqp, declare_durable, long, number_header, settle, short, text_header, Inner, HEADER_KEY,
    HEADER_METADATA, HEADER_PUBLISHED, HEADER_TOPIC,
};
use crate::component::{owner_topic, Consumer, ConsumerSpec};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, ReceivedMessage};
use crate::runtime::controls::keys;
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// On a deferred copy: the topic it was delivered from (its routing key then names
/// the group's queue).
const HEADER_DEFERRED_TOPIC: &str = "pcs-deferred-topic";
/// On a deferred copy: returns before it was deferred (the copy's own delivery count
/// starts again at zero).
const HEADER_RETURNS: &str = "pcs-returns";
/// The shortest wait queue; longer ones double.
const SHORTEST_WAIT: Duration = Duration::from_millis(64);

impl Inner {
    /// Opens a channel, declares the group and starts consuming from its queue.
    async fn subscribe(&self, spec: &ConsumerSpec) -> Result<Subscription> {
        let channel = self.channel("opening a consumer channel").await?;
        let queue = self.declare_group(&channel, spec).await?;
        channel
            .basic_qos(self.config.prefetch, BasicQosOptions::default())
            .await
            .map_err(amqp("setting the prefetch"))?;
        let deliveries = channel
            .basic_consume(
                queue,
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(amqp("starting to consume"))?;
        Ok(Subscription {
            channel,
            deliveries,
        })
    }
}

/// The wait queue a message deferred for `delay` goes to: the longest doubling of
/// 64 ms within it.
fn wait_for(delay: Duration) -> Duration {
    let mut wait = SHORTEST_WAIT;
    while wait * 2 <= delay {
        wait *= 2;
    }
    wait
}

/// The properties of a deferred message's copy: the app's headers, the topic it came
/// from, and the attempts it already had.
fn deferred_copy(unsettled: &Unsettled) -> BasicProperties {
    let mut headers = FieldTable::default();
    let original = unsettled.properties.headers().clone().unwrap_or_default();
    for (name, value) in original.inner() {
        if !name.as_str().starts_with("x-") && name.as_str() != HEADER_RETURNS {
            headers.insert(name.clone(), value.clone());
        }
    }
    headers.insert(HEADER_DEFERRED_TOPIC.into(), long(&unsettled.topic));
    headers.insert(
        HEADER_RETURNS.into(),
        AMQPValue::LongLongInt(i64::from(unsettled.attempt.saturating_sub(1))),
    );
    unsettled.properties.clone().with_headers(headers)
}

/// A consumer's channel and its stream of deliveries.
pub(super) struct Subscription {
    channel: Channel,
    deliveries: lapin::Consumer,
}

/// A member of a group; when its channel dies (the broker restarted, the network
/// failed) the next receive subscribes again on a new connection.
pub(super) struct RabbitConsumer {
    inner: Arc<Inner>,
    spec: ConsumerSpec,
    /// `None` after the channel died, until the next receive opens a new one.
    subscription: tokio::sync::Mutex<Option<Subscription>>,
    /// The delivery tag of each unsettled message, with the channel it came on.
    tags: Mutex<HashMap<MessageId, Unsettled>>,
    closed: AtomicBool,
}

/// A delivered message awaiting settlement: its tag and channel, and what a deferred
/// copy needs.
struct Unsettled {
    tag: u64,
    channel: Channel,
    topic: String,
    attempt: u32,
    payload: Vec<u8>,
    properties: BasicProperties,
}

/// The most recent dead-lettering of a message (`x-death` lists the latest first):
/// its reason and the queue it left.
fn last_death(headers: &FieldTable) -> Option<(String, String)> {
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(latest) = deaths.as_slice().first()? else {
        return None;
    };
    Some((
        text_header(latest, "reason")?,
        text_header(latest, "queue").unwrap_or_default(),
    ))
}

/// True for a wait queue's name (see [`RabbitConsumer::defer`]).
fn is_wait_queue(queue: &str) -> bool {
    queue.contains(".wait.")
}

impl RabbitConsumer {
    /// A member of `spec`'s group, consuming from the group's queue.
    pub(super) async fn open(inner: Arc<Inner>, spec: ConsumerSpec) -> Result<Self> {
        let subscription = inner.subscribe(&spec).await?;
        Ok(RabbitConsumer {
            inner,
            spec,
            subscription: tokio::sync::Mutex::new(Some(subscription)),
            tags: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    fn take(&self, id: &MessageId) -> Result<Unsettled> {
        owner_topic(id, &self.spec.topics)?;
        self.tags
            .lock()
            .expect("tags lock")
            .remove(id)
            .ok_or_else(|| {
                PubSubError::NotFound(format!("message {id} is not awaiting settlement"))
            })
    }

    fn tag(&self, id: &MessageId) -> Result<(u64, Channel)> {
        self.take(id).map(|u| (u.tag, u.channel))
    }

    /// Declares the group's wait queue for `wait`: what expires there goes back to the
    /// group's queue (through the default exchange).
    async fn wait_queue(&self, channel: &Channel, wait: Duration) -> Result<ShortString> {
        let group_queue = self.inner.queue_name(&self.spec)?;
        let name = short(format!("{}.wait.{}", group_queue, wait.as_millis())).map_err(|_| {
            PubSubError::InvalidRequest(format!(
                "group '{}' makes a wait queue name over 255 bytes",
                self.spec.group
            ))
        })?;
        let mut arguments = FieldTable::default();
        let ms = wait.as_millis() as i64;
        arguments.insert("x-message-ttl".into(), AMQPValue::LongLongInt(ms));
        arguments.insert("x-dead-letter-exchange".into(), long(""));
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            long(group_queue.as_str()),
        );
        arguments.insert("x-expires".into(), AMQPValue::LongLongInt(ms + 60_000));
        declare_durable(channel, name.clone(), arguments, "declaring a wait queue").await?;
        Ok(name)
    }

    fn convert(&self, delivery: lapin::message::Delivery, channel: &Channel) -> ReceivedMessage {
        let properties = &delivery.properties;
        let empty = FieldTable::default();
        let headers = properties.headers().as_ref().unwrap_or(&empty);
        let topic = topic_of(delivery.routing_key.as_str());
        let mut metadata: Metadata = text_header(headers, HEADER_METADATA)
            .and_then(|json| serde_json::from_str(&json).ok())
            .unwrap_or_default();
        let topic = text_header(headers, HEADER_DEFERRED_TOPIC).unwrap_or(topic);
        let dead = last_death(headers).filter(|(_, queue)| !is_wait_queue(queue));
        if let Some((reason, _)) = dead {
            let reason = match reason.as_str() {
                "rejected" => "dropped",
                "delivery_limit" => "maxDeliveries",
                other => other,
            };
            metadata.insert(keys::DEAD_LETTER_REASON.into(), reason.into());
            if let Some(original) = text_header(headers, HEADER_TOPIC) {
                metadata.insert(keys::ORIGINAL_TOPIC.into(), original);
            }
        }
        let position = properties
            .message_id()
            .as_ref()
            .and_then(|id| id.as_str().parse().ok())
            .unwrap_or(delivery.delivery_tag);
        let returns = number_header(headers, "x-delivery-count").unwrap_or(0)
            + number_header(headers, HEADER_RETURNS).unwrap_or(0);
        let published = number_header(headers, HEADER_PUBLISHED)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
            .unwrap_or_else(SystemTime::now);
        let id = MessageId::new(&topic, None, position);
        let attempt = 1 + returns.max(0) as u32;
        self.tags.lock().expect("tags lock").insert(
            id.clone(),
            Unsettled {
                tag: delivery.delivery_tag,
                channel: channel.clone(),
                topic,
                attempt,
                payload: delivery.data.clone(),
                properties: properties.clone(),
            },
        );
        ReceivedMessage {
            id,
            content_type: properties
                .content_type()
                .as_ref()
                .map(|c| c.as_str().to_string()),
            partition_key: text_header(headers, HEADER_KEY),
            metadata,
            attempt,
            publish_time: published,
            payload: delivery.data,
        }
    }
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PubSubError::Closed("the consumer is closed".into()));
        }
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        let mut current = self.subscription.lock().await;
        if current.is_none() {
            *current = Some(self.inner.subscribe(&self.spec).await?);
        }
        let subscription = current.as_mut().expect("opened above");
        let channel = subscription.channel.clone();
        let first = match tokio::time::timeout(wait, subscription.deliveries.next()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(Some(Ok(delivery))) => delivery,
            Ok(ended) => {
                // The channel died under us (its unacknowledged messages go back to
                // the queue): the next receive subscribes again.
                *current = None;
                let why = match ended {
                    Some(Err(e)) => e.to_string(),
                    _ => "the delivery stream ended".into(),
                };
                return Err(PubSubError::broker(
                    "receiving (the channel was lost; the next receive subscribes again)",
                    why,
                ));
            }
        };
        let mut received = vec![self.convert(first, &channel)];
        while received.len() < max {
            match subscription.deliveries.next().now_or_never() {
                Some(Some(Ok(delivery))) => received.push(self.convert(delivery, &channel)),
                _ => break,
            }
        }
        Ok(received)
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        crate::component::ack_together(self, ids, &self.spec.topics).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        channel
            .basic_ack(tag, BasicAckOptions::default())
            .await
            .map_err(amqp("acknowledging"))
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        // A failed delivery: basic.reject with requeue. Since RabbitMQ 4.3 only a
        // reject counts towards the quorum queue's delivery-count (x-delivery-count,
        // the attempt, and x-delivery-limit, maxDeliveries); a basic.nack returns the
        // message without counting (rabbitmq-server#15387). Earlier versions count both.
        let requeue = BasicRejectOptions { requeue: true };
        if delay.is_zero() {
            return channel
                .basic_reject(tag, requeue)
                .await
                .map_err(amqp("requeueing"));
        }
        // RabbitMQ requeues at once; the message stays unacknowledged here until its
        // delay has passed (closing the channel returns it earlier, which is allowed).
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = channel.basic_reject(tag, requeue).await;
        });
        Ok(())
    }

    /// Hands the message to the group's wait queue for the longest doubling of 64 ms
    /// within `delay` (it expires back into the group's queue, where the runtime holds
    /// or defers it again), and acknowledges the original: unlike a held message, a
    /// deferred one does not fill the prefetch window. The copy keeps its attempt.
    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.defer_many(&[(id.clone(), delay)]).await
    }

    /// Defers in bulk, pipelined: every wait queue needed is declared once, every copy
    /// is published before any confirm is awaited, the confirms are awaited together
    /// (a quorum queue confirms after its disk write, so one at a time would cost a
    /// disk write each), and then each original whose copy was confirmed is
    /// acknowledged; one whose copy was not goes back to the queue, never lost.
    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        let mut first_error: Option<PubSubError> = None;
        let mut taken = Vec::new();
        for (id, delay) in deferrals {
            match self.take(id) {
                Ok(unsettled) => taken.push((unsettled, wait_for(*delay))),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((first, _)) = taken.first() else {
            return first_error.map_or(Ok(()), Err);
        };
        let channel = first.channel.clone();
        let mut queues: HashMap<Duration, Result<ShortString>> = HashMap::new();
        for (_, wait) in &taken {
            if !queues.contains_key(wait) {
                let declared = self.wait_queue(&channel, *wait).await;
                queues.insert(*wait, declared);
            }
        }
        let publisher = match self.inner.link().await {
            Ok(link) => Some(link),
            Err(e) => {
                first_error.get_or_insert(e);
                None
            }
        };
        // Every copy on its way first ...
        let mut sent = Vec::new();
        for (unsettled, wait) in taken {
            let confirm = match (&publisher, &queues[&wait]) {
                (Some(link), Ok(queue)) => link
                    .publisher
                    .basic_publish(
                        "".into(),
                        queue.clone(),
                        BasicPublishOptions::default(),
                        &unsettled.payload,
                        deferred_copy(&unsettled),
                    )
                    .await
                    .map_err(amqp("publishing a deferred copy")),
                (_, Err(e)) => Err(PubSubError::broker("declaring a wait queue", e)),
                (None, _) => Err(PubSubError::broker(
                    "publishing a deferred copy",
                    "no connection",
                )),
            };
            sent.push((unsettled, confirm));
        }
        // ... then their confirms together.
        let settled =
            futures::future::join_all(sent.into_iter().map(|(unsettled, confirm)| async move {
                let copied = match confirm {
                    Ok(confirm) => settle(confirm).await,
                    Err(e) => Err(e),
                };
                (unsettled, copied)
            }))
            .await;
        for (unsettled, copied) in settled {
            let answered = match copied {
                Ok(()) => unsettled
                    .channel
                    .basic_ack(unsettled.tag, BasicAckOptions::default())
                    .await
                    .map_err(amqp("acknowledging a deferred message")),
                Err(e) => {
                    // Never lose it: back to the queue.
                    let _ = unsettled
                        .channel
                        .basic_nack(
                            unsettled.tag,
                            BasicNackOptions {
                                requeue: true,
                                ..Default::default()
                            },
                        )
                        .await;
                    Err(e)
                }
            };
            if let Err(e) = answered {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn reject(&self, id: &MessageId, _reason: &str) -> Result<()> {
        let (tag, channel) = self.tag(id)?;
        channel
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
            .map_err(amqp("dead-lettering"))
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(subscription) = self.subscription.lock().await.take() {
            if subscription.channel.status().connected() {
                subscription
                    .channel
                    .close(200, "consumer closed".into())
                    .await
                    .map_err(amqp("closing the consumer channel"))?;
            }
        }
        Ok(())
    }
}
