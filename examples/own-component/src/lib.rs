//! An example component author's crate: a small in-process queue written against the
//! suite's component traits, and [`register`], which adds its type (`pubsub.own-queue`)
//! to the suite's registry so that `tests/certify.rs` runs the whole catalogue on it.
//!
//! The queue keeps one log per topic; each consumer group reads the log from its own
//! cursor (every group sees every message), members of a group share it, and what a
//! member takes stays in flight until it is acknowledged, negatively acknowledged
//! (back after the delay asked for) or its consumer closes (back at once). What it
//! does not do itself (bulk calls, TTL, dead letters, delays) it declares emulated,
//! and the suite's runtime layer does it on top.

use async_trait::async_trait;
use pubsub_components::component::{check_message_size, receive_limit};
use pubsub_components::config::{ComponentDefinition, ConfigError};
use pubsub_components::registry::{self, ExternalType};
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, Metadata, OutgoingMessage,
    PubSubError, ReceivedMessage, Result, StartPosition, Support, TopicSelector,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::time::Instant;

/// The type name, as written after `pubsub.` in a definition's `spec.type`.
pub const TYPE: &str = "own-queue";

/// Adds `pubsub.own-queue` to the suite's registry for this process.
pub fn register() {
    registry::register(ExternalType {
        name: TYPE,
        broker_of: None,
        endpoint_field: None,
        adapts: "own-queue 0.1.0 (example)",
        validate: |definition| settings(definition).map(|_| ()),
        build: |definition, _endpoint| {
            Box::pin(async move {
                let max_message_bytes = settings(&definition)?;
                Ok(Arc::new(OwnQueue::new(max_message_bytes)) as Arc<dyn Component>)
            })
        },
    })
    .expect("own-queue is a valid registration");
}

/// The definition's settings: `maxMessageBytes` (optional, at least 1).
fn settings(definition: &ComponentDefinition) -> std::result::Result<usize, ConfigError> {
    definition.check_known(&["maxMessageBytes"])?;
    let max = definition
        .value::<usize>("maxMessageBytes", "a number of bytes")?
        .unwrap_or(1024 * 1024);
    if max == 0 {
        return Err(definition.error("spec.metadata (maxMessageBytes)", "must be at least 1"));
    }
    Ok(max)
}

/// A message as the queue keeps it.
struct Stored {
    payload: Vec<u8>,
    content_type: Option<String>,
    metadata: Metadata,
    partition_key: Option<String>,
    published: SystemTime,
}

/// A group's place in a topic's log.
#[derive(Default)]
struct Cursor {
    /// The next log position never delivered to the group.
    next: usize,
    /// Taken and not yet settled: position -> attempt.
    in_flight: HashMap<usize, u32>,
    /// Coming back: position -> (due, attempt it will be).
    returning: BTreeMap<usize, (Instant, u32)>,
}

#[derive(Default)]
struct Topic {
    log: Vec<Stored>,
    groups: HashMap<String, Cursor>,
}

#[derive(Default)]
struct State {
    topics: HashMap<String, Topic>,
}

/// The example component. Clones share one queue.
#[derive(Clone)]
pub struct OwnQueue {
    max_message_bytes: usize,
    state: Arc<Mutex<State>>,
    /// Bumped whenever something may have become deliverable.
    changed: Arc<watch::Sender<u64>>,
}

impl OwnQueue {
    /// An empty queue refusing payloads over `max_message_bytes`.
    pub fn new(max_message_bytes: usize) -> Self {
        OwnQueue {
            max_message_bytes,
            state: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Opens the group's cursor where it starts, if it has none yet.
    fn join(&self, topic: &str, spec: &ConsumerSpec) {
        let mut state = self.lock();
        let topic = state.topics.entry(topic.to_string()).or_default();
        let end = topic.log.len();
        topic
            .groups
            .entry(spec.group.clone())
            .or_insert_with(|| Cursor {
                next: match spec.start {
                    StartPosition::Earliest => 0,
                    StartPosition::Latest => end,
                },
                ..Cursor::default()
            });
    }
}

fn single_topic<'a>(kind: &str, topics: &'a TopicSelector) -> Result<&'a str> {
    match topics {
        TopicSelector::Single(topic) => Ok(topic),
        _ => Err(PubSubError::unsupported(kind, "multi-topic subscriptions")),
    }
}

#[async_trait]
impl Component for OwnQueue {
    fn kind(&self) -> &str {
        TYPE
    }

    fn capabilities(&self) -> Capabilities {
        // Only what differs from the baseline most brokers share.
        Capabilities {
            bulk_publish: Support::Emulated,
            multi_topic: false,
            seek: false,
            max_message_bytes: Some(self.max_message_bytes),
            delivery_bound: Duration::from_secs(1),
            redelivery_bound: Duration::from_secs(1),
            delay_precision: Duration::from_millis(100),
            clock_tolerance: Duration::from_millis(5),
            // In process: nothing outlives it.
            durable: false,
            recovery_bound: Duration::from_secs(2),
            // No lease: a closed consumer returns what it held at once.
            ..Capabilities::default()
        }
    }

    async fn broker_version(&self) -> Result<String> {
        Ok("own-queue 0.1.0 (in process)".to_string())
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        check_message_size(&message, self.max_message_bytes)?;
        let position = {
            let mut state = self.lock();
            let topic = state.topics.entry(message.topic.clone()).or_default();
            topic.log.push(Stored {
                payload: message.payload,
                content_type: message.content_type,
                metadata: message.metadata,
                partition_key: message.partition_key,
                published: SystemTime::now(),
            });
            topic.log.len() - 1
        };
        self.wake();
        Ok(MessageId::new(message.topic, None, position as u64))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.join(single_topic(TYPE, &spec.topics)?, spec);
        Ok(())
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let topic = single_topic(TYPE, &spec.topics)?.to_string();
        self.join(&topic, &spec);
        Ok(Box::new(Member {
            queue: self.clone(),
            topic,
            group: spec.group,
            held: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }))
    }
}

/// One member of a group.
struct Member {
    queue: OwnQueue,
    topic: String,
    group: String,
    /// Positions this member took and has not settled, returned when it closes.
    held: Mutex<Vec<usize>>,
    /// Closed members take nothing more.
    closed: AtomicBool,
}

impl Member {
    /// Takes up to `max` deliverable messages: those coming back that are due, then
    /// new ones. Returns them and, when none is ready, when the next one comes back.
    fn take(&self, max: usize) -> (Vec<ReceivedMessage>, Option<Instant>) {
        let now = Instant::now();
        let mut state = self.queue.lock();
        // Checked under the queue's lock, which close takes too: nothing is taken
        // once close has begun returning what this member held.
        if self.closed.load(Ordering::Acquire) {
            return (Vec::new(), None);
        }
        let Some(topic) = state.topics.get_mut(&self.topic) else {
            return (Vec::new(), None);
        };
        let Some(cursor) = topic.groups.get_mut(&self.group) else {
            return (Vec::new(), None);
        };
        let mut taken: Vec<(usize, u32)> = Vec::new();
        let due: Vec<usize> = cursor
            .returning
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(position, _)| *position)
            .take(max)
            .collect();
        for position in due {
            if let Some((_, attempt)) = cursor.returning.remove(&position) {
                taken.push((position, attempt));
            }
        }
        while taken.len() < max && cursor.next < topic.log.len() {
            taken.push((cursor.next, 1));
            cursor.next += 1;
        }
        let next_due = cursor.returning.values().map(|(at, _)| *at).min();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let messages = taken
            .into_iter()
            .map(|(position, attempt)| {
                cursor.in_flight.insert(position, attempt);
                held.push(position);
                let stored = &topic.log[position];
                ReceivedMessage {
                    id: MessageId::new(self.topic.clone(), None, position as u64),
                    payload: stored.payload.clone(),
                    content_type: stored.content_type.clone(),
                    metadata: stored.metadata.clone(),
                    partition_key: stored.partition_key.clone(),
                    attempt,
                    publish_time: stored.published,
                }
            })
            .collect();
        (messages, next_due)
    }

    /// Settles an in-flight message of this member's group: gone (`None`) or back
    /// after `delay`.
    fn settle(&self, id: &MessageId, back_after: Option<Duration>) -> Result<()> {
        if id.topic.as_deref() != Some(self.topic.as_str()) {
            return Err(PubSubError::broker(
                "settling a message",
                format!("{id} is not a message of topic '{}'", self.topic),
            ));
        }
        let position = id.position as usize;
        {
            let mut state = self.queue.lock();
            let cursor = state
                .topics
                .get_mut(&self.topic)
                .and_then(|topic| topic.groups.get_mut(&self.group));
            if let Some(cursor) = cursor {
                if let Some(attempt) = cursor.in_flight.remove(&position) {
                    if let Some(delay) = back_after {
                        cursor
                            .returning
                            .insert(position, (Instant::now() + delay, attempt + 1));
                    }
                }
            }
        }
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|held| *held != position);
        if back_after.is_some() {
            self.queue.wake();
        }
        Ok(())
    }
}

#[async_trait]
impl Consumer for Member {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        // At most 0: none, at once; no more at once than the suite's cap.
        let Some(max) = receive_limit(max) else {
            return Ok(Vec::new());
        };
        let deadline = Instant::now() + wait;
        let mut changed = self.queue.changed.subscribe();
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(PubSubError::broker(
                    "receiving",
                    format!(
                        "the consumer of '{}' in group '{}' was closed",
                        self.topic, self.group
                    ),
                ));
            }
            let (messages, next_due) = self.take(max);
            if !messages.is_empty() || Instant::now() >= deadline {
                return Ok(messages);
            }
            let until = next_due.map_or(deadline, |due| due.min(deadline));
            // Woken by a publish or a return, or when the next return is due.
            let _ = tokio::time::timeout_at(until, changed.changed()).await;
        }
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.settle(id, None)
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.settle(id, Some(delay))
    }

    async fn close(&self) -> Result<()> {
        self.leave()
    }
}

impl Member {
    /// Takes nothing more and hands back what it holds to the group.
    fn leave(&self) -> Result<()> {
        {
            let _queue = self.queue.lock();
            self.closed.store(true, Ordering::Release);
        }
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()));
        for position in held {
            self.settle(
                &MessageId::new(self.topic.clone(), None, position as u64),
                Some(Duration::ZERO),
            )?;
        }
        Ok(())
    }
}

impl Drop for Member {
    /// A member dropped without a close leaves as a close does: what it held goes
    /// back to the group (`certification.consumer-dropped-others-stay`).
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            let _ = self.leave();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_member_gets_a_nacked_message_back_after_its_delay() {
        let queue = OwnQueue::new(1024);
        let spec = ConsumerSpec::new(TopicSelector::Single("t".into()), "g");
        let member = queue.consumer(spec).await.unwrap();
        queue
            .publish(OutgoingMessage::new("t", b"a".to_vec()))
            .await
            .unwrap();
        let first = member.receive(10, Duration::from_secs(1)).await.unwrap();
        assert_eq!(first.len(), 1);
        member
            .nack(&first[0].id, Duration::from_millis(50))
            .await
            .unwrap();
        let again = member.receive(10, Duration::from_secs(1)).await.unwrap();
        assert_eq!((again.len(), again[0].attempt), (1, 2));
    }
}
