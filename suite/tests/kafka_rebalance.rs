//! A Kafka member that gives partitions up in a rebalance (a second member joins) never
//! lets its group receive again what it acknowledged, even after a gap (Kafka commits
//! one offset per partition), loses nothing, and refuses an acknowledgement that comes
//! after the rebalance took the record's partition. On a tansu broker of its own
//! (`fixtures/kafka.yaml`, two partitions).

use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::{
    Component, Consumer, ConsumerSpec, ErrorKind, OutgoingMessage, ReceivedMessage, TopicSelector,
};
use pubsub_conformance::provision::{self, ProvisionKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const PUBLISHED: usize = 40;
/// What the first member takes before the second joins.
const TAKEN_ALONE: usize = 20;
/// How long the two members may take to settle everything: a rebalance (a join, a
/// revoke, the copies, a sync) takes a few seconds on tansu.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

fn payload_of(message: &ReceivedMessage) -> String {
    String::from_utf8_lossy(&message.payload).into_owned()
}

async fn component() -> (Arc<dyn Component>, provision::Provisioned) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/kafka.yaml");
    let mut definition = ComponentDefinition::from_file(&path).unwrap();
    definition.metadata.insert("partitions".into(), "2".into());
    let provisioned = provision::provision(
        &definition,
        &provision::order_for("kafka", Some(&[ProvisionKind::LocalProcess])),
    )
    .await
    .unwrap_or_else(|reasons| panic!("no Kafka broker for this test: {reasons:?}"));
    (provisioned.component.clone(), provisioned)
}

/// Receives on `member` until `count` records came (bounded).
async fn take(member: &dyn Consumer, count: usize) -> Vec<ReceivedMessage> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut taken = Vec::new();
    while taken.len() < count && Instant::now() < deadline {
        let more = member
            .receive(count - taken.len(), Duration::from_millis(500))
            .await
            .unwrap();
        taken.extend(more);
    }
    assert_eq!(
        taken.len(),
        count,
        "the first member must receive {count} records alone"
    );
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_never_delivers_again_what_the_member_giving_up_its_partitions_acknowledged() {
    let (component, _broker) = component().await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("rebalance-{}", &run[..8]);
    let spec = ConsumerSpec::new(
        TopicSelector::Single(topic.clone()),
        format!("g-{}", &run[..8]),
    );
    let first = component.consumer(spec.clone()).await.unwrap();
    let messages = (0..PUBLISHED)
        .map(|i| OutgoingMessage::new(&topic, format!("m-{i}").into_bytes()))
        .collect();
    for result in component.publish_batch(messages).await.unwrap() {
        result.unwrap();
    }

    // Alone, the first member acknowledges every other record it takes: each
    // partition gets gaps, which its commit point cannot pass.
    let taken = take(first.as_ref(), TAKEN_ALONE).await;
    let mut settled: BTreeSet<String> = BTreeSet::new();
    let mut unanswered = Vec::new();
    for (i, message) in taken.into_iter().enumerate() {
        if i % 2 == 0 {
            first.ack(&message.id).await.unwrap();
            settled.insert(payload_of(&message));
        } else {
            unanswered.push(message);
        }
    }

    // The second member joins; both receive and acknowledge until every record is
    // settled. Nothing acknowledged may come again. (Which member ends up with which
    // partition, and when, is the broker's choice; the first member's late
    // acknowledgements below are refused only if a rebalance took its partitions.)
    let second = component.consumer(spec.clone()).await.unwrap();
    let members: [(&str, &dyn Consumer); 2] =
        [("first", first.as_ref()), ("second", second.as_ref())];
    let mut again_after_ack = Vec::new();
    let mut attempts: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let deadline = Instant::now() + SETTLE_BOUND;
    while settled.len() < PUBLISHED && Instant::now() < deadline {
        let (a, b) = tokio::join!(
            first.receive(100, Duration::from_millis(250)),
            second.receive(100, Duration::from_millis(250))
        );
        for ((name, member), received) in members.iter().zip([a.unwrap(), b.unwrap()]) {
            for message in received {
                let payload = payload_of(&message);
                if settled.contains(&payload) {
                    again_after_ack.push(format!("{payload} to the {name} member"));
                }
                attempts
                    .entry(payload.clone())
                    .or_default()
                    .push(message.attempt);
                if member.ack(&message.id).await.is_ok() {
                    settled.insert(payload);
                }
            }
        }
    }

    assert!(
        again_after_ack.is_empty(),
        "acknowledged records were delivered again after the rebalance: {again_after_ack:?}"
    );
    let lost: Vec<String> = (0..PUBLISHED)
        .map(|i| format!("m-{i}"))
        .filter(|p| !settled.contains(p))
        .collect();
    assert!(
        lost.is_empty(),
        "never settled within {SETTLE_BOUND:?}: {lost:?}"
    );
    for message in &unanswered {
        let payload = payload_of(message);
        let error = first.ack(&message.id).await.expect_err(
            "an acknowledgement after the rebalance handed the record back must be refused",
        );
        assert_eq!(error.kind(), ErrorKind::NotAllowed, "{error}");
        assert!(error.to_string().contains("rebalance"), "{error}");
        let again = &attempts[&payload];
        assert!(
            again.iter().all(|attempt| *attempt >= 2),
            "{payload} was handed out before the rebalance: its copy is a further attempt, got {again:?}"
        );
    }
    let ids: Vec<_> = unanswered.iter().map(|m| m.id.clone()).collect();
    let error = first
        .ack_many(&ids)
        .await
        .expect_err("acknowledging records handed back on the rebalance together must be refused");
    assert_eq!(error.kind(), ErrorKind::NotAllowed, "{error}");
    for id in &ids {
        assert!(
            error.to_string().contains(&id.to_string()),
            "{id} is not named: {error}"
        );
    }
    first.close().await.unwrap();
    second.close().await.unwrap();
}

/// One group whose members come and go on different topics, as behind a sidecar
/// whose app id is every subscription's group: each new member receives what its
/// topic holds within the rebalance bound, while another member of the group, which
/// holds partitions and has nothing in flight, is not received from meanwhile (its
/// runtime busy elsewhere): it must still serve the group's rebalances. (A member
/// whose handler is at work holds them until it answers, as Kafka's consumers do:
/// `certification.slow-handler`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_members_come_and_go_on_other_topics_keeps_receiving() {
    let (component, _broker) = component().await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let group = format!("shared-{}", &run[..8]);
    let publish_one = |topic: String| {
        let component = component.clone();
        async move {
            for result in component
                .publish_batch(vec![OutgoingMessage::new(&topic, b"m".to_vec())])
                .await
                .unwrap()
            {
                result.unwrap();
            }
        }
    };
    let receive_one = |member: Arc<dyn Consumer>, what: String| async move {
        let started = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && started.elapsed() < SETTLE_BOUND {
            got = member.receive(1, Duration::from_millis(500)).await.unwrap();
        }
        eprintln!("{what}: received after {:?}", started.elapsed());
        assert_eq!(got.len(), 1, "{what}: nothing within {SETTLE_BOUND:?}");
        for message in &got {
            member.ack(&message.id).await.unwrap();
        }
    };
    let join = |topic: String| {
        let (component, group) = (component.clone(), group.clone());
        async move {
            let member: Arc<dyn Consumer> = component
                .consumer(ConsumerSpec::new(TopicSelector::Single(topic), group))
                .await
                .unwrap()
                .into();
            member
        }
    };
    // The busy member takes its partitions (it receives once), then is never
    // received from again while the others come and go.
    let busy_topic = format!("busy-{}", &run[..8]);
    let busy = join(busy_topic.clone()).await;
    publish_one(busy_topic).await;
    receive_one(busy.clone(), "the busy member".into()).await;
    for round in 0..3 {
        let topic = format!("churn-{}-{round}", &run[..8]);
        let member = join(topic.clone()).await;
        publish_one(topic).await;
        receive_one(member.clone(), format!("round {round}")).await;
        member.close().await.unwrap();
    }
    busy.close().await.unwrap();
}
