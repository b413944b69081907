//! The suite tests itself: every case family has a deliberately faulty component that
//! must make the right cases FAIL, with evidence that says why, while the correct
//! in-memory component passes the same cases.

mod faulty {
    pub mod defects;
    pub mod recovery;
    pub mod sidecar;
}

use faulty::defects::{Defect, Faulty};
use faulty::recovery::{Breaks, Broken};
use faulty::sidecar::{FaultySidecars, SidecarFault};
use pubsub_conformance::cases::pairs::{self, Part};
use pubsub_conformance::catalogue::find;
use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::memory::{MemoryComponent, MemoryConfig};
use pubsub_conformance::components::runtime::Runtime;
use pubsub_conformance::components::Component;
use pubsub_conformance::harness::describe;
use pubsub_conformance::provision::{self, ProvisionKind};
use pubsub_conformance::replay::{self, SavedAttempt};
use pubsub_conformance::reports::{CaseResult, Status};
use pubsub_conformance::row_runtime::{factory_of, ComponentFactory};
use pubsub_conformance::runner::{run_case, run_case_in, CaseEnvironment, RunOptions, SaveTo};
use pubsub_sidecar::SidecarTarget;
use rstest::rstest;
use std::path::Path;
use std::sync::Arc;

fn memory() -> MemoryComponent {
    MemoryComponent::new(MemoryConfig {
        max_message_bytes: 64 * 1024,
        default_partitions: 1,
    })
}

/// One attempt.
const NO_RETRY: RunOptions = RunOptions {
    retries: 0,
    seed: None,
    save: None,
    bystander: true,
};

/// `case` run once against the in-memory component with `defect`.
async fn run_faulty(defect: Defect, case: &pubsub_conformance::catalogue::Case) -> CaseResult {
    let faulty = Runtime::new("faulty", Faulty::shared(memory(), defect));
    run_case(case, &faulty, &NO_RETRY).await
}

/// Whether one of `lines` (a cell's findings or notes) contains `text`.
fn mention(lines: &[String], text: &str) -> bool {
    lines.iter().any(|line| line.contains(text))
}

/// Asserts that `result` is a FAIL with a finding that mentions `finding` (as written):
/// what `broken` (a defect, or a way of breaking) must make of its case.
fn assert_fails_saying(result: &CaseResult, broken: &dyn std::fmt::Debug, finding: &str) {
    let id = &result.id;
    assert_eq!(
        result.status,
        Status::Fail,
        "{broken:?} must fail {id}:\n{}",
        describe(result)
    );
    assert!(
        mention(&result.evidence.findings, finding),
        "{broken:?} failed {id}, but no finding mentions '{finding}':\n{}",
        describe(result)
    );
}

#[rstest]
#[case::drops(Defect::Drops, &["publish.delivery", "certification.concurrent-publishers"], "lost")]
#[case::receive_zero_takes_one(Defect::ReceiveZeroTakesOne, &["subscribe.method-edges"], "lost after the edge calls")]
#[case::batch_of_zero_takes_one(Defect::BatchOfZeroTakesOne, &["subscribe.method-edges"], "lost after the edge calls")]
#[case::empty_ack_many_acks_all(Defect::EmptyAckManyAcksAll, &["subscribe.method-edges"], "lost after the edge calls")]
#[case::defers_zero_by_default(Defect::DefersZeroByDefault, &["subscribe.method-edges"], "deferred with no delay, did not come back")]
#[case::empty_defer_many_defers_all(Defect::EmptyDeferManyDefersAll, &["subscribe.method-edges"], "lost after the edge calls")]
#[case::delivers_one_late(Defect::DeliversOneLate, &["publish.delivery"], "late: 1 acknowledged publishes were delivered only after the delivery bound (2s): m-")]
#[case::duplicates(Defect::Duplicates, &["publish.delivery"], "duplicated")]
#[case::reorders(Defect::Reorders, &["ordering.declared-scope", "ordering.after-retry", "bulk-publish.keep-order"], "reordered")]
#[case::delivers_early(Defect::DeliversEarly, &["delay.deliver-after", "delay.deliver-at", "delay.receiver-delay"], "early")]
#[case::ignores_ttl(Defect::IgnoresTtl, &["ttl.expired-not-delivered", "ttl.expired-dead-lettered", "bulk-subscribe.expired-entries"], "after its 1 s TTL")]
#[case::never_dead_letters(Defect::NeverDeadLetters, &["dead-letter.max-deliveries", "dead-letter.drop", "bulk-subscribe.exhausted-dead-lettered"], "never reached the dead-letter topic")]
#[case::retries_forever(Defect::NeverDeadLetters, &["retry.exhausted-without-dead-letter"], "maxDeliveries is 3")]
#[case::lies_in_bulk_statuses(Defect::LiesInBulkStatuses, &["bulk-publish.partial-failure", "bulk-publish.status-mapping"], "lost")]
#[case::overfills_batches(Defect::OverfillsBatches, &["bulk-subscribe.max-messages"], "exceeds maxMessagesCount")]
#[case::counts_put_back_entries(Defect::CountsPutBackEntries, &["bulk-subscribe.max-messages"], "first delivered as a later attempt, never delivered before")]
#[case::holds_partial_batches(Defect::HoldsPartialBatches, &["bulk-subscribe.max-await"], "maxAwaitDurationMs")]
#[case::loses_owner_topic(Defect::LosesOwnerTopic, &["multi-topic.owner-topic", "message-id.round-trip"], "owner")]
#[case::seeks_everything(Defect::SeeksEverything, &["multi-topic.seek"], "repositioned")]
#[case::acks_every_topic(Defect::AcksEveryTopic, &["multi-topic.ack-owner"], "redelivered")]
#[case::accepts_foreign_acks(Defect::AcceptsForeignAcks, &["multi-topic.ack-refused"], "was accepted")]
#[case::duplicates_last_ids(Defect::DuplicatesLastIds, &["multi-topic.last-message-ids"], "duplicate owner topics")]
#[case::ignores_partition_updates(Defect::IgnoresPartitionUpdates, &["partitions.watch"], "final count 5")]
#[case::ignores_partition_updates_usage(Defect::IgnoresPartitionUpdates, &["partitions.update-seen"], "new partitions")]
#[case::seeks_every_group(Defect::SeeksEveryGroup, &["multi-topic.seek", "multi-topic.seek-publish-id"], "bystander group")]
#[case::seeks_last_as_latest(Defect::SeeksLastAsLatest, &["multi-topic.seek-edges", "multi-topic.seek-edges@partitioned"], "after seeking to the last id")]
#[case::seeks_past_end_to_earliest(Defect::SeeksPastEndToEarliest, &["multi-topic.seek-edges", "multi-topic.seek-edges@partitioned"], "messages published before came back")]
#[case::starts_latest_per_member(Defect::StartsLatestPerMember, &["subscribe.start-latest"], "lost: a later member of a group that started at the latest position never got")]
#[case::ignores_start_latest(Defect::IgnoresStartLatest, &["subscribe.start-latest"], "got messages published before")]
#[case::grows_on_create(Defect::GrowsOnCreate, &["partitions.invalid-updates"], "again with 5 partitions where it has 3 was accepted")]
#[case::ignores_count_on_create(Defect::IgnoresCountOnCreate, &["partitions.invalid-updates"], "again with 1 partition where it has 3 was accepted")]
#[case::acks_cumulatively_for_every_group(Defect::AcksCumulativelyForEveryGroup, &["multi-topic.ack-cumulative"], "bystander group")]
#[case::dropped_watcher_stops_others(Defect::DroppedWatcherStopsOthers, &["partitions.watch"], "first watcher")]
#[case::lists_partitions_at_open(Defect::ListsPartitionsAtOpen, &["partitions.update-seen-in-list"], "new partitions")]
#[case::reorders_non_ascii_keys(Defect::ReordersNonAsciiKeys, &["ordering.key-space"], "reordered")]
#[case::misroutes_keys(Defect::MisroutesKeys, &["partitions.key-routing"], "landed on partitions")]
#[case::routes_bulk_entries_in_turn(Defect::RoutesBulkEntriesInTurn, &["partitions.key-routing"], "landed on partitions")]
#[case::routes_long_keys_in_turn(Defect::RoutesLongKeysInTurn, &["partitions.key-routing"], "(1024 characters) landed on partitions")]
// Only the partitioned twins see these: on topics of one partition they are right
// (`topology_defects_pass_on_one_partition`).
#[case::settles_on_partition_zero_acks(Defect::SettlesOnPartitionZero, &["multi-topic.ack-owner@partitioned"], "redelivered")]
#[case::settles_on_partition_zero_round_trip(Defect::SettlesOnPartitionZero, &["message-id.round-trip@partitioned"], "acked through round-tripped ids came back")]
#[case::partitionless_as_first(Defect::PartitionlessAsFirst, &["multi-topic.ack-refused@partitioned", "multi-topic.seek-refused@partitioned"], "an id naming no partition of a partitioned topic")]
#[case::acks_ahead(Defect::AcksAhead, &["multi-topic.ack-refused", "multi-topic.ack-refused@partitioned"], "messages published later never came")]
#[case::settles_on_partition_zero_seeks(Defect::SettlesOnPartitionZero, &["multi-topic.seek@partitioned", "multi-topic.seek-publish-id@partitioned"], "other topics or partitions")]
#[case::last_ids_per_topic(Defect::LastIdsPerTopic, &["multi-topic.last-message-ids@partitioned"], "last_message_ids returned")]
#[case::drops_trace_context(Defect::DropsTraceContext, &["tracing.per-entry", "tracing.bulk-parent"], "traceparent")]
#[case::no_redelivery(Defect::NoRedelivery, &["retry.redelivery", "bulk-subscribe.statuses", "bulk-subscribe.handler-error"], "not redelivered")]
#[case::loses_unacked_on_leave(Defect::LosesUnackedOnLeave, &["certification.consumer-leaves", "certification.consumer-leaves-others-stay", "certification.consumer-leaves-others-first"], "lost")]
#[case::keeps_what_dropped_members_held(Defect::KeepsWhatDroppedMembersHeld, &["certification.consumer-dropped-others-stay"], "lost")]
#[case::strands_held_while_others_stay(Defect::StrandsHeldWhileOthersStay, &["certification.consumer-leaves-others-stay", "certification.consumer-leaves-others-first"], "lost")]
#[case::strips_envelope(Defect::StripsEnvelope, &["envelope.cloudevents"], "without a CloudEvent envelope")]
#[case::strips_envelope_fidelity(Defect::StripsEnvelope, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::strips_raw_marker(Defect::StripsRawMarker, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::truncates_large_payloads(Defect::TruncatesLargePayloads, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
// Only the value space's draws reach these: the fixed samples end in no NUL, carry
// 15 entries and no character past the first plane.
#[case::strips_trailing_nul_bytes(Defect::StripsTrailingNulBytes, &["publish.fidelity", "bulk-publish.fidelity"], "smallest failing draw")]
#[case::keeps_sixteen_metadata_entries(Defect::KeepsSixteenMetadataEntries, &["publish.fidelity", "bulk-publish.fidelity"], "smallest failing draw")]
#[case::replaces_astral_chars_in_metadata(Defect::ReplacesAstralCharsInMetadata, &["publish.fidelity", "bulk-publish.fidelity"], "smallest failing draw")]
#[case::truncates_at_maximum(Defect::TruncatesAtMaximum, &["publish.size-boundary"], "a payload of exactly the maximum (65536 bytes) was delivered with 65535 bytes")]
#[case::refuses_exact_maximum(Defect::RefusesExactMaximum, &["publish.size-boundary"], "of exactly the maximum (65536 bytes) was refused")]
#[case::loses_empty_values_after_wait(Defect::LosesEmptyValuesAfterWait, &["publish.fidelity-after-wait"], "after 3 s in the broker: single-empty-ce: metadata not delivered as published: \"app-empty\" missing")]
#[case::ignores_groups(Defect::IgnoresGroups, &["subscribe.competing-consumers"], "more than one member")]
#[case::merges_groups(Defect::MergesGroups, &["subscribe.fan-out"], "missed")]
#[case::forgets_created_groups(Defect::ForgetsCreatedGroups, &["ordering.declared-scope", "certification.consumer-leaves", "retry.redelivery"], "lost")]
#[case::halves_ttl(Defect::HalvesTtl, &["ttl.live-late-in-life"], "lost inside their TTL")]
#[case::ignores_retry_delay(Defect::IgnoresRetryDelay, &["retry.delay"], "before its retry delay")]
#[case::leaks_retries_to_other_groups(Defect::LeaksRetriesToOtherGroups, &["retry.delay", "subscribe.group-isolation"], "group isolation broken")]
#[case::strands_dropped_receives(Defect::StrandsDroppedReceives, &["subscribe.cancelled-receive"], "lost after a dropped receive")]
#[case::folds_colons(Defect::FoldsColons, &["topics.distinct-names"], "topic names folded")]
#[case::folds_metadata_key_case(Defect::FoldsMetadataKeyCase, &["publish.fidelity", "bulk-publish.fidelity"], "metadata not delivered as published: \"app-Case\" missing")]
#[case::folds_group_case(
    Defect::FoldsGroupCase,
    &["groups.distinct-names"],
    "published once the other groups' members stopped: one broker group under two names"
)]
#[case::starves_one_group(
    Defect::StarvesOneGroup,
    &["groups.distinct-names"],
    "never delivered: group"
)]
#[case::strips_metadata(Defect::StripsMetadata, &["subscribe.acked-not-redelivered", "certification.concurrent-publishers"], "delivered without its metadata")]
#[case::borrows_metadata(Defect::BorrowsMetadata, &["subscribe.acked-not-redelivered", "certification.concurrent-publishers", "publish.concurrent-fidelity"], "carries another message's metadata")]
#[case::counts_attempts_across_groups(Defect::CountsAttemptsAcrossGroups, &["subscribe.group-isolation"], "attempts not counted per group")]
// Only the bystander dimension sees what these do to a group without members: the
// group-isolation and fan-out cases, whose groups all have members, pass them
// (`bystander_defects_pass_where_every_group_has_members`).
#[case::settles_dead_letters_for_idle_groups(Defect::SettlesDeadLettersForIdleGroups, &["dead-letter.max-deliveries", "dead-letter.drop", "bulk-subscribe.exhausted-dead-lettered"], "bystander group")]
#[case::counts_delayed_retries_for_idle_groups(Defect::CountsDelayedRetriesForIdleGroups, &["retry.delay"], "attempts are counted across groups")]
#[case::delivers_late(Defect::DeliversLate, &["delay.deliver-after", "delay.deliver-at"], "late")]
#[case::pretends_to_extend_lease(Defect::PretendsToExtendLease, &["delay.beyond-lease"], "redelivered after acknowledgement")]
#[case::forgets_while_empty(Defect::ForgetsWhileEmpty, &["subscribe.group-without-members"], "lost while the group had no member")]
#[case::repeats_envelope_ids(Defect::RepeatsEnvelopeIds, &["envelope.unique-ids"], "envelope ids not unique")]
#[case::phantom_versions(Defect::PhantomVersions, &["partitions.watch"], "a version the topic never had")]
#[case::hands_partial_batches_early(Defect::HandsPartialBatchesEarly, &["bulk-subscribe.max-await"], "handed over early")]
#[case::ignores_rejected_partition_updates(Defect::IgnoresRejectedPartitionUpdates, &["partitions.watch-resend"], "was not sent again")]
#[case::phantom_versions_resent(Defect::PhantomVersions, &["partitions.watch-resend"], "never had")]
#[case::loses_dead_letter_content_type(Defect::LosesDeadLetterContentType, &["dead-letter.max-deliveries"], "dead letter content type")]
#[case::skips_acks(Defect::SkipsAcks, &["subscribe.acked-not-redelivered"], "after acknowledgement")]
#[case::wraps_app_events(Defect::WrapsAppEvents, &["envelope.app-cloudevent"], "wrapped a second time")]
#[case::delays_from_receipt(Defect::DelaysFromReceipt, &["delay.receiver-delay-from-publish"], "counted from receipt")]
#[case::blocks_behind_delayed(Defect::BlocksBehindDelayed, &["delay.no-starvation"], "starved")]
#[case::delays_capped_at_lease(Defect::DelaysCappedAtLease, &["delay.beyond-lease"], "early")]
#[case::accepts_foreign_seeks(Defect::AcceptsForeignSeeks, &["multi-topic.seek-refused"], "was accepted")]
#[case::seeks_one_topic(Defect::SeeksOneTopic, &["multi-topic.seek-earliest-latest"], "after seeking to")]
#[case::acks_many_partially(Defect::AcksManyPartially, &["multi-topic.ack-many"], "the refused call acknowledged some ids")]
#[case::watches_changed_topic_only(Defect::WatchesChangedTopicOnly, &["partitions.watch-several"], "not the state of every watched topic")]
#[case::renames_dead_letters(Defect::RenamesDeadLetters, &["dead-letter.max-deliveries"], "keeps its id")]
#[case::acks_cumulative_everywhere(Defect::AcksCumulativeEverywhere, &["multi-topic.ack-cumulative"], "after a cumulative ack")]
#[case::rescans_what_it_read(Defect::RescansWhatItRead, &["certification.long-drain"], "slowed down")]
#[case::hides_partitions(Defect::HidesPartitions, &["partitions.watch", "partitions.key-routing", "partitions.watch-several"], "declared unsupported")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_component_fails_the_cases_it_breaks(
    #[case] defect: Defect,
    #[case] case_ids: &[&str],
    #[case] evidence: &str,
) {
    for id in case_ids {
        let case = find(id).unwrap_or_else(|| panic!("no case {id} in the catalogue"));
        let correct = Runtime::new("memory", std::sync::Arc::new(memory()));
        let passed = run_case(case, &correct, &NO_RETRY).await;
        assert_eq!(
            passed.status,
            Status::Pass,
            "the correct component must pass:\n{}",
            describe(&passed)
        );

        let failed = run_faulty(defect, case).await;
        assert_eq!(
            failed.status,
            Status::Fail,
            "{defect:?} must fail {id}:\n{}",
            describe(&failed)
        );
        let text = describe(&failed);
        assert!(
            failed
                .evidence
                .findings
                .iter()
                .any(|f| f.to_lowercase().contains(&evidence.to_lowercase())),
            "{defect:?} failed {id}, but no finding mentions '{evidence}':\n{text}"
        );
    }
}

/// The defects only the partitioned twins catch pass the cases they twin: on topics
/// of one partition the defect does nothing wrong.
#[rstest]
#[case::settles_on_partition_zero(Defect::SettlesOnPartitionZero, &["multi-topic.ack-owner", "message-id.round-trip", "multi-topic.seek", "multi-topic.seek-publish-id", "multi-topic.ack-cumulative"])]
#[case::last_ids_per_topic(Defect::LastIdsPerTopic, &["multi-topic.last-message-ids"])]
#[case::partitionless_as_first(Defect::PartitionlessAsFirst, &["multi-topic.ack-refused", "multi-topic.seek-refused", "multi-topic.ack-owner", "multi-topic.seek"])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_defects_pass_on_one_partition(#[case] defect: Defect, #[case] case_ids: &[&str]) {
    assert_faulty_passes(defect, case_ids, "is right on one partition").await;
}

/// The defects only the feature pairs catch: each fails the row where its two features
/// meet, saying which rule broke, and passes the cases of each feature alone.
#[rstest]
#[case::resets_attempts_across_members(
    Defect::ResetsAttemptsAcrossMembers,
    [Part::Retry, Part::MemberChurn],
    // On whichever message answered RETRY the leaving member held (retried- or
    // exhausted-, as the members split the batch).
    "each must be higher than the last, whichever member got it",
    &["retry.redelivery", "retry.delay", "retry.exhausted-without-dead-letter", "dead-letter.max-deliveries", "certification.retry-while-members-change", "certification.consumer-leaves", "subscribe.competing-consumers"],
)]
#[case::drops_due_times_in_bulk(
    Defect::DropsDueTimesInBulk,
    [Part::BulkPublish, Part::DeliverAt],
    "DLY-1: settled-0-t0 was delivered",
    &["delay.deliver-at", "delay.deliver-after", "delay.receiver-delay", "bulk-publish.all-success", "bulk-publish.metadata-merge", "bulk-publish.fidelity"],
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pair_defects_fail_only_where_their_features_meet(
    #[case] defect: Defect,
    #[case] meet: [Part; 2],
    #[case] finding: &str,
    #[case] alone: &[&str],
) {
    let row = pairs::rows()
        .into_iter()
        .find(|row| meet.iter().all(|part| row.contains(part)))
        .expect("every two features meet in a row");
    let id = pairs::id_of(&row);
    let case = find(&id).unwrap_or_else(|| panic!("no case {id} in the catalogue"));
    assert_fails_saying(&run_faulty(defect, case).await, &defect, finding);
    assert_faulty_passes(defect, alone, "breaks only where its two features meet").await;
}

/// Asserts that `defect` passes each of `case_ids`, for the reason given.
async fn assert_faulty_passes(defect: Defect, case_ids: &[&str], because: &str) {
    for id in case_ids {
        let case = find(id).unwrap_or_else(|| panic!("no case {id} in the catalogue"));
        let result = run_faulty(defect, case).await;
        assert_eq!(
            result.status,
            Status::Pass,
            "{defect:?} {because}, so {id} must pass:\n{}",
            describe(&result)
        );
    }
}

/// The defects only the bystander dimension catches pass the cases whose groups all
/// have members: what they break needs a group that exists without one.
#[rstest]
#[case::settles_dead_letters_for_idle_groups(Defect::SettlesDeadLettersForIdleGroups)]
#[case::counts_delayed_retries_for_idle_groups(Defect::CountsDelayedRetriesForIdleGroups)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bystander_defects_pass_where_every_group_has_members(#[case] defect: Defect) {
    assert_faulty_passes(
        defect,
        &[
            "subscribe.group-isolation",
            "subscribe.fan-out",
            "subscribe.group-without-members",
        ],
        "is meant for the bystander alone",
    )
    .await;
}

/// A member that leaves while others of its group stay connected is a case of its own:
/// the defect that strands what it held then passes where members come one after
/// another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_while_others_stay_is_its_own_case() {
    assert_faulty_passes(
        Defect::StrandsHeldWhileOthersStay,
        &["certification.consumer-leaves"],
        "strands only while another member is connected",
    )
    .await;
}

/// A member dropped without a close is a case of its own: the defect that keeps what a
/// dropped member held passes where members are closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_member_is_its_own_case() {
    assert_faulty_passes(
        Defect::KeepsWhatDroppedMembersHeld,
        &[
            "certification.consumer-leaves",
            "certification.consumer-leaves-others-stay",
        ],
        "keeps messages only where a handle is dropped",
    )
    .await;
}

/// A partitioned topic named in a list is a case of its own: the defect that resolves a
/// list into the partitions there are at open passes where the topic is subscribed
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_to_a_listed_topic_is_its_own_case() {
    assert_faulty_passes(
        Defect::ListsPartitionsAtOpen,
        &["partitions.update-seen"],
        "misses added partitions only through a list",
    )
    .await;
}

/// What a component declares decides its verdicts: the in-memory component declared
/// as `declared` says runs each case, and each verdict must be the one listed; an
/// UNSUPPORTED one must say why (every fragment of `unsupported_says` in one note).
#[rstest]
// A component without a size limit is not an ERROR where a case provokes an entry
// failure by size: the cell is UNSUPPORTED and says why and what to declare.
#[case::no_size_limit_makes_entry_failure_cases_unsupported_not_errors(Defect::DeclaresNoSizeLimit, &[("bulk-publish.partial-failure", Status::Unsupported), ("bulk-publish.status-mapping", Status::Unsupported), ("bulk-publish.keep-order", Status::Unsupported)], &["declares none", "max_message_bytes"])]
// Producer-side delays and receiverDelay are declared apart: a component that delays
// only on the producer side passes the delay cases and is UNSUPPORTED (refusal
// verified) for receiverDelay.
#[case::receiver_delay_is_declared_apart_from_producer_delays(Defect::DeclaresNoReceiverDelay, &[("delay.deliver-after", Status::Pass), ("delay.receiver-delay", Status::Unsupported), ("delay.receiver-delay-from-publish", Status::Unsupported)], &[])]
// A component that cannot extend a lease (its `extend_lease` refuses) still delivers
// a message delayed beyond the lease once and on time: the runtime defers it instead
// of holding it past the lease (holding it, as for a component that only pretends to
// extend, hands it out twice: `pretends_to_extend_lease` above).
#[case::a_lease_that_cannot_be_extended_is_deferred_past(Defect::LeaseWithoutExtension, &[("delay.beyond-lease", Status::Pass), ("delay.deliver-after", Status::Pass), ("delay.no-starvation", Status::Pass)], &[])]
// A work queue (no fan-out to several groups) declares it: the fan-out cases are
// UNSUPPORTED with the refusal verified, and one group per topic works as before.
#[case::a_work_queue_declares_no_fan_out(Defect::DeclaresNoFanOut, &[("subscribe.fan-out", Status::Unsupported), ("multi-topic.owner-topic", Status::Unsupported), ("publish.delivery", Status::Pass), ("subscribe.competing-consumers", Status::Pass)], &["fan-out"])]
// A component that acknowledges one id at a time gets its batches acknowledged all
// the same: the runtime acknowledges each entry where `ack_many` is unsupported (it
// did not, and a member that left handed the "acknowledged" entries back).
#[case::batches_are_acknowledged_one_by_one_where_several_cannot_be(Defect::CannotAckMany, &[("pairs.receiver-delay+deliver-at+bulk-publish+bulk-subscribe+member-churn", Status::Pass), ("bulk-subscribe.statuses", Status::Pass), ("bulk-subscribe.max-messages", Status::Pass)], &[])]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declarations_decide_verdicts(
    #[case] declared: Defect,
    #[case] cells: &[(&str, Status)],
    #[case] unsupported_says: &[&str],
) {
    let runtime = Runtime::new(format!("{declared:?}"), Faulty::shared(memory(), declared));
    for (id, status) in cells {
        let result = run_case(find(id).unwrap(), &runtime, &NO_RETRY).await;
        assert_eq!(result.status, *status, "{id}:\n{}", describe(&result));
        let why = match status {
            Status::Unsupported => unsupported_says,
            _ => &[],
        };
        assert!(
            why.is_empty()
                || result
                    .evidence
                    .notes
                    .iter()
                    .any(|n| why.iter().all(|w| n.contains(w))),
            "{id} says why ({why:?}):\n{}",
            describe(&result)
        );
    }
}

/// Exactly-once is judged by what is declared: the correct component declaring it
/// passes every case (redeliveries the handler asks for are not duplicates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_declared_by_a_correct_component_passes_every_case() {
    let runtime = Runtime::new(
        "exactly-once",
        Faulty::shared(memory(), Defect::DeclaresExactlyOnce),
    );
    let mut failed = Vec::new();
    for case in pubsub_conformance::catalogue::catalogue()
        .iter()
        .filter(|c| c.injects.is_empty())
    {
        let result = run_case(case, &runtime, &NO_RETRY).await;
        if result.status != Status::Pass {
            failed.push(describe(&result));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// The Redis Streams component on a broker of its own (a spawned redis-server the
/// suite can kill, restart and cut off), broken as `breaks` says; the environment
/// builds the same component behind a fault proxy.
async fn on_own_redis(breaks: Option<Breaks>) -> (Runtime, CaseEnvironment) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/redis.yaml");
    let definition = ComponentDefinition::from_file(&path).unwrap();
    let provisioned = provision::provision(
        &definition,
        &provision::order_for("redis-streams", Some(&[ProvisionKind::LocalProcess])),
    )
    .await
    .expect("a local redis-server (scripts/install.sh)");
    let plain = factory_of(&definition);
    let connect: ComponentFactory = Arc::new(move |endpoint: String| {
        let plain = plain.clone();
        Box::pin(async move { plain(endpoint).await.map(|c| wrap(breaks, c)) })
    });
    let environment = CaseEnvironment {
        broker: provisioned.broker,
        definition: None,
        connect: Some(connect),
        wrap: None,
    };
    (
        Runtime::new("redis-under-faults", wrap(breaks, provisioned.component)),
        environment,
    )
}

/// The component as it is, or broken the way `breaks` says.
fn wrap(breaks: Option<Breaks>, inner: Arc<dyn Component>) -> Arc<dyn Component> {
    match breaks {
        None => inner,
        Some(breaks) => Arc::new(Broken { inner, breaks }),
    }
}

#[rstest]
#[case::fire_and_forget(Breaks::FireAndForget, "certification.network-cut", "lost")]
#[case::lies_after_disconnect(Breaks::LiesAfterDisconnect, "certification.network-cut", "lost")]
#[case::fire_and_forget_single(
    Breaks::FireAndForget,
    "certification.network-cut-single-publishes",
    "lost"
)]
#[case::acks_before_confirm(
    Breaks::AcksBeforeConfirm,
    "certification.network-cut-single-publishes",
    "lost"
)]
#[case::lies_while_the_broker_is_down(
    Breaks::LiesAfterDisconnect,
    "certification.broker-restart",
    "reported successful while the broker was down"
)]
#[case::never_resubscribes(
    Breaks::NeverResubscribes,
    "certification.broker-restart",
    "the subscriber did not recover"
)]
#[case::keeps_delivering_after_close(
    Breaks::KeepsDeliveringAfterClose,
    "certification.close-stops-delivery",
    "a closed consumer still received"
)]
#[case::hides_lease_expiry(
    Breaks::HidesLeaseExpiry,
    "certification.slow-handler",
    "handed to another member while the first still worked on it"
)]
#[case::skips_acks(
    Breaks::SkipsAcks,
    "subscribe.acked-not-redelivered",
    "redelivered after acknowledgement"
)]
#[case::dead_letters_redeliveries(
    Breaks::DeadLettersRedeliveries,
    "certification.crash-not-dead-lettered",
    "dead-lettered though never handled"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_breaks_under_faults_fails_the_fault_case(
    #[case] breaks: Breaks,
    #[case] case_id: &str,
    #[case] finding: &str,
) {
    let case = find(case_id).unwrap();
    let (runtime, environment) = on_own_redis(None).await;
    let good = run_case_in(case, &runtime, &NO_RETRY, &environment).await;
    assert_eq!(
        good.status,
        Status::Pass,
        "the correct component:\n{}",
        describe(&good)
    );
    if let Some(broker) = &environment.broker {
        broker.shutdown().await;
    }
    let (runtime, environment) = on_own_redis(Some(breaks)).await;
    let bad = run_case_in(case, &runtime, &NO_RETRY, &environment).await;
    assert_fails_saying(&bad, &breaks, finding);
    if case.injects.is_empty() {
        return;
    }
    assert!(
        bad.evidence.timeline.as_ref().is_some_and(|t| t
            .events
            .iter()
            .any(|e| e.lane == pubsub_conformance::reports::Lane::Fault)),
        "a fault case's evidence carries its timeline:\n{}",
        describe(&bad)
    );
    if let Some(broker) = &environment.broker {
        broker.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_cases_on_an_in_process_component_are_not_provisioned_with_the_reason() {
    let runtime = Runtime::new("memory", Arc::new(memory()));
    for case in pubsub_conformance::catalogue::catalogue()
        .iter()
        .filter(|c| !c.injects.is_empty())
    {
        let result = run_case(case, &runtime, &NO_RETRY).await;
        assert_eq!(
            result.status,
            Status::NotProvisioned,
            "{}",
            describe(&result)
        );
        assert!(
            mention(&result.evidence.notes, "no broker to fault"),
            "{}",
            describe(&result)
        );
    }
}

/// A FAIL is judged again from its saved history to the same verdict and findings,
/// offline: the histories of several faulty components' failures (a checker finding,
/// a timing finding, a case body's own finding) are saved, and `replay::recheck` of
/// the report made of them finds no difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_failures_are_judged_again_identically() {
    use pubsub_conformance::reports::{ComponentReport, Provisioning, RunReport};
    let dir = tempfile::tempdir().unwrap();
    let mut components = Vec::new();
    for (defect, id) in [
        (Defect::Drops, "publish.delivery"),
        (Defect::DeliversLate, "delay.deliver-after"),
        (
            Defect::DelaysFromReceipt,
            "delay.receiver-delay-from-publish",
        ),
        (Defect::IgnoresRetryDelay, "retry.delay"),
    ] {
        let name = format!("{defect:?}");
        let (result, saved) = fails_and_saves(defect, &name, id, dir.path()).await;
        let judged = replay::judge(&saved);
        let mut live = result.evidence.findings.clone();
        let mut again = judged.findings.clone();
        live.sort();
        again.sort();
        assert_eq!(live, again, "{id}: the same findings offline");
        components.push(ComponentReport {
            name,
            component_type: "in-memory".into(),
            definition: String::new(),
            provisioning: Provisioning {
                kind: "in-process".into(),
                endpoint: None,
                broker_version: None,
                problem: None,
                unsupported_broker: None,
            },
            capabilities: serde_json::Value::Null,
            cases: vec![result],
            third_party: None,
            broker_axis: None,
        });
    }
    let report = RunReport {
        schema_version: pubsub_conformance::reports::SCHEMA_VERSION,
        suite_version: "test".into(),
        started_at: String::new(),
        finished_at: String::new(),
        machine: pubsub_conformance::certify::machine(),
        components,
        conflicts: Vec::new(),
        bench: Vec::new(),
        baseline: None,
    };
    std::fs::write(
        dir.path().join("report.json"),
        serde_json::to_string(&report).unwrap(),
    )
    .unwrap();
    let recheck = replay::recheck(dir.path(), None).unwrap();
    assert_eq!(recheck.judged, 4);
    assert!(recheck.differences.is_empty(), "{:?}", recheck.differences);
}

/// Timing findings made while the machine was too busy to judge timing are not the
/// component's: from a saved history whose controls were slow on a loaded machine, the
/// verdict is Busy (the runner runs the case again, and the cell is ERROR if the
/// machine stays busy); the same history on an idle machine is a FAIL; and findings
/// load cannot cause stay FAIL however busy the machine was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_machine_makes_timing_findings_inconclusive_only() {
    use pubsub_conformance::history::Record;
    use pubsub_conformance::replay::Verdict;
    let dir = tempfile::tempdir().unwrap();
    let (result, attempt) = fails_and_saves(
        Defect::DeliversLate,
        "late",
        "delay.deliver-after",
        dir.path(),
    )
    .await;
    assert!(
        mention(&result.evidence.notes, "control latency p50"),
        "a timing verdict's evidence carries the lag figures:\n{}",
        describe(&result)
    );
    assert_eq!(replay::judge(&attempt).verdict, Verdict::Fail);
    // The same run with every control two seconds slow and the disk contended.
    let mut busy = attempt.clone();
    slow_controls_on_a_contended_disk(&mut busy.history);
    let judged = replay::judge(&busy);
    assert_eq!(judged.verdict, Verdict::Busy, "{:?}", judged.findings);
    assert_eq!(
        replay::cell_status(&[Verdict::Busy, Verdict::Busy, Verdict::Busy]),
        Status::Error
    );
    // Slow controls on an idle machine: the component's own slowness.
    let mut idle = busy.clone();
    for record in &mut idle.history.records {
        if let Record::Lag {
            io_stall,
            cpu_stall,
            ticker_p99_ms,
            ..
        } = record
        {
            *io_stall = Some(0.0);
            *cpu_stall = Some(0.0);
            *ticker_p99_ms = 1.0;
        }
    }
    assert_eq!(replay::judge(&idle).verdict, Verdict::Fail);
    // Early delivery is never the machine's.
    let (_, mut early) = fails_and_saves(
        Defect::DeliversEarly,
        "early",
        "delay.deliver-after",
        dir.path(),
    )
    .await;
    slow_controls_on_a_contended_disk(&mut early.history);
    assert_eq!(replay::judge(&early).verdict, Verdict::Fail);
}

/// Runs case `id` once on the in-memory component with `defect`, named `name`, saving
/// its history under `dir`; it must FAIL. The result, and the attempt saved.
async fn fails_and_saves(
    defect: Defect,
    name: &str,
    id: &str,
    dir: &Path,
) -> (CaseResult, SavedAttempt) {
    let runtime = Runtime::new(name, Faulty::shared(memory(), defect));
    let options = RunOptions {
        save: Some(SaveTo {
            dir: dir.to_path_buf(),
            component: name.into(),
            run: 1,
        }),
        ..NO_RETRY
    };
    let result = run_case(find(id).unwrap(), &runtime, &options).await;
    assert_eq!(result.status, Status::Fail, "{}", describe(&result));
    let mut saved = replay::load(&replay::history_path(dir, name, id)).unwrap();
    (result, saved.swap_remove(0))
}

/// Makes a saved history's controls (after the first) two seconds slow, with the disk
/// contended: what a machine too busy to judge timing records.
fn slow_controls_on_a_contended_disk(history: &mut pubsub_conformance::history::History) {
    use pubsub_conformance::history::{is_control, Record};
    for record in &mut history.records {
        match record {
            Record::Delivered {
                key: Some(k), at, ..
            } if is_control(k) && k != "pcs-control-0" => {
                *at += std::time::Duration::from_secs(2);
            }
            Record::Lag { io_stall, .. } => *io_stall = Some(0.8),
            _ => {}
        }
    }
}

/// `component`, an in-memory one, behind `serve` as pub/sub `name`: its runtime over
/// Dapr's HTTP API, and the sidecar to stop.
async fn served(name: &str, component: Arc<dyn Component>) -> (Runtime, Arc<SidecarTarget>) {
    pubsub_conformance::through_serve::runtime(name, "in-memory", component, None)
        .await
        .unwrap()
}

/// As [`served`], published to over `serve`'s gRPC API.
async fn served_over_grpc(
    name: &str,
    component: Arc<dyn Component>,
) -> (Runtime, Arc<SidecarTarget>) {
    pubsub_conformance::through_serve::runtime_over_grpc(name, "in-memory", component, None)
        .await
        .unwrap()
}

/// The same deliberately faulty components behind `serve`, certified over Dapr's
/// HTTP API: the wire path must not hide a component's defect, and the correct
/// component must pass through it.
#[rstest]
#[case::drops(Defect::Drops, &["publish.delivery"], "lost")]
#[case::duplicates(Defect::Duplicates, &["publish.delivery"], "duplicated")]
#[case::never_dead_letters(Defect::NeverDeadLetters, &["dead-letter.drop", "dead-letter.max-deliveries"], "never reached the dead-letter topic")]
#[case::lies_in_bulk_statuses(Defect::LiesInBulkStatuses, &["bulk-publish.partial-failure"], "lost")]
#[case::no_redelivery(Defect::NoRedelivery, &["retry.redelivery", "bulk-subscribe.statuses"], "not redelivered")]
#[case::ignores_retry_delay(Defect::IgnoresRetryDelay, &["retry.delay"], "before its retry delay")]
#[case::delivers_early(Defect::DeliversEarly, &["delay.deliver-after"], "early")]
#[case::ignores_ttl(Defect::IgnoresTtl, &["ttl.expired-not-delivered"], "after its 1 s TTL")]
#[case::truncates_large_payloads(Defect::TruncatesLargePayloads, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::merges_groups(Defect::MergesGroups, &["subscribe.fan-out"], "missed")]
#[case::ignores_groups(Defect::IgnoresGroups, &["subscribe.competing-consumers"], "more than one member")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_component_fails_through_serve(
    #[case] defect: Defect,
    #[case] case_ids: &[&str],
    #[case] evidence: &str,
) {
    let (correct, correct_target) = served("memory", Arc::new(memory())).await;
    let (faulty, faulty_target) = served("faulty", Faulty::shared(memory(), defect)).await;
    fails_through_serve(defect, case_ids, evidence, (&correct, &faulty)).await;
    correct_target.stop().await;
    faulty_target.stop().await;
}

/// The same defects over `serve`'s gRPC API (publishing through it, delivering to gRPC
/// apps): its path must not hide them either.
#[rstest]
#[case::drops(Defect::Drops, &["publish.delivery"], "lost")]
#[case::never_dead_letters(Defect::NeverDeadLetters, &["dead-letter.drop"], "never reached the dead-letter topic")]
#[case::no_redelivery(Defect::NoRedelivery, &["retry.redelivery", "bulk-subscribe.statuses"], "not redelivered")]
#[case::merges_groups(Defect::MergesGroups, &["subscribe.fan-out"], "missed")]
#[case::ignores_groups(Defect::IgnoresGroups, &["subscribe.competing-consumers"], "more than one member")]
#[case::duplicates(Defect::Duplicates, &["publish.delivery"], "duplicated")]
#[case::lies_in_bulk_statuses(Defect::LiesInBulkStatuses, &["bulk-publish.partial-failure"], "lost")]
#[case::truncates_large_payloads(Defect::TruncatesLargePayloads, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::ignores_ttl(Defect::IgnoresTtl, &["ttl.expired-not-delivered"], "after its 1 s TTL")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_component_fails_through_serve_over_grpc(
    #[case] defect: Defect,
    #[case] case_ids: &[&str],
    #[case] evidence: &str,
) {
    let (correct, correct_target) = served_over_grpc("memory", Arc::new(memory())).await;
    let (faulty, faulty_target) =
        served_over_grpc("faulty", Faulty::shared(memory(), defect)).await;
    fails_through_serve(defect, case_ids, evidence, (&correct, &faulty)).await;
    correct_target.stop().await;
    faulty_target.stop().await;
}

/// `case_ids` pass on the correct runtime (or fail only on what the wire cannot
/// carry) and fail on the faulty one with a finding naming `evidence`.
async fn fails_through_serve(
    defect: Defect,
    case_ids: &[&str],
    evidence: &str,
    (correct, faulty): (&Runtime, &Runtime),
) {
    for id in case_ids {
        let case = find(id).unwrap_or_else(|| panic!("no case {id} in the catalogue"));
        // The correct component passes, or fails only on what the HTTP API cannot
        // carry (README, "Certifying over the wire"), never on what the defect breaks.
        let passed = run_case(case, correct, &NO_RETRY).await;
        let breaks = |finding: &String| finding.to_lowercase().contains(&evidence.to_lowercase());
        assert!(
            passed.status == Status::Pass
                || (passed.status == Status::Fail && !passed.evidence.findings.iter().any(breaks)),
            "the correct component must not show '{evidence}' in {id} through serve:\n{}",
            describe(&passed)
        );
        let failed = run_case(case, faulty, &NO_RETRY).await;
        assert_eq!(
            failed.status,
            Status::Fail,
            "{defect:?} must fail {id} through serve:\n{}",
            describe(&failed)
        );
        assert!(
            failed.evidence.findings.iter().any(breaks),
            "{defect:?} failed {id} through serve, but no finding mentions '{evidence}':\n{}",
            describe(&failed)
        );
    }
}

/// A sidecar with one wire defect (serve behind a proxy that applies it) fails the
/// cases it breaks when certified from outside, while serve alone passes them.
#[rstest]
#[case::folds_entry_id_case(SidecarFault::FoldsEntryIdCase, &["bulk-publish.entry-id-space"], "succeeded but reported failed: [\"e-case\", \"k\"]")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_sidecar_fails_the_cases_it_breaks(
    #[case] fault: SidecarFault,
    #[case] case_ids: &[&str],
    #[case] evidence: &str,
) {
    use pubsub_conformance::through_serve;
    let (correct, correct_target) = served("memory", Arc::new(memory())).await;
    let launcher = Arc::new(FaultySidecars {
        inner: through_serve::serve_launcher("memory", "in-memory", Arc::new(memory())),
        fault,
    });
    let (faulty, faulty_target) =
        through_serve::runtime_with(launcher, "memory", Arc::new(memory()))
            .await
            .unwrap();
    for id in case_ids {
        let case = find(id).unwrap_or_else(|| panic!("no case {id} in the catalogue"));
        let passed = run_case(case, &correct, &NO_RETRY).await;
        assert_eq!(
            passed.status,
            Status::Pass,
            "serve must pass {id}:\n{}",
            describe(&passed)
        );
        let failed = run_case(case, &faulty, &NO_RETRY).await;
        assert_fails_saying(&failed, &fault, evidence);
    }
    correct_target.stop().await;
    faulty_target.stop().await;
}
