//! Publish and subscribe, fidelity, envelopes, bad input, consumer groups, message ids.

use super::{fidelity_problems, generate, key_of, samples, Crossing, Sample};
use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::{Record, KEY};
use crate::outcome::{CaseError, CaseRun, Context, Outcome};
use base64::Engine;
use pubsub_components::runtime::trace::is_valid_traceparent;
use pubsub_components::runtime::{PublishRequest, Subscription};
use pubsub_components::{
    ConsumerSpec, ErrorKind, MessageId, Metadata, OrderingScope, TopicSelector,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "publish.delivery",
            must: "Every acknowledged publish MUST be delivered to a running subscriber, and nothing that was not published may be delivered.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(delivery(ctx)),
        },
        Case {
            id: "publish.fidelity",
            must: "Payload bytes (binary, empty, unicode, large), content type and metadata MUST survive single publish -> delivery unchanged, with and without the envelope.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(fidelity(ctx, false)),
        },
        Case {
            id: "publish.concurrent-fidelity",
            must: "Under concurrent single and bulk publishers, each message with its own payload, content type and metadata, every message MUST arrive with its own, never another message's.",
            requires: &[pubsub_components::Feature::BulkPublish],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(concurrent_fidelity(ctx)),
        },
        Case {
            id: "publish.invalid-requests",
            must: "A publish with an invalid topic or invalid metadata MUST be refused with an InvalidRequest error naming the problem, and nothing MUST be published.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("delivery bound + redelivery bound", |c| c.delivery_bound + c.redelivery_bound),
            run: |ctx| Box::pin(invalid_requests(ctx)),
        },
        Case {
            id: "envelope.cloudevents",
            must: "By default a message MUST be wrapped in a CloudEvents 1.0 envelope with id, source, type, datacontenttype, topic, pubsubname and traceparent; JSON data in `data`, binary in `data_base64`.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(cloudevents(ctx)),
        },
        Case {
            id: "envelope.raw-payload",
            must: "With metadata rawPayload=true the payload bytes and content type MUST be delivered untouched, without an envelope.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(raw_payload(ctx)),
        },
        Case {
            id: "subscribe.competing-consumers",
            must: "Members of one consumer group MUST share the messages: each message is first delivered to exactly one member, and all are delivered.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(competing_consumers(ctx)),
        },
        Case {
            id: "subscribe.fan-out",
            must: "Every consumer group MUST receive every message published to the topic.",
            requires: &[pubsub_components::Feature::FanOut],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(fan_out(ctx)),
        },
        Case {
            id: "message-id.round-trip",
            must: "A delivered message id MUST name its owner topic, serialise and deserialise with it intact, and be accepted by ack after the round trip.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("3 x delivery bound", |c| c.delivery_bound * 3),
            run: |ctx| Box::pin(message_id_round_trip(ctx)),
        },
    ]
}

async fn delivery(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let keys = ctx.publish_numbered(&topic, "m", 50).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    Ok(ctx.check(&ctx.expectation()))
}

/// Publishes the samples (singly or in one bulk request) and compares deliveries.
pub(super) async fn fidelity(ctx: CaseContext, bulk: bool) -> CaseRun {
    let topic = ctx.topic("t");
    let samples = samples(&ctx.caps, ctx.seed(), 12);
    let subscription = ctx.subscribe_recorded(&topic).await?;
    if bulk {
        let request = pubsub_components::runtime::BulkPublishRequest {
            topic: topic.clone(),
            entries: samples.iter().map(Sample::entry).collect(),
            metadata: Default::default(),
        };
        let response = ctx
            .bulk_publish(request)
            .await
            .doing("bulk publishing the samples")?;
        if !response.failed_entries.is_empty() {
            return Err(CaseError::Component(format!(
                "bulk publish of valid samples reported failures: {:?}",
                response.failed_entries
            )));
        }
    } else {
        for sample in &samples {
            ctx.publish(sample.request(&topic))
                .await
                .doing(&format!("publishing sample {}", sample.key))?;
        }
    }
    let keys: Vec<String> = samples.iter().map(|s| s.key.clone()).collect();
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let events = ctx.recorder.events();
    let crossing = Crossing::of(&ctx.runtime);
    for sample in &samples {
        if let Some(event) = events.iter().find(|e| key_of(e) == sample.key) {
            outcome
                .findings
                .extend(fidelity_problems(sample, event, crossing));
        }
    }
    outcome.note(format!("{} samples (seed {})", samples.len(), ctx.seed()));
    crossing.note_what_is_not_compared(&mut outcome, &ctx.runtime);
    Ok(outcome)
}

async fn invalid_requests(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let bad =
        |key: &str| PublishRequest::new(&topic, key.as_bytes().to_vec()).with_metadata(KEY, key);
    let attempts: Vec<(&str, PublishRequest, &str)> = vec![
        (
            "empty topic",
            PublishRequest::new("", "x").with_metadata(KEY, "bad-0"),
            "topic",
        ),
        (
            "topic with '#'",
            PublishRequest::new(format!("{topic}#1"), "x").with_metadata(KEY, "bad-1"),
            "topic",
        ),
        (
            "reserved metadata key",
            bad("bad-2").with_metadata("x-rt-envelope", "forged"),
            "x-rt-envelope",
        ),
        (
            "ttlInSeconds=soon",
            bad("bad-3").with_metadata("ttlInSeconds", "soon"),
            "ttlInSeconds",
        ),
        (
            "deliverAt=tomorrow",
            bad("bad-4").with_metadata("deliverAt", "tomorrow"),
            "deliverAt",
        ),
        (
            "deliverAfter=5 parsecs",
            bad("bad-5").with_metadata("deliverAfter", "5 parsecs"),
            "deliverAfter",
        ),
        (
            "rawPayload=maybe",
            bad("bad-6").with_metadata("rawPayload", "maybe"),
            "rawPayload",
        ),
        (
            "malformed traceparent",
            bad("bad-7").with_metadata("traceparent", "00-xyz"),
            "traceparent",
        ),
        (
            "control character in metadata",
            bad("bad-8").with_metadata("app-note", "a\u{7}b"),
            "control character",
        ),
    ];
    let mut outcome = Outcome::new();
    for (what, request, named) in attempts {
        match ctx.runtime.publish(request).await {
            Ok(id) => {
                outcome.fail(format!("{what}: accepted (id {id}) instead of refused"));
            }
            Err(e) if e.kind() != ErrorKind::InvalidRequest => {
                outcome.fail(format!(
                    "{what}: refused with a {:?} error, not InvalidRequest: {e}",
                    e.kind()
                ));
            }
            Err(e) if !e.to_string().contains(named) => {
                outcome.fail(format!("{what}: the error does not name '{named}': {e}"));
            }
            Err(e) => {
                outcome.note(format!("{what}: {e}"));
            }
        }
    }
    let sentinel = ctx.publish_numbered(&topic, "ok", 1).await?;
    ctx.recorder
        .wait_for_keys(&sentinel, ctx.delivery_deadline())
        .await;
    if ctx.caps.ordering == OrderingScope::None {
        // Without ordering, a refused-but-published message could trail the sentinel.
        ctx.recorder
            .wait_until(ctx.quiet_window(), |h| {
                h.delivered_keys().iter().any(|k| k.starts_with("bad-"))
            })
            .await;
    }
    subscription.stop().await;
    Ok(outcome.merge(ctx.check(&ctx.expectation())))
}

async fn cloudevents(ctx: CaseContext) -> CaseRun {
    super::needs_whole_events(&ctx)?;
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let payloads: Vec<(&str, Vec<u8>, &str)> = vec![
        ("json", br#"{"n":1,"s":"x"}"#.to_vec(), "application/json"),
        ("binary", vec![0, 1, 254, 255], "application/octet-stream"),
        ("text", b"plain text".to_vec(), "text/plain"),
    ];
    for (key, data, content_type) in &payloads {
        let request = PublishRequest::new(&topic, data.clone())
            .with_content_type(content_type)
            .with_metadata(KEY, *key);
        ctx.publish(request)
            .await
            .doing(&format!("publishing {key}"))?;
    }
    let keys: Vec<String> = payloads.iter().map(|p| p.0.to_string()).collect();
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    for event in ctx.recorder.events() {
        let key = key_of(&event).to_string();
        let Some(ce) = &event.cloud_event else {
            outcome.fail(format!("{key}: delivered without a CloudEvent envelope"));
            continue;
        };
        let field = |name: &str| ce.get(name).and_then(|v| v.as_str()).map(str::to_string);
        let (_, data, content_type) = payloads
            .iter()
            .find(|p| p.0 == key)
            .cloned()
            .unwrap_or_default();
        let mut expect_field = |name: &str, expected: Option<&str>| {
            let actual = field(name);
            let ok = match expected {
                Some(value) => actual.as_deref() == Some(value),
                None => actual.as_deref().is_some_and(|v| !v.is_empty()),
            };
            outcome.expect(ok, || {
                format!(
                    "{key}: envelope field '{name}' is {actual:?}, expected {}",
                    expected.unwrap_or("non-empty")
                )
            });
        };
        expect_field("specversion", Some("1.0"));
        expect_field("id", None);
        expect_field("source", None);
        expect_field("type", Some("com.dapr.event.sent"));
        expect_field("datacontenttype", Some(content_type));
        expect_field("topic", Some(&topic));
        expect_field("pubsubname", Some(ctx.runtime.name()));
        let traceparent = field("traceparent");
        outcome.expect(
            traceparent.as_deref().is_some_and(is_valid_traceparent) && traceparent == event.trace_parent,
            || format!("{key}: envelope traceparent {traceparent:?} is not valid or differs from the event's {:?}", event.trace_parent),
        );
        match key.as_str() {
            "json" => {
                let expected: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
                outcome.expect(ce.get("data") == Some(&expected), || {
                    format!(
                        "json: `data` is {:?}, expected the JSON {expected}",
                        ce.get("data")
                    )
                });
            }
            "binary" => {
                let decoded = field("data_base64")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
                outcome.expect(decoded.as_deref() == Some(&data[..]), || {
                    format!("binary: `data_base64` is {:?}", field("data_base64"))
                });
            }
            _ => {}
        }
    }
    Ok(outcome)
}

async fn raw_payload(ctx: CaseContext) -> CaseRun {
    if ctx.runtime.is_remote() {
        return Err(CaseError::CannotProvoke(
            "over Dapr's HTTP API a rawPayload message reaches a subscription without rawPayload wrapped in a CloudEvent (data_base64, application/octet-stream), as daprd delivers it: the property needs a subscriber the API does not have; that the bytes arrive is publish.fidelity's".into(),
        ));
    }
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let data = vec![0xff, 0x00, b'{', 0x80, 0x7f];
    let request = PublishRequest::new(&topic, data.clone())
        .with_content_type("application/x-protobuf")
        .with_metadata("rawPayload", "true")
        .with_metadata(KEY, "raw-0");
    ctx.publish(request)
        .await
        .doing("publishing a raw payload")?;
    ctx.recorder
        .wait_for_keys(&["raw-0".into()], ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    if let Some(event) = ctx.recorder.events().first() {
        outcome.expect(event.cloud_event.is_none(), || {
            "raw payload was delivered wrapped in an envelope".into()
        });
        outcome.expect(event.data == data, || {
            format!(
                "raw payload changed: {:?} published, {:?} delivered",
                data, event.data
            )
        });
        outcome.expect(
            event.content_type.as_deref() == Some("application/x-protobuf"),
            || format!("content type changed to {:?}", event.content_type),
        );
    }
    Ok(outcome)
}

async fn competing_consumers(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let group = ctx.group("shared");
    let first = ctx
        .subscribe(
            Subscription::new(&topic, &group),
            ctx.recorder.handler("member-1"),
        )
        .await?;
    let second = ctx
        .subscribe(
            Subscription::new(&topic, &group),
            ctx.recorder.handler("member-2"),
        )
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 100).await?;
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    first.stop().await;
    second.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let history = ctx.recorder.history();
    let mut first_deliveries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in &history.records {
        if let Record::Delivered {
            key: Some(key),
            attempt: 1,
            subscriber,
            ..
        } = record
        {
            // A member that gets the same message twice has a duplicate (the
            // checker judges it); sharing is violated only across members.
            let members = first_deliveries.entry(key.clone()).or_default();
            if !members.contains(subscriber) {
                members.push(subscriber.clone());
            }
        }
    }
    let shared: Vec<String> = first_deliveries
        .iter()
        .filter(|(_, members)| members.len() > 1)
        .map(|(key, members)| format!("{key} to {}", members.join(" and ")))
        .collect();
    outcome.expect(shared.is_empty(), || {
        format!(
            "{} messages were first-delivered to more than one member of the group: {}",
            shared.len(),
            shared
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let per_member = |m: &str| {
        first_deliveries
            .values()
            .filter(|v| v.iter().any(|s| s == m))
            .count()
    };
    outcome.note(format!(
        "member-1 got {}, member-2 got {}",
        per_member("member-1"),
        per_member("member-2")
    ));
    Ok(outcome)
}

async fn fan_out(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let first = ctx
        .subscribe(
            Subscription::new(&topic, ctx.group("a")),
            ctx.recorder.handler("group-a"),
        )
        .await?;
    let second = ctx
        .subscribe(
            Subscription::new(&topic, ctx.group("b")),
            ctx.recorder.handler("group-b"),
        )
        .await?;
    let keys = ctx.publish_numbered(&topic, "m", 30).await?;
    let all: BTreeSet<String> = keys.iter().cloned().collect();
    let got = |h: &crate::history::History, who: &str| -> BTreeSet<String> {
        h.records
            .iter()
            .filter_map(|r| match r {
                Record::Delivered {
                    key: Some(k),
                    subscriber,
                    ..
                } if subscriber == who => Some(k.clone()),
                _ => None,
            })
            .collect()
    };
    ctx.recorder
        .wait_until(ctx.delivery_deadline(), |h| {
            got(h, "group-a") == all && got(h, "group-b") == all
        })
        .await;
    first.stop().await;
    second.stop().await;
    let history = ctx.recorder.history();
    let mut outcome = Outcome::new().with_history(&history);
    for who in ["group-a", "group-b"] {
        let delivered = got(&history, who);
        let missing: Vec<&String> = all.difference(&delivered).collect();
        outcome.expect(missing.is_empty(), || {
            format!("{who} missed {} messages: {missing:?}", missing.len())
        });
    }
    Ok(outcome)
}

async fn message_id_round_trip(ctx: CaseContext) -> CaseRun {
    let mut outcome = Outcome::new();
    // Arbitrary ids, generated from the case seed.
    let strategy = (
        proptest::option::of("[a-zA-Z0-9._/:-]{1,60}"),
        proptest::option::of(0u32..4096),
        proptest::num::u64::ANY,
    );
    for (topic, partition, position) in generate(strategy, ctx.seed(), 256) {
        let partition = topic.as_ref().and(partition);
        let id = MessageId {
            topic,
            partition,
            position,
        };
        let text = id.to_string();
        match text.parse::<MessageId>() {
            Ok(back) if back == id => {}
            other => {
                outcome.fail(format!("id {id:?} -> '{text}' -> {other:?}"));
            }
        }
    }
    // Delivered ids: owner topic named, and acceptable to ack after the round trip.
    let topic = ctx.topic("t");
    let group = ctx.group("g");
    let spec = ConsumerSpec::new(TopicSelector::Single(topic.clone()), &group);
    ctx.create_consumer_group(&spec).await?;
    let keys = ctx.publish_numbered(&topic, "m", 5).await?;
    let consumer = ctx
        .runtime
        .component()
        .consumer(spec.clone())
        .await
        .doing("opening a consumer")?;
    let mut received = Vec::new();
    while received.len() < keys.len() && tokio::time::Instant::now() < ctx.delivery_deadline() {
        let wait = ctx
            .delivery_deadline()
            .saturating_duration_since(tokio::time::Instant::now());
        received.extend(
            consumer
                .receive(keys.len(), wait)
                .await
                .doing("receiving")?,
        );
    }
    outcome.expect(received.len() == keys.len(), || {
        format!("received {} of {} messages", received.len(), keys.len())
    });
    for message in &received {
        outcome.expect(message.id.topic.as_deref() == Some(topic.as_str()), || {
            format!(
                "delivered id {} does not name its owner topic '{topic}'",
                message.id
            )
        });
        let json = serde_json::to_string(&message.id).unwrap_or_default();
        let back: Option<MessageId> = serde_json::from_str(&json).ok();
        outcome.expect(back.as_ref() == Some(&message.id), || {
            format!("id {} -> {json} -> {back:?}", message.id)
        });
        if let Some(back) = back {
            if let Err(e) = consumer.ack(&back).await {
                outcome.fail(format!("ack of round-tripped id {back} refused: {e}"));
            }
        }
    }
    let _ = consumer.close().await;
    // Acked through round-tripped ids: a new member of the group gets nothing back.
    let again = ctx
        .runtime
        .component()
        .consumer(spec)
        .await
        .doing("reopening the consumer")?;
    let redelivered = again
        .receive(
            keys.len(),
            ctx.caps.redelivery_bound.min(Duration::from_secs(2)),
        )
        .await
        .doing("receiving after acks")?;
    let _ = again.close().await;
    outcome.expect(redelivered.is_empty(), || {
        format!(
            "{} messages acked through round-tripped ids came back: {:?}",
            redelivered.len(),
            redelivered
                .iter()
                .map(|m| m.id.to_string())
                .collect::<Vec<_>>()
        )
    });
    Ok(outcome)
}

/// Single publishers and bulk publishers of `publish.concurrent-fidelity`.
const CONCURRENT_SINGLE_PUBLISHERS: usize = 4;
const CONCURRENT_BULK_PUBLISHERS: usize = 2;
/// Messages each publisher sends.
const CONCURRENT_MESSAGES: usize = 25;

/// The messages publisher `label` sends: each its own payload (text, bytes or JSON
/// by turn, from the seed), content type and metadata values.
fn concurrent_samples(label: &str, seed: u64) -> Vec<Sample> {
    let strategy = (
        proptest::collection::vec(proptest::num::u8::ANY, 1..512),
        "[a-zA-Z0-9 ✓é日]{1,40}",
        "[ -~]{0,60}",
    );
    generate(strategy, seed, CONCURRENT_MESSAGES)
        .into_iter()
        .enumerate()
        .map(|(i, (bytes, text, value))| {
            let key = format!("{label}-{i}");
            let (data, content_type) = match i % 3 {
                0 => (
                    format!("{text} from {key}").into_bytes(),
                    "text/plain; charset=utf-8",
                ),
                1 => (bytes, "application/octet-stream"),
                _ => (
                    serde_json::json!({ "publisher": label, "n": i, "text": text })
                        .to_string()
                        .into_bytes(),
                    "application/json",
                ),
            };
            let mut metadata = Metadata::new();
            metadata.insert(KEY.into(), key.clone());
            metadata.insert("app-publisher".into(), label.to_string());
            metadata.insert("app-value".into(), format!("{key}:{value}"));
            Sample {
                key,
                data,
                content_type: Some(content_type.to_string()),
                metadata,
            }
        })
        .collect()
}

/// Publishers, single and bulk, run at once, each message with its own payload,
/// content type and metadata: each must arrive with its own, never another's.
async fn concurrent_fidelity(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let subscription = ctx.subscribe_recorded(&topic).await?;
    let seed = ctx.seed();
    let single: Vec<Vec<Sample>> = (0..CONCURRENT_SINGLE_PUBLISHERS)
        .map(|p| concurrent_samples(&format!("s{p}"), seed.wrapping_add(p as u64)))
        .collect();
    let bulk: Vec<Vec<Sample>> = (0..CONCURRENT_BULK_PUBLISHERS)
        .map(|p| concurrent_samples(&format!("b{p}"), seed.wrapping_add(100 + p as u64)))
        .collect();
    let (ctx_ref, topic_ref) = (&ctx, &topic);
    let singles = single.iter().map(|samples| async move {
        for sample in samples {
            ctx_ref
                .publish(sample.request(topic_ref))
                .await
                .doing(&format!("publishing {}", sample.key))?;
        }
        Ok::<(), crate::outcome::CaseError>(())
    });
    let bulks = bulk.iter().map(|samples| {
        ctx.bulk_publish(pubsub_components::runtime::BulkPublishRequest {
            topic: topic.clone(),
            entries: samples.iter().map(Sample::entry).collect(),
            metadata: Default::default(),
        })
    });
    let (single_results, bulk_results) = futures::join!(
        futures::future::join_all(singles),
        futures::future::join_all(bulks)
    );
    for result in single_results {
        result?;
    }
    for result in bulk_results {
        let response = result.doing("bulk publishing concurrently")?;
        if !response.failed_entries.is_empty() {
            return Err(CaseError::Component(format!(
                "a bulk publish of valid messages reported failures: {:?}",
                response.failed_entries
            )));
        }
    }
    let all: Vec<&Sample> = single.iter().chain(&bulk).flatten().collect();
    let keys: Vec<String> = all.iter().map(|s| s.key.clone()).collect();
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    subscription.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
    let crossing = Crossing::of(&ctx.runtime);
    for event in ctx.recorder.events() {
        let key = key_of(&event).to_string();
        if let Some(sample) = all.iter().find(|s| s.key == key) {
            outcome
                .findings
                .extend(fidelity_problems(sample, &event, crossing));
        }
    }
    outcome.note(format!(
        "{} messages from {CONCURRENT_SINGLE_PUBLISHERS} single and {CONCURRENT_BULK_PUBLISHERS} bulk publishers at once (seed {seed})",
        all.len()
    ));
    crossing.note_what_is_not_compared(&mut outcome, &ctx.runtime);
    Ok(outcome)
}
