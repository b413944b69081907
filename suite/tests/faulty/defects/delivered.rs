//! Defects of what a receive hands out: messages lost, duplicated or reordered,
//! delivered early, late or past their expiry, with their owner topic, metadata or
//! attempt count wrong, copies leaked to other groups, and what a lease lets go of.

use super::consumer::{FaultyConsumer, FAULTY_LEASE};
use super::published::{DUE_HEADER, EXPIRES_HEADER};
use super::Defect;
use pubsub_components::memory::MemoryComponent;
use pubsub_components::{Component, MessageId, ReceivedMessage, Result};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

impl FaultyConsumer {
    /// How late [`Defect::DeliversLate`] delivers: two delay precisions.
    fn late_by(&self) -> Duration {
        MemoryComponent::default().capabilities().delay_precision * 2
    }

    /// `messages` but those `gone` picks, which are acknowledged and never handed out.
    async fn withhold(
        &self,
        messages: Vec<ReceivedMessage>,
        gone: impl Fn(&ReceivedMessage) -> bool,
    ) -> Result<Vec<ReceivedMessage>> {
        let mut kept = Vec::new();
        for message in messages {
            if gone(&message) {
                self.inner.ack(&message.id).await?;
            } else {
                kept.push(message);
            }
        }
        Ok(kept)
    }

    /// `messages` without those `unseen` picks, which are acknowledged without being
    /// handed out.
    async fn settle_unseen(
        &self,
        messages: Vec<ReceivedMessage>,
        mut unseen: impl FnMut(&ReceivedMessage) -> bool,
    ) -> Result<Vec<ReceivedMessage>> {
        let mut kept = Vec::new();
        for message in messages {
            if unseen(&message) {
                self.inner.ack(&message.id).await?;
            } else {
                kept.push(message);
            }
        }
        Ok(kept)
    }

    /// `messages` as the defect hands them out.
    pub(super) async fn distort(
        &self,
        mut messages: Vec<ReceivedMessage>,
    ) -> Result<Vec<ReceivedMessage>> {
        match self.defect {
            Defect::AcksCumulativelyForEveryGroup => {
                messages = self
                    .settle_unseen(messages, |m| self.settled_by_another_group(&m.id))
                    .await?;
            }
            Defect::AcksAhead => {
                messages = self
                    .settle_unseen(messages, |m| self.acked_ahead.lock().unwrap().remove(&m.id))
                    .await?;
            }
            Defect::ListsPartitionsAtOpen => {
                messages = self
                    .settle_unseen(messages, |m| {
                        m.id.topic.as_ref().is_some_and(|topic| {
                            self.partitions_at_open
                                .get(topic)
                                .is_some_and(|&count| m.id.partition.unwrap_or(0) >= count)
                        })
                    })
                    .await?;
            }
            Defect::Drops => {
                messages = self
                    .settle_unseen(messages, |_| {
                        self.received.fetch_add(1, Ordering::Relaxed) % 3 == 2
                    })
                    .await?;
            }
            Defect::Duplicates => {
                messages = messages.into_iter().flat_map(|m| [m.clone(), m]).collect();
            }
            Defect::Reorders => messages.reverse(),
            Defect::DeliversOneLate => {
                let mut kept = Vec::new();
                for message in messages {
                    if self.received.fetch_add(1, Ordering::Relaxed) == 6 {
                        // Past the delivery bound, and back well before the case stops
                        // its subscription (its bound less a second for the stop).
                        let late =
                            super::component::FAULTY_DELIVERY_BOUND + Duration::from_millis(500);
                        self.inner.defer(&message.id, late).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            Defect::ReordersNonAsciiKeys => {
                let odd: Vec<usize> = (0..messages.len())
                    .filter(|&i| {
                        messages[i]
                            .partition_key
                            .as_deref()
                            .is_some_and(|key| !key.is_ascii())
                    })
                    .collect();
                let reversed: Vec<ReceivedMessage> =
                    odd.iter().rev().map(|&i| messages[i].clone()).collect();
                for (slot, message) in odd.into_iter().zip(reversed) {
                    messages[slot] = message;
                }
            }
            Defect::ForgetsCreatedGroups => {
                let mut kept = Vec::new();
                for message in messages {
                    if message.publish_time < self.opened_at {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            Defect::LosesOwnerTopic => {
                for message in &mut messages {
                    message.id.topic = None;
                }
            }
            Defect::ForgetsWhileEmpty => {
                messages = self
                    .withhold(messages, |message| {
                        self.forget_since.is_some_and(|since| {
                            message.publish_time >= since && message.publish_time < self.opened_at
                        })
                    })
                    .await?;
            }
            Defect::LosesEmptyValuesAfterWait => {
                let now = SystemTime::now();
                for message in &mut messages {
                    let waited = now.duration_since(message.publish_time).unwrap_or_default();
                    if waited > Duration::from_secs(2) {
                        message.metadata.retain(|_, value| !value.is_empty());
                    }
                }
            }
            Defect::StripsMetadata => {
                for message in &mut messages {
                    if self.received.fetch_add(1, Ordering::Relaxed) % 100 == 37 {
                        message.metadata.clear();
                    }
                }
            }
            Defect::BorrowsMetadata => {
                let mut last = self.last_metadata.lock().unwrap();
                for message in &mut messages {
                    let own = message.metadata.clone();
                    if self.received.fetch_add(1, Ordering::Relaxed) % 100 == 37 {
                        if let Some(previous) = last.clone() {
                            message.metadata = previous;
                        }
                    }
                    *last = Some(own);
                }
            }
            Defect::SettlesDeadLettersForIdleGroups => {
                let settled = self.idle.lock().unwrap().settled.clone();
                messages = self
                    .withhold(messages, |message| {
                        settled
                            .get(&message.id)
                            .is_some_and(|groups| groups.contains(&self.group))
                    })
                    .await?;
            }
            Defect::CountsDelayedRetriesForIdleGroups => {
                let idle = self.idle.lock().unwrap();
                for message in &mut messages {
                    let key = (message.id.clone(), self.group.clone());
                    message.attempt += idle.retries.get(&key).copied().unwrap_or(0);
                }
            }
            Defect::ResetsAttemptsAcrossMembers => {
                let mut own = self.own_attempts.lock().unwrap();
                for message in &mut messages {
                    let count = own.entry(message.id.clone()).or_insert(0);
                    *count += 1;
                    message.attempt = *count;
                }
            }
            Defect::CountsAttemptsAcrossGroups => {
                let retries = self.retries.lock().unwrap();
                for message in &mut messages {
                    let elsewhere: u32 = retries
                        .get(&message.id)
                        .map(|by_group| {
                            by_group
                                .iter()
                                .filter(|(group, _)| **group != self.group)
                                .map(|(_, n)| n)
                                .sum()
                        })
                        .unwrap_or(0);
                    message.attempt += elsewhere;
                }
            }
            Defect::LeaksRetriesToOtherGroups => {
                let now = SystemTime::now();
                {
                    let mut retried = self.retried.lock().unwrap();
                    for message in &messages {
                        retried.insert(message.id.clone(), message.clone());
                    }
                }
                let mut leaks = self.leaks.lock().unwrap();
                for leak in leaks.iter_mut() {
                    if leak.due <= now
                        && leak.from_group != self.group
                        && leak.taken_by.insert(self.group.clone())
                    {
                        let mut copy = leak.message.clone();
                        copy.id.position +=
                            1_000_000_000 + self.received.fetch_add(1, Ordering::Relaxed);
                        self.leaked.lock().unwrap().insert(copy.id.clone());
                        messages.push(copy);
                    }
                }
            }
            Defect::DelaysFromReceipt
            | Defect::BlocksBehindDelayed
            | Defect::DelaysCappedAtLease
            | Defect::DeliversLate
            | Defect::DropsDueTimesInBulk => {
                let now = SystemTime::now();
                let mut kept = Vec::new();
                // Strictly in line: once a delayed message reached the head, what
                // comes after waits until it is due.
                let mut blocked = self
                    .blocked_until
                    .lock()
                    .unwrap()
                    .is_some_and(|until| until > now);
                for message in messages {
                    let mut due = message
                        .metadata
                        .get(DUE_HEADER)
                        .and_then(|ms| ms.parse::<u64>().ok())
                        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
                    if let Some(delay) = self.receiver_delay {
                        let from = match self.defect {
                            Defect::DelaysFromReceipt => *self
                                .first_seen
                                .lock()
                                .unwrap()
                                .entry(message.id.clone())
                                .or_insert(now),
                            _ => message.publish_time,
                        };
                        due = Some(due.map_or(from + delay, |d| d.max(from + delay)));
                    }
                    if self.defect == Defect::DeliversLate {
                        due = due.map(|d| d + self.late_by());
                    }
                    let wait = due.and_then(|d| d.duration_since(now).ok());
                    match (self.defect, wait) {
                        (Defect::BlocksBehindDelayed, _) if blocked => {
                            self.inner
                                .nack(&message.id, Duration::from_millis(50))
                                .await?;
                        }
                        (Defect::BlocksBehindDelayed, Some(wait)) => {
                            blocked = true;
                            {
                                let mut until = self.blocked_until.lock().unwrap();
                                *until = Some(until.map_or(now + wait, |u| u.max(now + wait)));
                            }
                            self.inner
                                .nack(&message.id, wait.min(Duration::from_millis(50)))
                                .await?;
                        }
                        // Held for one lease; back after it, it goes out as it is.
                        (Defect::DelaysCappedAtLease, Some(_)) if message.attempt > 1 => {
                            kept.push(message)
                        }
                        (Defect::DelaysCappedAtLease, Some(wait)) => {
                            self.inner
                                .nack(&message.id, wait.min(Duration::from_secs(1)))
                                .await?;
                        }
                        (_, Some(wait)) => self.inner.nack(&message.id, wait).await?,
                        (_, None) => kept.push(message),
                    }
                }
                messages = kept;
            }
            Defect::HalvesTtl => {
                let now = SystemTime::now();
                let mut kept = Vec::new();
                for message in messages {
                    let expires = message
                        .metadata
                        .get(EXPIRES_HEADER)
                        .and_then(|ms| ms.parse::<u64>().ok())
                        .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
                    let half_life = expires.map(|at| {
                        let life = at.duration_since(message.publish_time).unwrap_or_default();
                        message.publish_time + life / 2
                    });
                    if half_life.is_some_and(|at| at <= now) {
                        self.inner.ack(&message.id).await?;
                    } else {
                        kept.push(message);
                    }
                }
                messages = kept;
            }
            _ => {}
        }
        let mut held = self.held.lock().unwrap();
        held.extend(messages.iter().map(|m| m.id.clone()));
        if matches!(
            self.defect,
            Defect::LeaseWithoutExtension | Defect::PretendsToExtendLease
        ) {
            let mut handed = self.handed_at.lock().unwrap();
            for message in &messages {
                handed.insert(message.id.clone(), Instant::now());
            }
        }
        Ok(messages)
    }

    /// The broker's side of a lease: what a member has held unsettled for longer
    /// than the lease goes back to the group.
    pub(super) async fn expire_leases(&self) -> Result<()> {
        let expired: Vec<MessageId> = {
            let mut handed = self.handed_at.lock().unwrap();
            let expired: Vec<MessageId> = handed
                .iter()
                .filter(|(_, at)| at.elapsed() >= FAULTY_LEASE)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                handed.remove(id);
            }
            expired
        };
        for id in expired {
            self.inner.nack(&id, Duration::ZERO).await?;
        }
        Ok(())
    }
}
