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
///
/// [`Capabilities::default`] is the baseline: what most built-in components declare
/// (each field's documentation names its baseline value). A component states only what
/// differs: `Capabilities { seek: false, ..Capabilities::default() }`. Serde's defaults
/// for fields missing from an older report are their own, unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Baseline: `Native`.
    pub bulk_publish: Support,
    /// Baseline: `Emulated`.
    pub bulk_subscribe: Support,
    /// Baseline: `Emulated`.
    pub ttl: Support,
    /// Baseline: `Emulated`.
    pub dead_letter: Support,
    /// Producer-side delays: `deliverAt` and `deliverAfter`. Baseline: `Emulated`.
    pub delayed_delivery: Support,
    /// Subscription-side `receiverDelay`. Baseline: `Emulated`.
    pub receiver_delay: Support,
    /// Baseline: `PerTopic`.
    pub ordering: OrderingScope,
    /// One consumer over several topics (list or pattern) with topic-qualified ids.
    /// Baseline: `true`.
    pub multi_topic: bool,
    /// Several consumer groups on one topic, each getting every message; `false`
    /// for a work queue (one group per topic). Baseline: `true`.
    #[serde(default = "yes")]
    pub fan_out: bool,
    /// Message headers: metadata, content type and partition key travel beside the
    /// payload. `false` for a broker or client library that carries bytes only; the
    /// runtime then carries them in a frame in front of the payload (see
    /// [`crate::runtime::carrier`]), and takes the publish time from the frame.
    /// Baseline: `true`.
    #[serde(default = "yes")]
    pub headers: bool,
    /// `Consumer::seek` and `Consumer::last_message_ids`. Baseline: `true`.
    pub seek: bool,
    /// Partitioned topics with partition-count updates; `None` when unsupported.
    /// Baseline: `None`.
    pub partitions: Option<PartitionSupport>,
    /// Baseline: `AtLeastOnce`.
    pub delivery: DeliveryGuarantee,
    /// The largest payload the broker accepts, when it has a limit. Baseline: `None`.
    pub max_message_bytes: Option<usize>,
    /// The most metadata entries a message may carry (the case's own key and
    /// `rawPayload` among them), when the broker or its client has a limit; the suite
    /// draws no more. Baseline: `None` (the suite draws up to 64).
    #[serde(default)]
    pub max_metadata_entries: Option<usize>,
    /// How long a published message may take to reach a running subscriber.
    /// Baseline: 5 s.
    pub delivery_bound: Duration,
    /// How long a negatively acknowledged message may take to come back, beyond the
    /// requested redelivery delay. Baseline: 2 s.
    pub redelivery_bound: Duration,
    /// How late a delayed message may be delivered after its due time. Baseline: 300 ms.
    pub delay_precision: Duration,
    /// How early a delayed message may be delivered (clock skew between parties).
    /// Baseline: 50 ms.
    pub clock_tolerance: Duration,
    /// Whether the broker keeps what it acknowledged across a crash and restart (as
    /// provisioned by the suite: persistence on). Baseline: `true` (a report without
    /// the field reads `false`).
    #[serde(default)]
    pub durable: bool,
    /// How long publishers and subscribers may take to work again, without being
    /// recreated, once the broker or the network is back. Baseline: 10 s.
    #[serde(default)]
    pub recovery_bound: Duration,
    /// How long a delivered, unacknowledged message stays with the member that got it
    /// before another member can get it when that member is gone without a word
    /// (claim idle time, ack wait, visibility timeout); zero where the broker hands it
    /// on as soon as the member's connection dies. Baseline: zero.
    #[serde(default)]
    pub lease: Duration,
    /// Whether a message whose handler works longer than the lease may be handed to
    /// another member while the first still works on it (the lease expires; at-least-
    /// once then delivers it twice). Baseline: `false`.
    #[serde(default)]
    pub redelivers_slow_handlers: bool,
    /// Whether a member that closes hands what it received but did not acknowledge
    /// back to its group at once. `false` where the broker gets such messages back
    /// only when their lease expires (a prefetched batch on a visibility-timeout
    /// queue, a client that cannot release what it fetched): the cases where a member
    /// leaves then wait the lease too. Baseline: `true`.
    #[serde(default = "yes")]
    pub returns_on_close: bool,
}

impl Default for Capabilities {
    /// The baseline: what most built-in components declare.
    fn default() -> Self {
        Capabilities {
            bulk_publish: Support::Native,
            bulk_subscribe: Support::Emulated,
            ttl: Support::Emulated,
            dead_letter: Support::Emulated,
            delayed_delivery: Support::Emulated,
            receiver_delay: Support::Emulated,
            ordering: OrderingScope::PerTopic,
            multi_topic: true,
            fan_out: true,
            headers: true,
            seek: true,
            partitions: None,
            delivery: DeliveryGuarantee::AtLeastOnce,
            max_message_bytes: None,
            max_metadata_entries: None,
            delivery_bound: Duration::from_secs(5),
            redelivery_bound: Duration::from_secs(2),
            delay_precision: Duration::from_millis(300),
            clock_tolerance: Duration::from_millis(50),
            durable: true,
            recovery_bound: Duration::from_secs(10),
            lease: Duration::ZERO,
            redelivers_slow_handlers: false,
            returns_on_close: true,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The baseline is part of the contract: components outside the crate build on it.
    #[test]
    fn the_baseline_is_pinned() {
        let Capabilities {
            bulk_publish,
            bulk_subscribe,
            ttl,
            dead_letter,
            delayed_delivery,
            receiver_delay,
            ordering,
            multi_topic,
            fan_out,
            headers,
            seek,
            partitions,
            delivery,
            max_message_bytes,
            max_metadata_entries,
            delivery_bound,
            redelivery_bound,
            delay_precision,
            clock_tolerance,
            durable,
            recovery_bound,
            lease,
            redelivers_slow_handlers,
            returns_on_close,
        } = Capabilities::default();
        assert_eq!(bulk_publish, Support::Native);
        assert_eq!(bulk_subscribe, Support::Emulated);
        assert_eq!(ttl, Support::Emulated);
        assert_eq!(dead_letter, Support::Emulated);
        assert_eq!(delayed_delivery, Support::Emulated);
        assert_eq!(receiver_delay, Support::Emulated);
        assert_eq!(ordering, OrderingScope::PerTopic);
        assert!(multi_topic);
        assert!(fan_out);
        assert!(headers);
        assert!(seek);
        assert_eq!(partitions, None);
        assert_eq!(delivery, DeliveryGuarantee::AtLeastOnce);
        assert_eq!(max_message_bytes, None);
        assert_eq!(max_metadata_entries, None);
        assert_eq!(delivery_bound, Duration::from_secs(5));
        assert_eq!(redelivery_bound, Duration::from_secs(2));
        assert_eq!(delay_precision, Duration::from_millis(300));
        assert_eq!(clock_tolerance, Duration::from_millis(50));
        assert!(durable);
        assert_eq!(recovery_bound, Duration::from_secs(10));
        assert_eq!(lease, Duration::ZERO);
        assert!(!redelivers_slow_handlers);
        assert!(returns_on_close);
    }
}
