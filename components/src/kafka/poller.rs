//! Keeps a member polling while the runtime is not receiving from it.
//!
//! librdkafka serves a group's rebalances from a member's poll: a member nobody polls
//! (its app busy, a retry waiting) holds every rebalance of its group, and the
//! group's other members get nothing meanwhile. So between receives, a background
//! task polls for the member: what it gets waits in the ledger, set aside for the
//! next receive, and when too much waits the member's partitions are paused (a paused
//! member still serves rebalances). A receive or a seek takes its turn at the poll
//! from the task, which gives way at once.
//!
//! While a record handed out is unanswered (its handler at work), the task does not
//! poll: a rebalance then waits for the answer, as Kafka's consumers make it wait for
//! the records they process, rather than take the record from a member still working
//! on it and hand it to another.

use super::intake::admit;
use super::ledger::{lock, SharedLedger};
use rdkafka::consumer::{Consumer as _, ConsumerContext, StreamConsumer};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Records received and not yet handed out above which the member pauses.
pub(super) const PREFETCH_LIMIT: usize = 1000;

/// Who polls a member's consumer: receives share it, a seek has it alone, and the
/// background task has it when nobody else wants it.
#[derive(Default)]
pub(super) struct PollTurn {
    lock: RwLock<()>,
    /// Receives and seeks that hold the poll or wait for it.
    claims: AtomicUsize,
    /// Tells the background task to give the poll up.
    wanted: Notify,
    /// Tells the background task that nobody claims the poll any more.
    released: Notify,
    /// Tells the background task that a record handed out was answered.
    answered: Notify,
    /// The background task paused the member's partitions.
    paused: AtomicBool,
}

/// A claim on the poll, released when dropped (also when a receive is cancelled
/// while it waits for its turn).
struct Claim<'a>(&'a PollTurn);

impl<'a> Claim<'a> {
    fn new(turn: &'a PollTurn) -> Self {
        turn.claims.fetch_add(1, Ordering::AcqRel);
        turn.wanted.notify_one();
        Claim(turn)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.0.claims.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.released.notify_one();
        }
    }
}

/// A receive's share of the poll.
pub(super) struct SharedTurn<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    _claim: Claim<'a>,
}

/// A seek's sole use of the poll.
pub(super) struct SoleTurn<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    _claim: Claim<'a>,
}

impl PollTurn {
    /// Waits until the background task has given the poll up; receives share it.
    pub async fn share(&self) -> SharedTurn<'_> {
        let claim = Claim::new(self);
        SharedTurn {
            _guard: self.lock.read().await,
            _claim: claim,
        }
    }

    /// Waits until nobody else polls.
    pub async fn alone(&self) -> SoleTurn<'_> {
        let claim = Claim::new(self);
        SoleTurn {
            _guard: self.lock.write().await,
            _claim: claim,
        }
    }

    /// Tells the background task that the member answered a record it handed out.
    pub fn answered(&self) {
        self.answered.notify_one();
    }

    /// Resumes the partitions the background task paused, once what waits in the
    /// ledger is below half the limit.
    pub fn resume_if_drained<C>(&self, consumer: &StreamConsumer<C>, waiting: usize)
    where
        C: ConsumerContext + 'static,
    {
        if waiting >= PREFETCH_LIMIT / 2 || !self.paused.load(Ordering::Acquire) {
            return;
        }
        self.set_paused(consumer, false);
    }

    /// Pauses (or resumes) every partition assigned to the member, and remembers it.
    fn set_paused<C: ConsumerContext + 'static>(&self, consumer: &StreamConsumer<C>, pause: bool) {
        let done = consumer.assignment().and_then(|assigned| {
            if pause {
                consumer.pause(&assigned)
            } else {
                consumer.resume(&assigned)
            }
        });
        match done {
            Ok(()) => self.paused.store(pause, Ordering::Release),
            Err(e) if pause => tracing::warn!(error = %e, "pausing a kafka member's partitions"),
            Err(e) => tracing::warn!(error = %e, "resuming a kafka member's partitions"),
        }
    }
}

/// The background task of one member: polls whenever nobody claims the poll, until
/// aborted (the member closes or is dropped).
pub(super) fn spawn<C: ConsumerContext + 'static>(
    consumer: Arc<StreamConsumer<C>>,
    turn: Arc<PollTurn>,
    ledger: SharedLedger,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let released = turn.released.notified();
            if turn.claims.load(Ordering::Acquire) > 0 {
                released.await;
                continue;
            }
            drop(released);
            let answered = turn.answered.notified();
            if lock(&ledger).has_in_flight() {
                answered.await;
                continue;
            }
            drop(answered);
            let held = turn.lock.write().await;
            if turn.claims.load(Ordering::Acquire) > 0 {
                continue;
            }
            let wanted = turn.wanted.notified();
            tokio::select! {
                biased;
                _ = wanted => {}
                polled = consumer.recv() => match polled {
                    Ok(record) => {
                        let Some((_, message)) = admit(&ledger, &record) else {
                            continue;
                        };
                        let waiting = {
                            let mut ledger = lock(&ledger);
                            ledger.set_aside(vec![message]);
                            ledger.set_aside_count()
                        };
                        if waiting >= PREFETCH_LIMIT {
                            turn.set_paused(&consumer, true);
                        }
                    }
                    Err(e) => {
                        // Topics that do not exist yet, transient broker errors.
                        tracing::debug!(error = %e, "kafka consumer error between receives");
                        drop(held);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                },
            }
        }
    })
}
