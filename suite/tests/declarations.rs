//! The in-memory reference component's declaration, pinned. The catalogue judges what a
//! component does against what it declares, so a declaration grown weaker than the
//! truth (a longer bound, a native feature declared emulated, a durability or a size
//! limit left out) would pass every case: this test holds the reference's declaration,
//! and kills the mutants that weaken it (docs/mutation-testing.md). So does what the
//! reference does that no case sees: letting go of a topic (only `bench` asks).

use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::{Component, ConsumerSpec, OutgoingMessage, TopicSelector};
use std::path::Path;
use std::time::Duration;

/// The component `fixtures/memory.yaml` builds.
async fn reference() -> std::sync::Arc<dyn Component> {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/memory.yaml"
    ));
    let text = std::fs::read_to_string(path).expect("reading fixtures/memory.yaml");
    let definition = ComponentDefinition::parse(&text, path).expect("parsing fixtures/memory.yaml");
    pubsub_conformance::components::registry::build(&definition, None)
        .await
        .expect("building the in-memory component")
}

/// The reference runs in process: its definition names no broker endpoint, not even
/// an empty one.
#[test]
fn the_reference_names_no_endpoint() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/memory.yaml"
    ));
    let text = std::fs::read_to_string(path).expect("reading fixtures/memory.yaml");
    let definition = ComponentDefinition::parse(&text, path).expect("parsing fixtures/memory.yaml");
    let validated = pubsub_conformance::components::registry::validate(&definition)
        .expect("validating fixtures/memory.yaml");
    assert_eq!(validated.endpoint, None);
}

/// What `fixtures/memory.yaml` builds declares, and the version it reports.
const DECLARED: &str = r#"
{
    "bulk_publish": "native",
    "bulk_subscribe": "native",
    "clock_tolerance": {
        "nanos": 5000000,
        "secs": 0
    },
    "dead_letter": "emulated",
    "delay_precision": {
        "nanos": 250000000,
        "secs": 0
    },
    "delayed_delivery": "emulated",
    "delivery": "at-least-once",
    "delivery_bound": {
        "nanos": 0,
        "secs": 5
    },
    "durable": false,
    "fan_out": true,
    "headers": true,
    "lease": {
        "nanos": 0,
        "secs": 0
    },
    "max_message_bytes": 65536,
    "max_metadata_entries": null,
    "multi_topic": true,
    "ordering": "per-partition",
    "partitions": {
        "discovery_bound": {
            "nanos": 500000000,
            "secs": 0
        },
        "emulated": false
    },
    "receiver_delay": "emulated",
    "recovery_bound": {
        "nanos": 0,
        "secs": 2
    },
    "redelivers_slow_handlers": false,
    "redelivery_bound": {
        "nanos": 0,
        "secs": 1
    },
    "returns_on_close": true,
    "seek": true,
    "ttl": "emulated"
}
"#;

#[tokio::test]
async fn the_reference_component_declares_what_it_does() {
    let component = reference().await;
    let declared = serde_json::to_value(component.capabilities()).expect("the declaration as JSON");
    let pinned: serde_json::Value = serde_json::from_str(DECLARED).expect("DECLARED is JSON");
    assert_eq!(
        declared,
        pinned,
        "the in-memory component's declaration changed; it declares:\n{}",
        serde_json::to_string_pretty(&declared).unwrap_or_default()
    );
    let version = component
        .broker_version()
        .await
        .expect("the in-memory component's version");
    assert_eq!(version, format!("in-memory {}", env!("CARGO_PKG_VERSION")));
}

/// Discarding a topic frees its messages and its groups' positions, and no other
/// topic's: a bench run discards each topic it is done with while others run.
#[tokio::test]
async fn discarding_a_topic_frees_it_and_leaves_the_others() {
    let component = reference().await;
    let spec = |topic: &str| ConsumerSpec::new(TopicSelector::Single(topic.to_string()), "g");
    for topic in ["kept", "discarded"] {
        component
            .create_group(&spec(topic))
            .await
            .expect("creating a group");
        for n in 0..2 {
            component
                .publish(OutgoingMessage::new(topic, format!("{topic}-{n}")))
                .await
                .expect("publishing");
        }
    }
    // The group on `kept` has a position: its first message acknowledged.
    let member = component
        .consumer(spec("kept"))
        .await
        .expect("opening a member");
    let first = member
        .receive(1, Duration::from_secs(1))
        .await
        .expect("receiving");
    assert_eq!(first.len(), 1);
    member.ack(&first[0].id).await.expect("acknowledging");
    member.close().await.expect("closing");
    component
        .discard_topic("discarded")
        .await
        .expect("discarding");
    let payloads = |topic: &'static str| {
        let component = &component;
        async move {
            let member = component
                .consumer(spec(topic))
                .await
                .expect("opening a member");
            let got = member
                .receive(10, Duration::from_millis(300))
                .await
                .expect("receiving");
            got.into_iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        payloads("kept").await,
        ["kept-1"],
        "the other topic kept its position"
    );
    assert!(
        payloads("discarded").await.is_empty(),
        "the discarded topic's messages are gone"
    );
}

/// A definition whose size limit or partition count is 0, either one alone, is
/// refused naming both settings: such a reference would refuse every message or hold
/// none.
#[tokio::test]
async fn a_zero_size_limit_or_partition_count_is_refused() {
    let path = Path::new("memory-zero.yaml");
    for (max_message_bytes, partitions) in [("0", "1"), ("65536", "0"), ("0", "0")] {
        let text = format!(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: memory\nspec:\n  type: pubsub.in-memory\n  version: v1\n  metadata:\n    - name: maxMessageBytes\n      value: \"{max_message_bytes}\"\n    - name: partitions\n      value: \"{partitions}\"\n"
        );
        let definition = ComponentDefinition::parse(&text, path).expect("parsing the definition");
        let built = pubsub_conformance::components::registry::build(&definition, None).await;
        let error = match built {
            Ok(_) => panic!(
                "maxMessageBytes {max_message_bytes} and partitions {partitions} were accepted"
            ),
            Err(error) => format!("{error:#}"),
        };
        assert!(
            error.contains("maxMessageBytes and partitions must be above 0"),
            "maxMessageBytes {max_message_bytes}, partitions {partitions}: {error}"
        );
    }
}
