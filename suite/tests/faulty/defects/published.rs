//! Defects of the publish path: what is published arrives changed (payloads,
//! metadata, envelopes, topics, keys, due times and expiries kept where the receive
//! side reads them), or is refused.

use super::{Defect, Faulty};
use pubsub_components::{Component, OutgoingMessage, Result};
use std::sync::atomic::{AtomicU64, Ordering};

impl Faulty {
    /// For [`Defect::RefusesExactMaximum`]: refuses a payload of exactly the maximum.
    pub(super) fn refuse_exact_maximum(&self, message: &OutgoingMessage) -> Result<()> {
        let max = self.inner.capabilities().max_message_bytes;
        if self.defect == Defect::RefusesExactMaximum && Some(message.payload.len()) == max {
            return Err(pubsub_components::PubSubError::InvalidRequest(format!(
                "message of {} bytes reaches the maximum message size",
                message.payload.len()
            )));
        }
        Ok(())
    }

    /// `message` as the defect publishes it.
    pub(super) fn corrupt(&self, mut message: OutgoingMessage) -> OutgoingMessage {
        match self.defect {
            Defect::FoldsColons => message.topic = message.topic.replace(':', "_"),
            Defect::FoldsMetadataKeyCase => {
                message.metadata = std::mem::take(&mut message.metadata)
                    .into_iter()
                    .map(|(key, value)| (key.to_lowercase(), value))
                    .collect();
            }
            Defect::MisroutesKeys => {
                message.partition_key = Some(uuid_like(&self.consumers));
            }
            Defect::RoutesLongKeysInTurn
                if message
                    .partition_key
                    .as_ref()
                    .is_some_and(|k| k.len() > 255) =>
            {
                message.partition_key = None;
            }
            Defect::DropsTraceContext => {
                // Wherever it travels: the header, or the envelope's attribute (a
                // component that rewrites envelopes with the attributes it knows).
                message
                    .metadata
                    .remove(pubsub_components::runtime::controls::HEADER_TRACEPARENT);
                if enveloped(&message) {
                    if let Ok(mut envelope) =
                        serde_json::from_slice::<serde_json::Value>(&message.payload)
                    {
                        if let Some(attributes) = envelope.as_object_mut() {
                            attributes.remove("traceparent");
                        }
                        message.payload = serde_json::to_vec(&envelope).unwrap();
                    }
                }
            }
            Defect::StripsEnvelope if enveloped(&message) => {
                message.content_type = None;
            }
            Defect::StripsRawMarker => {
                message
                    .metadata
                    .remove(pubsub_components::runtime::controls::HEADER_RAW);
            }
            Defect::TruncatesLargePayloads => message.payload.truncate(4096),
            Defect::StripsTrailingNulBytes => {
                while message.payload.last() == Some(&0) {
                    message.payload.pop();
                }
            }
            Defect::KeepsSixteenMetadataEntries => {
                let mut kept = 0;
                message.metadata.retain(|key, _| {
                    let apps = key.starts_with("app-") || key.starts_with("app.");
                    kept += usize::from(apps);
                    !apps || kept <= 16
                });
            }
            Defect::ReplacesAstralCharsInMetadata => {
                for value in message.metadata.values_mut() {
                    *value = value
                        .chars()
                        .map(|c| if c as u32 > 0xffff { '\u{fffd}' } else { c })
                        .collect();
                }
            }
            Defect::TruncatesAtMaximum => {
                let max = self.inner.capabilities().max_message_bytes;
                if Some(message.payload.len()) == max {
                    message.payload.pop();
                }
            }
            Defect::DelaysFromReceipt
            | Defect::BlocksBehindDelayed
            | Defect::DelaysCappedAtLease
            | Defect::DeliversLate
            | Defect::DropsDueTimesInBulk => {
                if let Some(due) = message.deliver_at {
                    message.metadata.insert(
                        DUE_HEADER.into(),
                        pubsub_components::component::millis_since_epoch(due).to_string(),
                    );
                }
            }
            Defect::HalvesTtl => {
                if let Some(expires) = message.expires_at {
                    message.metadata.insert(
                        EXPIRES_HEADER.into(),
                        pubsub_components::component::millis_since_epoch(expires).to_string(),
                    );
                }
            }
            Defect::RepeatsEnvelopeIds if enveloped(&message) => {
                let n = self.published.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut envelope) =
                    serde_json::from_slice::<serde_json::Value>(&message.payload)
                {
                    let own = envelope["id"].as_str().map(str::to_string);
                    let mut last = self.last_envelope_id.lock().unwrap();
                    if n % 100 == 99 {
                        if let Some(previous) = last.clone() {
                            envelope["id"] = serde_json::Value::String(previous);
                            message.payload = serde_json::to_vec(&envelope).unwrap();
                        }
                    }
                    *last = own;
                }
            }
            Defect::LosesDeadLetterContentType
                if message.metadata.contains_key("deadLetterReason") && !enveloped(&message) =>
            {
                message.content_type = None;
            }
            Defect::RenamesDeadLetters if message.metadata.contains_key("deadLetterReason") => {
                if let Ok(mut envelope) =
                    serde_json::from_slice::<serde_json::Value>(&message.payload)
                {
                    envelope["id"] = serde_json::Value::String("renamed-dead-letter".into());
                    message.payload = serde_json::to_vec(&envelope).unwrap();
                }
            }
            Defect::WrapsAppEvents => {
                let app_event = serde_json::from_slice::<serde_json::Value>(&message.payload)
                    .ok()
                    .filter(|e| e["type"] != "com.dapr.event.sent" && e["specversion"] == "1.0");
                if app_event.is_some() {
                    let fields = pubsub_components::runtime::envelope::EnvelopeFields {
                        id: "wrapped-again",
                        source: "faulty",
                        topic: &message.topic,
                        pubsub_name: "faulty",
                        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        content_type: Some("application/cloudevents+json"),
                        expiration: None,
                        time: "2026-01-01T00:00:00Z",
                    };
                    message.payload =
                        pubsub_components::runtime::envelope::encode(&fields, &message.payload)
                            .unwrap();
                }
            }
            _ => {}
        }
        message
    }
}

/// Where [`Defect::HalvesTtl`] keeps a message's expiry (ms since the epoch).
pub(super) const EXPIRES_HEADER: &str = "x-faulty-expires-ms";
/// Where the delaying defects keep a message's due time (ms since the epoch).
pub(super) const DUE_HEADER: &str = "x-faulty-due-ms";
/// True for a message the runtime put in a CloudEvents envelope (its content type says
/// so, and it was not sent `rawPayload`).
fn enveloped(message: &OutgoingMessage) -> bool {
    pubsub_components::runtime::envelope::is_cloudevents(message.content_type.as_deref())
        && !message
            .metadata
            .contains_key(pubsub_components::runtime::controls::HEADER_RAW)
}

/// A different key on every call.
fn uuid_like(counter: &AtomicU64) -> String {
    format!("misrouted-{}", counter.fetch_add(7919, Ordering::Relaxed))
}
