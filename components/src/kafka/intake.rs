//! A polled record turned into a delivery: its headers read back into the message
//! it was published as, and its admission recorded in the member's ledger.

use super::ledger::{lock, SharedLedger};
use super::{HEADER_ATTEMPT, HEADER_CONTENT_TYPE, HEADER_DUE, HEADER_METADATA, HEADER_PUBLISHED};
use crate::message::{MessageId, Metadata, ReceivedMessage};
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::Message;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Records a polled record in the ledger and turns it into a delivery, with its
/// admission; `None` for a copy that is not due yet, which the ledger holds until it is.
pub(super) fn admit(
    ledger: &SharedLedger,
    record: &BorrowedMessage<'_>,
) -> Option<(u64, ReceivedMessage)> {
    let mut metadata = Metadata::new();
    let mut content_type = None;
    let mut attempt = 1;
    let mut published_ms = None;
    let mut due_ms = None;
    if let Some(headers) = record.headers() {
        for header in headers.iter() {
            let value = header.value.unwrap_or_default();
            match header.key {
                HEADER_METADATA => {
                    metadata = serde_json::from_slice(value).unwrap_or_default();
                }
                HEADER_CONTENT_TYPE => {
                    content_type = Some(String::from_utf8_lossy(value).into_owned());
                }
                HEADER_ATTEMPT => {
                    attempt = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(1);
                }
                HEADER_PUBLISHED => {
                    published_ms = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                }
                HEADER_DUE => {
                    due_ms = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                }
                _ => {}
            }
        }
    }
    let published_ms = published_ms
        .or_else(|| record.timestamp().to_millis().map(|ms| ms.max(0) as u64))
        .unwrap_or_default();
    let message = ReceivedMessage {
        id: MessageId::new(
            record.topic(),
            Some(record.partition() as u32),
            record.offset() as u64,
        ),
        payload: record.payload().unwrap_or_default().to_vec(),
        content_type,
        metadata,
        partition_key: record
            .key()
            .map(|key| String::from_utf8_lossy(key).into_owned()),
        attempt,
        publish_time: UNIX_EPOCH + Duration::from_millis(published_ms),
    };
    let wait = due_ms.and_then(|ms| {
        (UNIX_EPOCH + Duration::from_millis(ms))
            .duration_since(SystemTime::now())
            .ok()
    });
    match wait {
        Some(wait) => {
            lock(ledger).admit_due(&message, Instant::now() + wait);
            None
        }
        None => {
            let admission = lock(ledger).admit(&message);
            Some((admission, message))
        }
    }
}
