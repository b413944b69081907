//! What a component declares about itself, in the spirit of OpenDAL's `Capability`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a feature is provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Support {
    /// The broker does it; the runtime passes it through.
    Native,
    /// The runtime layer does it on top of the component.
    Emulated,
    /// Neither: using it must give a clear `Unsupported` error.
    Unsupported,
}

impl Support {
    /// True unless unsupported.
    pub fn is_available(self) -> bool {
        self != Support::Unsupported
    }
}

/// The ordering a component guarantees to a single subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OrderingScope {
    None,
    PerTopic,
    PerPartition,
    PerKey,
}

/// The delivery guarantee a component claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryGuarantee {
    AtMostOnce,
    AtLeastOnce,
    ExactlyOnce,
}

/// A feature of the contract, as named in capability declarations and in the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    BulkPublish,
    BulkSubscribe,
    Ttl,
    DeadLetter,
    DelayedDelivery,
    /// A subscription's `receiverDelay` (delay counted from publish time on the
    /// subscriber's side), apart from producer-side `deliverAt`/`deliverAfter`.
    ReceiverDelay,
    /// Several groups on one topic, each getting every message (a work queue
    /// without it has one group per topic).
    FanOut,
    Ordering,
    MultiTopic,
    Seek,
    Partitions,
}

impl Feature {
    /// The kebab-case name used in reports and CLI output.
    pub fn name(self) -> &'static str {
        match self {
            Feature::BulkPublish => "bulk-publish",
            Feature::BulkSubscribe => "bulk-subscribe",
            Feature::Ttl => "ttl",
            Feature::DeadLetter => "dead-letter",
            Feature::DelayedDelivery => "delayed-delivery",
            Feature::ReceiverDelay => "receiver-delay",
            Feature::FanOut => "fan-out",
            Feature::Ordering => "ordering",
            Feature::MultiTopic => "multi-topic",
            Feature::Seek => "seek",
            Feature::Partitions => "partitions",
        }
    }
}

/// Everything a component declares. The runtime emulates `Emulated` features, refuses
/// `Unsupported` ones, and passes `Native` ones to the component. The suite checks
/// exactly what is declared, with waits derived from the declared bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    pub bulk_publish: Support,
    pub bulk_subscribe: Support,
    pub ttl: Support,
    pub dead_letter: Support,
    /// Producer-side delays: `deliverAt` and `deliverAfter`.
    pub delayed_delivery: Support,
    /// Subscription-side `receiverDelay`.
    pub receiver_delay: Support,
    pub ordering: OrderingScope,
    /// One consumer over several topics (list or pattern) with topic-qualified ids.
    pub multi_topic: bool,
    /// Several consumer groups on one topic, each getting every message; `false`
    /// for a work queue (one group per topic).
    #[serde(default = "yes")]
    pub fan_out: bool,
    /// Message headers: metadata, content type and partition key travel beside the
    /// payload. `false` for a broker or client library that carries bytes only; the
    /// runtime then carries them in a frame in front of the payload (see
    /// [`crate::runtime::carrier`]), and takes the publish time from the frame.
    #[serde(default = "yes")]
    pub headers: bool,
    /// `Consumer::seek` and `Consumer::last_message_ids`.
    pub seek: bool,
    /// Partitioned topics with partition-count updates; `None` when unsupported.
    pub partitions: Option<PartitionSupport>,
    pub delivery: DeliveryGuarantee,
    /// The largest payload the broker accepts, when it has a limit.
    pub max_message_bytes: Option<usize>,
    /// How long a published message may take to reach a running subscriber.
    pub delivery_bound: Duration,
    /// How long a negatively acknowledged message may take to come back, beyond the
    /// requested redelivery delay.
    pub redelivery_bound: Duration,
    /// How late a delayed message may be delivered after its due time.
    pub delay_precision: Duration,
    /// How early a delayed message may be delivered (clock skew between parties).
    pub clock_tolerance: Duration,
    /// Whether the broker keeps what it acknowledged across a crash and restart (as
    /// provisioned by the suite: persistence on).
    #[serde(default)]
    pub durable: bool,
    /// How long publishers and subscribers may take to work again, without being
    /// recreated, once the broker or the network is back.
    #[serde(default)]
    pub recovery_bound: Duration,
    /// How long a delivered, unacknowledged message stays with the member that got it
    /// before another member can get it when that member is gone without a word
    /// (claim idle time, ack wait, visibility timeout); zero where the broker hands it
    /// on as soon as the member's connection dies.
    #[serde(default)]
    pub lease: Duration,
    /// Whether a message whose handler works longer than the lease may be handed to
    /// another member while the first still works on it (the lease expires; at-least-
    /// once then delivers it twice).
    #[serde(default)]
    pub redelivers_slow_handlers: bool,
    /// Whether a member that closes hands what it received but did not acknowledge
    /// back to its group at once. `false` where the broker gets such messages back
    /// only when their lease expires (a prefetched batch on a visibility-timeout
    /// queue, a client that cannot release what it fetched): the cases where a member
    /// leaves then wait the lease too.
    #[serde(default = "yes")]
    pub returns_on_close: bool,
}

fn yes() -> bool {
    true
}

/// Partition support details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSupport {
    /// How long publishers and subscribers may take to use added partitions.
    pub discovery_bound: Duration,
    /// Partitions emulated (a topic per partition and a watched record in the broker)
    /// rather than the broker's own.
    #[serde(default)]
    pub emulated: bool,
}

impl Capabilities {
    /// How the given feature is provided.
    pub fn support(&self, feature: Feature) -> Support {
        let available = |yes: bool| {
            if yes {
                Support::Native
            } else {
                Support::Unsupported
            }
        };
        match feature {
            Feature::BulkPublish => self.bulk_publish,
            Feature::BulkSubscribe => self.bulk_subscribe,
            Feature::Ttl => self.ttl,
            Feature::DeadLetter => self.dead_letter,
            Feature::DelayedDelivery => self.delayed_delivery,
            Feature::ReceiverDelay => self.receiver_delay,
            Feature::FanOut => available(self.fan_out),
            Feature::Ordering => available(self.ordering != OrderingScope::None),
            Feature::MultiTopic => available(self.multi_topic),
            Feature::Seek => available(self.seek),
            Feature::Partitions => match self.partitions {
                Some(p) if p.emulated => Support::Emulated,
                Some(_) => Support::Native,
                None => Support::Unsupported,
            },
        }
    }
}
