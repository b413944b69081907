//! Bulk publish: validation, metadata merge, native or bounded-parallel publishing,
//! `batchPublishKeepOrder` and per-entry status mapping.

use super::controls::{keys, parse_bool};
use super::{BulkPublishRequest, BulkPublishResponse, FailedEntry, Runtime, REQUEST_ONLY_KEYS};
use crate::capability::{Feature, Support};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage};
use futures::StreamExt;
use std::collections::HashSet;

pub(super) async fn publish(
    runtime: &Runtime,
    request: BulkPublishRequest,
) -> Result<BulkPublishResponse> {
    runtime.require(Feature::BulkPublish)?;
    super::controls::validate_topic(&request.topic)?;
    validate_entry_ids(&request)?;
    if request.entries.is_empty() {
        return Ok(BulkPublishResponse::default());
    }
    let keep_order = match request.metadata.get(keys::KEEP_ORDER) {
        Some(v) => parse_bool(keys::KEEP_ORDER, v)?,
        None => false,
    };
    let max_bytes = match request.metadata.get(keys::MAX_BULK_PUB_BYTES) {
        Some(v) => Some(v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
            PubSubError::InvalidRequest(format!(
                "metadata '{}' has value '{v}'; expected a number of bytes above 0",
                keys::MAX_BULK_PUB_BYTES
            ))
        })?),
        None => None,
    };

    // The call's own span: a child of the request's traceparent (the caller's
    // context) when it has one; each entry's span is a child of it.
    if let Some(parent) = request.metadata.get(keys::TRACEPARENT) {
        if !super::trace::is_valid_traceparent(parent) {
            return Err(PubSubError::InvalidRequest(format!(
                "request metadata 'traceparent' has value '{parent}'; expected a W3C traceparent like 00-<32 hex>-<16 hex>-<2 hex>; nothing was published"
            )));
        }
    }
    let call_traceparent = request
        .metadata
        .get(keys::TRACEPARENT)
        .map(|parent| super::trace::child_of(parent))
        .unwrap_or_else(super::trace::new_traceparent);
    // Valid by construction (a child of a checked parent, or new): its entries' spans
    // are made in its trace without checking it again.
    let call_trace = super::trace::trace_id(&call_traceparent).unwrap_or_default();
    let call_span = tracing::info_span!(
        "pubsub.bulk_publish",
        topic = %request.topic,
        entries = request.entries.len(),
        traceparent = %call_traceparent,
    );

    // Prepare every entry before publishing any, so bad input publishes nothing.
    let stamp = super::Stamp::now();
    let mut ids = Vec::with_capacity(request.entries.len());
    let mut messages = Vec::with_capacity(request.entries.len());
    for entry in request.entries {
        let mut metadata = request.metadata.clone();
        metadata.retain(|k, _| {
            !REQUEST_ONLY_KEYS.contains(&k.as_str()) && k.as_str() != keys::TRACEPARENT
        });
        metadata.extend(entry.metadata);
        // Every entry carries its own traceparent: the app's, or a new span in the
        // call's trace.
        let entry_traceparent = metadata
            .get(keys::TRACEPARENT)
            .cloned()
            .unwrap_or_else(|| super::trace::new_span_in(call_trace));
        tracing::info_span!(
            parent: &call_span,
            "pubsub.publish_entry",
            entry_id = %entry.entry_id,
            traceparent = %entry_traceparent,
            parent_traceparent = %call_traceparent,
        )
        .in_scope(|| ());
        let message = runtime
            .prepare(
                &request.topic,
                entry.event,
                entry.content_type,
                metadata,
                Some(entry_traceparent),
                &stamp,
            )
            .map_err(|e| match e {
                PubSubError::InvalidRequest(why) => {
                    PubSubError::InvalidRequest(format!("entry '{}': {why}", entry.entry_id))
                }
                other => other,
            })?;
        ids.push(entry.entry_id);
        messages.push(message);
    }
    if let Some(max) = max_bytes {
        let total: usize = messages.iter().map(|m| m.payload.len()).sum();
        if total > max {
            return Err(PubSubError::InvalidRequest(format!(
                "bulk request of {} entries is {total} bytes, over maxBulkPubBytes {max}; nothing was published",
                ids.len()
            )));
        }
    }

    let results = if keep_order {
        publish_in_order(runtime, messages).await
    } else if runtime.mode(Feature::BulkPublish) == Support::Native {
        publish_native(runtime, messages).await
    } else {
        publish_parallel(runtime, messages).await
    };
    let failed_entries = ids
        .into_iter()
        .zip(results)
        .filter_map(|(entry_id, result)| {
            result.err().map(|e| FailedEntry {
                entry_id,
                error: e.to_string(),
            })
        })
        .collect();
    Ok(BulkPublishResponse { failed_entries })
}

fn validate_entry_ids(request: &BulkPublishRequest) -> Result<()> {
    let mut seen = HashSet::with_capacity(request.entries.len());
    for (index, entry) in request.entries.iter().enumerate() {
        if entry.entry_id.trim().is_empty() {
            return Err(PubSubError::InvalidRequest(format!(
                "bulk entry at index {index} has an empty entryId; nothing was published"
            )));
        }
        if !seen.insert(entry.entry_id.as_str()) {
            return Err(PubSubError::InvalidRequest(format!(
                "entryId '{}' appears more than once (again at index {index}); nothing was published",
                entry.entry_id
            )));
        }
    }
    Ok(())
}

/// Sequential publishing; after the first failure nothing more is published and the
/// rest is reported failed, so a retry from the first failed entry keeps order.
async fn publish_in_order(
    runtime: &Runtime,
    messages: Vec<OutgoingMessage>,
) -> Vec<Result<MessageId>> {
    let mut results = Vec::with_capacity(messages.len());
    let mut first_failure: Option<usize> = None;
    for (index, message) in messages.into_iter().enumerate() {
        if let Some(at) = first_failure {
            results.push(Err(PubSubError::NotAllowed(format!(
                "not published: entry {at} failed before it and batchPublishKeepOrder is set"
            ))));
            continue;
        }
        let result = runtime.component.publish(message).await;
        if result.is_err() {
            first_failure = Some(index);
        }
        results.push(result);
    }
    results
}

async fn publish_native(
    runtime: &Runtime,
    messages: Vec<OutgoingMessage>,
) -> Vec<Result<MessageId>> {
    let count = messages.len();
    match runtime.component.publish_batch(messages).await {
        Ok(results) if results.len() == count => results,
        Ok(results) => {
            // Never guess which entries made it: every entry is reported failed.
            let why = format!(
                "component answered {} statuses for {count} entries; outcome unknown",
                results.len()
            );
            (0..count)
                .map(|_| Err(PubSubError::broker("bulk publish", &why)))
                .collect()
        }
        Err(e) => (0..count).map(|_| Err(e.clone())).collect(),
    }
}

async fn publish_parallel(
    runtime: &Runtime,
    messages: Vec<OutgoingMessage>,
) -> Vec<Result<MessageId>> {
    let component = runtime.component.clone();
    futures::stream::iter(messages)
        .map(|message| {
            let component = component.clone();
            async move { component.publish(message).await }
        })
        .buffered(runtime.options.bulk_publish_concurrency.max(1))
        .collect()
        .await
}
