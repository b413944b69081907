//! envelope.*: the CloudEvents envelope around each message, raw payloads without one,
//! and event ids unique per message.

use super::key_of;
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseError, CaseRun, Context};
use base64::Engine;
use pubsub_components::runtime::trace::is_valid_traceparent;
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest, PublishRequest};
use pubsub_components::Metadata;
use std::collections::{BTreeMap, BTreeSet};

pub(super) async fn cloudevents(ctx: CaseContext) -> CaseRun {
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
    let mut outcome = ctx.conclude(&keys, subscription).await;
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

pub(super) async fn raw_payload(ctx: CaseContext) -> CaseRun {
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
    let mut outcome = ctx.check(&ctx.criteria());
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

/// Messages per path: a runtime that repeats 1 id in 100 shows within them.
const PER_PATH: usize = 150;

pub(super) async fn unique_ids(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let mut keys = ctx.publish_numbered(&topic, "single", PER_PATH).await?;
    let bulk = ctx.caps.bulk_publish.is_available();
    if bulk {
        let entries: Vec<BulkPublishEntry> = (0..PER_PATH)
            .map(|i| super::keyed_entry(&format!("bulk-{i}")))
            .collect();
        keys.extend(entries.iter().map(|e| e.entry_id.clone()));
        ctx.bulk_publish(BulkPublishRequest::new(&topic, entries))
            .await
            .doing("bulk publishing")?;
    }
    let mut outcome = ctx.conclude(&keys, handle).await;
    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for event in ctx.recorder.events() {
        ids.entry(event.id.clone())
            .or_default()
            .insert(super::key_of(&event).to_string());
    }
    outcome.note(format!(
        "{} distinct CloudEvent ids over {} messages ({})",
        ids.len(),
        keys.len(),
        if bulk {
            "single and bulk paths"
        } else {
            "single path; bulk publish is unsupported"
        }
    ));
    Ok(outcome)
}

pub(super) async fn app_cloudevent(ctx: CaseContext) -> CaseRun {
    super::needs_whole_events(&ctx)?;
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let app_event = |key: &str| {
        format!(
            r#"{{"specversion":"1.0","id":"app-{key}","source":"urn:shop","type":"com.example.order.placed","datacontenttype":"application/json","subject":"{key}","data":{{"order": "{key}", "lines": [1, 2]}}}}"#
        )
    };
    let mut keys = vec!["single".to_string()];
    ctx.publish(
        PublishRequest::new(&topic, app_event("single").into_bytes())
            .with_content_type("application/cloudevents+json")
            .with_metadata(KEY, "single"),
    )
    .await
    .doing("publishing an app CloudEvent")?;
    if ctx.caps.bulk_publish.is_available() {
        let mut metadata = Metadata::new();
        metadata.insert(KEY.into(), "bulk".into());
        ctx.bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries: vec![BulkPublishEntry {
                entry_id: "bulk".into(),
                event: app_event("bulk").into_bytes(),
                content_type: Some("application/cloudevents+json".into()),
                metadata,
            }],
            metadata: Metadata::new(),
        })
        .await
        .doing("bulk publishing an app CloudEvent")?;
        keys.push("bulk".into());
    }
    let mut outcome = ctx.conclude(&keys, handle).await;
    for event in ctx.recorder.events() {
        let key = super::key_of(&event).to_string();
        let Some(ce) = &event.cloud_event else {
            outcome.fail(format!("{key}: delivered without its CloudEvent"));
            continue;
        };
        let field = |name: &str| ce.get(name).and_then(|v| v.as_str()).map(str::to_string);
        for (name, expected) in [
            ("id", format!("app-{key}")),
            ("source", "urn:shop".to_string()),
            ("type", "com.example.order.placed".to_string()),
            ("subject", key.clone()),
            ("topic", topic.clone()),
            ("pubsubname", ctx.runtime.name().to_string()),
        ] {
            let actual = field(name);
            outcome.expect(actual.as_deref() == Some(expected.as_str()), || {
                format!("{key}: CloudEvent '{name}' is {actual:?}, expected {expected:?} (wrapped a second time?)")
            });
        }
        outcome.expect(field("traceparent").is_some(), || {
            format!("{key}: the runtime did not add a traceparent to the app's CloudEvent")
        });
        let expected_data = format!(r#"{{"order": "{key}", "lines": [1, 2]}}"#);
        let same_data = event.data == expected_data.as_bytes()
            || (ctx.runtime.reserializes_json()
                && super::same_json(&event.data, expected_data.as_bytes()));
        outcome.expect(same_data, || {
            format!(
                "{key}: data {:?} delivered, expected the app event's data {expected_data:?} (wrapped a second time?)",
                String::from_utf8_lossy(&event.data)
            )
        });
    }
    Ok(outcome)
}
