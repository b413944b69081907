//! The CloudEvents 1.0 structured JSON envelope.

use crate::error::{PubSubError, Result};
use base64::Engine;
use serde_json::Value;

/// The content type of an enveloped payload on the wire.
pub const CLOUDEVENTS_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The CloudEvent `type` of published events.
pub const EVENT_TYPE: &str = "com.dapr.event.sent";

/// What goes into an envelope besides the payload.
pub struct EnvelopeFields<'a> {
    pub id: &'a str,
    pub source: &'a str,
    pub topic: &'a str,
    pub pubsub_name: &'a str,
    pub traceparent: &'a str,
    pub content_type: Option<&'a str>,
    /// RFC 3339 expiry, when a TTL is set.
    pub expiration: Option<&'a str>,
    pub time: &'a str,
}

/// A content type without its parameters (`text/plain; charset=utf-8` -> `text/plain`).
pub fn essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// True when `content_type` is the CloudEvents structured JSON type (parameters and
/// case aside: media types are case-insensitive, RFC 9110 8.3.1).
pub fn is_cloudevents(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|ct| essence(ct).eq_ignore_ascii_case(CLOUDEVENTS_CONTENT_TYPE))
}

/// True when `content_type` declares JSON: `application/json` or a `+json` type,
/// parameters and case aside. The one predicate the runtime, the sidecar and the
/// suite's checks share.
pub fn declares_json(content_type: &str) -> bool {
    let essence = essence(content_type).to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

/// True when `content_type` is binary: `application/octet-stream` (case aside).
pub fn declares_binary(content_type: &str) -> bool {
    essence(content_type).eq_ignore_ascii_case("application/octet-stream")
}

/// True when `content_type` is text: `text/*`, `application/xml` or a `+xml` type.
pub fn declares_text(content_type: &str) -> bool {
    let essence = essence(content_type).to_ascii_lowercase();
    essence.starts_with("text/") || essence == "application/xml" || essence.ends_with("+xml")
}

/// Whether an entry of a bulk request over Dapr's HTTP API can have this content
/// type: binary, text or JSON (daprd's `ConvertEventToBytes`); the API refuses others.
pub fn bulk_http_carries(content_type: &str) -> bool {
    declares_binary(content_type) || declares_text(content_type) || declares_json(content_type)
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(declares_json)
}

/// Refuses a payload declared JSON (`application/json`, `*+json`) that is not even
/// UTF-8 text: the envelope could only carry it as base64, against what the app
/// said it is.
pub fn check_declared_json(content_type: Option<&str>, data: &[u8]) -> Result<()> {
    if !is_json(content_type) {
        return Ok(());
    }
    match std::str::from_utf8(data) {
        Ok(_) => Ok(()),
        Err(e) => Err(PubSubError::InvalidRequest(format!(
            "the payload is declared '{}' but is not UTF-8 (invalid byte at offset {}); send binary data as application/octet-stream or with rawPayload=true",
            content_type.unwrap_or_default(),
            e.valid_up_to()
        ))),
    }
}

/// Appends `text` as a JSON string, exactly as serde_json writes it: copied as it is
/// when nothing needs escaping (the usual attribute or text payload), else escaped.
fn push_json_str(out: &mut Vec<u8>, text: &str) {
    // Checked without an early exit, so the check runs over whole vectors of bytes.
    let needs_escape = text.bytes().fold(false, |any, b| {
        any | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !needs_escape {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, text).expect("a string encodes");
    }
}

/// Appends `,"name":"value"`.
fn push_attribute(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(b',');
    push_json_str(out, name);
    out.push(b':');
    push_json_str(out, value);
}

/// What [`encode`] writes at most when no text needs escaping: the frame, the
/// attribute values, and the data as base64 (JSON or text data is shorter).
fn envelope_capacity(fields: &EnvelopeFields<'_>, data: &[u8]) -> usize {
    let values = [
        fields.id,
        fields.source,
        EVENT_TYPE,
        fields.topic,
        fields.pubsub_name,
        fields.traceparent,
        fields.time,
        fields.content_type.unwrap_or_default(),
        fields.expiration.unwrap_or_default(),
    ];
    let data_bytes = base64::encoded_len(data.len(), true).unwrap_or(data.len());
    ENVELOPE_FRAME_BYTES + values.iter().map(|v| v.len()).sum::<usize>() + data_bytes
}

/// The bytes of an envelope besides its attribute values and its data: the attribute
/// names, quotes and separators (159 with every attribute), with room to spare.
const ENVELOPE_FRAME_BYTES: usize = 192;

/// Wraps `data`: JSON payloads go in `data` as JSON (byte for byte), UTF-8 text in
/// `data` as a string, anything else base64 in `data_base64`. Written in one pass
/// into one buffer sized up front (no intermediate map or string; it grows only when
/// text needs escaping).
pub fn encode(fields: &EnvelopeFields<'_>, data: &[u8]) -> Result<Vec<u8>> {
    let mut body = Vec::with_capacity(envelope_capacity(fields, data));
    body.extend_from_slice(b"{\"specversion\":\"1.0\"");
    push_attribute(&mut body, "id", fields.id);
    push_attribute(&mut body, "source", fields.source);
    push_attribute(&mut body, "type", EVENT_TYPE);
    push_attribute(&mut body, "topic", fields.topic);
    push_attribute(&mut body, "pubsubname", fields.pubsub_name);
    push_attribute(&mut body, "traceparent", fields.traceparent);
    push_attribute(&mut body, "time", fields.time);
    if let Some(content_type) = fields.content_type {
        push_attribute(&mut body, "datacontenttype", content_type);
    }
    if let Some(expiration) = fields.expiration {
        push_attribute(&mut body, "expiration", expiration);
    }
    let text = std::str::from_utf8(data).ok();
    let json_data = text
        .filter(|_| is_json(fields.content_type))
        .and_then(|t| serde_json::from_str::<&serde_json::value::RawValue>(t).ok());
    // The data spliced in as raw JSON, so its bytes survive unchanged.
    match (json_data, text) {
        (Some(raw), _) => {
            body.extend_from_slice(b",\"data\":");
            body.extend_from_slice(raw.get().as_bytes());
        }
        (None, Some(text)) if fields.content_type.is_none_or(|ct| ct.starts_with("text/")) => {
            body.extend_from_slice(b",\"data\":");
            push_json_str(&mut body, text);
        }
        _ => {
            // Base64 needs no JSON escaping: encoded straight into the body.
            body.extend_from_slice(b",\"data_base64\":\"");
            let at = body.len();
            body.resize(at + base64::encoded_len(data.len(), true).unwrap_or(0), 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(data, &mut body[at..])
                .map_err(|e| PubSubError::InvalidRequest(format!("cannot encode envelope: {e}")))?;
            body.truncate(at + written);
            body.push(b'"');
        }
    }
    body.push(b'}');
    Ok(body)
}

/// An application-supplied CloudEvent (`application/cloudevents+json` whose body is a
/// structured CloudEvent 1.0), parsed so the runtime can complete it rather than wrap
/// it a second time. `None` when `data` is not one.
pub struct AppEvent {
    attributes: std::collections::BTreeMap<String, Box<serde_json::value::RawValue>>,
}

impl AppEvent {
    /// Reads `data` as an app-supplied CloudEvent when its content type says so.
    pub fn parse(content_type: Option<&str>, data: &[u8]) -> Option<AppEvent> {
        if !is_cloudevents(content_type) {
            return None;
        }
        let attributes: std::collections::BTreeMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_slice(data).ok()?;
        let spec = attributes.get("specversion")?;
        (spec.get() == "\"1.0\"").then_some(AppEvent { attributes })
    }

    /// True when the completed event will carry a trace other than `traceparent`: the
    /// app's event has a `traceparent` of its own (completing never overwrites it)
    /// that is not that one.
    pub fn keeps_another_trace(&self, traceparent: &str) -> bool {
        self.attributes.contains_key("traceparent")
            && self.attribute("traceparent").as_deref() != Some(traceparent)
    }

    /// A string attribute of the event.
    pub fn attribute(&self, name: &str) -> Option<String> {
        serde_json::from_str(self.attributes.get(name)?.get()).ok()
    }

    /// The event with the attributes the runtime adds where the app left them out
    /// (`id`, `source`, `type`, `topic`, `pubsubname`, `traceparent`, `time`), and the
    /// runtime's `expiration` when a TTL is set; its `data` bytes are kept as sent.
    pub fn complete(mut self, fields: &EnvelopeFields<'_>) -> Result<Vec<u8>> {
        let mut set = |name: &str, value: &str, overwrite: bool| -> Result<()> {
            if overwrite || !self.attributes.contains_key(name) {
                let raw = serde_json::value::to_raw_value(value).map_err(|e| {
                    PubSubError::InvalidRequest(format!("cannot encode CloudEvent {name}: {e}"))
                })?;
                self.attributes.insert(name.to_string(), raw);
            }
            Ok(())
        };
        set("id", fields.id, false)?;
        set("source", fields.source, false)?;
        set("type", EVENT_TYPE, false)?;
        set("topic", fields.topic, false)?;
        set("pubsubname", fields.pubsub_name, false)?;
        set("traceparent", fields.traceparent, false)?;
        set("time", fields.time, false)?;
        if let Some(expiration) = fields.expiration {
            set("expiration", expiration, true)?;
        }
        serde_json::to_vec(&self.attributes)
            .map_err(|e| PubSubError::InvalidRequest(format!("cannot encode CloudEvent: {e}")))
    }
}

/// An envelope taken apart.
pub struct Decoded {
    /// The whole envelope: its attributes and its `data` or `data_base64`.
    pub envelope: Value,
    pub data: Vec<u8>,
    pub content_type: Option<String>,
    pub id: Option<String>,
}

/// A structured CloudEvent read in one pass: every member as a JSON value (`data`
/// too, as the app may read it in the envelope), and `data` also as the raw JSON it
/// was written as, so its bytes come back exactly as published.
struct Structured<'a> {
    attributes: serde_json::Map<String, Value>,
    /// `None` when absent or null.
    data: Option<&'a serde_json::value::RawValue>,
}

impl<'de> serde::Deserialize<'de> for Structured<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Structured<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut event = Structured {
                    attributes: serde_json::Map::new(),
                    data: None,
                };
                while let Some(name) = map.next_key::<String>()? {
                    let value = if name == "data" {
                        let raw: &serde_json::value::RawValue = map.next_value()?;
                        let value: Value =
                            serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
                        event.data = (!value.is_null()).then_some(raw);
                        value
                    } else {
                        map.next_value()?
                    };
                    event.attributes.insert(name, value);
                }
                Ok(event)
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// Unwraps an envelope produced by [`encode`] (or any structured CloudEvent), read in
/// one pass.
pub fn decode(payload: &[u8]) -> Result<Decoded> {
    let broken = |why: String| PubSubError::InvalidRequest(format!("malformed CloudEvent: {why}"));
    let text = std::str::from_utf8(payload).map_err(|e| broken(e.to_string()))?;
    let event: Structured<'_> = serde_json::from_str(text).map_err(|e| broken(e.to_string()))?;
    let attributes = event.attributes;
    if attributes.get("specversion").and_then(Value::as_str) != Some("1.0") {
        return Err(broken("specversion is not \"1.0\"".into()));
    }
    let content_type = attributes
        .get("datacontenttype")
        .and_then(Value::as_str)
        .map(str::to_string);
    let data_base64 = match attributes.get("data_base64") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.as_str()),
        Some(other) => return Err(broken(format!("data_base64 is {other}, not a string"))),
    };
    let data = match (event.data, data_base64) {
        (_, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| broken(format!("data_base64: {e}")))?,
        (Some(raw), None) => match serde_json::from_str::<String>(raw.get()) {
            Ok(text) if !is_json(content_type.as_deref()) => text.into_bytes(),
            _ => raw.get().as_bytes().to_vec(),
        },
        (None, None) => Vec::new(),
    };
    Ok(Decoded {
        id: attributes
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string),
        envelope: Value::Object(attributes),
        data,
        content_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn media_types_are_recognised_whatever_their_case() {
        assert!(declares_json("Application/JSON"));
        assert!(declares_json("application/vnd.api+JSON; charset=utf-8"));
        assert!(!declares_json("application/jsonl"));
        assert!(is_cloudevents(Some("Application/CloudEvents+JSON")));
        assert!(
            check_declared_json(Some("Application/Json"), &[0xff, 0xfe]).is_err(),
            "a payload declared JSON in any case must be text"
        );
    }

    fn fields(content_type: Option<&str>) -> EnvelopeFields<'_> {
        EnvelopeFields {
            id: "id-1",
            source: "app",
            topic: "t",
            pubsub_name: "ps",
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            content_type,
            expiration: None,
            time: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn json_data_is_embedded_as_json() {
        let body = encode(&fields(Some("application/json")), br#"{"a": [1, 2]}"#).unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["data"]["a"][1], 2);
        assert_eq!(value["specversion"], "1.0");
        assert_eq!(value["type"], EVENT_TYPE);
        assert_eq!(decode(&body).unwrap().data, br#"{"a": [1, 2]}"#);
    }

    #[test]
    fn binary_data_goes_to_data_base64() {
        let body = encode(
            &fields(Some("application/octet-stream")),
            &[0, 159, 146, 150],
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert!(value.get("data").is_none());
        assert_eq!(value["data_base64"], "AJ+Slg==");
    }

    #[test]
    fn a_decoded_envelope_keeps_its_attributes_and_its_data() {
        let body = encode(&fields(Some("application/json")), br#"{"a":1}"#).unwrap();
        let decoded = decode(&body).unwrap();
        assert_eq!(decoded.envelope["topic"], "t");
        assert_eq!(decoded.envelope["traceparent"], fields(None).traceparent);
        assert_eq!(decoded.envelope["data"]["a"], 1);
        assert_eq!(decoded.data, br#"{"a":1}"#);
        assert_eq!(decoded.id.as_deref(), Some("id-1"));
        // base64 written with an escaped slash (valid JSON) decodes as well.
        let escaped = br#"{"specversion":"1.0","id":"x","data_base64":"AJ\/Slg=="}"#;
        let decoded = decode(escaped).unwrap();
        assert_eq!(decoded.data, [0, 159, 210, 150]);
        assert_eq!(decoded.envelope["data_base64"], "AJ/Slg==");
        // A null data is no data.
        for null in [
            &br#"{"specversion":"1.0","data":null}"#[..],
            br#"{"specversion":"1.0","data_base64":null}"#,
        ] {
            let decoded = decode(null).unwrap();
            assert!(decoded.data.is_empty());
            assert_eq!(decoded.envelope.as_object().unwrap().len(), 2);
        }
        for bad in [
            &br#"[1]"#[..],
            br#"{"specversion":"0.3"}"#,
            br#"{"specversion":"1.0","data_base64":"%%"}"#,
            b"{",
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn an_app_cloud_event_is_completed_not_wrapped() {
        let app = br#"{"specversion":"1.0","id":"app-1","source":"shop","type":"order.placed","datacontenttype":"application/json","data":{"n": 1}}"#;
        let event = AppEvent::parse(Some("application/cloudevents+json"), app).unwrap();
        let body = event.complete(&fields(Some("application/json"))).unwrap();
        let decoded = decode(&body).unwrap();
        assert_eq!(decoded.id.as_deref(), Some("app-1"));
        assert_eq!(decoded.envelope["type"], "order.placed");
        assert_eq!(decoded.envelope["topic"], "t");
        assert_eq!(decoded.data, br#"{"n": 1}"#);
        assert!(AppEvent::parse(Some("application/json"), app).is_none());
        assert!(AppEvent::parse(Some("application/cloudevents+json"), b"[1]").is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn any_bytes_survive(data in proptest::collection::vec(any::<u8>(), 0..300),
                             ct in proptest::option::of(prop_oneof![
                                 Just("application/json"), Just("text/plain"),
                                 Just("application/octet-stream"), Just("application/cloudevents+json")])) {
            let body = encode(&fields(ct), &data).unwrap();
            let decoded = decode(&body).unwrap();
            prop_assert_eq!(decoded.data, data);
            prop_assert_eq!(decoded.content_type.as_deref(), ct);
        }

        /// The buffer sized up front holds the whole envelope (it never grows) for
        /// every attribute set and any data that needs no escaping.
        #[test]
        fn the_envelope_fits_the_buffer_sized_for_it(
            data in proptest::collection::vec(any::<u8>(), 0..5000),
            topic in "[a-z0-9./-]{1,249}",
            ct in proptest::option::of(prop_oneof![
                Just("application/json"), Just("text/plain"), Just("application/octet-stream")]),
            expiration in proptest::option::of(Just("2026-01-01T00:00:03.123456789Z")),
        ) {
            let mut every = fields(ct);
            every.topic = &topic;
            every.expiration = expiration;
            let body = encode(&every, &data).unwrap();
            let escapes = std::str::from_utf8(&data)
                .is_ok_and(|t| t.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'));
            prop_assert!(escapes || body.len() <= envelope_capacity(&every, &data),
                "{} bytes written, {} sized", body.len(), envelope_capacity(&every, &data));
        }
    }
}
