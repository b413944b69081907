//! The RabbitMQ component keeps a topic's partition record as the message counts of
//! two queues. A broker recovering its queues after a restart can show one queue's
//! messages before the other's: a record whose queues disagree is never read (a
//! record of 0 partitions does not exist; the read fails naming both counts), and is
//! read once they agree. Runs
//! against the server in `fixtures/rabbitmq.yaml` (or PUBSUB_RABBITMQ_ENDPOINT), on
//! an exchange of its own.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueuePurgeOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::{registry, Component, PartitionUpdate};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn definition(exchange: &str) -> ComponentDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/rabbitmq.yaml");
    let mut definition = ComponentDefinition::from_file(&path).unwrap();
    definition
        .metadata
        .insert("exchange".into(), exchange.into());
    definition
}

fn connection_string(definition: &ComponentDefinition) -> String {
    let configured = definition.metadata["connectionString"].clone();
    match std::env::var("PUBSUB_RABBITMQ_ENDPOINT") {
        Ok(endpoint) => configured.replace("127.0.0.1:5672", &endpoint),
        Err(_) => configured,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_record_whose_queues_disagree_is_not_reported_until_they_agree() {
    let exchange = format!("pcsrec{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let definition = definition(&exchange);
    let endpoint = std::env::var("PUBSUB_RABBITMQ_ENDPOINT").ok();
    let component: Arc<dyn Component> = registry::build(&definition, endpoint.as_deref())
        .await
        .unwrap_or_else(|e| panic!("building the rabbitmq component: {e}"));
    let topic = "t";
    component.create_topic(topic, 2).await.unwrap();

    // The count queue loses its messages, as if the broker had not recovered it yet.
    let connection = Connection::connect(
        &connection_string(&definition),
        ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let channel = connection.create_channel().await.unwrap();
    // Confirmed publishes: the count queue holds both messages before the next read.
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let count_queue = format!("{exchange}.partitions.{topic}.count");
    channel
        .queue_purge(count_queue.as_str().into(), QueuePurgeOptions::default())
        .await
        .unwrap();

    let refused = component.watch_partitions(topic).await;
    let error = match refused {
        Ok(mut watch) => panic!(
            "a record whose version queue holds a version and whose count queue is empty was read; first notification: {:?}",
            watch.next_within(Duration::from_secs(1)).await
        ),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("disagreed") && error.contains("count queue 0"),
        "the error must say the record's queues disagree: {error}"
    );

    // The count queue comes back: the record is reported as it was written.
    for _ in 0..2 {
        channel
            .basic_publish(
                "".into(),
                count_queue.as_str().into(),
                BasicPublishOptions::default(),
                b"",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut watch = component.watch_partitions(topic).await.unwrap();
    let shown = watch.next_within(Duration::from_secs(10)).await;
    assert_eq!(
        shown,
        Some(PartitionUpdate {
            version: 1,
            partitions: 2
        })
    );
    for what in ["version", "count"] {
        let _ = channel
            .queue_delete(
                format!("{exchange}.partitions.{topic}.{what}")
                    .as_str()
                    .into(),
                Default::default(),
            )
            .await;
    }
}
