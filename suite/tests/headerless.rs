//! The runtime's header frame (`components/src/runtime/carrier.rs`) under a component
//! without headers: the in-memory component made to lose what a broker without
//! headers loses (metadata and content type), declaring `headers: false`, must pass
//! the cases that read headers, keys and partitions through the frame. Part of the
//! mutation test command (docs/mutation-testing.md): the reference declares headers,
//! so the in-memory catalogue never runs through the frame.

use async_trait::async_trait;
use pubsub_conformance::catalogue::find;
use pubsub_conformance::components::memory::{MemoryComponent, MemoryConfig};
use pubsub_conformance::components::runtime::Runtime;
use pubsub_conformance::components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, Metadata, OutgoingMessage,
    PartitionWatch, PartitionsWatch, ReceivedMessage, Result, StartPosition, Support,
    TopicSelector,
};
use pubsub_conformance::harness::describe;
use pubsub_conformance::reports::Status;
use pubsub_conformance::runner::{run_case, RunOptions};
use rstest::rstest;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The in-memory component with its headers lost on the way to the broker.
struct Headerless {
    inner: MemoryComponent,
    /// What it declares: `false` puts the runtime's frame on top; `true` (a component
    /// that claims headers it loses) must fail the cases.
    declares_headers: bool,
    /// Groups created through it (the reference creates nothing ahead: a group takes
    /// its position at its first member).
    groups_created: AtomicUsize,
}

impl Headerless {
    fn shared(declares_headers: bool) -> Arc<Headerless> {
        Arc::new(Headerless {
            inner: MemoryComponent::new(MemoryConfig {
                max_message_bytes: 64 * 1024,
                default_partitions: 1,
            }),
            declares_headers,
            groups_created: AtomicUsize::new(0),
        })
    }

    /// What a broker without headers keeps of `message`: the payload, its topic, key,
    /// expiry and due time.
    fn stripped(message: OutgoingMessage) -> OutgoingMessage {
        OutgoingMessage {
            content_type: None,
            metadata: Metadata::new(),
            ..message
        }
    }
}

#[async_trait]
impl Component for Headerless {
    fn kind(&self) -> &str {
        "headerless"
    }

    fn capabilities(&self) -> Capabilities {
        // As brokers without headers mostly are, without expiry and delays of their
        // own: the runtime counts them from the publish time the frame carries.
        Capabilities {
            headers: self.declares_headers,
            ttl: Support::Emulated,
            delayed_delivery: Support::Emulated,
            receiver_delay: Support::Emulated,
            ..self.inner.capabilities()
        }
    }

    async fn broker_version(&self) -> Result<String> {
        self.inner.broker_version().await
    }

    fn client_version(&self) -> Option<String> {
        Some("headerless-client 1.0".into())
    }

    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        Ok(Some("a broker with headers, for a start".into()))
    }

    async fn discard_topic(&self, topic: &str) -> Result<()> {
        self.inner.discard_topic(topic).await
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.inner.publish(Self::stripped(message)).await
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let stripped = messages.into_iter().map(Self::stripped).collect();
        self.inner.publish_batch(stripped).await
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        self.inner.consumer(spec).await
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.groups_created.fetch_add(1, Ordering::Relaxed);
        self.inner.create_group(spec).await
    }

    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        self.inner.create_topic(topic, partitions).await
    }

    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        self.inner.update_partitions(topic, partitions).await
    }

    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        self.inner.watch_partitions(topic).await
    }

    async fn watch_partitions_of(&self, topics: &[String]) -> Result<PartitionsWatch> {
        self.inner.watch_partitions_of(topics).await
    }
}

const ONCE: RunOptions = RunOptions {
    retries: 0,
    seed: None,
    save: None,
    bystander: true,
};

/// Through the frame, a component without headers passes what reads them: metadata,
/// content types and keys on both publish paths, CloudEvents, topics created with
/// partitions, the publish time that receiver delays and TTL count from; and what
/// every consumer method does under the frame (settling, deferring, leases, seeks).
#[rstest]
#[case::publish_fidelity("publish.fidelity")]
#[case::bulk_publish_fidelity("bulk-publish.fidelity")]
#[case::bulk_publish_metadata_merge("bulk-publish.metadata-merge")]
#[case::envelope_cloudevents("envelope.cloudevents")]
#[case::key_routing("partitions.key-routing")]
#[case::invalid_updates("partitions.invalid-updates")]
#[case::update_seen("partitions.update-seen")]
#[case::receiver_delay("delay.receiver-delay")]
#[case::receiver_delay_from_publish("delay.receiver-delay-from-publish")]
#[case::deliver_at("delay.deliver-at")]
#[case::ttl_expired_not_delivered("ttl.expired-not-delivered")]
#[case::acked_not_redelivered("subscribe.acked-not-redelivered")]
#[case::redelivery("retry.redelivery")]
#[case::retry_delay("retry.delay")]
#[case::max_deliveries("dead-letter.max-deliveries")]
#[case::method_edges("subscribe.method-edges")]
#[case::bulk_statuses("bulk-subscribe.statuses")]
#[case::slow_handler("certification.slow-handler")]
#[case::consumer_leaves("certification.consumer-leaves")]
#[case::seek("multi-topic.seek")]
#[case::seek_earliest_latest("multi-topic.seek-earliest-latest")]
#[case::ack_many("multi-topic.ack-many")]
#[case::ack_cumulative("multi-topic.ack-cumulative")]
#[case::last_message_ids("multi-topic.last-message-ids")]
#[case::start_latest("subscribe.start-latest")]
#[case::group_without_members("subscribe.group-without-members")]
#[tokio::test(flavor = "multi_thread")]
async fn the_frame_carries_what_the_broker_loses(#[case] id: &str) {
    let case = find(id).expect("a case of the catalogue");
    let runtime = Runtime::new(
        "headerless",
        Headerless::shared(false) as Arc<dyn Component>,
    );
    let result = run_case(case, &runtime, &ONCE).await;
    assert_eq!(result.status, Status::Pass, "{}", describe(&result));
}

/// Without the frame (the component claims headers), the same loss fails the cases:
/// the fixture really loses what the frame must carry.
#[rstest]
#[case::publish_fidelity("publish.fidelity", "metadata")]
#[case::bulk_publish_metadata_merge("bulk-publish.metadata-merge", "metadata")]
#[tokio::test(flavor = "multi_thread")]
async fn without_the_frame_the_loss_fails(#[case] id: &str, #[case] finding: &str) {
    let case = find(id).expect("a case of the catalogue");
    let runtime = Runtime::new(
        "claims-headers",
        Headerless::shared(true) as Arc<dyn Component>,
    );
    let result = run_case(case, &runtime, &ONCE).await;
    assert_eq!(result.status, Status::Fail, "{}", describe(&result));
    assert!(
        result
            .evidence
            .findings
            .iter()
            .any(|line| line.contains(finding)),
        "no finding mentions '{finding}':\n{}",
        describe(&result)
    );
}

/// The frame layer answers for the component under it: its kind (a row through
/// `serve` is named by it), its declaration, its versions and broker requirement (the
/// report's), creating a group, and discarding a topic (`bench` does).
#[tokio::test]
async fn the_frame_answers_for_the_component_under_it() {
    let headerless = Headerless::shared(false);
    let under: Arc<dyn Component> = headerless.clone();
    let runtime = Runtime::new("headerless", under.clone());
    let framed = runtime.component();
    assert!(
        !Arc::ptr_eq(framed, &under),
        "the runtime puts the frame over a component without headers"
    );
    assert_eq!(framed.kind(), "headerless");
    assert_eq!(framed.capabilities(), under.capabilities());
    assert_eq!(
        framed.broker_version().await.unwrap(),
        under.broker_version().await.unwrap()
    );
    assert_eq!(
        framed.client_version().as_deref(),
        Some("headerless-client 1.0")
    );
    assert_eq!(
        framed.version_text().await.unwrap(),
        under.version_text().await.unwrap()
    );
    assert_eq!(
        framed.unmet_broker_requirement().await.unwrap().as_deref(),
        Some("a broker with headers, for a start")
    );
    // Discarded through the frame, a topic is gone: a new group there finds nothing.
    let spec = ConsumerSpec::new(TopicSelector::Single("discarded".into()), "g");
    framed.create_group(&spec).await.unwrap();
    assert_eq!(
        headerless.groups_created.load(Ordering::Relaxed),
        1,
        "the frame passes group creation on"
    );
    framed
        .publish(OutgoingMessage::new("discarded", "before"))
        .await
        .unwrap();
    framed.discard_topic("discarded").await.unwrap();
    let member = framed.consumer(spec).await.unwrap();
    let left = member
        .receive(10, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "a discarded topic kept {} messages",
        left.len()
    );
}

/// Under the frame, a consumer that records each call and answers it itself.
struct Recording {
    calls: Arc<Mutex<Vec<&'static str>>>,
}

impl Recording {
    fn called(&self, name: &'static str) {
        self.calls.lock().unwrap().push(name);
    }
}

/// The id [`Recording`] gives as its last.
fn marker() -> MessageId {
    MessageId::new("recorded", Some(0), 7)
}

#[async_trait]
impl Consumer for Recording {
    async fn receive(&self, _: usize, _: Duration) -> Result<Vec<ReceivedMessage>> {
        self.called("receive");
        Ok(Vec::new())
    }
    async fn receive_batch(&self, _: usize, _: Duration) -> Result<Vec<ReceivedMessage>> {
        self.called("receive_batch");
        Ok(Vec::new())
    }
    async fn ack(&self, _: &MessageId) -> Result<()> {
        self.called("ack");
        Ok(())
    }
    async fn nack(&self, _: &MessageId, _: Duration) -> Result<()> {
        self.called("nack");
        Ok(())
    }
    async fn defer(&self, _: &MessageId, _: Duration) -> Result<()> {
        self.called("defer");
        Ok(())
    }
    async fn defer_many(&self, _: &[(MessageId, Duration)]) -> Result<()> {
        self.called("defer_many");
        Ok(())
    }
    async fn extend_lease(&self, _: &[MessageId]) -> Result<()> {
        self.called("extend_lease");
        Ok(())
    }
    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        self.called("handed_back");
        Ok(ids.to_vec())
    }
    async fn reject(&self, _: &MessageId, _: &str) -> Result<()> {
        self.called("reject");
        Ok(())
    }
    async fn seek(&self, _: &MessageId) -> Result<()> {
        self.called("seek");
        Ok(())
    }
    async fn seek_all(&self, _: StartPosition) -> Result<()> {
        self.called("seek_all");
        Ok(())
    }
    async fn ack_many(&self, _: &[MessageId]) -> Result<()> {
        self.called("ack_many");
        Ok(())
    }
    async fn ack_cumulative(&self, _: &MessageId) -> Result<()> {
        self.called("ack_cumulative");
        Ok(())
    }
    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.called("last_message_ids");
        Ok(vec![marker()])
    }
    async fn close(&self) -> Result<()> {
        self.called("close");
        Ok(())
    }
}

/// A component without headers whose consumers are [`Recording`]s.
struct RecordingComponent {
    calls: Arc<Mutex<Vec<&'static str>>>,
}

#[async_trait]
impl Component for RecordingComponent {
    fn kind(&self) -> &str {
        "recording"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            headers: false,
            ..Capabilities::default()
        }
    }
    async fn broker_version(&self) -> Result<String> {
        Ok("none".into())
    }
    async fn publish(&self, _: OutgoingMessage) -> Result<MessageId> {
        Ok(marker())
    }
    async fn consumer(&self, _: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        Ok(Box::new(Recording {
            calls: self.calls.clone(),
        }))
    }
}

/// The frame passes every consumer call on, with the answer: the catalogue cannot tell
/// for calls the reference answers the same whether made or not (deferring several,
/// extending leases it does not have, handing back, rejecting).
#[tokio::test]
async fn the_frame_passes_every_consumer_call_on() {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let runtime = Runtime::new(
        "recording",
        Arc::new(RecordingComponent {
            calls: calls.clone(),
        }) as Arc<dyn Component>,
    );
    let consumer = runtime
        .component()
        .consumer(ConsumerSpec::new(TopicSelector::Single("t".into()), "g"))
        .await
        .unwrap();
    let id = marker();
    let ids = [id.clone()];
    let wait = Duration::from_millis(1);
    consumer.receive(1, wait).await.unwrap();
    consumer.receive_batch(1, wait).await.unwrap();
    consumer.ack(&id).await.unwrap();
    consumer.nack(&id, wait).await.unwrap();
    consumer.defer(&id, wait).await.unwrap();
    consumer.defer_many(&[(id.clone(), wait)]).await.unwrap();
    consumer.extend_lease(&ids).await.unwrap();
    assert_eq!(consumer.handed_back(&ids).await.unwrap(), ids);
    consumer.reject(&id, "rejected").await.unwrap();
    consumer.seek(&id).await.unwrap();
    consumer.seek_all(StartPosition::Earliest).await.unwrap();
    consumer.ack_many(&ids).await.unwrap();
    consumer.ack_cumulative(&id).await.unwrap();
    assert_eq!(consumer.last_message_ids().await.unwrap(), ids);
    consumer.close().await.unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        [
            "receive",
            "receive_batch",
            "ack",
            "nack",
            "defer",
            "defer_many",
            "extend_lease",
            "handed_back",
            "reject",
            "seek",
            "seek_all",
            "ack_many",
            "ack_cumulative",
            "last_message_ids",
            "close"
        ]
    );
}
