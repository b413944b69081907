//! The shared runtime layer: what a Dapr sidecar adds on top of any component.
//!
//! Applications talk to a [`Runtime`]. It validates requests, wraps payloads in
//! CloudEvents, stamps a `traceparent` on every message, and emulates every feature
//! the component does not declare native: bulk publish (bounded-parallel fallback,
//! `batchPublishKeepOrder`), bulk subscribe batching, retries and dead letters, TTL
//! and delayed delivery. Features declared unsupported are refused with
//! [`PubSubError::Unsupported`].

mod bulk;
pub mod carrier;
pub mod controls;
mod delivery;
pub mod envelope;
mod remote;
pub mod trace;
mod types;

pub use delivery::{to_event, SubscriptionHandle};
pub use remote::{RemoteRuntime, BEYOND_REMOTE_API};
pub use types::*;

use crate::capability::{Capabilities, Feature, Support};
use crate::component::{Component, ConsumerSpec};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage};
use controls::{keys, Controls};
use std::sync::Arc;
use std::time::SystemTime;

/// Settings of the runtime layer.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeOptions {
    /// Entries published at once by the bulk publish fallback (Dapr: 100).
    pub bulk_publish_concurrency: usize,
    /// Emulate every emulatable feature even where the component is native
    /// (to compare both paths).
    pub force_emulation: bool,
    /// The CloudEvent `source`.
    pub app_id: String,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            bulk_publish_concurrency: 100,
            force_emulation: false,
            app_id: "pubsub-conformance".into(),
        }
    }
}

/// The application-facing pub/sub API over one component.
#[derive(Clone)]
pub struct Runtime {
    name: String,
    component: Arc<dyn Component>,
    capabilities: Capabilities,
    options: RuntimeOptions,
    /// The group of each topic, for a component without fan-out (one group per
    /// topic); empty otherwise.
    groups: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    /// Where publish and subscribe go when the runtime is answered elsewhere.
    remote: Option<Arc<dyn RemoteRuntime>>,
}

/// The moment a publish call prepares its messages, with its RFC 3339 text (the
/// envelope's `time`): taken once per call, so a bulk request's entries share it.
pub(crate) struct Stamp {
    at: SystemTime,
    text: String,
}

impl Stamp {
    pub(crate) fn now() -> Stamp {
        let at = SystemTime::now();
        Stamp {
            at,
            text: controls::format_time(at),
        }
    }
}

impl Runtime {
    /// A runtime over `component`, known to applications as pub/sub `name`.
    pub fn new(name: impl Into<String>, component: Arc<dyn Component>) -> Self {
        Runtime::with_options(name, component, RuntimeOptions::default())
    }

    /// A runtime with explicit options.
    pub fn with_options(
        name: impl Into<String>,
        component: Arc<dyn Component>,
        options: RuntimeOptions,
    ) -> Self {
        let capabilities = component.capabilities();
        Runtime {
            name: name.into(),
            component: carrier::HeaderCarrier::wrap(component),
            capabilities,
            options,
            groups: Arc::default(),
            remote: None,
        }
    }

    /// A runtime answered by `remote`, known to applications as pub/sub `name`:
    /// publish, bulk publish and subscribe go to it as they are. `description`
    /// declares what it offers (capabilities, bounds, kind, broker version); its
    /// other methods are the remote's and are not called through this runtime.
    pub fn remote(
        name: impl Into<String>,
        description: Arc<dyn Component>,
        remote: Arc<dyn RemoteRuntime>,
    ) -> Self {
        Runtime {
            name: name.into(),
            capabilities: description.capabilities(),
            component: description,
            options: RuntimeOptions::default(),
            groups: Arc::default(),
            remote: Some(remote),
        }
    }

    /// Whether publish and subscribe are answered elsewhere ([`Runtime::remote`]).
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Whether JSON payloads cross the remote runtime as values serialized again (by
    /// an SDK's publisher or app, [`RemoteRuntime::reserializes_json`]): equal as
    /// JSON, not as bytes.
    pub fn reserializes_json(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.reserializes_json())
    }

    /// Whether the spans this runtime records reach this process's tracing
    /// subscriber: always in process, for a remote one as it says
    /// ([`RemoteRuntime::records_spans_here`]).
    pub fn records_spans_here(&self) -> bool {
        self.remote.as_ref().is_none_or(|r| r.records_spans_here())
    }

    /// Why subscribers' handlers see only an event's data and metadata (no
    /// CloudEvent, no content type), if they do ([`RemoteRuntime::hands_over_data_only`]).
    pub fn hands_over_data_only(&self) -> Option<&'static str> {
        self.remote.as_ref().and_then(|r| r.hands_over_data_only())
    }

    /// Whether deliveries reach subscribers over gRPC, whose metadata names are
    /// fewer than HTTP's ([`RemoteRuntime::delivers_metadata_over_grpc`]).
    pub fn delivers_metadata_over_grpc(&self) -> bool {
        self.remote
            .as_ref()
            .is_some_and(|r| r.delivers_metadata_over_grpc())
    }

    /// Why each subscriber's attempts are as its app counted them, if they are
    /// ([`RemoteRuntime::counts_attempts_per_app`]).
    pub fn counts_attempts_per_app(&self) -> Option<&'static str> {
        self.remote
            .as_ref()
            .and_then(|r| r.counts_attempts_per_app())
    }

    /// The pub/sub name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The component underneath.
    pub fn component(&self) -> &Arc<dyn Component> {
        &self.component
    }

    /// What the component declares.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// How a feature is provided to applications through this runtime.
    pub fn mode(&self, feature: Feature) -> Support {
        match self.capabilities.support(feature) {
            Support::Native if self.options.force_emulation && emulatable(feature) => {
                Support::Emulated
            }
            other => other,
        }
    }

    fn require(&self, feature: Feature) -> Result<Support> {
        match self.mode(feature) {
            Support::Unsupported => Err(PubSubError::unsupported(
                self.component.kind(),
                feature.name(),
            )),
            mode => Ok(mode),
        }
    }

    /// Publishes one message.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        if let Some(remote) = &self.remote {
            return remote.publish(request).await;
        }
        let message = self.wire_message(request)?;
        self.component.publish(message).await
    }

    /// The message [`Runtime::publish`] hands the component for `request`, without
    /// sending it: its envelope, content type and wire metadata, as the broker gets
    /// them (for tools that measure or inspect what goes on the wire).
    pub fn wire_message(&self, request: PublishRequest) -> Result<OutgoingMessage> {
        controls::validate_topic(&request.topic)?;
        self.prepare(
            &request.topic,
            request.data,
            request.content_type,
            request.metadata,
            None,
            &Stamp::now(),
        )
    }

    /// Turns application data and metadata into the wire message; `default_traceparent`
    /// is used when the metadata carries none (a bulk entry's span in its call's trace).
    fn prepare(
        &self,
        topic: &str,
        data: Vec<u8>,
        content_type: Option<String>,
        metadata: Metadata,
        default_traceparent: Option<String>,
        stamp: &Stamp,
    ) -> Result<OutgoingMessage> {
        let now = stamp.at;
        let Controls {
            raw_payload,
            ttl,
            deliver_at,
            partition_key,
            traceparent,
        } = controls::parse_controls(&metadata, now)?;
        let ttl_mode = match ttl {
            Some(_) => Some(self.require(Feature::Ttl)?),
            None => None,
        };
        let delay_mode = match deliver_at {
            Some(_) => Some(self.require(Feature::DelayedDelivery)?),
            None => None,
        };
        if !raw_payload {
            envelope::check_declared_json(content_type.as_deref(), &data)?;
        }
        let app_event = if raw_payload {
            None
        } else {
            envelope::AppEvent::parse(content_type.as_deref(), &data)
        };
        let traceparent = traceparent
            .or_else(|| app_event.as_ref().and_then(|e| e.attribute("traceparent")))
            .or(default_traceparent)
            .unwrap_or_else(trace::new_traceparent);
        let expires_at = ttl.map(|ttl| now + ttl);
        let expiration = expires_at.map(controls::format_time);

        let mut wire = metadata;
        if ttl_mode == Some(Support::Emulated) {
            wire.insert(
                controls::HEADER_EXPIRATION.into(),
                expiration.clone().expect("ttl set"),
            );
        }
        if delay_mode == Some(Support::Emulated) {
            wire.insert(
                controls::HEADER_DELIVER_AT.into(),
                controls::format_time(deliver_at.expect("delay set")),
            );
        }
        let (payload, wire_content_type) = if raw_payload {
            wire.insert(controls::HEADER_TRACEPARENT.into(), traceparent);
            if envelope::is_cloudevents(content_type.as_deref()) {
                wire.insert(controls::HEADER_RAW.into(), "true".into());
            }
            (data, content_type)
        } else {
            // The envelope carries the trace; the header only where the app's own
            // CloudEvent keeps a trace of its own that the metadata overrides.
            if app_event
                .as_ref()
                .is_some_and(|event| event.keeps_another_trace(&traceparent))
            {
                wire.insert(controls::HEADER_TRACEPARENT.into(), traceparent.clone());
            }
            let mut id_text = uuid::Uuid::encode_buffer();
            let id = uuid::Builder::from_random_bytes(rand::random())
                .into_uuid()
                .hyphenated()
                .encode_lower(&mut id_text);
            let fields = envelope::EnvelopeFields {
                id,
                source: &self.options.app_id,
                topic,
                pubsub_name: &self.name,
                traceparent: &traceparent,
                content_type: content_type.as_deref(),
                expiration: expiration.as_deref(),
                time: &stamp.text,
            };
            let body = match app_event {
                // The app sent a CloudEvent: complete it, never wrap it twice.
                Some(event) => event.complete(&fields)?,
                None => envelope::encode(&fields, &data)?,
            };
            (body, Some(envelope::CLOUDEVENTS_CONTENT_TYPE.to_string()))
        };
        Ok(OutgoingMessage {
            topic: topic.to_string(),
            payload,
            content_type: wire_content_type,
            metadata: wire,
            partition_key,
            expires_at: (ttl_mode == Some(Support::Native))
                .then_some(expires_at)
                .flatten(),
            deliver_at: (delay_mode == Some(Support::Native))
                .then_some(deliver_at)
                .flatten(),
        })
    }

    /// Publishes a bulk request; see [`BulkPublishRequest`] and CONTRACT.md section 2.
    pub async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        if let Some(remote) = &self.remote {
            return remote.bulk_publish(request).await;
        }
        bulk::publish(self, request).await
    }

    /// Starts delivering to `handler`; stops when the handle is stopped or dropped.
    pub async fn subscribe(
        &self,
        subscription: Subscription,
        handler: Handler,
    ) -> Result<SubscriptionHandle> {
        if let Some(remote) = &self.remote {
            return remote.subscribe(subscription, handler).await;
        }
        self.validate_subscription(&subscription, &handler)?;
        let spec = self.consumer_spec(&subscription);
        let consumer = self.component.consumer(spec).await?;
        Ok(delivery::start(
            self.clone(),
            subscription,
            handler,
            consumer,
        ))
    }

    /// Creates the subscription's consumer group ahead of its first subscriber, so
    /// that messages published from now on are kept for it even on brokers that only
    /// keep messages for groups that exist (queues, sessions). A no-op where groups
    /// see earlier messages anyway.
    pub async fn create_group(&self, subscription: &Subscription) -> Result<()> {
        if let Some(remote) = &self.remote {
            return remote.create_group(subscription).await;
        }
        self.validate_topics(subscription)?;
        self.component
            .create_group(&self.consumer_spec(subscription))
            .await
    }

    /// The consumer a subscription needs: native features are passed to the
    /// component, emulated ones stay with the runtime.
    fn consumer_spec(&self, subscription: &Subscription) -> ConsumerSpec {
        let native = |feature| self.mode(feature) == Support::Native;
        ConsumerSpec {
            topics: subscription.topics.clone(),
            group: subscription.group.clone(),
            start: subscription.start,
            max_deliveries: native(Feature::DeadLetter).then_some(subscription.max_deliveries),
            dead_letter_topic: subscription
                .dead_letter_topic
                .clone()
                .filter(|_| native(Feature::DeadLetter)),
            receiver_delay: subscription
                .receiver_delay
                .filter(|_| native(Feature::ReceiverDelay)),
        }
    }

    fn validate_subscription(&self, subscription: &Subscription, handler: &Handler) -> Result<()> {
        self.validate_topics(subscription)?;
        if matches!(handler, Handler::Bulk(_)) {
            self.require(Feature::BulkSubscribe)?;
        }
        match (handler, &subscription.bulk) {
            (Handler::Bulk(_), Some(bulk)) if bulk.max_messages_count == 0 => {
                Err(PubSubError::InvalidRequest(
                    "bulkSubscribe maxMessagesCount must be at least 1".into(),
                ))
            }
            (Handler::Bulk(_), Some(bulk)) if bulk.max_await_duration.is_zero() => {
                Err(PubSubError::InvalidRequest(
                    "bulkSubscribe maxAwaitDurationMs must be above 0".into(),
                ))
            }
            (Handler::Single(_), Some(_)) => Err(PubSubError::InvalidRequest(
                "bulkSubscribe is enabled but the handler takes single messages".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Checks what a subscription asks for, apart from its handler.
    /// On a component without fan-out, refuses a second group on a topic that
    /// already has one (through this runtime).
    fn claim_group(&self, subscription: &Subscription) -> Result<()> {
        if self.capabilities.fan_out {
            return Ok(());
        }
        let topics: Vec<&String> = match &subscription.topics {
            crate::TopicSelector::Single(t) => vec![t],
            crate::TopicSelector::List(ts) => ts.iter().collect(),
            crate::TopicSelector::Pattern(_) => Vec::new(),
        };
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((topic, group)) = topics.iter().find_map(|t| {
            groups
                .get(*t)
                .filter(|g| **g != subscription.group)
                .map(|g| (*t, g))
        }) {
            return Err(PubSubError::Unsupported {
                component: self.component.kind().to_string(),
                feature: format!(
                    "fan-out: topic '{topic}' already has group '{group}', and the component delivers each message to one group only, not also to '{}'",
                    subscription.group
                ),
            });
        }
        for topic in topics {
            groups.insert(topic.clone(), subscription.group.clone());
        }
        Ok(())
    }

    fn validate_topics(&self, subscription: &Subscription) -> Result<()> {
        match &subscription.topics {
            crate::TopicSelector::Single(t) => controls::validate_topic(t)?,
            crate::TopicSelector::List(ts) => {
                if ts.is_empty() {
                    return Err(PubSubError::InvalidRequest(
                        "subscription lists no topic".into(),
                    ));
                }
                ts.iter().try_for_each(|t| controls::validate_topic(t))?;
            }
            crate::TopicSelector::Pattern(p) => {
                controls::validate_topic(&p.replace('*', "x"))?;
            }
        }
        if subscription.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "subscription group is empty".into(),
            ));
        }
        if subscription.topics.is_multi_topic() {
            self.require(Feature::MultiTopic)?;
        }
        self.claim_group(subscription)?;
        if subscription.max_deliveries == 0 {
            return Err(PubSubError::InvalidRequest(
                "subscription maxDeliveries must be at least 1".into(),
            ));
        }
        if let Some(dlq) = &subscription.dead_letter_topic {
            controls::validate_topic(dlq)?;
            if subscription.topics.matches(dlq) {
                return Err(PubSubError::InvalidRequest(format!(
                    "dead-letter topic '{dlq}' is one of the subscribed topics"
                )));
            }
            self.require(Feature::DeadLetter)?;
        }
        if subscription.receiver_delay.is_some() {
            self.require(Feature::ReceiverDelay)?;
        }
        Ok(())
    }
}

/// Features the runtime can do on top of any component.
fn emulatable(feature: Feature) -> bool {
    matches!(
        feature,
        Feature::BulkPublish
            | Feature::BulkSubscribe
            | Feature::Ttl
            | Feature::DeadLetter
            | Feature::DelayedDelivery
            | Feature::ReceiverDelay
    )
}

/// Request metadata keys that apply to the request, not to entries.
const REQUEST_ONLY_KEYS: [&str; 2] = [keys::KEEP_ORDER, keys::MAX_BULK_PUB_BYTES];
