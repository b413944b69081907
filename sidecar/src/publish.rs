//! Publishing through `serve`, whichever transport carried the request: the checks
//! daprd makes before it publishes, in its order, and the component's answer turned
//! into daprd's error. The HTTP and gRPC handlers read their requests into these
//! calls and write the answers back in their own form.

use crate::serve::ServedComponent;
use crate::wire::ApiError;
use pubsub_components::runtime::{
    BulkPublishEntry, BulkPublishRequest, FailedEntry, PublishRequest,
};
use pubsub_components::{Metadata, PubSubError};
use std::collections::{BTreeMap, HashSet};

/// The component served as `pubsub`, or the documented error (an empty name, an
/// unknown one).
pub fn component<'a>(
    components: &'a BTreeMap<String, ServedComponent>,
    pubsub: &str,
) -> Result<&'a ServedComponent, ApiError> {
    if pubsub.is_empty() {
        return Err(ApiError::pubsub_empty());
    }
    components
        .get(pubsub)
        .ok_or_else(|| ApiError::pubsub_not_found(pubsub))
}

/// A request's metadata as daprd reads it before publishing: a `rawPayload` that is
/// neither true nor false is refused.
pub fn check_metadata(pubsub: &str, metadata: &Metadata) -> Result<(), ApiError> {
    flag(metadata, "rawPayload")
        .map(|_| ())
        .map_err(|why| ApiError::request_metadata(pubsub, why))
}

/// A boolean metadata value, as the runtime reads one (absent is false).
pub fn flag(metadata: &BTreeMap<String, String>, key: &str) -> Result<bool, String> {
    metadata.get(key).map_or(Ok(false), |value| {
        pubsub_components::runtime::controls::parse_bool(key, value).map_err(|e| e.to_string())
    })
}

/// Publishes one message.
pub async fn publish(
    served: &ServedComponent,
    pubsub: &str,
    request: PublishRequest,
) -> Result<(), ApiError> {
    let topic = request.topic.clone();
    served
        .runtime
        .publish(request)
        .await
        .map(|_| ())
        .map_err(|e| publish_error(pubsub, &topic, e))
}

/// An entry of a bulk publish as a transport read it: its event already bytes, or
/// why it cannot be.
pub struct ReadEntry {
    pub entry_id: String,
    pub event: Result<Vec<u8>, String>,
    pub content_type: Option<String>,
    pub metadata: Metadata,
}

/// The entries of a bulk publish, every one checked before anything is published: a
/// missing or duplicated entry id, or an event that cannot be read, refuses the
/// whole request, so nothing is half-published.
pub fn bulk_entries(
    pubsub: &str,
    topic: &str,
    read: Vec<ReadEntry>,
) -> Result<Vec<BulkPublishEntry>, ApiError> {
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(read.len());
    for (index, entry) in read.into_iter().enumerate() {
        if entry.entry_id.is_empty() || !seen.insert(entry.entry_id.clone()) {
            return Err(ApiError::marshal_events(
                pubsub,
                topic,
                format!(
                    "entryId is duplicated or not present for the entry at index {index} ('{}')",
                    entry.entry_id
                ),
            ));
        }
        let event = entry.event.map_err(|why| {
            ApiError::marshal_events(pubsub, topic, format!("entry '{}': {why}", entry.entry_id))
        })?;
        entries.push(BulkPublishEntry {
            entry_id: entry.entry_id,
            event,
            content_type: entry.content_type.filter(|c| !c.is_empty()),
            metadata: entry.metadata,
        });
    }
    Ok(entries)
}

/// Publishes a bulk request: the entries that failed (none when all were
/// published), or the error that refused the whole request.
pub async fn bulk_publish(
    served: &ServedComponent,
    pubsub: &str,
    request: BulkPublishRequest,
) -> Result<Vec<FailedEntry>, ApiError> {
    let topic = request.topic.clone();
    served
        .runtime
        .bulk_publish(request)
        .await
        .map(|response| response.failed_entries)
        .map_err(|e| publish_error(pubsub, &topic, e))
}

/// A publish error as daprd answers it: a request the runtime refuses as malformed
/// is an error of its metadata, anything else a failed publish.
fn publish_error(pubsub: &str, topic: &str, error: PubSubError) -> ApiError {
    match error {
        PubSubError::InvalidRequest(why) => ApiError::request_metadata(pubsub, why),
        other => ApiError::publish_message(pubsub, topic, other),
    }
}
