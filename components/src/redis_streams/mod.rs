//! Redis Streams component: one stream per topic, consumer groups, XACK, redelivery
//! by XAUTOCLAIM, native bulk publish (pipelined XADD), native bulk read (COUNT),
//! multi-stream consumers with stream-qualified ids, seek (XGROUP SETID).
//!
//! Negative acknowledgement and release: a pending entry's idle time is set with
//! `XCLAIM ... IDLE` so that it becomes claimable (by any member, through XAUTOCLAIM
//! with `claimIdleMs`) exactly when it is due.

mod consumer;
mod settings;

pub use settings::RedisConfig;

use crate::capability::{Capabilities, Support};
use crate::component::{check_message_size, Component, Consumer, ConsumerSpec};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage};
use async_trait::async_trait;
use consumer::RedisConsumer;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;
use std::time::Duration;

/// The Redis Streams component.
pub struct RedisStreams {
    config: RedisConfig,
    client: redis::Client,
    connection: ConnectionManager,
}

fn broker(context: &str) -> impl Fn(redis::RedisError) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
}

/// Stream ids `ms-seq` as one ordered u64: ms in the high 42 bits, seq in the low 22.
fn position(id: &str) -> Result<u64> {
    let (ms, seq) = id
        .split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?)))
        .ok_or_else(|| {
            PubSubError::broker("reading a stream id", format!("unexpected id '{id}'"))
        })?;
    Ok((ms << 22) | (seq & 0x3f_ffff))
}

fn stream_id(position: u64) -> String {
    format!("{}-{}", position >> 22, position & 0x3f_ffff)
}

/// The id just before `position`, for XGROUP SETID.
fn stream_id_before(position: u64) -> String {
    let (ms, seq) = (position >> 22, position & 0x3f_ffff);
    match (ms, seq) {
        (0, 0) => "0-0".into(),
        (ms, 0) => format!("{}-{}", ms - 1, u64::MAX),
        (ms, seq) => format!("{ms}-{}", seq - 1),
    }
}

/// Connections that reconnect by themselves after the server or the network comes
/// back (the failed command reports the error; the next one goes to a new connection).
/// No response timeout: blocking reads wait as long as they ask to.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_number_of_retries(2)
}

impl RedisStreams {
    /// Connects to the server named in `config`.
    pub async fn connect(config: RedisConfig) -> Result<Self> {
        let client = redis::Client::open(format!("redis://{}/", config.host)).map_err(|e| {
            PubSubError::InvalidRequest(format!("redisHost '{}': {e}", config.host))
        })?;
        let connection = client
            .get_connection_manager_with_config(manager_config())
            .await
            .map_err(|e| {
                PubSubError::broker(format!("connecting to redis at {}", config.host), e)
            })?;
        Ok(RedisStreams {
            config,
            client,
            connection,
        })
    }

    fn key(&self, topic: &str) -> String {
        format!("{}:{topic}", self.config.key_prefix)
    }

    /// A field of the server's `INFO server` section; `context` names the read in
    /// errors.
    async fn server_info(&self, field: &str, context: &str) -> Result<Option<String>> {
        let mut conn = self.connection.clone();
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(broker(context))?;
        let prefix = format!("{field}:");
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .map(|value| value.trim().to_string()))
    }

    /// The hash holding `topic`'s partition record.
    fn partition_record(&self, topic: &str) -> String {
        format!("{}-partitions:{topic}", self.config.key_prefix)
    }

    fn check_size(&self, message: &OutgoingMessage) -> Result<()> {
        check_message_size(message, self.config.max_message_bytes)
    }

    /// The XADD of `message` to the stream `key`, its buffers sized for it up front
    /// (grown argument by argument, they were copied several times per message).
    fn xadd(&self, key: &str, message: &OutgoingMessage) -> redis::Cmd {
        let metadata = serde_json::to_string(&message.metadata).unwrap_or_default();
        let content_type = message.content_type.as_deref();
        let partition_key = message.partition_key.as_deref();
        let bytes = "XADD*payloadmdctpk".len()
            + key.len()
            + message.payload.len()
            + metadata.len()
            + content_type.map_or(0, str::len)
            + partition_key.map_or(0, str::len);
        let mut cmd = redis::Cmd::with_capacity(10, bytes);
        cmd.arg("XADD")
            .arg(key)
            .arg("*")
            .arg("payload")
            .arg(&message.payload);
        if let Some(ct) = content_type {
            cmd.arg("ct").arg(ct);
        }
        cmd.arg("md").arg(metadata);
        if let Some(pk) = partition_key {
            cmd.arg("pk").arg(pk);
        }
        cmd
    }
}

/// Partition records in hashes `<prefix>-partitions:<topic>` (fields `version` and
/// `partitions`), outside the `<prefix>:` keys that pattern consumers take for streams.
#[async_trait]
impl crate::partitioned::PartitionStore for RedisStreams {
    async fn read_partitions(&self, topic: &str) -> Result<Option<crate::PartitionUpdate>> {
        let mut conn = self.connection.clone();
        let (version, partitions): (Option<u64>, Option<u32>) = redis::cmd("HMGET")
            .arg(self.partition_record(topic))
            .arg("version")
            .arg("partitions")
            .query_async(&mut conn)
            .await
            .map_err(broker("reading a partition record"))?;
        Ok(version
            .zip(partitions)
            .map(|(version, partitions)| crate::PartitionUpdate {
                version,
                partitions,
            }))
    }

    async fn incarnation(&self) -> Result<String> {
        let run_id = self
            .server_info("run_id", "reading the server's run id")
            .await?;
        Ok(run_id.unwrap_or_default())
    }

    async fn write_partitions(&self, topic: &str, record: crate::PartitionUpdate) -> Result<()> {
        let mut conn = self.connection.clone();
        redis::cmd("HSET")
            .arg(self.partition_record(topic))
            .arg("version")
            .arg(record.version)
            .arg("partitions")
            .arg(record.partitions)
            .query_async::<Value>(&mut conn)
            .await
            .map_err(broker("writing a partition record"))?;
        Ok(())
    }
}

impl RedisConfig {
    /// What the component declares, decided by its settings alone. Durable with the
    /// append-only file on (as the suite provisions it).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            bulk_subscribe: Support::Native,
            max_message_bytes: Some(self.max_message_bytes),
            // Pending entries idle this long are claimed by another member.
            lease: self.claim_idle,
            redelivers_slow_handlers: true,
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for RedisStreams {
    async fn broker_version(&self) -> Result<String> {
        let version = self
            .server_info("redis_version", "reading the server version")
            .await?
            .unwrap_or_else(|| "unknown".into());
        Ok(format!("redis {version} at {}", self.config.host))
    }

    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        // Redeliveries are claimed with XAUTOCLAIM (Redis 6.2). On a key that does not
        // exist a broker that knows it answers NOGROUP; one that does not, an unknown
        // command.
        let mut conn = self.connection.clone();
        let answer = redis::cmd("XAUTOCLAIM")
            .arg(format!(
                "{}-probe:{}",
                self.config.key_prefix,
                uuid::Uuid::new_v4().simple()
            ))
            .arg("probe")
            .arg("probe")
            .arg(0)
            .arg("0-0")
            .arg("COUNT")
            .arg(1)
            .query_async::<Value>(&mut conn)
            .await;
        Ok(match answer {
            Err(e) if e.to_string().to_lowercase().contains("unknown command") => Some(format!(
                "needs Redis >= 6.2 (XAUTOCLAIM, with which it claims redeliveries); the broker answered: {e}"
            )),
            _ => None,
        })
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        self.check_size(&message)?;
        let mut conn = self.connection.clone();
        let id: String = self
            .xadd(&self.key(&message.topic), &message)
            .query_async(&mut conn)
            .await
            .map_err(broker("publishing with XADD"))?;
        Ok(MessageId::new(message.topic, None, position(&id)?))
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let mut results: Vec<Option<Result<MessageId>>> = Vec::with_capacity(messages.len());
        let mut pipe = redis::Pipeline::with_capacity(messages.len());
        let mut sent = Vec::with_capacity(messages.len());
        // A request's entries share their topic: its stream key is written once.
        let mut key: Option<(&str, String)> = None;
        for (index, message) in messages.iter().enumerate() {
            match self.check_size(message) {
                Ok(()) => {
                    let stream = match &key {
                        Some((topic, stream)) if *topic == message.topic => stream,
                        _ => &key.insert((&message.topic, self.key(&message.topic))).1,
                    };
                    pipe.add_command(self.xadd(stream, message));
                    sent.push(index);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        if !sent.is_empty() {
            let mut conn = self.connection.clone();
            match pipe.query_async::<Vec<Value>>(&mut conn).await {
                Ok(replies) if replies.len() == sent.len() => {
                    for (index, reply) in sent.iter().zip(replies) {
                        // The reply's id read in place, without copying it out.
                        let id = match &reply {
                            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
                            Value::SimpleString(text) => Some(text.as_str()),
                            _ => None,
                        }
                        .ok_or_else(|| {
                            PubSubError::broker(
                                "pipelined XADD",
                                format!("unexpected reply {reply:?}"),
                            )
                        })
                        .and_then(position)
                        .map(|p| MessageId::new(messages[*index].topic.clone(), None, p));
                        results[*index] = Some(id);
                    }
                }
                Ok(replies) => {
                    let why = format!("{} replies for {} commands", replies.len(), sent.len());
                    for index in &sent {
                        results[*index] = Some(Err(PubSubError::broker("pipelined XADD", &why)));
                    }
                }
                Err(e) => {
                    for index in &sent {
                        results[*index] = Some(Err(PubSubError::broker("pipelined XADD", &e)));
                    }
                }
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every entry has a result"))
            .collect())
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        if spec.group.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "consumer group name is empty".into(),
            ));
        }
        // A dedicated connection: blocking reads must not stall publishers.
        let connection = self
            .client
            .get_connection_manager_with_config(manager_config())
            .await
            .map_err(|e| PubSubError::broker("opening a consumer connection", e))?;
        let consumer = RedisConsumer::open(connection, &self.config, spec).await?;
        Ok(Box::new(consumer))
    }

    fn kind(&self) -> &str {
        "redis-streams"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_map_to_ordered_positions() {
        for id in ["0-0", "1-0", "1526919030474-55", "1700000000000-4194303"] {
            assert_eq!(stream_id(position(id).unwrap()), id);
        }
        assert!(position("5-1").unwrap() > position("5-0").unwrap());
        assert!(position("6-0").unwrap() > position("5-99").unwrap());
        assert_eq!(stream_id_before(position("5-1").unwrap()), "5-0");
        assert_eq!(
            stream_id_before(position("5-0").unwrap()),
            format!("4-{}", u64::MAX)
        );
    }
}
