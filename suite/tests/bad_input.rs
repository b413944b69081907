//! Malformed input, one test each: component definitions, expectations files,
//! request metadata, bulk requests, payloads, acknowledgements and subscriptions.
//! Every refusal names the file, field or value and what was expected, and leaves
//! nothing half-done (nothing published, nothing acknowledged). The command line's
//! bad options, globs and report files are in `cli/bad_input.rs`.

use pubsub_conformance::components::component::{ConsumerSpec, TopicSelector};
use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::memory::{MemoryComponent, MemoryConfig};
use pubsub_conformance::components::runtime::{
    BulkHandler, BulkPublishEntry, BulkPublishRequest, BulkSubscribeOptions, EntryStatus, Handler,
    MessageHandler, PublishRequest, Runtime, Status, Subscription,
};
use pubsub_conformance::components::{
    registry, Component, Consumer, ErrorKind, MessageId, Metadata,
};
use pubsub_conformance::expectations::Expectations;
use rstest::rstest;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const HEAD: &str = "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: bad\nspec:\n";

/// The refusal of a definition: parsing, then the type's validation.
fn definition_error(text: &str) -> String {
    let source = Path::new("fixtures/bad.yaml");
    match ComponentDefinition::parse(text, source) {
        Err(e) => e.to_string(),
        Ok(definition) => match registry::validate(&definition) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted:\n{text}"),
        },
    }
}

fn with_metadata(component_type: &str, items: &[(&str, &str)]) -> String {
    let mut text = format!("{HEAD}  type: pubsub.{component_type}\n  metadata:\n");
    for (name, value) in items {
        text.push_str(&format!("    - name: {name}\n      value: \"{value}\"\n"));
    }
    text
}

#[rstest]
#[case::empty_file("", &["fixtures/bad.yaml"])]
#[case::not_yaml("{{{ :", &["fixtures/bad.yaml", "line 1"])]
#[case::a_list("- a\n- b\n", &["fixtures/bad.yaml", "invalid type"])]
#[case::missing_spec("apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: x\n", &["spec"])]
#[case::wrong_kind("apiVersion: dapr.io/v1alpha1\nkind: Subscription\nmetadata:\n  name: x\nspec:\n  type: pubsub.in-memory\n", &["kind", "expected 'Component'"])]
#[case::bad_name("apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: \"a b\"\nspec:\n  type: pubsub.in-memory\n", &["metadata.name", "'a b'"])]
#[case::type_without_prefix(&format!("{HEAD}  type: redis\n"), &["spec.type", "expected 'pubsub.<name>'"])]
#[case::unknown_type(&format!("{HEAD}  type: pubsub.kafka-nope\n"), &["kafka-nope"])]
#[case::item_without_value(&format!("{HEAD}  type: pubsub.in-memory\n  metadata:\n    - name: partitions\n"), &["value"])]
#[case::nested_value(&format!("{HEAD}  type: pubsub.in-memory\n  metadata:\n    - name: partitions\n      value: [1, 2]\n"), &["spec.metadata[0] (partitions)", "string, number or boolean"])]
#[case::set_twice(&with_metadata("in-memory", &[("partitions", "1"), ("partitions", "2")]), &["spec.metadata[1] (partitions)", "set twice"])]
#[case::unknown_field(&with_metadata("nats-jetstream", &[("natsUrl", "nats://127.0.0.1:4222")]), &["natsUrl", "known:", "natsURL"])]
#[case::non_numeric(&with_metadata("nats-jetstream", &[("ackWaitMs", "soon")]), &["ackWaitMs", "soon"])]
#[case::negative(&with_metadata("nats-jetstream", &[("ackWaitMs", "-5")]), &["ackWaitMs", "-5"])]
#[case::below_minimum(&with_metadata("rabbitmq", &[("queueExpiryMs", "10")]), &["queueExpiryMs", "at least 1000 ms"])]
#[case::zero_partitions(&with_metadata("in-memory", &[("partitions", "0")]), &["partitions"])]
#[case::zero_size_limit(&with_metadata("in-memory", &[("maxMessageBytes", "0")]), &["maxMessageBytes"])]
fn a_bad_definition_is_refused_naming_the_field(#[case] text: &str, #[case] named: &[&str]) {
    let error = definition_error(text);
    for part in named {
        assert!(error.contains(part), "{error:?} does not name {part:?}");
    }
}

/// Kafka's settings (the component is behind the `kafka` feature, on by default).
#[cfg(feature = "kafka")]
#[rstest]
#[case::brokers_without_port(&with_metadata("kafka", &[("brokers", "127.0.0.1")]), &["spec.metadata (brokers)", "host:port", "'127.0.0.1'"])]
#[case::one_bad_broker_of_two(&with_metadata("kafka", &[("brokers", "a:9092,b:nine")]), &["brokers", "'a:9092,b:nine'"])]
#[case::group_with_spaces(&with_metadata("kafka", &[("consumerGroup", "my group")]), &["consumerGroup", "'my group'"])]
#[case::unknown_offset(&with_metadata("kafka", &[("initialOffset", "earliest")]), &["initialOffset", "'oldest' or 'newest'", "'earliest'"])]
#[case::acks_zero(&with_metadata("kafka", &[("acks", "0")]), &["acks", "no publish could be confirmed"])]
#[case::acks_word(&with_metadata("kafka", &[("acks", "leader")]), &["acks", "'leader'"])]
#[case::refresh_too_fast(&with_metadata("kafka", &[("metadataRefreshIntervalMs", "5")]), &["metadataRefreshIntervalMs", "at least 100 ms"])]
#[case::refresh_not_a_number(&with_metadata("kafka", &[("metadataRefreshIntervalMs", "1s")]), &["metadataRefreshIntervalMs", "1s"])]
#[case::message_bytes_too_small(&with_metadata("kafka", &[("maxMessageBytes", "10")]), &["maxMessageBytes", "1000 to 1000000000"])]
#[case::unknown_setting(&with_metadata("kafka", &[("bootstrapServers", "127.0.0.1:9092")]), &["bootstrapServers", "brokers"])]
fn a_bad_kafka_definition_is_refused_naming_the_field(#[case] text: &str, #[case] named: &[&str]) {
    let error = definition_error(text);
    for part in named {
        assert!(error.contains(part), "{error:?} does not name {part:?}");
    }
}

#[rstest]
#[case::unknown_case(
    "expectations:\n  - case: publish.nope\n    broker: x\n    reason: y\n",
    "case 'publish.nope' is not in the catalogue"
)]
#[case::no_reason(
    "expectations:\n  - case: publish.delivery\n    broker: x\n    reason: \" \"\n",
    "needs a broker or client version and a reason"
)]
#[case::not_a_list("expectations: yes\n", "not an expectations file")]
#[case::no_such_path(
    "expectations:\n  - case: publish.delivery\n    broker: x\n    via: attached-sidecar\n    reason: y\n",
    "names no path in 'via: attached-sidecar' (one of: serve, serve over gRPC, sidecar, sidecar over gRPC, attached sidecar, attached sidecar over gRPC, @dapr/dapr client, "
)]
fn a_bad_expectations_file_is_refused_naming_it(#[case] text: &str, #[case] named: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.yaml");
    std::fs::write(&path, text).unwrap();
    let error = format!("{:#}", Expectations::load_file(&path).unwrap_err());
    assert!(error.contains(named), "{error}");
    assert!(error.contains("memory.yaml"), "the file is named: {error}");
}

fn memory() -> Arc<MemoryComponent> {
    Arc::new(MemoryComponent::new(MemoryConfig {
        max_message_bytes: 1024,
        ..MemoryConfig::default()
    }))
}

/// A new member of `group` on `topic`.
async fn member(component: &MemoryComponent, topic: &str, group: &str) -> Box<dyn Consumer> {
    component
        .consumer(ConsumerSpec::new(
            TopicSelector::Single(topic.into()),
            group,
        ))
        .await
        .unwrap()
}

/// How many messages `topic` holds now, read by a fresh group from the start.
async fn published(component: &Arc<MemoryComponent>, topic: &str) -> usize {
    let consumer = member(component, topic, "bad-input-count").await;
    let got = consumer
        .receive(100, Duration::from_millis(50))
        .await
        .unwrap();
    let _ = consumer.close().await;
    got.len()
}

#[rstest]
#[case::ttl_negative("ttlInSeconds", "-1", "a whole number of seconds above 0")]
#[case::ttl_text("ttlInSeconds", "abc", "a whole number of seconds above 0")]
#[case::ttl_beyond_representable("ttlInSeconds", "99999999999999", "before the year 10000")]
#[case::deliver_at_text("deliverAt", "next tuesday", "an RFC 3339 time")]
#[case::deliver_at_no_zone("deliverAt", "2026-01-02T03:04:05", "an RFC 3339 time")]
#[case::deliver_after_huge("deliverAfter", "500000000years", "before the year 10000")]
#[case::deliver_after_unit("deliverAfter", "5 fortnights", "a duration such as")]
#[case::raw_payload_maybe("rawPayload", "maybe", "'true' or 'false'")]
#[case::traceparent_short("traceparent", "00-abc", "W3C traceparent")]
#[case::reserved_key("x-rt-envelope", "x", "reserved for the runtime")]
#[tokio::test]
async fn bad_metadata_is_refused_and_nothing_is_published(
    #[case] key: &str,
    #[case] value: &str,
    #[case] expected: &str,
) {
    let component = memory();
    let runtime = Runtime::new("bad-input", component.clone());
    let topic = format!("bad-metadata-{}", key.to_lowercase());
    let error = runtime
        .publish(PublishRequest::new(&topic, b"x".to_vec()).with_metadata(key, value))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{error}");
    let text = error.to_string();
    assert!(
        text.contains(key) && text.contains(value) && text.contains(expected),
        "{text}"
    );
    assert_eq!(published(&component, &topic).await, 0);
}

#[tokio::test]
async fn invalid_utf8_declared_json_is_refused_naming_the_offset() {
    let component = memory();
    let runtime = Runtime::new("bad-input", component.clone());
    let error = runtime
        .publish(
            PublishRequest::new("bad-json", vec![b'{', b'"', 0xff, b'"', b'}'])
                .with_content_type("application/json"),
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("declared 'application/json' but is not UTF-8") && text.contains("offset 2"),
        "{text}"
    );
    // The same bytes as binary, or raw, are fine.
    runtime
        .publish(
            PublishRequest::new("bad-json", vec![0xff])
                .with_content_type("application/octet-stream"),
        )
        .await
        .unwrap();
    runtime
        .publish(
            PublishRequest::new("bad-json", vec![0xff])
                .with_content_type("application/json")
                .with_metadata("rawPayload", "true"),
        )
        .await
        .unwrap();
    assert_eq!(published(&component, "bad-json").await, 2);
}

fn entry(id: &str, data: &[u8]) -> BulkPublishEntry {
    BulkPublishEntry {
        entry_id: id.into(),
        event: data.to_vec(),
        content_type: Some("text/plain".into()),
        metadata: Metadata::new(),
    }
}

fn bulk(
    topic: &str,
    entries: Vec<BulkPublishEntry>,
    metadata: &[(&str, &str)],
) -> BulkPublishRequest {
    BulkPublishRequest {
        topic: topic.into(),
        entries,
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

#[rstest]
#[case::empty_entry_id(vec![entry("a", b"1"), entry("", b"2")], &[], "entry")]
#[case::duplicate_entry_ids(vec![entry("a", b"1"), entry("a", b"2")], &[], "'a'")]
#[case::bad_entry_metadata(
    vec![entry("a", b"1"), BulkPublishEntry { metadata: [("ttlInSeconds".to_string(), "-1".to_string())].into(), ..entry("b", b"2") }],
    &[],
    "entry 'b'"
)]
#[case::bad_keep_order(vec![entry("a", b"1")], &[("batchPublishKeepOrder", "sometimes")], "batchPublishKeepOrder")]
#[case::bad_size_limit(vec![entry("a", b"1")], &[("maxBulkPubBytes", "lots")], "maxBulkPubBytes")]
#[case::zero_size_limit(vec![entry("a", b"1")], &[("maxBulkPubBytes", "0")], "above 0")]
#[case::bad_request_traceparent(vec![entry("a", b"1")], &[("traceparent", "nope")], "traceparent")]
#[tokio::test]
async fn a_bad_bulk_request_is_refused_whole(
    #[case] entries: Vec<BulkPublishEntry>,
    #[case] metadata: &[(&str, &str)],
    #[case] named: &str,
) {
    let component = memory();
    let runtime = Runtime::new("bad-input", component.clone());
    let topic = format!("bad-bulk-{}", named.len());
    let error = runtime
        .bulk_publish(bulk(&topic, entries, metadata))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{error}");
    assert!(error.to_string().contains(named), "{error}");
    assert_eq!(
        published(&component, &topic).await,
        0,
        "nothing half-published"
    );
}

/// An entry over the size limit fails alone, with the limit named; the others go.
#[tokio::test]
async fn an_oversize_entry_fails_alone_naming_the_limit() {
    let component = memory();
    let runtime = Runtime::new("bad-input", component.clone());
    let response = runtime
        .bulk_publish(bulk(
            "bad-oversize",
            vec![
                entry("small", b"1"),
                entry("huge", &[b'x'; 4096]),
                entry("also", b"2"),
            ],
            &[],
        ))
        .await
        .unwrap();
    assert_eq!(response.failed_entries.len(), 1, "{response:?}");
    let failed = &response.failed_entries[0];
    assert_eq!(failed.entry_id, "huge");
    assert!(failed.error.contains("1024"), "{}", failed.error);
    assert_eq!(published(&component, "bad-oversize").await, 2);
}

/// An acknowledgement of an id the consumer does not hold is refused naming it, and
/// acknowledges nothing else.
#[tokio::test]
async fn a_foreign_ack_is_refused_naming_the_id() {
    let component = memory();
    let runtime = Runtime::new("bad-input", component.clone());
    runtime
        .publish(PublishRequest::new("bad-ack", b"1".to_vec()))
        .await
        .unwrap();
    let consumer = member(&component, "bad-ack", "bad-ack-group").await;
    let held = consumer
        .receive(10, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let foreign = MessageId::new("bad-ack", None, 999_999);
    let error = consumer.ack(&foreign).await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            ErrorKind::NotFound | ErrorKind::InvalidRequest
        ),
        "{error}"
    );
    assert!(error.to_string().contains(&foreign.to_string()), "{error}");
    let elsewhere = MessageId::new("another-topic", None, 1);
    let error = consumer
        .ack_many(&[held[0].id.clone(), elsewhere.clone()])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("another-topic"), "{error}");
    // The refused ack_many acknowledged nothing: the message comes back to the group.
    consumer.close().await.unwrap();
    let again = member(&component, "bad-ack", "bad-ack-group").await;
    let back = again.receive(10, Duration::from_secs(2)).await.unwrap();
    assert_eq!(back.len(), 1, "the held message was not acknowledged");
}

struct Never;

#[async_trait::async_trait]
impl BulkHandler for Never {
    async fn handle(
        &self,
        _: pubsub_conformance::components::runtime::Batch,
    ) -> Result<Vec<EntryStatus>, String> {
        Ok(Vec::new())
    }
}

#[async_trait::async_trait]
impl MessageHandler for Never {
    async fn handle(
        &self,
        _: pubsub_conformance::components::runtime::Event,
    ) -> Result<Status, String> {
        Ok(Status::Success)
    }
}

#[rstest]
#[case::zero_messages(Some(BulkSubscribeOptions { max_messages_count: 0, max_await_duration: Duration::from_secs(1) }), true, "maxMessagesCount must be at least 1")]
#[case::zero_await(Some(BulkSubscribeOptions { max_messages_count: 10, max_await_duration: Duration::ZERO }), true, "maxAwaitDurationMs must be above 0")]
#[case::bulk_options_single_handler(
    Some(BulkSubscribeOptions::default()),
    false,
    "the handler takes single messages"
)]
#[tokio::test]
async fn a_bad_subscription_is_refused(
    #[case] bulk: Option<BulkSubscribeOptions>,
    #[case] bulk_handler: bool,
    #[case] named: &str,
) {
    let runtime = Runtime::new("bad-input", memory());
    let mut subscription = Subscription::new("bad-sub", "bad-sub-group");
    subscription.bulk = bulk;
    let handler = if bulk_handler {
        Handler::Bulk(Arc::new(Never))
    } else {
        Handler::Single(Arc::new(Never))
    };
    let Err(error) = runtime.subscribe(subscription, handler).await else {
        panic!("the subscription was accepted");
    };
    assert!(error.to_string().contains(named), "{error}");
}

#[rstest]
#[case::empty("")]
#[case::space("with space")]
#[case::hash("orders#1")]
#[tokio::test]
async fn a_bad_topic_is_refused_naming_it(#[case] topic: &str) {
    let runtime = Runtime::new("bad-input", memory());
    let error = runtime
        .publish(PublishRequest::new(topic, b"x".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidRequest);
    assert!(error.to_string().contains("topic name"), "{error}");
}

/// Answers each batch in the HTTP shape: `SUCCESS` for `keep`, an unknown `OK` for
/// `odd`, nothing for `left-out`; records every delivery.
struct WireAnswers {
    deliveries: std::sync::Mutex<Vec<(String, u32)>>,
    warnings: std::sync::Mutex<Vec<String>>,
    delivered: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl BulkHandler for WireAnswers {
    async fn handle(
        &self,
        batch: pubsub_conformance::components::runtime::Batch,
    ) -> Result<Vec<EntryStatus>, String> {
        let mut answers = Vec::new();
        for entry in &batch.entries {
            let data = String::from_utf8_lossy(&entry.event.data).into_owned();
            self.deliveries
                .lock()
                .unwrap()
                .push((data.clone(), entry.event.attempt));
            match data.as_str() {
                "keep" => answers.push(format!(
                    r#"{{"entryId":"{}","status":"SUCCESS"}}"#,
                    entry.entry_id
                )),
                "odd" => answers.push(format!(
                    r#"{{"entryId":"{}","status":"OK"}}"#,
                    entry.entry_id
                )),
                _ => {}
            }
        }
        let body = format!(r#"{{"statuses":[{}]}}"#, answers.join(","));
        let ids: Vec<&str> = batch.entries.iter().map(|e| e.entry_id.as_str()).collect();
        let answer =
            pubsub_conformance::components::runtime::BulkAnswer::from_json(body.as_bytes(), &ids)?;
        self.warnings.lock().unwrap().extend(answer.warnings);
        self.delivered.notify_one();
        Ok(answer.statuses)
    }
}

/// An unknown status string in a bulk answer counts as RETRY (the contract), named in
/// a warning; an entry the answer leaves out is retried too; SUCCESS is not redelivered.
#[tokio::test]
async fn an_unknown_bulk_status_retries_its_entry_only() {
    let runtime = Runtime::new("bad-input", memory());
    let handler = Arc::new(WireAnswers {
        deliveries: Default::default(),
        warnings: Default::default(),
        delivered: tokio::sync::Notify::new(),
    });
    let mut subscription = Subscription::new("bad-status", "bad-status-group");
    subscription.bulk = Some(BulkSubscribeOptions {
        max_messages_count: 10,
        max_await_duration: Duration::from_millis(50),
    });
    let handle = runtime
        .subscribe(subscription, Handler::Bulk(handler.clone()))
        .await
        .unwrap();
    for data in ["keep", "odd", "left-out"] {
        runtime
            .publish(PublishRequest::new("bad-status", data.as_bytes().to_vec()))
            .await
            .unwrap();
    }
    let redelivered = |data: &str| {
        handler
            .deliveries
            .lock()
            .unwrap()
            .iter()
            .any(|(d, attempt)| d == data && *attempt >= 2)
    };
    let bound = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(redelivered("odd") && redelivered("left-out")) {
        tokio::time::timeout_at(bound, handler.delivered.notified())
            .await
            .expect("odd and left-out were not redelivered within 10 s");
    }
    handle.stop().await;
    let deliveries = handler.deliveries.lock().unwrap().clone();
    assert_eq!(
        deliveries.iter().filter(|(d, _)| d == "keep").count(),
        1,
        "SUCCESS was delivered again: {deliveries:?}"
    );
    let warnings = handler.warnings.lock().unwrap().join("\n");
    assert!(
        warnings.contains("unknown status 'OK' counts as RETRY")
            && warnings.contains("has no answer"),
        "{warnings}"
    );
}
