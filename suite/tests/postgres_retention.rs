//! The PostgreSQL component deletes what every group acknowledged: after a run with
//! `retentionMs: 0`, its tables hold only what some group has not acknowledged, and
//! with a retention they keep acknowledged messages (for a seek back) until it passes.
//! Runs against the server in `fixtures/postgres.yaml` (or PUBSUB_POSTGRES_ENDPOINT),
//! on tables of its own.

use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::registry;
use pubsub_conformance::components::{
    Component, ConsumerSpec, MessageId, OutgoingMessage, TopicSelector,
};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The fixture's definition on tables of its own, with `retention_ms`.
fn definition(prefix: &str, retention_ms: u64) -> ComponentDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/postgres.yaml");
    let mut definition = ComponentDefinition::from_file(&path).unwrap();
    definition
        .metadata
        .insert("tablePrefix".into(), prefix.into());
    definition
        .metadata
        .insert("retentionMs".into(), retention_ms.to_string());
    definition
}

async fn component(prefix: &str, retention_ms: u64) -> Arc<dyn Component> {
    let endpoint = std::env::var("PUBSUB_POSTGRES_ENDPOINT").ok();
    registry::build(&definition(prefix, retention_ms), endpoint.as_deref())
        .await
        .unwrap_or_else(|e| panic!("building the postgres component: {e}"))
}

/// A direct connection to the server the component uses, to look at its tables.
async fn inspect() -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = definition("unused", 0).metadata["connectionString"]
        .parse()
        .unwrap();
    if let Ok(endpoint) = std::env::var("PUBSUB_POSTGRES_ENDPOINT") {
        let (host, port) = endpoint.rsplit_once(':').unwrap();
        config.host(host).port(port.parse().unwrap());
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The message ids left in `prefix`'s message table, and the (group, id) pending rows.
async fn tables(
    client: &tokio_postgres::Client,
    prefix: &str,
) -> (BTreeSet<i64>, BTreeSet<(String, i64)>) {
    let messages = client
        .query(&format!("SELECT id FROM {prefix}_messages"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let pending = client
        .query(
            &format!("SELECT grp, message_id FROM {prefix}_pending"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    (messages, pending)
}

/// Asserts that `prefix`'s message and pending tables are empty, `when` saying after what.
async fn assert_tables_empty(client: &tokio_postgres::Client, prefix: &str, when: &str) {
    let (messages, pending) = tables(client, prefix).await;
    assert!(
        messages.is_empty() && pending.is_empty(),
        "{when} the tables must be empty: {} messages, {} pending rows left",
        messages.len(),
        pending.len()
    );
}

async fn drop_tables(client: &tokio_postgres::Client, prefix: &str) {
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {prefix}_messages, {prefix}_pending, {prefix}_cursors, {prefix}_partitions"
        ))
        .await
        .unwrap();
}

/// Publishes `count` messages to each topic; returns their ids.
async fn publish(component: &dyn Component, topics: &[&str], count: usize) -> Vec<MessageId> {
    let mut ids = Vec::new();
    for topic in topics {
        let messages = (0..count)
            .map(|i| OutgoingMessage::new(*topic, format!("m{i}").into_bytes()))
            .collect();
        for result in component.publish_batch(messages).await.unwrap() {
            ids.push(result.unwrap());
        }
    }
    ids
}

/// Receives until `count` messages came (bounded), acknowledging those `keep` rejects
/// not; returns the ids received.
async fn read(
    component: &dyn Component,
    spec: &ConsumerSpec,
    count: usize,
    ack: impl Fn(&MessageId) -> bool,
) -> Vec<MessageId> {
    let consumer = component.consumer(spec.clone()).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < count && tokio::time::Instant::now() < deadline {
        for message in consumer
            .receive(100, Duration::from_millis(500))
            .await
            .unwrap()
        {
            if ack(&message.id) {
                consumer.ack(&message.id).await.unwrap();
            }
            got.push(message.id);
        }
    }
    consumer.close().await.unwrap();
    got
}

fn unique_prefix() -> String {
    format!("pcsret_{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_rows_go_away_and_only_what_a_group_holds_stays() {
    let prefix = unique_prefix();
    let component = component(&prefix, 0).await;
    let topics = ["t1", "t2"];
    let spec = |group: &str| {
        ConsumerSpec::new(
            TopicSelector::List(topics.iter().map(|t| t.to_string()).collect()),
            group,
        )
    };
    // Both groups exist before anything is published, so both are owed everything.
    for group in ["all", "half"] {
        component
            .consumer(spec(group))
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
    }
    let published = publish(component.as_ref(), &topics, 50).await;
    let everything = read(component.as_ref(), &spec("all"), 100, |_| true).await;
    assert_eq!(
        everything.len(),
        100,
        "group 'all' must read all 100 messages"
    );
    let half = read(component.as_ref(), &spec("half"), 100, |id| {
        id.position % 2 == 0
    })
    .await;
    assert_eq!(half.len(), 100, "group 'half' must read all 100 messages");

    let held: BTreeSet<i64> = published
        .iter()
        .filter(|id| id.position % 2 == 1)
        .map(|id| id.position as i64)
        .collect();
    let client = inspect().await;
    let (messages, pending) = tables(&client, &prefix).await;
    assert_eq!(
        messages, held,
        "the message table must hold exactly what group 'half' did not acknowledge"
    );
    let expected_pending: BTreeSet<(String, i64)> =
        held.iter().map(|id| ("half".to_string(), *id)).collect();
    assert_eq!(
        pending, expected_pending,
        "pending rows must be exactly group 'half''s unacknowledged messages"
    );

    // Group 'half' gets the rest again, acknowledges it, and nothing is left.
    let again = read(component.as_ref(), &spec("half"), held.len(), |_| true).await;
    assert_eq!(
        again
            .iter()
            .map(|id| id.position as i64)
            .collect::<BTreeSet<_>>(),
        held,
        "group 'half' must get exactly its unacknowledged messages again"
    );
    assert_tables_empty(
        &client,
        &prefix,
        "after every group acknowledged everything",
    )
    .await;
    drop_tables(&client, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_keeps_acknowledged_messages_for_a_seek_back() {
    let prefix = unique_prefix();
    let component = component(&prefix, 60_000).await;
    let spec = ConsumerSpec::new(TopicSelector::Single("t".into()), "g");
    component
        .consumer(spec.clone())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let published = publish(component.as_ref(), &["t"], 20).await;
    let got = read(component.as_ref(), &spec, 20, |_| true).await;
    assert_eq!(got.len(), 20);
    let client = inspect().await;
    let (messages, pending) = tables(&client, &prefix).await;
    assert_eq!(
        messages.len(),
        20,
        "inside the retention, acknowledged messages must stay"
    );
    assert!(
        pending.is_empty(),
        "acknowledged pending rows must be deleted"
    );

    // A seek back to the first message replays all 20.
    let consumer = component.consumer(spec.clone()).await.unwrap();
    consumer.seek(&published[0]).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut replayed = BTreeSet::new();
    while replayed.len() < 20 && tokio::time::Instant::now() < deadline {
        for message in consumer
            .receive(100, Duration::from_millis(500))
            .await
            .unwrap()
        {
            consumer.ack(&message.id).await.unwrap();
            replayed.insert(message.id.position);
        }
    }
    consumer.close().await.unwrap();
    assert_eq!(
        replayed,
        published.iter().map(|id| id.position).collect(),
        "a seek back inside the retention must replay every message"
    );
    drop_tables(&client, &prefix).await;
}

/// A group created (`create_group`) before the messages came and not yet reading is
/// owed them: another group reading and acknowledging everything under `retentionMs: 0`
/// must not trim them away (a bench with a 60 s retention once stalled so: its groups
/// were created first and drained one after another, and create_group registered
/// nothing, so the last groups found the topic trimmed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_group_keeps_its_messages_while_another_group_acknowledges_them() {
    let prefix = unique_prefix();
    let component = component(&prefix, 0).await;
    let spec = |group: &str| ConsumerSpec::new(TopicSelector::Single("t".into()), group);
    for group in ["first", "later"] {
        component.create_group(&spec(group)).await.unwrap();
    }
    let published = publish(component.as_ref(), &["t"], 30).await;
    let first = read(component.as_ref(), &spec("first"), 30, |_| true).await;
    assert_eq!(first.len(), 30, "group 'first' must read all 30 messages");
    let client = inspect().await;
    let (messages, _) = tables(&client, &prefix).await;
    assert_eq!(
        messages.len(),
        30,
        "group 'later' has read nothing yet, so none of its messages may be trimmed"
    );
    let later = read(component.as_ref(), &spec("later"), 30, |_| true).await;
    assert_eq!(
        later.iter().map(|id| id.position).collect::<BTreeSet<_>>(),
        published.iter().map(|id| id.position).collect(),
        "group 'later' must get every message published after it was created"
    );
    assert_tables_empty(&client, &prefix, "once both groups acknowledged everything").await;
    drop_tables(&client, &prefix).await;
}
