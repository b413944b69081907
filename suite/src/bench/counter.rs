//! Counting a subscriber's deliveries (and their end-to-end latency) until all came.

use async_trait::async_trait;
use hdrhistogram::Histogram;
use pubsub_components::runtime::{Batch, BulkHandler, EntryStatus, Event, MessageHandler, Status};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// Counts deliveries and records end-to-end latency.
pub(super) struct Counter {
    received: AtomicU64,
    target: u64,
    done: Notify,
    /// Each delivery's latency, in microseconds.
    pub(super) latency: Mutex<Histogram<u64>>,
}

impl Counter {
    pub(super) fn new(target: usize) -> Arc<Self> {
        Arc::new(Counter {
            received: AtomicU64::new(0),
            target: target as u64,
            done: Notify::new(),
            latency: Mutex::new(Histogram::new(3).expect("3 significant digits is valid")),
        })
    }

    /// Counts one delivered event (its latency recorded when it carries a send time)
    /// and wakes the waiter.
    fn count(&self, event: &Event) {
        self.record(event);
        self.done.notify_waiters();
    }

    /// Counts one delivered event without waking the waiter: a batch wakes it once.
    fn record(&self, event: &Event) {
        if let Some(sent) = event
            .metadata
            .get("bench-sent-us")
            .and_then(|v| v.parse::<u64>().ok())
        {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros() as u64;
            let _ = self
                .latency
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(now.saturating_sub(sent).max(1));
        }
        self.received.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits (bounded) until every expected message arrived.
    pub(super) async fn wait(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_for(self.target, timeout).await
    }

    /// Waits (bounded) until `count` messages arrived.
    pub(super) async fn wait_for(&self, count: u64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.received.load(Ordering::SeqCst) >= count {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                anyhow::bail!(
                    "received {} of {count} messages within {timeout:?}",
                    self.received.load(Ordering::SeqCst)
                );
            }
        }
    }
}

#[async_trait]
impl MessageHandler for Counter {
    async fn handle(&self, event: Event) -> Result<Status, String> {
        self.count(&event);
        Ok(Status::Success)
    }
}

#[async_trait]
impl BulkHandler for Counter {
    async fn handle(&self, batch: Batch) -> Result<Vec<EntryStatus>, String> {
        let statuses = batch
            .entries
            .into_iter()
            .map(|entry| {
                self.record(&entry.event);
                EntryStatus {
                    entry_id: entry.entry_id,
                    status: Status::Success,
                }
            })
            .collect();
        self.done.notify_waiters();
        Ok(statuses)
    }
}
