//! Delivery to the app: runtime handlers that send each event (or batch) to the
//! app's route in the documented bodies and turn its answer into a status.

use crate::app::AppChannel;
use crate::wire::{
    self, AppVerdict, BulkDelivery, BulkDeliveryEntry, CLOUD_EVENT_CONTENT_TYPE, DAPR_EVENT_TYPE,
};
use async_trait::async_trait;
use base64::Engine as _;
use pubsub_components::runtime::{
    Batch, BulkAnswer, BulkHandler, EntryStatus, Event, MessageHandler, Status,
};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Where a subscription's events go.
#[derive(Clone, Debug)]
pub struct Route {
    pub app: AppChannel,
    pub pubsub_name: String,
    pub path: String,
    /// The subscription asked for raw payloads (`rawPayload: "true"`).
    pub raw_payload: bool,
}

/// The CloudEvent the app receives for `event`: the envelope it was published in;
/// a raw payload (published raw, or asked raw by the subscription) wrapped as daprd
/// wraps one, `data_base64` with `application/octet-stream`.
pub fn cloud_event(event: &Event, route: &Route) -> Value {
    match (&event.cloud_event, route.raw_payload) {
        (Some(envelope), false) => envelope.clone(),
        _ => {
            let bytes = raw_bytes(event);
            json!({
                "specversion": "1.0",
                "id": event.id,
                "source": "",
                "type": DAPR_EVENT_TYPE,
                "topic": event.topic,
                "pubsubname": route.pubsub_name,
                "datacontenttype": "application/octet-stream",
                "data_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            })
        }
    }
}

/// The CloudEvent the app receives for `event`, as JSON text: where the event's data
/// is JSON, the bytes it was published with (the contract: payload bytes survive
/// publish to delivery unchanged). daprd departs from this: it re-serializes the
/// event (Go's encoding/json sorts the data's keys and drops its spacing).
pub fn cloud_event_text(event: &Event, route: &Route) -> String {
    let value = cloud_event(event, route);
    let as_written = || serde_json::to_string(&value).unwrap_or_default();
    let Some(object) = value.as_object().filter(|_| !route.raw_payload) else {
        return as_written();
    };
    let Some(data) = object.get("data").filter(|d| !d.is_string()) else {
        return as_written();
    };
    // The published bytes, where they are that same JSON value.
    let published = std::str::from_utf8(&event.data)
        .ok()
        .filter(|text| serde_json::from_str::<Value>(text).ok().as_ref() == Some(data));
    let Some(published) = published else {
        return as_written();
    };
    wire::envelope_with_json_data(object, published)
}

/// The bytes of `event` as the broker carried them: its envelope, or the raw payload.
fn raw_bytes(event: &Event) -> Vec<u8> {
    match &event.cloud_event {
        Some(envelope) => serde_json::to_vec(envelope).unwrap_or_default(),
        None => event.data.clone(),
    }
}

/// Delivers one event at a time to the app.
pub struct SingleDelivery {
    pub route: Route,
}

#[async_trait]
impl MessageHandler for SingleDelivery {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        let body = cloud_event_text(&event, &self.route).into_bytes();
        let answer = self
            .route
            .app
            .post(
                &self.route.path,
                body,
                CLOUD_EVENT_CONTENT_TYPE,
                event.trace_parent.as_deref(),
                &event.metadata,
            )
            .await?;
        Ok(match wire::single_answer(answer.status, &answer.body) {
            AppVerdict::Success => Status::Success,
            AppVerdict::Retry(why) => {
                tracing::debug!(id = %event.id, %why, "the app asked for the event again");
                Status::Retry
            }
            AppVerdict::Drop(why) => {
                tracing::warn!(id = %event.id, %why, "the app dropped the event");
                Status::Drop
            }
        })
    }
}

/// Delivers batches to the app in the bulk body.
pub struct BulkDeliveryHandler {
    pub route: Route,
}

/// The bulk body of `batch`: each entry's CloudEvent as an object, or for a raw
/// payload subscription its bytes as base64 text with `application/octet-stream`.
pub fn bulk_body(batch: &Batch, route: &Route) -> BulkDelivery {
    let entries = batch
        .entries
        .iter()
        .map(|entry| {
            let (event, content_type) = if route.raw_payload {
                let encoded =
                    base64::engine::general_purpose::STANDARD.encode(raw_bytes(&entry.event));
                (
                    serde_json::value::to_raw_value(&encoded).expect("a string is JSON"),
                    "application/octet-stream".to_string(),
                )
            } else {
                let text = cloud_event_text(&entry.event, route);
                (
                    RawValue::from_string(text).expect("the CloudEvent is JSON"),
                    CLOUD_EVENT_CONTENT_TYPE.to_string(),
                )
            };
            BulkDeliveryEntry {
                entry_id: entry.entry_id.clone(),
                event,
                content_type,
                metadata: entry
                    .event
                    .metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }
        })
        .collect();
    BulkDelivery {
        id: batch.id.clone(),
        event_type: DAPR_EVENT_TYPE.to_string(),
        topic: batch.topic.clone(),
        pubsub_name: route.pubsub_name.clone(),
        metadata: BTreeMap::new(),
        entries,
    }
}

#[async_trait]
impl BulkHandler for BulkDeliveryHandler {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String> {
        let body =
            serde_json::to_vec(&bulk_body(&batch, &self.route)).map_err(|e| e.to_string())?;
        let answer = self
            .route
            .app
            .post(
                &self.route.path,
                body,
                "application/json",
                None,
                &Default::default(),
            )
            .await?;
        if !(200..300).contains(&answer.status) {
            return Err(format!(
                "the app answered the batch with HTTP {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(200)])
            ));
        }
        let ids: Vec<&str> = batch.entries.iter().map(|e| e.entry_id.as_str()).collect();
        let read = BulkAnswer::from_json(&answer.body, &ids)?;
        for warning in &read.warnings {
            tracing::warn!(batch = %batch.id, %warning, "the app's bulk answer");
        }
        Ok(read.statuses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::MessageId;

    fn event(data: &[u8], envelope: Value) -> Event {
        Event {
            id: "1".into(),
            topic: "t".into(),
            data: data.to_vec(),
            content_type: Some("application/json".into()),
            metadata: Default::default(),
            message_id: MessageId::new("t", None, 0),
            attempt: 1,
            trace_parent: None,
            cloud_event: Some(envelope),
            published_at: std::time::SystemTime::now(),
        }
    }

    fn route(raw_payload: bool) -> Route {
        Route {
            app: AppChannel::new("http://127.0.0.1:1", std::time::Duration::from_secs(1)).unwrap(),
            pubsub_name: "ps".into(),
            path: "/r".into(),
            raw_payload,
        }
    }

    #[test]
    fn json_data_reaches_the_app_in_the_bytes_it_was_published_with() {
        let published = br#"{"order": "single", "lines": [1, 2]}"#;
        let envelope = json!({"id": "1", "specversion": "1.0",
            "data": {"order": "single", "lines": [1, 2]}});
        let text = cloud_event_text(&event(published, envelope), &route(false));
        assert!(
            text.ends_with(r#""data":{"order": "single", "lines": [1, 2]}}"#),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["id"], "1");
        // Text data stays a string, even when it reads as JSON.
        let envelope = json!({"id": "2", "data": "123"});
        let text = cloud_event_text(&event(b"123", envelope), &route(false));
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["data"], "123");
        // Bytes that are not the envelope's data are never spliced in.
        let envelope = json!({"id": "3", "data": {"a": 1}});
        let text = cloud_event_text(&event(br#"{"a": 2}"#, envelope), &route(false));
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["data"],
            json!({"a": 1})
        );
    }
}
