//! Partition records for the RabbitMQ component, kept in the broker as the message
//! counts of two durable queues per partitioned topic.
//!
//! AMQP has no key-value store, but a passive queue declaration answers with the
//! queue's message count without taking anything from it, so any number of readers
//! read a count without blocking one another. A topic's partition count is the
//! message count of `<exchange>.partitions.<topic>.count`; its version is half the
//! count of `<exchange>.partitions.<topic>.version`, which a write raises by one
//! before it adds partitions and by one after (a sequence lock: an odd count means a
//! write is under way, and a read that saw the version change retries). Messages are
//! persistent and confirmed, so a record survives a broker restart. One writer per
//! topic at a time, as the other brokers' records.
//!
//! Reads declare the queues (a passive declaration of a missing queue would close
//! the channel, which the client logs as an error on every read of an unpartitioned
//! topic): an empty version queue means no record. The queues take the group
//! queues' expiry when one is configured, so a record unused that long goes, as a
//! group does.

use super::{amqp, confirmed, confirming_channel, declare_durable};
use crate::component::PartitionUpdate;
use crate::error::{PubSubError, Result};
use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use std::time::Duration;

/// How often a read retries while a write is under way.
const READ_TRIES: u32 = 100;
/// Between two tries of a read that met a write.
const READ_RETRY: Duration = Duration::from_millis(10);

/// The two queues of one topic's record.
struct Queues {
    version: ShortString,
    count: ShortString,
}

/// Reads and writes partition records on a RabbitMQ connection.
pub(crate) struct CountedRecords {
    exchange: String,
    /// How long a record's queues outlive their last use (`None`: for ever).
    expiry: Option<Duration>,
    /// The channel reads run on, opened again when it died.
    reader: tokio::sync::Mutex<Option<Channel>>,
}

impl CountedRecords {
    /// Records named after the component's exchange, whose queues expire after
    /// `expiry` unused.
    pub(crate) fn new(exchange: &str, expiry: Option<Duration>) -> Self {
        CountedRecords {
            exchange: exchange.to_string(),
            expiry,
            reader: tokio::sync::Mutex::new(None),
        }
    }

    /// The arguments every record queue is declared with.
    fn arguments(&self) -> FieldTable {
        let mut arguments = FieldTable::default();
        // Classic: its declared message count is exact at once.
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("classic")),
        );
        if let Some(expiry) = self.expiry {
            arguments.insert(
                "x-expires".into(),
                AMQPValue::LongLongInt(expiry.as_millis().min(i64::MAX as u128) as i64),
            );
        }
        arguments
    }

    fn queues(&self, topic: &str) -> Result<Queues> {
        // A name over AMQP's 255 bytes carries a hash of the topic in its place.
        let topic_part = if self.exchange.len() + topic.len() + ".partitions..version".len() > 255 {
            format!("h{:016x}", crate::component::stable_hash(topic.as_bytes()))
        } else {
            topic.to_string()
        };
        let name = |what: &str| {
            ShortString::try_new(format!("{}.partitions.{topic_part}.{what}", self.exchange))
                .map_err(|e| {
                    PubSubError::InvalidRequest(format!(
                        "topic '{topic}' is too long for a RabbitMQ partition record: {e}"
                    ))
                })
        };
        Ok(Queues {
            version: name("version")?,
            count: name("count")?,
        })
    }

    /// The topic's record, `None` when it has none. A record is read when its version
    /// is even and unchanged across the read, and the two queues agree: a stored
    /// record has at least one partition, and a topic without a record has none (a
    /// broker still recovering its queues after a restart can show one queue's
    /// messages before the other's).
    pub(crate) async fn read(
        &self,
        connection: &Connection,
        topic: &str,
    ) -> Result<Option<PartitionUpdate>> {
        let queues = self.queues(topic)?;
        let mut seen = (0, 0);
        for _ in 0..READ_TRIES {
            let before = self.count(connection, &queues.version).await?;
            if before % 2 == 0 {
                let partitions = self.count(connection, &queues.count).await?;
                seen = (before, partitions);
                let agree = (before == 0) == (partitions == 0);
                if agree && self.count(connection, &queues.version).await? == before {
                    return Ok((before > 0).then(|| PartitionUpdate {
                        version: u64::from(before / 2),
                        partitions,
                    }));
                }
            }
            tokio::time::sleep(READ_RETRY).await;
        }
        Err(PubSubError::broker(
            format!("reading the partition record of '{topic}'"),
            format!(
                "for {:?} a write stayed under way or the record's two queues disagreed (last seen: version queue {} messages, count queue {})",
                READ_RETRY * READ_TRIES,
                seen.0,
                seen.1
            ),
        ))
    }

    /// Writes the topic's record (its version must be above the stored one and its
    /// count not below), returning once the broker confirmed it.
    pub(crate) async fn write(
        &self,
        connection: &Connection,
        topic: &str,
        record: PartitionUpdate,
    ) -> Result<()> {
        let queues = self.queues(topic)?;
        let channel = confirming_channel(
            connection,
            "opening a channel for a partition record",
            "enabling confirms for a partition record",
        )
        .await?;
        // Both queues exist before anything is published to them (the default
        // exchange drops what no queue takes, and still confirms it).
        self.count(connection, &queues.count).await?;
        let stored = self
            .read(connection, topic)
            .await?
            .unwrap_or(PartitionUpdate {
                version: 0,
                partitions: 0,
            });
        if record.version <= stored.version || record.partitions < stored.partitions {
            return Err(PubSubError::InvalidRequest(format!(
                "partition record of '{topic}': {record:?} does not follow the stored {stored:?}"
            )));
        }
        let lock_steps = record.version * 2 - stored.version * 2;
        add(&channel, &queues.version, 1).await?;
        add(
            &channel,
            &queues.count,
            u64::from(record.partitions - stored.partitions),
        )
        .await?;
        add(&channel, &queues.version, lock_steps - 1).await?;
        let _ = channel.close(200, "partition record written".into()).await;
        Ok(())
    }

    /// A record queue's message count (the queue is declared if missing).
    async fn count(&self, connection: &Connection, queue: &ShortString) -> Result<u32> {
        let mut reader = self.reader.lock().await;
        let channel = match reader.as_ref().filter(|c| c.status().connected()) {
            Some(channel) => channel.clone(),
            None => {
                let channel = connection
                    .create_channel()
                    .await
                    .map_err(amqp("opening a channel to read partition records"))?;
                *reader = Some(channel.clone());
                channel
            }
        };
        let declared = declare_durable(
            &channel,
            queue.clone(),
            self.arguments(),
            "declaring a partition record queue",
        )
        .await?;
        Ok(declared.message_count())
    }
}

/// Publishes `n` persistent messages to `queue` and waits for their confirms.
async fn add(channel: &Channel, queue: &ShortString, n: u64) -> Result<()> {
    let mut confirms = Vec::with_capacity(n as usize);
    for _ in 0..n {
        confirms.push(
            channel
                .basic_publish(
                    ShortString::from(""),
                    queue.clone(),
                    BasicPublishOptions::default(),
                    b"",
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .map_err(amqp("writing a partition record"))?,
        );
    }
    for confirm in confirms {
        if !confirmed(confirm, "confirming a partition record").await? {
            return Err(PubSubError::broker(
                "writing a partition record",
                "the broker refused a record message",
            ));
        }
    }
    Ok(())
}
