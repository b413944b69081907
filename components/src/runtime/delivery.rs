//! The delivery loop of one subscription: receive, screen (TTL, delays), batch,
//! dispatch, and settle each message (ack, redeliver, dead-letter).

use super::controls::{self, keys};
use super::envelope;
use super::types::{Batch, BatchEntry, BulkSubscribeOptions, Event, Handler, Status, Subscription};
use super::Runtime;
use crate::capability::{Feature, Support};
use crate::component::Consumer;
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage, ReceivedMessage};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::instrument::WithSubscriber;
use tracing::{debug, warn, Instrument};

/// The longest the loop blocks in one receive, so that stops and timers are served.
const POLL: Duration = Duration::from_millis(100);
/// Messages fetched at once for a single-message handler.
const FETCH_MAX: usize = 32;
/// Delayed messages held at once; beyond this the furthest-due go back to the broker
/// ([`Consumer::defer`]) so that they never fill the prefetch window and starve
/// messages that are due.
const HOLD_LIMIT: usize = 128;
/// How long `stop` waits for the loop to finish its current handler call.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A running subscription. Dropping it stops delivery too, without waiting.
pub struct SubscriptionHandle {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl SubscriptionHandle {
    /// A handle over `task`, which ends its subscription once `stop` says true (a
    /// [`super::RemoteRuntime`]'s subscription).
    pub fn new(stop: watch::Sender<bool>, task: JoinHandle<()>) -> Self {
        SubscriptionHandle {
            stop,
            task: Some(task),
        }
    }

    /// Stops delivery, waits (bounded) for the handler call under way, and leaves the
    /// group, so unacknowledged messages go back to the broker.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(STOP_GRACE, task).await.is_err() {
                warn!("subscription did not stop within {STOP_GRACE:?}; aborting it");
                abort.abort();
            }
        }
    }
}

impl Drop for SubscriptionHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub(super) fn start(
    runtime: Runtime,
    subscription: Subscription,
    handler: Handler,
    consumer: Box<dyn Consumer>,
) -> SubscriptionHandle {
    let (stop, stopped) = watch::channel(false);
    let bulk = subscription.bulk.unwrap_or_default();
    let delivery = Delivery {
        ttl_emulated: runtime.mode(Feature::Ttl) == Support::Emulated,
        delay_emulated: runtime.mode(Feature::DelayedDelivery) == Support::Emulated,
        receiver_delay_emulated: runtime.mode(Feature::ReceiverDelay) == Support::Emulated,
        dead_letter_native: runtime.mode(Feature::DeadLetter) == Support::Native,
        bulk_native: runtime.mode(Feature::BulkSubscribe) == Support::Native,
        runtime,
        subscription,
        bulk,
        handler,
        consumer,
        stopped,
        held: BTreeMap::new(),
        held_seq: 0,
        can_extend: None,
        leases_extended: Instant::now(),
        pending: BTreeMap::new(),
    };
    let task = tokio::spawn(delivery.run().with_current_subscriber());
    SubscriptionHandle {
        stop,
        task: Some(task),
    }
}

type Ready = (ReceivedMessage, Event);

struct PendingBatch {
    started: Instant,
    entries: Vec<Ready>,
}

struct Delivery {
    runtime: Runtime,
    subscription: Subscription,
    bulk: BulkSubscribeOptions,
    handler: Handler,
    consumer: Box<dyn Consumer>,
    /// Says true once the handle asks the subscription to stop (or is dropped).
    stopped: watch::Receiver<bool>,
    ttl_emulated: bool,
    delay_emulated: bool,
    /// `receiverDelay` held here rather than by the component.
    receiver_delay_emulated: bool,
    dead_letter_native: bool,
    bulk_native: bool,
    /// Delayed messages, held (unacknowledged) until due.
    held: BTreeMap<(SystemTime, u64), Ready>,
    held_seq: u64,
    /// Whether the component can extend the lease of held messages (asked once, on
    /// the first message held, where it declares a lease).
    can_extend: Option<bool>,
    /// When the leases of held messages were last extended.
    leases_extended: Instant,
    /// Emulated bulk subscribe: a batch being filled per topic.
    pending: BTreeMap<String, PendingBatch>,
}

impl Delivery {
    async fn run(mut self) {
        let mut stopped = self.stopped.clone();
        loop {
            if self.stopping() {
                break;
            }
            // A receive under way is not cut short by a stop: it ends within its wait,
            // and what it took stays with the consumer, whose close below hands it back
            // to the group (a receive dropped halfway could strand what the broker was
            // handing it until a lease ran out).
            let received = self.fetch(self.next_wait()).await;
            if self.stopping() {
                break;
            }
            match received {
                Ok(messages) => self.process(messages).await,
                Err(PubSubError::Closed(_)) => break,
                Err(e) => {
                    warn!(error = %e, "receive failed; retrying");
                    tokio::select! {
                        _ = stopped.changed() => break,
                        _ = tokio::time::sleep(POLL) => {}
                    }
                }
            }
            if self.stopping() {
                break;
            }
            self.release_due().await;
            self.extend_held_leases().await;
            self.flush_batches(false).await;
        }
        if let Err(e) = self.consumer.close().await {
            warn!(error = %e, "closing the consumer failed");
        }
    }

    /// Whether a stop was asked: no handler call starts after it, and what was not
    /// handed over stays unsettled, for the close to hand back to the group.
    fn stopping(&self) -> bool {
        *self.stopped.borrow()
    }

    fn is_bulk(&self) -> bool {
        matches!(self.handler, Handler::Bulk(_))
    }

    /// How long the next receive may block.
    fn next_wait(&self) -> Duration {
        let now = SystemTime::now();
        let mut wait = POLL;
        if let Some(((due, _), _)) = self.held.first_key_value() {
            wait = wait.min(due.duration_since(now).unwrap_or_default());
        }
        for batch in self.pending.values() {
            let deadline = batch.started + self.bulk.max_await_duration;
            wait = wait.min(deadline.saturating_duration_since(Instant::now()));
        }
        wait
    }

    async fn fetch(&self, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        if self.is_bulk() && self.bulk_native {
            // A held delayed message may be due before the batch wait ends.
            let max_await = match self.held.first_key_value() {
                Some(_) => self
                    .bulk
                    .max_await_duration
                    .min(wait.max(Duration::from_millis(1))),
                None => self.bulk.max_await_duration,
            };
            self.consumer
                .receive_batch(self.bulk.max_messages_count, max_await)
                .await
        } else if self.is_bulk() {
            // An emulated batch fills from one receive where the broker has that many.
            self.consumer
                .receive(self.bulk.max_messages_count.max(1), wait)
                .await
        } else {
            self.consumer.receive(FETCH_MAX, wait).await
        }
    }

    async fn process(&mut self, messages: Vec<ReceivedMessage>) {
        let mut ready = Vec::new();
        for message in messages {
            if let Some(entry) = self.screen(message).await {
                ready.push(entry);
            }
        }
        self.defer_surplus().await;
        self.deliver(ready, true).await;
    }

    /// Hands ready messages over. `as_received` keeps a native batch as the component
    /// formed it.
    async fn deliver(&mut self, ready: Vec<Ready>, as_received: bool) {
        if ready.is_empty() {
            return;
        }
        if !self.is_bulk() {
            for (message, event) in ready {
                if self.stopping() {
                    break;
                }
                self.dispatch_single(message, event).await;
            }
        } else if self.bulk_native && as_received {
            self.dispatch_batch(ready).await;
        } else {
            for entry in ready {
                let topic = entry.1.topic.clone();
                let full = self
                    .pending
                    .get(&topic)
                    .is_some_and(|b| b.entries.len() >= self.bulk.max_messages_count);
                if full {
                    self.flush_topic(&topic).await;
                }
                self.pending
                    .entry(topic)
                    .or_insert_with(|| PendingBatch {
                        started: Instant::now(),
                        entries: Vec::new(),
                    })
                    .entries
                    .push(entry);
            }
            self.flush_batches(false).await;
        }
    }

    /// Decodes a message and applies emulated TTL and delays. Returns it when it is
    /// to be delivered now.
    async fn screen(&mut self, message: ReceivedMessage) -> Option<Ready> {
        let event = match to_event(&message) {
            Ok(event) => event,
            Err(e) => {
                warn!(id = %message.id, error = %e, "undecodable message");
                self.give_up(&message, "undecodable").await;
                return None;
            }
        };
        let now = SystemTime::now();
        if self.ttl_emulated {
            let expired = message
                .metadata
                .get(controls::HEADER_EXPIRATION)
                .and_then(|at| controls::parse_time(at))
                .is_some_and(|at| at <= now);
            if expired {
                self.give_up(&message, "expired").await;
                return None;
            }
        }
        // A producer-side due time (written by the runtime only when it emulates
        // delays) and the subscription's receiverDelay, each where emulated here.
        let mut due = message
            .metadata
            .get(controls::HEADER_DELIVER_AT)
            .filter(|_| self.delay_emulated)
            .and_then(|at| controls::parse_time(at));
        if let Some(delay) = self
            .subscription
            .receiver_delay
            .filter(|_| self.receiver_delay_emulated)
        {
            let receiver_due = message.publish_time + delay;
            due = Some(due.map_or(receiver_due, |d| d.max(receiver_due)));
        }
        if let Some(due) = due.filter(|due| *due > now) {
            self.hold(due, (message, event)).await;
            return None;
        }
        Some((message, event))
    }

    /// Holds a delayed message until `due` (what is held beyond the limit goes back to
    /// the broker after the receive, [`Delivery::defer_surplus`]).
    async fn hold(&mut self, due: SystemTime, ready: Ready) {
        if self.can_extend.is_none() {
            let lease = self.runtime.capabilities().lease;
            // An empty call asks whether the component can extend a lease at all.
            self.can_extend = Some(
                lease.is_zero()
                    || !matches!(
                        self.consumer.extend_lease(&[]).await,
                        Err(PubSubError::Unsupported { .. })
                    ),
            );
        }
        self.held_seq += 1;
        self.held.insert((due, self.held_seq), ready);
    }

    /// Hands back to the broker, in one call, the held messages due last beyond the
    /// hold limit, and, where the component cannot extend a lease, those due later
    /// than half its lease (held that long, the broker would hand them to another
    /// member): each until it is nearly due.
    async fn defer_surplus(&mut self) {
        let now = SystemTime::now();
        let lease = self.runtime.capabilities().lease;
        let hold_until = match self.can_extend {
            Some(false) => Some(now + lease / 2),
            _ => None,
        };
        let mut surplus = Vec::new();
        while let Some((&(due, _), _)) = self.held.last_key_value() {
            let beyond_lease = hold_until.is_some_and(|until| due > until);
            if self.held.len() <= HOLD_LIMIT && !beyond_lease {
                break;
            }
            let Some((_, (message, _))) = self.held.pop_last() else {
                break;
            };
            surplus.push((message.id, due.duration_since(now).unwrap_or_default()));
        }
        if surplus.is_empty() {
            return;
        }
        if let Err(e) = self.consumer.defer_many(&surplus).await {
            warn!(count = surplus.len(), error = %e, "deferring delayed messages failed");
        }
    }

    /// Keeps the broker from handing held (delayed) messages to another member: where
    /// the component declares a lease, held messages are extended every third of it.
    async fn extend_held_leases(&mut self) {
        let lease = self.runtime.capabilities().lease;
        if lease.is_zero()
            || self.can_extend == Some(false)
            || self.held.is_empty()
            || self.leases_extended.elapsed() < lease / 3
        {
            return;
        }
        self.leases_extended = Instant::now();
        let ids: Vec<_> = self.held.values().map(|(m, _)| m.id.clone()).collect();
        if let Err(e) = self.consumer.extend_lease(&ids).await {
            warn!(error = %e, held = ids.len(), "extending the lease of held messages failed");
        }
    }

    async fn release_due(&mut self) {
        let now = SystemTime::now();
        let mut due = Vec::new();
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        let due = self.still_held(due).await;
        self.deliver(due, false).await;
    }

    /// `ready` without the messages the member handed back since it received them (a
    /// rebalance gave their partition to another member, which gets copies): what the
    /// runtime held meanwhile (a delayed message, an entry of a batch being filled)
    /// is not delivered here too.
    async fn still_held(&self, mut ready: Vec<Ready>) -> Vec<Ready> {
        if ready.is_empty() {
            return ready;
        }
        let ids: Vec<MessageId> = ready.iter().map(|(m, _)| m.id.clone()).collect();
        match self.consumer.handed_back(&ids).await {
            Ok(gone) if !gone.is_empty() => {
                debug!(
                    count = gone.len(),
                    "held messages handed back to the group: delivered by another member"
                );
                ready.retain(|(m, _)| !gone.contains(&m.id));
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "asking which held messages were handed back failed"),
        }
        ready
    }

    /// Hands over emulated batches that are full or whose wait has passed (all when
    /// `everything`).
    async fn flush_batches(&mut self, everything: bool) {
        let topics: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, b)| {
                everything
                    || b.entries.len() >= self.bulk.max_messages_count
                    || b.started.elapsed() >= self.bulk.max_await_duration
            })
            .map(|(t, _)| t.clone())
            .collect();
        for topic in topics {
            if self.stopping() {
                break;
            }
            self.flush_topic(&topic).await;
        }
    }

    async fn flush_topic(&mut self, topic: &str) {
        if let Some(batch) = self.pending.remove(topic) {
            let entries = self.still_held(batch.entries).await;
            if !entries.is_empty() {
                self.dispatch_batch(entries).await;
            }
        }
    }

    async fn dispatch_single(&mut self, message: ReceivedMessage, event: Event) {
        let Handler::Single(handler) = &self.handler else {
            return;
        };
        if self.stopping() {
            return;
        }
        let span = tracing::info_span!(
            "pubsub.deliver",
            pubsub = %self.runtime.name(),
            topic = %event.topic,
            message_id = %message.id,
            traceparent = event.trace_parent.as_deref().unwrap_or(""),
            batch_id = "",
            attempt = message.attempt,
        );
        let status = match handler.handle(event).instrument(span).await {
            Ok(status) => status,
            Err(e) => {
                warn!(id = %message.id, error = %e, "handler failed; retrying");
                Status::Retry
            }
        };
        self.settle(&message, status).await;
    }

    async fn dispatch_batch(&mut self, entries: Vec<Ready>) {
        let Handler::Bulk(handler) = &self.handler else {
            return;
        };
        if self.stopping() {
            return;
        }
        let batch_id = uuid::Uuid::new_v4().to_string();
        let topic = entries[0].1.topic.clone();
        let batch_span = tracing::info_span!(
            "pubsub.bulk_deliver",
            pubsub = %self.runtime.name(),
            topic = %topic,
            batch_id = %batch_id,
            size = entries.len(),
        );
        // One span per entry, linked to the entry's own trace.
        for (message, event) in &entries {
            tracing::info_span!(
                parent: &batch_span,
                "pubsub.deliver",
                pubsub = %self.runtime.name(),
                topic = %event.topic,
                message_id = %message.id,
                traceparent = event.trace_parent.as_deref().unwrap_or(""),
                batch_id = %batch_id,
                attempt = message.attempt,
            )
            .in_scope(|| tracing::trace!("entry handed to bulk handler"));
        }
        // The events move into the batch (no copy of payloads and envelopes); the
        // messages stay here to be settled, each with its entry id.
        let mut messages = Vec::with_capacity(entries.len());
        let mut batch_entries = Vec::with_capacity(entries.len());
        for (message, event) in entries {
            let entry_id = message.id.to_string();
            batch_entries.push(BatchEntry {
                entry_id: entry_id.clone(),
                event,
            });
            messages.push((message, entry_id));
        }
        let batch = Batch {
            id: batch_id,
            topic,
            entries: batch_entries,
        };
        let statuses: HashMap<String, Status> =
            match handler.handle(batch).instrument(batch_span).await {
                Ok(statuses) => statuses
                    .into_iter()
                    .map(|s| (s.entry_id, s.status))
                    .collect(),
                Err(e) => {
                    warn!(error = %e, "bulk handler failed; retrying the whole batch");
                    HashMap::new()
                }
            };
        // The entries that succeeded are acknowledged together (one request where the
        // component acknowledges several ids at once, one by one where it cannot); the
        // others one by one.
        let mut succeeded = Vec::new();
        for (message, entry_id) in &messages {
            let status = statuses.get(entry_id).copied().unwrap_or(Status::Retry);
            if status == Status::Success {
                succeeded.push(message.id.clone());
            } else {
                self.settle(message, status).await;
            }
        }
        if succeeded.is_empty() {
            return;
        }
        match self.consumer.ack_many(&succeeded).await {
            Ok(()) => {}
            Err(PubSubError::Unsupported { .. }) => {
                for id in &succeeded {
                    if let Err(e) = self.consumer.ack(id).await {
                        warn!(%id, error = %e, "acknowledging a batch entry failed");
                    }
                }
            }
            Err(e) => warn!(count = succeeded.len(), error = %e, "acknowledging a batch failed"),
        }
    }

    async fn settle(&self, message: &ReceivedMessage, status: Status) {
        match status {
            Status::Success => self.ack(message).await,
            Status::Drop => self.give_up(message, "dropped").await,
            Status::Retry
                if !self.dead_letter_native
                    && message.attempt >= self.subscription.max_deliveries =>
            {
                self.give_up(message, "maxDeliveries").await
            }
            Status::Retry => {
                if let Err(e) = self
                    .consumer
                    .nack(&message.id, self.subscription.retry_delay)
                    .await
                {
                    warn!(id = %message.id, error = %e, "nack failed");
                }
            }
        }
    }

    async fn ack(&self, message: &ReceivedMessage) {
        if let Err(e) = self.consumer.ack(&message.id).await {
            warn!(id = %message.id, error = %e, "ack failed");
        }
    }

    /// Dead-letters the message with `reason` when a dead-letter topic is set, else
    /// drops it; either way it is not delivered again.
    async fn give_up(&self, message: &ReceivedMessage, reason: &str) {
        let Some(topic) = &self.subscription.dead_letter_topic else {
            warn!(id = %message.id, reason, "dropping message: no dead-letter topic is set");
            return self.ack(message).await;
        };
        if self.dead_letter_native {
            if let Err(e) = self.consumer.reject(&message.id, reason).await {
                warn!(id = %message.id, error = %e, "native dead-lettering failed");
            }
            return;
        }
        let mut metadata = message.metadata.clone();
        metadata.remove(controls::HEADER_EXPIRATION);
        metadata.remove(controls::HEADER_DELIVER_AT);
        metadata.insert(keys::ORIGINAL_TOPIC.into(), message.topic().to_string());
        metadata.insert(keys::DEAD_LETTER_REASON.into(), reason.to_string());
        let copy = OutgoingMessage {
            topic: topic.clone(),
            payload: message.payload.clone(),
            content_type: message.content_type.clone(),
            metadata,
            partition_key: message.partition_key.clone(),
            expires_at: None,
            deliver_at: None,
        };
        match self.runtime.component().publish(copy).await {
            Ok(_) => self.ack(message).await,
            Err(e) => {
                // Never lose it: leave it to be redelivered and dead-lettered again.
                warn!(id = %message.id, error = %e, "dead-lettering failed; will retry");
                let _ = self
                    .consumer
                    .nack(&message.id, self.subscription.retry_delay)
                    .await;
            }
        }
    }
}

/// The application's view of a received message: its envelope decoded (unless it was
/// published `rawPayload`) and the runtime's own headers taken out of its metadata.
/// Every delivery, single or bulk, does this once per message.
pub fn to_event(message: &ReceivedMessage) -> Result<Event> {
    let trace_parent = message.metadata.get(controls::HEADER_TRACEPARENT).cloned();
    let enveloped = envelope::is_cloudevents(message.content_type.as_deref())
        && !message.metadata.contains_key(controls::HEADER_RAW);
    // The app's metadata: everything but the runtime's headers (built in key order,
    // not cloned whole and then pruned).
    let metadata: crate::Metadata = message
        .metadata
        .iter()
        .filter(|(key, _)| !key.starts_with(controls::RESERVED_PREFIX))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let topic = message.topic().to_string();
    if enveloped {
        let decoded = envelope::decode(&message.payload)?;
        // The envelope's trace, unless a header names another (see `prepare`).
        let trace_parent = trace_parent.or_else(|| {
            decoded
                .envelope
                .get("traceparent")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        });
        Ok(Event {
            id: decoded.id.unwrap_or_else(|| message.id.to_string()),
            topic,
            data: decoded.data,
            content_type: decoded.content_type,
            metadata,
            message_id: message.id.clone(),
            attempt: message.attempt,
            trace_parent,
            cloud_event: Some(decoded.envelope),
            published_at: message.publish_time,
        })
    } else {
        Ok(Event {
            id: message.id.to_string(),
            topic,
            data: message.payload.clone(),
            content_type: message.content_type.clone(),
            metadata,
            message_id: message.id.clone(),
            attempt: message.attempt,
            trace_parent,
            cloud_event: None,
            published_at: message.publish_time,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryComponent;
    use crate::message::{MessageId, Metadata, ReceivedMessage};
    use crate::runtime::PublishRequest;
    use std::sync::Arc;

    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const APP_TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    /// What `request` is on the wire, delivered back as it was sent.
    fn round_trip(request: PublishRequest) -> (OutgoingMessage, Event) {
        let runtime = Runtime::new("ps", Arc::new(MemoryComponent::default()));
        let wire = runtime.wire_message(request).expect("a valid request");
        let delivered = ReceivedMessage {
            id: MessageId::new(wire.topic.clone(), None, 1),
            payload: wire.payload.clone(),
            content_type: wire.content_type.clone(),
            metadata: wire.metadata.clone(),
            partition_key: None,
            attempt: 1,
            publish_time: SystemTime::now(),
        };
        (wire, to_event(&delivered).expect("an event"))
    }

    #[test]
    fn an_envelope_is_told_by_its_content_type_and_carries_the_trace_alone() {
        let (wire, event) = round_trip(
            PublishRequest::new("t", b"\x00\x01".to_vec())
                .with_content_type("application/octet-stream")
                .with_metadata("app", "1")
                .with_metadata(keys::TRACEPARENT, TRACE),
        );
        // The wire metadata is the app's: nothing the envelope already says.
        let app: Metadata = [("app", "1"), (keys::TRACEPARENT, TRACE)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(wire.metadata, app);
        assert_eq!(event.metadata, app);
        assert_eq!(event.data, b"\x00\x01");
        assert_eq!(event.trace_parent.as_deref(), Some(TRACE));
        assert_eq!(event.cloud_event.unwrap()["traceparent"], TRACE);
    }

    #[test]
    fn a_raw_payload_keeps_its_trace_header_and_a_raw_cloud_event_is_not_unwrapped() {
        let app_event = br#"{"specversion":"1.0","id":"a","source":"s","type":"t","data":1}"#;
        for content_type in ["application/cloudevents+json", "application/json"] {
            let (wire, event) = round_trip(
                PublishRequest::new("t", app_event.to_vec())
                    .with_content_type(content_type)
                    .with_metadata(keys::RAW_PAYLOAD, "true")
                    .with_metadata(keys::TRACEPARENT, TRACE),
            );
            assert_eq!(wire.payload, app_event);
            assert_eq!(
                wire.metadata.contains_key(controls::HEADER_RAW),
                content_type == "application/cloudevents+json",
                "{content_type}"
            );
            assert_eq!(event.data, app_event, "{content_type}");
            assert!(event.cloud_event.is_none(), "{content_type}");
            assert_eq!(event.trace_parent.as_deref(), Some(TRACE));
            assert!(event
                .metadata
                .keys()
                .all(|k| k == keys::RAW_PAYLOAD || k == keys::TRACEPARENT));
        }
    }

    #[test]
    fn an_app_cloud_event_with_a_trace_of_its_own_delivers_the_trace_the_metadata_chose() {
        let own = format!(
            r#"{{"specversion":"1.0","id":"a","source":"s","type":"t","traceparent":"{APP_TRACE}","data":1}}"#
        );
        let published = |metadata_trace: Option<&str>| {
            let request = PublishRequest::new("t", own.clone().into_bytes())
                .with_content_type("application/cloudevents+json");
            round_trip(match metadata_trace {
                Some(trace) => request.with_metadata(keys::TRACEPARENT, trace),
                None => request,
            })
        };
        // Another trace in the metadata: kept beside the app's event, which is not
        // rewritten.
        let (wire, event) = published(Some(TRACE));
        assert_eq!(
            wire.metadata
                .get(controls::HEADER_TRACEPARENT)
                .map(String::as_str),
            Some(TRACE)
        );
        assert_eq!(event.trace_parent.as_deref(), Some(TRACE));
        assert_eq!(event.cloud_event.unwrap()["traceparent"], APP_TRACE);
        // The event's own trace, or the same one: no header.
        for metadata_trace in [None, Some(APP_TRACE)] {
            let (wire, event) = published(metadata_trace);
            assert!(!wire.metadata.contains_key(controls::HEADER_TRACEPARENT));
            assert_eq!(event.trace_parent.as_deref(), Some(APP_TRACE));
        }
    }
}
