//! Envelope identity: every published message has its own CloudEvent id, and a
//! CloudEvent the app supplies is completed, not wrapped a second time.

use crate::catalogue::{Bound, Case, Level};
use crate::context::CaseContext;
use crate::history::KEY;
use crate::outcome::{CaseRun, Context};
use pubsub_components::runtime::{BulkPublishEntry, BulkPublishRequest, PublishRequest};
use pubsub_components::Metadata;
use std::collections::{BTreeMap, BTreeSet};

/// Messages per path: a runtime that repeats 1 id in 100 shows within them.
const PER_PATH: usize = 150;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            id: "envelope.unique-ids",
            must: "No two published messages MUST share a CloudEvent id (per source), through the single and the bulk publish paths; checked over 300 messages.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(unique_ids(ctx)),
        },
        Case {
            id: "envelope.app-cloudevent",
            must: "A CloudEvent the app publishes (application/cloudevents+json) MUST NOT be wrapped a second time: its id, source, type and data reach the subscriber as sent, completed with topic, pubsubname and traceparent.",
            requires: &[],
            level: Level::Core,
            injects: &[],
            bound: Bound::new("2 x delivery bound", |c| c.delivery_bound * 2),
            run: |ctx| Box::pin(app_cloudevent(ctx)),
        },
    ]
}

async fn unique_ids(ctx: CaseContext) -> CaseRun {
    let topic = ctx.topic("t");
    let handle = ctx.subscribe_recorded(&topic).await?;
    let mut keys = ctx.publish_numbered(&topic, "single", PER_PATH).await?;
    let bulk = ctx.caps.bulk_publish.is_available();
    if bulk {
        let entries: Vec<BulkPublishEntry> = (0..PER_PATH)
            .map(|i| super::keyed_entry(&format!("bulk-{i}")))
            .collect();
        keys.extend(entries.iter().map(|e| e.entry_id.clone()));
        ctx.bulk_publish(BulkPublishRequest {
            topic: topic.clone(),
            entries,
            metadata: Metadata::new(),
        })
        .await
        .doing("bulk publishing")?;
    }
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
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

async fn app_cloudevent(ctx: CaseContext) -> CaseRun {
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
    ctx.recorder
        .wait_for_keys(&keys, ctx.delivery_deadline())
        .await;
    handle.stop().await;
    let mut outcome = ctx.check(&ctx.expectation());
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
