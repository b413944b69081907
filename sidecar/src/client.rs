//! The app's side of the publish API: publish and bulk publish sent to a sidecar
//! over HTTP, as an app or SDK sends them, and its answers read back into the
//! runtime's results.

use crate::wire::{self, BulkPublishFailure, ErrorBody, API_TOKEN_HEADER, METADATA_PREFIX};
use base64::Engine as _;
use pubsub_components::runtime::{
    BulkPublishRequest, BulkPublishResponse, FailedEntry, PublishRequest,
};
use pubsub_components::{MessageId, Metadata, PubSubError, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The two paths of the bulk publish API.
const BULK_PATHS: [&str; 2] = ["/v1.0-alpha1/publish/bulk", "/v1.0/publish/bulk"];

/// An HTTP client of one sidecar's publish API for one pub/sub name.
pub struct SidecarClient {
    http: reqwest::Client,
    base: String,
    pubsub: String,
    api_token: Option<String>,
    /// Positions for the ids of published messages (the HTTP API answers none).
    positions: AtomicU64,
    /// The bulk path the sidecar answered, once known (index into [`BULK_PATHS`]).
    bulk_path: std::sync::Mutex<Option<usize>>,
}

impl SidecarClient {
    /// A client of the sidecar at `base` (e.g. `http://127.0.0.1:3500`); a request
    /// unanswered within `timeout` fails.
    pub fn new(
        base: impl Into<String>,
        pubsub: impl Into<String>,
        api_token: Option<String>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("cannot build the sidecar's HTTP client: {e}"))?;
        Ok(SidecarClient {
            http,
            base: base.into().trim_end_matches('/').to_string(),
            pubsub: pubsub.into(),
            api_token,
            positions: AtomicU64::new(0),
            bulk_path: std::sync::Mutex::new(None),
        })
    }

    /// The sidecar's address.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1.0/publish/{pubsub}/{topic}`: the data as the body, its content type
    /// as `Content-Type`, metadata as `metadata.*` query parameters, a `traceparent`
    /// in the metadata also as the header.
    pub async fn publish(&self, request: PublishRequest) -> Result<MessageId> {
        let url = format!(
            "{}/v1.0/publish/{}/{}{}",
            self.base,
            segment(&self.pubsub),
            segment(&request.topic),
            metadata_query(&request.metadata)
        );
        let mut call = self.http.post(url).body(request.data);
        if let Some(content_type) = &request.content_type {
            call = call.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        if let Some(traceparent) = request.metadata.get("traceparent") {
            call = call.header("traceparent", traceparent);
        }
        let (status, body) = self.send(call, "publishing").await?;
        if (200..300).contains(&status) {
            return Ok(self.next_id(&request.topic));
        }
        Err(api_error(status, &body, "publishing"))
    }

    /// A bulk publish: the entries as the documented JSON array, on the alpha path,
    /// or the stable path where the sidecar does not answer the alpha one.
    pub async fn bulk_publish(&self, request: BulkPublishRequest) -> Result<BulkPublishResponse> {
        let entries: Vec<wire::BulkPublishEntry> = request.entries.iter().map(wire_entry).collect();
        let body = serde_json::to_vec(&entries).map_err(|e| {
            PubSubError::InvalidRequest(format!("the bulk request cannot be written: {e}"))
        })?;
        let known = *self.bulk_path.lock().unwrap_or_else(|p| p.into_inner());
        let candidates: Vec<usize> = match known {
            Some(index) => vec![index],
            None => vec![0, 1],
        };
        let mut last = None;
        for index in candidates {
            let url = format!(
                "{}{}/{}/{}{}",
                self.base,
                BULK_PATHS[index],
                segment(&self.pubsub),
                segment(&request.topic),
                metadata_query(&request.metadata)
            );
            let call = self
                .http
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            let (status, answer) = self.send(call, "bulk publishing").await?;
            // A sidecar without this path answers 404 with no Dapr error body.
            if status == 404 && serde_json::from_slice::<ErrorBody>(&answer).is_err() {
                last = Some((status, answer));
                continue;
            }
            *self.bulk_path.lock().unwrap_or_else(|p| p.into_inner()) = Some(index);
            return bulk_answer(status, &answer);
        }
        let (status, answer) = last.unwrap_or_default();
        Err(PubSubError::NotFound(format!(
            "the sidecar at {} answers neither bulk publish path ({}): HTTP {status} {}",
            self.base,
            BULK_PATHS.join(", "),
            excerpt(&answer)
        )))
    }

    async fn send(&self, call: reqwest::RequestBuilder, what: &str) -> Result<(u16, Vec<u8>)> {
        let call = match &self.api_token {
            Some(token) => call.header(API_TOKEN_HEADER, token),
            None => call,
        };
        let response = call.send().await.map_err(|e| PubSubError::Broker {
            context: format!("{what} through the sidecar at {}", self.base),
            message: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| PubSubError::Broker {
            context: format!("reading the sidecar's answer to {what}"),
            message: e.to_string(),
        })?;
        Ok((status, body.to_vec()))
    }

    fn next_id(&self, topic: &str) -> MessageId {
        MessageId::new(
            topic.to_string(),
            None,
            self.positions.fetch_add(1, Ordering::Relaxed),
        )
    }
}

/// A path segment with what would end or split it escaped.
fn segment(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// `?metadata.k=v&…`, or nothing.
fn metadata_query(metadata: &Metadata) -> String {
    if metadata.is_empty() {
        return String::new();
    }
    let mut query = form_urlencoded::Serializer::new(String::from("?"));
    for (key, value) in metadata.iter() {
        query.append_pair(&format!("{METADATA_PREFIX}{key}"), value);
    }
    query.finish()
}

/// An entry as the wire carries it: JSON content types as JSON, text as a string,
/// binary types and bytes the API cannot carry in their own type (not text, or
/// JSON-typed but not JSON) as base64 with `application/octet-stream`.
pub(crate) fn wire_entry(
    entry: &pubsub_components::runtime::BulkPublishEntry,
) -> wire::BulkPublishEntry {
    let content_type = entry.content_type.clone().unwrap_or_default();
    let essence = wire::essence(&content_type);
    let text = std::str::from_utf8(&entry.event).ok();
    let string = |text: String| {
        serde_json::value::to_raw_value(&serde_json::Value::String(text)).expect("a string is JSON")
    };
    // The JSON as the app wrote it, bytes and all, where it is JSON.
    let json = text
        .filter(|_| wire::is_json(&essence))
        .filter(|t| serde_json::from_str::<&serde_json::value::RawValue>(t).is_ok())
        .and_then(|t| serde_json::value::RawValue::from_string(t.trim().to_string()).ok());
    // Bytes the API cannot carry in their own type (not text, or JSON-typed but not
    // JSON) go as binary: their bytes arrive, their content type does not.
    let binary = text.is_none() || (wire::is_json(&essence) && json.is_none());
    let (event, content_type) = if let Some(json) = json {
        (json, content_type)
    } else if essence == "application/octet-stream" || binary {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&entry.event);
        let content_type = if content_type.is_empty() || binary {
            "application/octet-stream".to_string()
        } else {
            content_type
        };
        (string(encoded), content_type)
    } else {
        let content_type = if content_type.is_empty() {
            "text/plain".to_string()
        } else {
            content_type
        };
        (string(text.unwrap_or_default().to_string()), content_type)
    };
    wire::BulkPublishEntry {
        entry_id: entry.entry_id.clone(),
        event,
        content_type,
        metadata: (!entry.metadata.is_empty()).then(|| {
            entry
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
    }
}

/// A bulk publish answer: 2xx is every entry published; 500 with `failedEntries` is
/// those failed; anything else refused the request.
fn bulk_answer(status: u16, body: &[u8]) -> Result<BulkPublishResponse> {
    if (200..300).contains(&status) {
        return Ok(BulkPublishResponse::default());
    }
    if let Ok(failure) = serde_json::from_slice::<BulkPublishFailure>(body) {
        if !failure.failed_entries.is_empty() {
            return Ok(BulkPublishResponse {
                failed_entries: failure
                    .failed_entries
                    .into_iter()
                    .map(|f| FailedEntry {
                        entry_id: f.entry_id,
                        error: if f.error.is_empty() {
                            failure.error_code.clone()
                        } else {
                            f.error
                        },
                    })
                    .collect(),
            });
        }
    }
    Err(api_error(status, body, "bulk publishing"))
}

/// An error answer as the runtime's error: 400 and 413 refuse the request as
/// invalid, 404 names what is not there, 401 and 403 refuse it, anything else is the
/// sidecar's or the broker's failure. The message keeps the status and error code.
pub(crate) fn api_error(status: u16, body: &[u8], what: &str) -> PubSubError {
    let error = serde_json::from_slice::<ErrorBody>(body).ok();
    let detail = match &error {
        Some(error) => format!("HTTP {status} {}: {}", error.error_code, error.message),
        None => format!("HTTP {status}: {}", excerpt(body)),
    };
    // daprd answers a request naming no pubsub or topic with 404 and an _EMPTY code.
    let names_nothing = error.is_some_and(|e| e.error_code.ends_with("_EMPTY"));
    match status {
        _ if names_nothing => PubSubError::InvalidRequest(detail),
        400 | 413 => PubSubError::InvalidRequest(detail),
        404 => PubSubError::NotFound(detail),
        401 | 403 => PubSubError::NotAllowed(detail),
        _ => PubSubError::Broker {
            context: format!("{what} through the sidecar"),
            message: detail,
        },
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]);
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_take_the_wire_shape_of_their_content_type() {
        let entry = |data: &[u8], content_type: Option<&str>| {
            wire_entry(&pubsub_components::runtime::BulkPublishEntry {
                entry_id: "e".into(),
                event: data.to_vec(),
                content_type: content_type.map(str::to_string),
                metadata: Metadata::new(),
            })
        };
        let json = entry(br#"{"b": 2, "a": 1}"#, Some("application/json"));
        assert_eq!(
            json.event.get(),
            r#"{"b": 2, "a": 1}"#,
            "JSON keeps its bytes"
        );
        let text = entry(b"hello", Some("text/plain"));
        assert_eq!(text.event.get(), r#""hello""#);
        let binary = entry(&[0xff, 0x00], Some("text/plain"));
        assert_eq!(binary.content_type, "application/octet-stream");
        assert_eq!(binary.event.get(), r#""/wA=""#);
        let untyped = entry(b"plain", None);
        assert_eq!(untyped.content_type, "text/plain");
        let not_json = entry(b"{not json", Some("application/json"));
        assert_eq!(not_json.content_type, "application/octet-stream");
        assert_eq!(
            not_json.event.get(),
            r#""e25vdCBqc29u""#,
            "its bytes, as base64"
        );
    }

    #[test]
    fn error_answers_keep_their_status_and_code() {
        let body = br#"{"errorCode":"ERR_PUBSUB_NOT_FOUND","message":"pubsub x not found"}"#;
        let error = api_error(404, body, "publishing");
        assert!(matches!(error, PubSubError::NotFound(_)));
        assert!(error.to_string().contains("HTTP 404 ERR_PUBSUB_NOT_FOUND"));
        let failed = bulk_answer(
            500,
            br#"{"failedEntries":[{"entryId":"2","error":"too big"}],"errorCode":"ERR_PUBSUB_PUBLISH_MESSAGE"}"#,
        )
        .unwrap();
        assert_eq!(failed.failed_entries[0].entry_id, "2");
        assert_eq!(failed.failed_entries[0].error, "too big");
    }

    #[test]
    fn metadata_travels_as_query_parameters() {
        let mut metadata = Metadata::new();
        metadata.insert("ttlInSeconds".into(), "5".into());
        metadata.insert("pcs-key".into(), "a b&c".into());
        let query = metadata_query(&metadata);
        assert!(query.starts_with('?'));
        assert!(query.contains("metadata.ttlInSeconds=5"));
        assert!(query.contains("metadata.pcs-key=a+b%26c"));
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
