//! Which function runs each case of `catalogue.yaml`, and the few bounds computed by a
//! function rather than their rule. [`super::all`] joins them to the entries by id.

use super::bound::BoundFn;
use super::case::CaseFn;
use super::certification::{self, broker, load, members, network};
use super::returned_after;
use super::{
    bulk_publish, bulk_subscribe, dead_letter, delay, envelope, groups, message_id, multi_topic,
    ordering, partitions, publish, retry, subscribe, topics, tracing, ttl,
};
use crate::fault_proxy::NetworkFault;
use members::{Leaving, Staying};
use ordering::Keys;

/// `"id" => f, args;` rows: the case `id` runs `f(ctx, args)`.
macro_rules! bodies {
    ($($id:literal => $body:path $(, $arg:expr)*;)*) => {
        &[$(($id, |ctx| Box::pin($body(ctx $(, $arg)*)))),*]
    };
}

/// The body of every case, by id.
pub(super) const BODIES: &[(&str, CaseFn)] = bodies! {
    "bulk-publish.all-success" => bulk_publish::all_success;
    "bulk-publish.entry-id-space" => bulk_publish::entry_id_space;
    "bulk-publish.entry-ids" => bulk_publish::entry_ids;
    "bulk-publish.fidelity" => publish::fidelity, true;
    "bulk-publish.keep-order" => bulk_publish::keep_order;
    "bulk-publish.metadata-merge" => bulk_publish::metadata_merge;
    "bulk-publish.partial-failure" => bulk_publish::partial_failure;
    "bulk-publish.size-limit" => bulk_publish::size_limit;
    "bulk-publish.status-mapping" => bulk_publish::status_mapping;
    "bulk-subscribe.exhausted-dead-lettered" => bulk_subscribe::exhausted_dead_lettered;
    "bulk-subscribe.expired-entries" => bulk_subscribe::expired_entries;
    "bulk-subscribe.handler-error" => bulk_subscribe::handler_error;
    "bulk-subscribe.max-await" => bulk_subscribe::max_await;
    "bulk-subscribe.max-messages" => bulk_subscribe::max_messages;
    "bulk-subscribe.statuses" => bulk_subscribe::statuses;
    "certification.backlog" => certification::backlog;
    "certification.broker-pause" => broker::broker_pause;
    "certification.broker-restart" => broker::broker_restart;
    "certification.close-stops-delivery" => members::close_stops_delivery;
    "certification.concurrent-publishers" => load::concurrent_publishers;
    "certification.consumer-crash" => members::consumer_crash;
    "certification.consumer-dropped-others-stay" => members::consumer_leaves, Staying::Meanwhile, Leaving::Dropped;
    "certification.consumer-leaves" => members::consumer_leaves, Staying::Later, Leaving::Closed;
    "certification.consumer-leaves-others-first" => members::consumer_leaves, Staying::Throughout, Leaving::Closed;
    "certification.consumer-leaves-others-stay" => members::consumer_leaves, Staying::Meanwhile, Leaving::Closed;
    "certification.crash-not-dead-lettered" => members::crash_not_dead_lettered;
    "certification.exhausted-stays-dead" => certification::exhausted_stays_dead, false;
    "certification.exhausted-stays-dead-after-restart" => certification::exhausted_stays_dead, true;
    "certification.long-drain" => load::long_drain;
    "certification.network-black-hole" => network::network_fault, NetworkFault::BlackHole;
    "certification.network-cut" => network::network_fault, NetworkFault::Cut;
    "certification.network-cut-single-publishes" => network::network_cut_single_publishes;
    "certification.retry-while-members-change" => members::retry_while_members_change;
    "certification.slow-handler" => load::slow_handler;
    "certification.slow-network-bulk-subscribe" => network::slow_network_bulk_subscribe;
    "certification.subscription-dropped-others-stay" => members::subscription_dropped_others_stay;
    "dead-letter.drop" => dead_letter::drop_to_dead_letter;
    "dead-letter.max-deliveries" => retry::exhausted, true;
    "delay.beyond-lease" => delay::beyond_lease;
    "delay.deliver-after" => delay::deliver_after;
    "delay.deliver-at" => delay::deliver_at;
    "delay.no-starvation" => delay::no_starvation;
    "delay.receiver-delay" => delay::receiver_delay;
    "delay.receiver-delay-from-publish" => delay::receiver_delay_from_publish;
    "envelope.app-cloudevent" => envelope::app_cloudevent;
    "envelope.cloudevents" => envelope::cloudevents;
    "envelope.raw-payload" => envelope::raw_payload;
    "envelope.unique-ids" => envelope::unique_ids;
    "groups.distinct-names" => groups::distinct_groups;
    "message-id.round-trip" => message_id::message_id_round_trip;
    "multi-topic.ack-cumulative" => multi_topic::ack_cumulative;
    "multi-topic.ack-many" => multi_topic::ack_many;
    "multi-topic.ack-owner" => multi_topic::ack_owner;
    "multi-topic.ack-refused" => multi_topic::ack_refused;
    "multi-topic.last-message-ids" => multi_topic::last_message_ids;
    "multi-topic.owner-topic" => multi_topic::owner_topic;
    "multi-topic.seek" => multi_topic::seek;
    "multi-topic.seek-edges" => multi_topic::seek_edges;
    "multi-topic.seek-earliest-latest" => multi_topic::seek_earliest_latest;
    "multi-topic.seek-publish-id" => multi_topic::seek_publish_id;
    "multi-topic.seek-refused" => multi_topic::seek_refused;
    "ordering.after-retry" => ordering::ordering, true, Keys::Plain;
    "ordering.declared-scope" => ordering::ordering, false, Keys::Plain;
    "ordering.key-space" => ordering::ordering, false, Keys::Odd;
    "partitions.invalid-updates" => partitions::invalid_updates;
    "partitions.key-routing" => partitions::key_routing;
    "partitions.update-seen" => partitions::update_seen;
    "partitions.update-seen-in-list" => partitions::update_seen_in_list;
    "partitions.watch" => partitions::watch;
    "partitions.watch-after-restart" => partitions::watch_after_restart;
    "partitions.watch-resend" => partitions::watch_resend;
    "partitions.watch-several" => partitions::watch_several;
    "publish.concurrent-fidelity" => publish::concurrent_fidelity;
    "publish.delivery" => publish::delivery;
    "publish.fidelity" => publish::fidelity, false;
    "publish.fidelity-after-wait" => publish::fidelity_after_wait;
    "publish.invalid-requests" => publish::invalid_requests;
    "publish.size-boundary" => publish::size_boundary;
    "retry.delay" => retry::retry_delay;
    "retry.exhausted-without-dead-letter" => retry::exhausted, false;
    "retry.redelivery" => retry::redelivery;
    "subscribe.acked-not-redelivered" => subscribe::acked_not_redelivered;
    "subscribe.cancelled-receive" => subscribe::cancelled_receive;
    "subscribe.competing-consumers" => subscribe::competing_consumers;
    "subscribe.method-edges" => subscribe::method_edges;
    "subscribe.start-latest" => subscribe::start_latest;
    "subscribe.fan-out" => subscribe::fan_out;
    "subscribe.group-isolation" => subscribe::group_isolation;
    "subscribe.group-without-members" => subscribe::group_without_members;
    "topics.distinct-names" => topics::distinct_names;
    "tracing.bulk-parent" => tracing::bulk_parent;
    "tracing.per-entry" => tracing::per_entry;
    "ttl.expired-dead-lettered" => ttl::expired, true;
    "ttl.expired-not-delivered" => ttl::expired, false;
    "ttl.live-delivered" => ttl::live;
    "ttl.live-late-in-life" => ttl::late_in_life;
};

/// Bounds that depend on a declaration in a way a rule's sum cannot say, by id.
pub(super) const CUSTOM_BOUNDS: &[(&str, BoundFn)] = &[
    // As a crashed member's, a dropped member's messages may come back after the lease.
    ("certification.consumer-dropped-others-stay", |c| {
        c.delivery_bound * 2 + c.redelivery_bound * 2 + c.lease
    }),
    ("certification.subscription-dropped-others-stay", |c| {
        c.delivery_bound
            + c.redelivery_bound
            + std::time::Duration::from_secs(1)
            + returned_after(c)
    }),
    ("certification.consumer-leaves", |c| {
        c.delivery_bound * 2 + c.redelivery_bound + returned_after(c)
    }),
    ("certification.consumer-leaves-others-stay", |c| {
        c.delivery_bound * 2 + c.redelivery_bound + returned_after(c)
    }),
    ("certification.consumer-leaves-others-first", |c| {
        c.delivery_bound * 2 + c.redelivery_bound + returned_after(c)
    }),
    ("certification.retry-while-members-change", |c| {
        c.redelivery_bound * 3 + c.delivery_bound * 3 + returned_after(c)
    }),
    // A second member may work the message as long again, where that is declared.
    ("certification.slow-handler", |c| {
        let handlers = if c.redelivers_slow_handlers { 2 } else { 1 };
        load::slow_handler_time(c) * handlers + c.redelivery_bound * 2 + c.delivery_bound * 2
    }),
    ("subscribe.group-without-members", |c| {
        c.delivery_bound * 3 + returned_after(c)
    }),
    ("ttl.live-late-in-life", |c| {
        ttl::late_ttl(c) + c.delivery_bound
    }),
];
