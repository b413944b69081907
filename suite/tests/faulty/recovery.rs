//! Components that break under faults the way real adapters do, each wrapped around a
//! correct component on a real broker: the fault cases of the certification level must
//! FAIL them while the correct component passes.

use async_trait::async_trait;
use pubsub_components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, OutgoingMessage, ReceivedMessage,
    Result, Support,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One way of breaking under faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaks {
    /// Answers a publish at once and sends it in the background: what was not sent
    /// when the connection died is lost, though it was reported published.
    FireAndForget,
    /// Waits 1 ms for the broker's answer to a publish and reports success if none
    /// came by then (the publish goes on in the background): correct while the
    /// broker answers quickly, a lost message when the connection dies just after.
    AcksBeforeConfirm,
    /// Reports SUCCESS for entries that failed on a dead connection.
    LiesAfterDisconnect,
    /// After its first receive error (the broker went away) it never subscribes
    /// again: receives return nothing for ever.
    NeverResubscribes,
    /// Closing a consumer does nothing: it keeps receiving.
    KeepsDeliveringAfterClose,
    /// Counts a redelivery after a member's crash as a failed delivery and
    /// dead-letters it at once (declares native dead letters).
    DeadLettersRedeliveries,
    /// Hands a slow handler's message to another member when its lease expires, but
    /// declares that it never does.
    HidesLeaseExpiry,
    /// Silently skips 1 XACK in 100: the acknowledged message comes back once the
    /// claim idle time has passed.
    SkipsAcks,
}

/// A correct component with one way of breaking.
pub struct Broken {
    pub inner: Arc<dyn Component>,
    pub breaks: Breaks,
}

fn fake_id(message: &OutgoingMessage) -> MessageId {
    MessageId::new(&message.topic, None, rand::random::<u32>() as u64)
}

#[async_trait]
impl Component for Broken {
    fn kind(&self) -> &str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        if self.breaks == Breaks::DeadLettersRedeliveries {
            caps.dead_letter = Support::Native;
        }
        if self.breaks == Breaks::HidesLeaseExpiry {
            caps.redelivers_slow_handlers = false;
        }
        caps
    }

    async fn broker_version(&self) -> Result<String> {
        self.inner.broker_version().await
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        match self.breaks {
            Breaks::FireAndForget => {
                let id = fake_id(&message);
                let inner = self.inner.clone();
                tokio::spawn(async move {
                    let _ = inner.publish(message).await;
                });
                Ok(id)
            }
            Breaks::LiesAfterDisconnect => {
                let id = fake_id(&message);
                Ok(self.inner.publish(message).await.unwrap_or(id))
            }
            Breaks::AcksBeforeConfirm => {
                let id = fake_id(&message);
                let inner = self.inner.clone();
                let mut sending = tokio::spawn(async move { inner.publish(message).await });
                match tokio::time::timeout(Duration::from_millis(1), &mut sending).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(_)) | Err(_) => Ok(id),
                }
            }
            _ => self.inner.publish(message).await,
        }
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        match self.breaks {
            Breaks::FireAndForget => {
                let ids = messages.iter().map(|m| Ok(fake_id(m))).collect();
                let inner = self.inner.clone();
                tokio::spawn(async move {
                    let _ = inner.publish_batch(messages).await;
                });
                Ok(ids)
            }
            Breaks::LiesAfterDisconnect => {
                let ids: Vec<MessageId> = messages.iter().map(fake_id).collect();
                match self.inner.publish_batch(messages).await {
                    Ok(results) => Ok(results
                        .into_iter()
                        .zip(ids)
                        .map(|(r, id)| Ok(r.unwrap_or(id)))
                        .collect()),
                    Err(_) => Ok(ids.into_iter().map(Ok).collect()),
                }
            }
            _ => self.inner.publish_batch(messages).await,
        }
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let inner = self.inner.consumer(spec.clone()).await?;
        Ok(Box::new(BrokenConsumer {
            inner,
            component: self.inner.clone(),
            spec,
            breaks: self.breaks,
            failed_once: AtomicBool::new(false),
            acks: AtomicU64::new(0),
        }))
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.inner.create_group(spec).await
    }
}

struct BrokenConsumer {
    inner: Box<dyn Consumer>,
    component: Arc<dyn Component>,
    spec: ConsumerSpec,
    breaks: Breaks,
    failed_once: AtomicBool,
    acks: AtomicU64,
}

#[async_trait]
impl Consumer for BrokenConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        if self.breaks == Breaks::NeverResubscribes && self.failed_once.load(Ordering::SeqCst) {
            tokio::time::sleep(wait).await;
            return Ok(Vec::new());
        }
        let received = match self.inner.receive(max, wait).await {
            Ok(received) => received,
            Err(e) => {
                self.failed_once.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        if self.breaks != Breaks::DeadLettersRedeliveries {
            return Ok(received);
        }
        let mut kept = Vec::new();
        for message in received {
            match (&self.spec.dead_letter_topic, message.attempt) {
                (Some(dead), attempt) if attempt >= 2 => {
                    let mut copy = OutgoingMessage::new(dead.clone(), message.payload.clone());
                    copy.content_type = message.content_type.clone();
                    copy.metadata = message.metadata.clone();
                    self.component.publish(copy).await?;
                    self.inner.ack(&message.id).await?;
                }
                _ => kept.push(message),
            }
        }
        Ok(kept)
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        if self.breaks == Breaks::SkipsAcks && self.acks.fetch_add(1, Ordering::Relaxed) % 100 == 41
        {
            return Ok(());
        }
        self.inner.ack(id).await
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.inner.nack(id, delay).await
    }

    async fn reject(&self, id: &MessageId, reason: &str) -> Result<()> {
        self.inner.reject(id, reason).await
    }

    async fn close(&self) -> Result<()> {
        if self.breaks == Breaks::KeepsDeliveringAfterClose {
            return Ok(());
        }
        self.inner.close().await
    }
}
