//! The bodies, status codes and error codes of Dapr's pub/sub HTTP API, as daprd
//! sends and reads them: the API reference (docs.dapr.io/reference/api/pubsub_api),
//! and daprd's own handlers where the reference is silent (each item names which).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// CloudEvents' structured JSON content type.
pub const CLOUD_EVENT_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The CloudEvent type daprd stamps on the events it wraps.
pub const DAPR_EVENT_TYPE: &str = "com.dapr.event.sent";
/// The query parameter prefix that carries publish metadata (`metadata.ttlInSeconds=5`).
pub const METADATA_PREFIX: &str = "metadata.";
/// The header carrying the API token when one is configured.
pub const API_TOKEN_HEADER: &str = "dapr-api-token";

/// One entry of a bulk publish request body (a JSON array of these). Read as daprd
/// reads it (Go's encoding/json): a field name matches its key exactly or, failing
/// that, in any case (`entryID`, which Dapr's JavaScript SDK sends, is `entryId`).
#[derive(Debug, Clone, Serialize)]
pub struct BulkPublishEntry {
    /// Unique and non-empty within the request (daprd refuses the request otherwise).
    #[serde(rename = "entryId", default)]
    pub entry_id: String,
    /// The event: JSON for JSON content types, a string for text, base64 text for
    /// binary content types; kept as the JSON text it came in, so that JSON data
    /// keeps its bytes.
    pub event: Box<RawValue>,
    #[serde(rename = "contentType", default)]
    pub content_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl<'de> Deserialize<'de> for BulkPublishEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut fields = BTreeMap::<String, Box<RawValue>>::deserialize(deserializer)?;
        let mut take = |name: &str| -> Option<Box<RawValue>> {
            if let Some(value) = fields.remove(name) {
                return Some(value);
            }
            let key = fields
                .keys()
                .find(|k| k.eq_ignore_ascii_case(name))?
                .clone();
            fields.remove(&key)
        };
        let text = |raw: Option<Box<RawValue>>, name: &str| {
            let value = match raw {
                Some(raw) => serde_json::from_str(raw.get()).map_err(D::Error::custom)?,
                None => serde_json::Value::Null,
            };
            match value {
                serde_json::Value::Null => Ok(String::new()),
                serde_json::Value::String(text) => Ok(text),
                other => Err(D::Error::custom(format!(
                    "{name} must be a string, not {}",
                    json_kind(&other)
                ))),
            }
        };
        let entry_id = text(take("entryId"), "entryId")?;
        let content_type = text(take("contentType"), "contentType")?;
        let event = take("event").ok_or_else(|| D::Error::missing_field("event"))?;
        let metadata = match take("metadata") {
            None => None,
            Some(raw) => serde_json::from_str::<Option<BTreeMap<String, String>>>(raw.get())
                .map_err(|e| D::Error::custom(format!("metadata: {e}")))?,
        };
        Ok(BulkPublishEntry {
            entry_id,
            event,
            content_type,
            metadata,
        })
    }
}

/// An entry a bulk publish did not publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedEntry {
    #[serde(rename = "entryId")]
    pub entry_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The body of a bulk publish that failed for some entries (HTTP 500).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkPublishFailure {
    #[serde(rename = "failedEntries")]
    pub failed_entries: Vec<FailedEntry>,
    #[serde(rename = "errorCode")]
    pub error_code: String,
}

/// An error answer: `{"errorCode","message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "errorCode")]
    pub error_code: String,
    pub message: String,
}

/// An API error as daprd answers it on either transport (the codes of daprd's
/// `pkg/api/errors/pubsub.go` and `pkg/messages/errorcodes`): over HTTP the status
/// and the body, over gRPC the status code, the message and the details (a
/// `ResourceInfo` naming the pub/sub where daprd adds one, then an `ErrorInfo`
/// with the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub body: ErrorBody,
    pub grpc: Box<GrpcError>,
}

/// What an [`ApiError`] is over gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcError {
    pub code: tonic::Code,
    /// The `ErrorInfo` reason, e.g. `DAPR_PUBSUB_NOT_FOUND`; empty where daprd sends
    /// no `ErrorInfo` (or the error is never answered over gRPC).
    pub reason: &'static str,
    /// The pub/sub a `ResourceInfo` names; none where daprd sends `ErrorInfo` only.
    pub resource: Option<String>,
    /// The `ErrorInfo` metadata.
    pub metadata: BTreeMap<String, String>,
}

impl ApiError {
    fn new(status: u16, code: &str, message: impl Into<String>, grpc: GrpcError) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error_code: code.to_string(),
                message: message.into(),
            },
            grpc: Box::new(grpc),
        }
    }

    /// No pub/sub component of that name: 404 `ERR_PUBSUB_NOT_FOUND`.
    pub fn pubsub_not_found(pubsub: &str) -> Self {
        ApiError::new(
            404,
            "ERR_PUBSUB_NOT_FOUND",
            format!("pubsub {pubsub} is not found"),
            GrpcError::invalid("DAPR_PUBSUB_NOT_FOUND", None),
        )
    }

    /// An empty pub/sub name: 404 `ERR_PUBSUB_EMPTY`.
    pub fn pubsub_empty() -> Self {
        ApiError::new(
            404,
            "ERR_PUBSUB_EMPTY",
            "pubsub name is empty",
            GrpcError::invalid("DAPR_PUBSUB_NAME_EMPTY", Some("")),
        )
    }

    /// An empty topic: 404 `ERR_TOPIC_NAME_EMPTY`.
    pub fn topic_empty(pubsub: &str) -> Self {
        ApiError::new(
            404,
            "ERR_TOPIC_NAME_EMPTY",
            format!("topic is empty in pubsub {pubsub}"),
            GrpcError::invalid("DAPR_PUBSUB_TOPIC_NAME_EMPTY", Some(pubsub)),
        )
    }

    /// Metadata that cannot be read (e.g. `rawPayload=maybe`): 400
    /// `ERR_PUBSUB_REQUEST_METADATA`.
    pub fn request_metadata(pubsub: &str, why: impl std::fmt::Display) -> Self {
        ApiError::new(
            400,
            "ERR_PUBSUB_REQUEST_METADATA",
            format!("failed deserializing metadata. Error: {why}"),
            GrpcError::invalid("DAPR_PUBSUB_METADATA_DESERIALIZATION", Some(pubsub)),
        )
    }

    /// A bulk body that is not a JSON array of entries: 400 `ERR_PUBSUB_EVENTS_SER`.
    pub fn unmarshal_events(pubsub: &str, topic: &str, why: impl std::fmt::Display) -> Self {
        ApiError::new(
            400,
            "ERR_PUBSUB_EVENTS_SER",
            format!("error when unmarshaling the request for topic {topic} pubsub {pubsub}: {why}"),
            GrpcError::invalid("", Some(pubsub)),
        )
    }

    /// An entry whose event does not match its content type, or a missing or
    /// duplicated entry id: 400 `ERR_PUBSUB_EVENTS_SER`.
    pub fn marshal_events(pubsub: &str, topic: &str, why: impl std::fmt::Display) -> Self {
        ApiError::new(
            400,
            "ERR_PUBSUB_EVENTS_SER",
            format!(
                "error marshaling events to bytes for topic {topic} pubsub {pubsub}. error: {why}"
            ),
            GrpcError::invalid("DAPR_PUBSUB_MARSHAL_EVENTS", Some(pubsub))
                .with("error", why.to_string()),
        )
    }

    /// The component refused or failed the publish: 500 `ERR_PUBSUB_PUBLISH_MESSAGE`.
    pub fn publish_message(pubsub: &str, topic: &str, why: impl std::fmt::Display) -> Self {
        ApiError::new(
            500,
            "ERR_PUBSUB_PUBLISH_MESSAGE",
            format!("error when publishing to topic {topic} in pubsub {pubsub}: {why}"),
            GrpcError {
                code: tonic::Code::Internal,
                reason: "DAPR_PUBSUB_PUBLISH_MESSAGE",
                resource: Some(pubsub.to_string()),
                metadata: BTreeMap::new(),
            }
            .with("topic", topic.to_string())
            .with("error", why.to_string()),
        )
    }

    /// A request without the configured API token: 401 `ERR_UNAUTHORIZED` (the text
    /// daprd's token middleware answers with).
    pub fn unauthorized() -> Self {
        ApiError::new(
            401,
            "ERR_UNAUTHORIZED",
            "invalid api token",
            GrpcError {
                code: tonic::Code::Unauthenticated,
                reason: "",
                resource: None,
                metadata: BTreeMap::new(),
            },
        )
    }

    /// A request that cannot be read (a path that is not UTF-8 once decoded): 400
    /// `ERR_MALFORMED_REQUEST`, daprd's common code for it.
    pub fn malformed(why: impl std::fmt::Display) -> Self {
        ApiError::new(
            400,
            "ERR_MALFORMED_REQUEST",
            format!("malformed request: {why}"),
            GrpcError::invalid("", None),
        )
    }

    /// A body larger than the sidecar accepts: 413 `ERR_BODY_TOO_LARGE`.
    pub fn body_too_large(limit: usize) -> Self {
        ApiError::new(
            413,
            "ERR_BODY_TOO_LARGE",
            format!("the request body is larger than {limit} bytes"),
            GrpcError {
                code: tonic::Code::ResourceExhausted,
                reason: "",
                resource: None,
                metadata: BTreeMap::new(),
            },
        )
    }
}

impl GrpcError {
    /// `InvalidArgument` with `reason`, naming `pubsub` in a `ResourceInfo` if given.
    fn invalid(reason: &'static str, pubsub: Option<&str>) -> Self {
        GrpcError {
            code: tonic::Code::InvalidArgument,
            reason,
            resource: pubsub.map(str::to_string),
            metadata: BTreeMap::new(),
        }
    }

    fn with(mut self, key: &str, value: String) -> Self {
        self.metadata.insert(key.to_string(), value);
        self
    }
}

/// `envelope` (its own `data` left out) as JSON text whose `data` is `json`, the JSON
/// text as written: bytes and all, where re-serializing would sort keys and drop
/// spacing.
pub fn envelope_with_json_data(
    envelope: &serde_json::Map<String, serde_json::Value>,
    json: &str,
) -> String {
    let mut rest = envelope.clone();
    rest.remove("data");
    let mut text = serde_json::to_string(&rest).unwrap_or_default();
    text.pop();
    if !rest.is_empty() {
        text.push(',');
    }
    text.push_str("\"data\":");
    text.push_str(json.trim());
    text.push('}');
    text
}

/// How an entry's event turns into bytes, by its content type (daprd's
/// `ConvertEventToBytes`): binary types take base64 text, text types a string, JSON
/// and CloudEvents types any JSON value (serialized). Anything else is a mismatch.
pub fn event_bytes(event: &RawValue, content_type: &str) -> Result<Vec<u8>, String> {
    let essence = essence(content_type);
    if is_json(&essence) {
        // The JSON text as it came: its bytes are the event's.
        return Ok(event.get().trim().as_bytes().to_vec());
    }
    let event: serde_json::Value = serde_json::from_str(event.get()).map_err(|e| e.to_string())?;
    let event = &event;
    if is_binary(&essence) {
        match event {
            serde_json::Value::String(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| format!("unable to decode base64 {essence} data: {e}")),
            other => Err(format!(
                "content type {essence} takes base64 text, not {}",
                json_kind(other)
            )),
        }
    } else if is_text(&essence) {
        match event {
            serde_json::Value::String(text) => Ok(text.clone().into_bytes()),
            other => Err(format!(
                "content type {essence} takes a string, not {}",
                json_kind(other)
            )),
        }
    } else {
        Err(format!(
            "content type '{content_type}' is neither binary, text nor JSON"
        ))
    }
}

/// The content type without parameters, lowercased (`Text/Plain; charset=utf-8` ->
/// `text/plain`).
pub fn essence(content_type: &str) -> String {
    pubsub_components::runtime::envelope::essence(content_type).to_ascii_lowercase()
}

fn is_binary(essence: &str) -> bool {
    pubsub_components::runtime::envelope::declares_binary(essence)
}

fn is_text(essence: &str) -> bool {
    pubsub_components::runtime::envelope::declares_text(essence)
}

/// JSON and CloudEvents content types (`application/json`, `…+json`, any case).
pub fn is_json(essence: &str) -> bool {
    pubsub_components::runtime::envelope::declares_json(essence)
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// One subscription an app declares in its `GET /dapr/subscribe` answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AppSubscription {
    #[serde(rename = "pubsubname")]
    pub pubsub_name: String,
    pub topic: String,
    /// The v1 form: one path for every event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The v2 form: rules, and a default path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routes: Option<Routes>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(
        rename = "deadLetterTopic",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dead_letter_topic: Option<String>,
    #[serde(
        rename = "bulkSubscribe",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bulk_subscribe: Option<BulkSubscribe>,
}

/// A subscription's routes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Routes {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A routing rule: a CEL expression and the path of the events it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(rename = "match", default)]
    pub matches: String,
    pub path: String,
}

/// A subscription's bulk options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BulkSubscribe {
    #[serde(default)]
    pub enabled: bool,
    #[serde(
        rename = "maxMessagesCount",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_messages_count: Option<u32>,
    #[serde(
        rename = "maxAwaitDurationMs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_await_duration_ms: Option<u64>,
}

impl AppSubscription {
    /// The path events go to: `route`, else the default route, else the path of a
    /// rule without a condition. A rule with a CEL condition is refused, naming it:
    /// `serve` does not evaluate CEL.
    pub fn path(&self) -> Result<String, String> {
        let mut path = self.route.clone().filter(|r| !r.is_empty());
        if let Some(routes) = &self.routes {
            if let Some(rule) = routes.rules.iter().find(|r| !r.matches.trim().is_empty()) {
                return Err(format!(
                    "subscription to {} routes by the rule '{}': routing rules (CEL) are not supported by serve; use route or routes.default",
                    self.topic, rule.matches
                ));
            }
            path = path
                .or_else(|| routes.default.clone())
                .or_else(|| routes.rules.first().map(|r| r.path.clone()));
        }
        let path = path.ok_or_else(|| format!("subscription to {} has no route", self.topic))?;
        Ok(if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        })
    }

    /// The path events go to over gRPC, as daprd sends it in each call's `path`: the
    /// first of `route`, the default route and the path of a rule without a
    /// condition, as declared (no `/` added: a gRPC app may match it exactly); none
    /// is the empty path ("gRPC automatically specifies a default route", daprd's
    /// `parseRoutingRulesGRPC`: the app routes by pub/sub and topic). A rule with a CEL
    /// condition is refused, as by [`AppSubscription::path`].
    pub fn grpc_path(&self) -> Result<String, String> {
        match self.path() {
            Err(e) if e.ends_with("has no route") => return Ok(String::new()),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let declared = self.route.clone().filter(|r| !r.is_empty()).or_else(|| {
            self.routes.as_ref().and_then(|routes| {
                routes
                    .default
                    .clone()
                    .filter(|d| !d.is_empty())
                    .or_else(|| routes.rules.first().map(|r| r.path.clone()))
            })
        });
        Ok(declared.unwrap_or_default())
    }
}

/// The body of a bulk delivery to an app.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkDelivery {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub topic: String,
    #[serde(rename = "pubsubname")]
    pub pubsub_name: String,
    pub metadata: BTreeMap<String, String>,
    pub entries: Vec<BulkDeliveryEntry>,
}

/// One entry of a bulk delivery: the CloudEvent (an object), or for a raw payload
/// subscription the payload as base64 text with `application/octet-stream`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkDeliveryEntry {
    #[serde(rename = "entryId")]
    pub entry_id: String,
    /// As JSON text, so that an event's JSON data keeps its bytes.
    pub event: Box<RawValue>,
    #[serde(rename = "contentType")]
    pub content_type: String,
    pub metadata: BTreeMap<String, String>,
}

/// What an app's answer to a single delivery means (daprd's HTTP postman): a 2xx
/// answer is read for `{"status"}` (no body, a body that is not such JSON, or an
/// empty status: SUCCESS; RETRY; DROP; any other status: RETRY); 404 is DROP; any
/// other code is RETRY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppVerdict {
    Success,
    Retry(String),
    Drop(String),
}

/// Reads an app's answer to a single delivery.
pub fn single_answer(status: u16, body: &[u8]) -> AppVerdict {
    if (200..300).contains(&status) {
        #[derive(Deserialize)]
        struct Answer {
            #[serde(default)]
            status: String,
        }
        return match serde_json::from_slice::<Answer>(body) {
            Err(_) => AppVerdict::Success,
            Ok(answer) => match answer.status.as_str() {
                "" | "SUCCESS" => AppVerdict::Success,
                "RETRY" => AppVerdict::Retry("the app answered RETRY".into()),
                "DROP" => AppVerdict::Drop("the app answered DROP".into()),
                other => AppVerdict::Retry(format!(
                    "the app answered the unknown status '{other}' (counts as RETRY)"
                )),
            },
        };
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if status == 404 {
        AppVerdict::Drop(format!("the app answered 404 ({text}): dropped"))
    } else {
        AppVerdict::Retry(format!("the app answered HTTP {status} ({text})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entry_fields_match_in_any_case_as_daprd_reads_them() {
        let entries: Vec<BulkPublishEntry> = serde_json::from_value(json!([
            {"entryID": "a", "event": "x", "ContentType": "text/plain", "metadata": {"k": "v"}},
            {"entryId": "b", "entryID": "other", "event": {"n": 1}, "contentType": "application/json"},
            {"event": "no id"}
        ]))
        .unwrap();
        assert_eq!(entries[0].entry_id, "a");
        assert_eq!(entries[0].content_type, "text/plain");
        assert_eq!(entries[0].metadata.as_ref().unwrap()["k"], "v");
        assert_eq!(entries[1].entry_id, "b", "an exact match wins");
        assert_eq!(entries[2].entry_id, "");
        let refused =
            serde_json::from_value::<Vec<BulkPublishEntry>>(json!([{"entryId": 1, "event": "x"}]))
                .unwrap_err();
        assert!(
            refused.to_string().contains("entryId must be a string"),
            "{refused}"
        );
    }

    #[test]
    fn events_turn_into_bytes_by_their_content_type() {
        let raw = |text: &str| RawValue::from_string(text.to_string()).unwrap();
        assert_eq!(
            event_bytes(&raw(r#"{"b": 2, "a": 1}"#), "application/json").unwrap(),
            br#"{"b": 2, "a": 1}"#,
            "JSON keeps the bytes it came in"
        );
        assert_eq!(
            event_bytes(&raw(r#""hi""#), "Text/Plain; charset=utf-8").unwrap(),
            b"hi"
        );
        assert_eq!(
            event_bytes(&raw(r#""AAEC""#), "application/octet-stream").unwrap(),
            [0, 1, 2]
        );
        for (event, content_type, expected) in [
            (json!(1), "text/plain", "takes a string, not a number"),
            (
                json!({"a": 1}),
                "application/octet-stream",
                "takes base64 text",
            ),
            (
                json!("not base64!"),
                "application/octet-stream",
                "unable to decode base64",
            ),
            (json!("x"), "image/png", "neither binary, text nor JSON"),
            (json!("x"), "", "neither binary, text nor JSON"),
        ] {
            let event = serde_json::value::to_raw_value(&event).unwrap();
            let error = event_bytes(&event, content_type).unwrap_err();
            assert!(error.contains(expected), "{content_type}: {error}");
        }
    }

    #[test]
    fn app_answers_map_as_daprd_maps_them() {
        assert_eq!(single_answer(200, b""), AppVerdict::Success);
        assert_eq!(single_answer(204, b"not json"), AppVerdict::Success);
        assert_eq!(single_answer(200, br#"{"status":""}"#), AppVerdict::Success);
        assert_eq!(
            single_answer(200, br#"{"status":"SUCCESS"}"#),
            AppVerdict::Success
        );
        assert!(matches!(
            single_answer(200, br#"{"status":"RETRY"}"#),
            AppVerdict::Retry(_)
        ));
        assert!(matches!(
            single_answer(200, br#"{"status":"DROP"}"#),
            AppVerdict::Drop(_)
        ));
        assert!(
            matches!(single_answer(200, br#"{"status":"success"}"#), AppVerdict::Retry(w) if w.contains("unknown status 'success'"))
        );
        assert!(
            matches!(single_answer(404, b"no route"), AppVerdict::Drop(w) if w.contains("404"))
        );
        assert!(
            matches!(single_answer(500, b"boom"), AppVerdict::Retry(w) if w.contains("HTTP 500 (boom)"))
        );
        assert!(matches!(single_answer(302, b""), AppVerdict::Retry(_)));
    }

    #[test]
    fn a_subscription_routes_by_route_or_default_and_refuses_cel_rules() {
        let mut sub = AppSubscription {
            topic: "orders".into(),
            route: Some("orders".into()),
            ..Default::default()
        };
        assert_eq!(sub.path().unwrap(), "/orders");
        assert_eq!(sub.grpc_path().unwrap(), "orders", "over gRPC, as declared");
        sub.route = None;
        sub.routes = Some(Routes {
            rules: vec![],
            default: Some("/fallback".into()),
        });
        assert_eq!(sub.path().unwrap(), "/fallback");
        sub.routes = Some(Routes {
            rules: vec![Rule {
                matches: "event.type == \"x\"".into(),
                path: "/x".into(),
            }],
            default: Some("/d".into()),
        });
        assert!(sub
            .path()
            .unwrap_err()
            .contains("routing rules (CEL) are not supported"));
        sub.routes = None;
        assert!(sub.path().unwrap_err().contains("has no route"));
        assert_eq!(
            sub.grpc_path().unwrap(),
            "",
            "over gRPC no route is the empty path"
        );
    }

    #[test]
    fn wire_bodies_are_pinned() {
        let failure = BulkPublishFailure {
            failed_entries: vec![FailedEntry {
                entry_id: "2".into(),
                error: "broker error".into(),
            }],
            error_code: "ERR_PUBSUB_PUBLISH_MESSAGE".into(),
        };
        insta::assert_json_snapshot!("bulk_publish_failure", failure);
        insta::assert_json_snapshot!(
            "error_pubsub_not_found",
            ApiError::pubsub_not_found("nope").body
        );
        let subscriptions: Vec<AppSubscription> = serde_json::from_value(json!([
            {"pubsubname": "p", "topic": "t", "route": "/t"},
            {"pubsubname": "p", "topic": "b", "routes": {"default": "/b"},
             "metadata": {"rawPayload": "true"}, "deadLetterTopic": "dead",
             "bulkSubscribe": {"enabled": true, "maxMessagesCount": 10, "maxAwaitDurationMs": 40}}
        ]))
        .unwrap();
        insta::assert_json_snapshot!("app_subscriptions", subscriptions);
        let delivery = BulkDelivery {
            id: "batch-1".into(),
            event_type: DAPR_EVENT_TYPE.into(),
            topic: "t".into(),
            pubsub_name: "p".into(),
            metadata: BTreeMap::new(),
            entries: vec![BulkDeliveryEntry {
                entry_id: "e1".into(),
                event: serde_json::value::to_raw_value(&json!("AAEC")).unwrap(),
                content_type: "application/octet-stream".into(),
                metadata: BTreeMap::from([("k".to_string(), "v".to_string())]),
            }],
        };
        // As the app reads it (insta does not serialize raw JSON text itself).
        insta::assert_json_snapshot!("bulk_delivery", serde_json::to_value(&delivery).unwrap());
    }
}
