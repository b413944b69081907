//! Which function runs each case of `catalogue.yaml`, and the few bounds computed by a
//! function rather than their rule. [`super::all`] joins them to the entries by id.

use super::bound::BoundFn;
use super::case::CaseFn;
use super::certification::{self, broker, load, members, network};
use super::{
    bulk_publish, bulk_subscribe, dead_letter, delay, envelope, groups, message_id, multi_topic,
    ordering, partitions, publish, retry, subscribe, topics, tracing, ttl,
};
use crate::fault_proxy::NetworkFault;
use ordering::Keys;

/// `run!(f, args)`: a case body calling `f(ctx, args)`.
macro_rules! run {
    ($body:path $(, $arg:expr)*) => {
        |ctx| Box::pin($body(ctx $(, $arg)*))
    };
}

/// The body of every case, by id.
pub(super) const BODIES: &[(&str, CaseFn)] = &[
    ("bulk-publish.all-success", run!(bulk_publish::all_success)),
    (
        "bulk-publish.entry-id-space",
        run!(bulk_publish::entry_id_space),
    ),
    ("bulk-publish.entry-ids", run!(bulk_publish::entry_ids)),
    ("bulk-publish.fidelity", run!(publish::fidelity, true)),
    ("bulk-publish.keep-order", run!(bulk_publish::keep_order)),
    (
        "bulk-publish.metadata-merge",
        run!(bulk_publish::metadata_merge),
    ),
    (
        "bulk-publish.partial-failure",
        run!(bulk_publish::partial_failure),
    ),
    ("bulk-publish.size-limit", run!(bulk_publish::size_limit)),
    (
        "bulk-publish.status-mapping",
        run!(bulk_publish::status_mapping),
    ),
    (
        "bulk-subscribe.exhausted-dead-lettered",
        run!(bulk_subscribe::exhausted_dead_lettered),
    ),
    (
        "bulk-subscribe.expired-entries",
        run!(bulk_subscribe::expired_entries),
    ),
    (
        "bulk-subscribe.handler-error",
        run!(bulk_subscribe::handler_error),
    ),
    ("bulk-subscribe.max-await", run!(bulk_subscribe::max_await)),
    (
        "bulk-subscribe.max-messages",
        run!(bulk_subscribe::max_messages),
    ),
    ("bulk-subscribe.statuses", run!(bulk_subscribe::statuses)),
    ("certification.backlog", run!(certification::backlog)),
    ("certification.broker-pause", run!(broker::broker_pause)),
    ("certification.broker-restart", run!(broker::broker_restart)),
    (
        "certification.close-stops-delivery",
        run!(members::close_stops_delivery),
    ),
    (
        "certification.concurrent-publishers",
        run!(load::concurrent_publishers),
    ),
    (
        "certification.consumer-crash",
        run!(members::consumer_crash),
    ),
    (
        "certification.consumer-leaves",
        run!(members::consumer_leaves),
    ),
    (
        "certification.crash-not-dead-lettered",
        run!(members::crash_not_dead_lettered),
    ),
    (
        "certification.exhausted-stays-dead",
        run!(certification::exhausted_stays_dead, false),
    ),
    (
        "certification.exhausted-stays-dead-after-restart",
        run!(certification::exhausted_stays_dead, true),
    ),
    ("certification.long-drain", run!(load::long_drain)),
    (
        "certification.network-black-hole",
        run!(network::network_fault, NetworkFault::BlackHole),
    ),
    (
        "certification.network-cut",
        run!(network::network_fault, NetworkFault::Cut),
    ),
    (
        "certification.network-cut-single-publishes",
        run!(network::network_cut_single_publishes),
    ),
    (
        "certification.retry-while-members-change",
        run!(members::retry_while_members_change),
    ),
    ("certification.slow-handler", run!(load::slow_handler)),
    (
        "certification.slow-network-bulk-subscribe",
        run!(network::slow_network_bulk_subscribe),
    ),
    ("dead-letter.drop", run!(dead_letter::drop_to_dead_letter)),
    ("dead-letter.max-deliveries", run!(retry::exhausted, true)),
    ("delay.beyond-lease", run!(delay::beyond_lease)),
    ("delay.deliver-after", run!(delay::deliver_after)),
    ("delay.deliver-at", run!(delay::deliver_at)),
    ("delay.no-starvation", run!(delay::no_starvation)),
    ("delay.receiver-delay", run!(delay::receiver_delay)),
    (
        "delay.receiver-delay-from-publish",
        run!(delay::receiver_delay_from_publish),
    ),
    ("envelope.app-cloudevent", run!(envelope::app_cloudevent)),
    ("envelope.cloudevents", run!(envelope::cloudevents)),
    ("envelope.raw-payload", run!(envelope::raw_payload)),
    ("envelope.unique-ids", run!(envelope::unique_ids)),
    ("groups.distinct-names", run!(groups::distinct_groups)),
    (
        "message-id.round-trip",
        run!(message_id::message_id_round_trip),
    ),
    (
        "multi-topic.ack-cumulative",
        run!(multi_topic::ack_cumulative),
    ),
    ("multi-topic.ack-many", run!(multi_topic::ack_many)),
    ("multi-topic.ack-owner", run!(multi_topic::ack_owner)),
    ("multi-topic.ack-refused", run!(multi_topic::ack_refused)),
    (
        "multi-topic.last-message-ids",
        run!(multi_topic::last_message_ids),
    ),
    ("multi-topic.owner-topic", run!(multi_topic::owner_topic)),
    ("multi-topic.seek", run!(multi_topic::seek)),
    (
        "multi-topic.seek-earliest-latest",
        run!(multi_topic::seek_earliest_latest),
    ),
    (
        "multi-topic.seek-publish-id",
        run!(multi_topic::seek_publish_id),
    ),
    ("multi-topic.seek-refused", run!(multi_topic::seek_refused)),
    (
        "ordering.after-retry",
        run!(ordering::ordering, true, Keys::Plain),
    ),
    (
        "ordering.declared-scope",
        run!(ordering::ordering, false, Keys::Plain),
    ),
    (
        "ordering.key-space",
        run!(ordering::ordering, false, Keys::Odd),
    ),
    (
        "partitions.invalid-updates",
        run!(partitions::invalid_updates),
    ),
    ("partitions.key-routing", run!(partitions::key_routing)),
    ("partitions.update-seen", run!(partitions::update_seen)),
    ("partitions.watch", run!(partitions::watch)),
    (
        "partitions.watch-after-restart",
        run!(partitions::watch_after_restart),
    ),
    ("partitions.watch-resend", run!(partitions::watch_resend)),
    ("partitions.watch-several", run!(partitions::watch_several)),
    (
        "publish.concurrent-fidelity",
        run!(publish::concurrent_fidelity),
    ),
    ("publish.delivery", run!(publish::delivery)),
    ("publish.fidelity", run!(publish::fidelity, false)),
    (
        "publish.fidelity-after-wait",
        run!(publish::fidelity_after_wait),
    ),
    ("publish.invalid-requests", run!(publish::invalid_requests)),
    ("publish.size-boundary", run!(publish::size_boundary)),
    ("retry.delay", run!(retry::retry_delay)),
    (
        "retry.exhausted-without-dead-letter",
        run!(retry::exhausted, false),
    ),
    ("retry.redelivery", run!(retry::redelivery)),
    (
        "subscribe.acked-not-redelivered",
        run!(subscribe::acked_not_redelivered),
    ),
    (
        "subscribe.cancelled-receive",
        run!(subscribe::cancelled_receive),
    ),
    (
        "subscribe.competing-consumers",
        run!(subscribe::competing_consumers),
    ),
    ("subscribe.fan-out", run!(subscribe::fan_out)),
    (
        "subscribe.group-isolation",
        run!(subscribe::group_isolation),
    ),
    (
        "subscribe.group-without-members",
        run!(subscribe::group_without_members),
    ),
    ("topics.distinct-names", run!(topics::distinct_names)),
    ("tracing.bulk-parent", run!(tracing::bulk_parent)),
    ("tracing.per-entry", run!(tracing::per_entry)),
    ("ttl.expired-dead-lettered", run!(ttl::expired, true)),
    ("ttl.expired-not-delivered", run!(ttl::expired, false)),
    ("ttl.live-delivered", run!(ttl::live)),
    ("ttl.live-late-in-life", run!(ttl::late_in_life)),
];

/// Bounds that depend on a declaration in a way a rule's sum cannot say, by id.
pub(super) const CUSTOM_BOUNDS: &[(&str, BoundFn)] = &[
    ("certification.consumer-leaves", |c| {
        c.delivery_bound * 2 + c.redelivery_bound + members::returned_after(c)
    }),
    ("certification.slow-handler", |c| {
        load::slow_handler_time(c) + c.redelivery_bound * 2 + c.delivery_bound * 2
    }),
    ("ttl.live-late-in-life", |c| {
        ttl::late_ttl(c) + c.delivery_bound
    }),
];
