//! The suite tests itself: every case family has a deliberately faulty component that
//! must make the right cases FAIL, with evidence that says why, while the correct
//! in-memory component passes the same cases.

mod faulty {
    pub mod faults;
}

use faulty::faults::{Fault, Faulty};
use pubsub_conformance::catalogue::find;
use pubsub_conformance::components::memory::{MemoryComponent, MemoryConfig};
use pubsub_conformance::components::runtime::Runtime;
use pubsub_conformance::harness::describe;
use pubsub_conformance::reports::Status;
use pubsub_conformance::runner::{run_case, RunOptions};
use rstest::rstest;

fn memory() -> MemoryComponent {
    MemoryComponent::new(MemoryConfig {
        max_message_bytes: 64 * 1024,
        default_partitions: 1,
    })
}

const NO_RETRY: RunOptions = RunOptions {
    retries: 0,
    seed: None,
};

#[rstest]
#[case::drops(Fault::Drops, &["publish.delivery", "certification.concurrent-publishers"], "lost")]
#[case::duplicates(Fault::Duplicates, &["publish.delivery"], "duplicated")]
#[case::reorders(Fault::Reorders, &["ordering.declared-scope", "ordering.after-retry", "bulk-publish.keep-order"], "reordered")]
#[case::delivers_early(Fault::DeliversEarly, &["delay.deliver-after", "delay.deliver-at", "delay.receiver-delay"], "early")]
#[case::ignores_ttl(Fault::IgnoresTtl, &["ttl.expired-not-delivered", "ttl.expired-dead-lettered"], "after its 1 s TTL")]
#[case::never_dead_letters(Fault::NeverDeadLetters, &["dead-letter.max-deliveries", "dead-letter.drop"], "never reached the dead-letter topic")]
#[case::retries_forever(Fault::NeverDeadLetters, &["retry.exhausted-without-dead-letter"], "maxDeliveries is 3")]
#[case::lies_in_bulk_statuses(Fault::LiesInBulkStatuses, &["bulk-publish.partial-failure", "bulk-publish.status-mapping"], "lost")]
#[case::overfills_batches(Fault::OverfillsBatches, &["bulk-subscribe.max-messages"], "exceeds maxMessagesCount")]
#[case::holds_partial_batches(Fault::HoldsPartialBatches, &["bulk-subscribe.max-await"], "maxAwaitDurationMs")]
#[case::loses_owner_topic(Fault::LosesOwnerTopic, &["multi-topic.owner-topic", "message-id.round-trip"], "owner")]
#[case::seeks_everything(Fault::SeeksEverything, &["multi-topic.seek"], "repositioned")]
#[case::acks_every_topic(Fault::AcksEveryTopic, &["multi-topic.ack-owner"], "redelivered")]
#[case::accepts_foreign_acks(Fault::AcceptsForeignAcks, &["multi-topic.ack-refused"], "was accepted")]
#[case::duplicates_last_ids(Fault::DuplicatesLastIds, &["multi-topic.last-message-ids"], "duplicate owner topics")]
#[case::ignores_partition_updates(Fault::IgnoresPartitionUpdates, &["partitions.watch"], "expected [1, 3, 5]")]
#[case::ignores_partition_updates_usage(Fault::IgnoresPartitionUpdates, &["partitions.update-seen"], "new partitions")]
#[case::misroutes_keys(Fault::MisroutesKeys, &["partitions.key-routing"], "landed on partitions")]
#[case::drops_trace_context(Fault::DropsTraceContext, &["tracing.per-entry"], "traceparent")]
#[case::no_redelivery(Fault::NoRedelivery, &["retry.redelivery", "bulk-subscribe.statuses", "bulk-subscribe.handler-error"], "not redelivered")]
#[case::loses_unacked_on_leave(Fault::LosesUnackedOnLeave, &["certification.consumer-leaves"], "lost")]
#[case::strips_envelope(Fault::StripsEnvelope, &["envelope.cloudevents"], "without a CloudEvent envelope")]
#[case::strips_envelope_fidelity(Fault::StripsEnvelope, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::truncates_large_payloads(Fault::TruncatesLargePayloads, &["publish.fidelity", "bulk-publish.fidelity"], "payload differs")]
#[case::ignores_groups(Fault::IgnoresGroups, &["subscribe.competing-consumers"], "more than one member")]
#[case::merges_groups(Fault::MergesGroups, &["subscribe.fan-out"], "missed")]
#[case::forgets_created_groups(Fault::ForgetsCreatedGroups, &["ordering.declared-scope", "certification.consumer-leaves", "retry.redelivery"], "lost")]
#[case::hides_partitions(Fault::HidesPartitions, &["partitions.watch", "partitions.key-routing"], "declared unsupported")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_component_fails_the_cases_it_breaks(
    #[case] fault: Fault,
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

        let faulty = Runtime::new("faulty", Faulty::shared(memory(), fault));
        let failed = run_case(case, &faulty, &NO_RETRY).await;
        assert_eq!(
            failed.status,
            Status::Fail,
            "{fault:?} must fail {id}:\n{}",
            describe(&failed)
        );
        let text = describe(&failed);
        assert!(
            failed
                .evidence
                .findings
                .iter()
                .any(|f| f.to_lowercase().contains(&evidence.to_lowercase())),
            "{fault:?} failed {id}, but no finding mentions '{evidence}':\n{text}"
        );
    }
}
