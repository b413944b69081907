//! A member of a consumer group on Redis Streams: reads new entries with XREADGROUP,
//! claims what is due again (released, negatively acknowledged, or left by a dead
//! member) with XAUTOCLAIM, acknowledges with XACK, and defers by setting a pending
//! entry's idle time (with a due time beside it when the claim idle time cannot hold
//! the delay).

use super::{broker, position, stream_id, stream_id_before, RedisConfig};
use crate::component::{
    ensure_open, millis_since_epoch, owner_topic, Consumer, ConsumerSpec, StartPosition,
    TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, ReceivedMessage};
use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::Value;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    }
}

fn items(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// A member of a consumer group, on a connection of its own.
pub(super) struct RedisConsumer {
    connection: ConnectionManager,
    prefix: String,
    claim_idle: Duration,
    name: String,
    spec: ConsumerSpec,
    /// Streams whose group exists, by topic.
    known: std::sync::Mutex<BTreeSet<String>>,
    closed: AtomicBool,
}

impl RedisConsumer {
    /// A member of `spec`'s group on `connection`, the group created on each stream
    /// it covers.
    pub(super) async fn open(
        connection: ConnectionManager,
        config: &RedisConfig,
        spec: ConsumerSpec,
    ) -> Result<Self> {
        let consumer = RedisConsumer {
            connection,
            prefix: config.key_prefix.clone(),
            claim_idle: config.claim_idle,
            name: format!("c-{}", uuid::Uuid::new_v4().simple()),
            spec,
            known: std::sync::Mutex::new(BTreeSet::new()),
            closed: AtomicBool::new(false),
        };
        consumer.refresh_streams().await?;
        Ok(consumer)
    }

    fn key(&self, topic: &str) -> String {
        format!("{}:{topic}", self.prefix)
    }

    fn ensure_open(&self) -> Result<()> {
        ensure_open(&self.closed, || format!("consumer {}", self.name))
    }

    fn topics(&self) -> Vec<String> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Finds the streams the selector covers and creates the group on each.
    async fn refresh_streams(&self) -> Result<()> {
        let mut conn = self.connection.clone();
        let topics: Vec<String> = match &self.spec.topics {
            TopicSelector::Single(t) => vec![t.clone()],
            TopicSelector::List(ts) => ts.clone(),
            TopicSelector::Pattern(p) => {
                let escaped: String = p
                    .chars()
                    .flat_map(|c| {
                        if matches!(c, '?' | '[' | ']' | '\\') {
                            vec!['\\', c]
                        } else {
                            vec![c]
                        }
                    })
                    .collect();
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}:{escaped}", self.prefix))
                    .query_async(&mut conn)
                    .await
                    .map_err(broker("listing streams for a pattern"))?;
                let prefix = format!("{}:", self.prefix);
                keys.into_iter()
                    .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                    .collect()
            }
        };
        let new: Vec<String> = {
            let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            topics.into_iter().filter(|t| !known.contains(t)).collect()
        };
        for topic in new {
            let start = match self.spec.start {
                StartPosition::Earliest => "0",
                StartPosition::Latest => "$",
            };
            let created: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(self.key(&topic))
                .arg(&self.spec.group)
                .arg(start)
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(_) => {}
                Err(e) if e.to_string().contains("BUSYGROUP") => {}
                Err(e) => return Err(PubSubError::broker(format!("creating group on {topic}"), e)),
            }
            self.known
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(topic);
        }
        Ok(())
    }

    fn entry(&self, topic: &str, entry: &Value, attempt: u32) -> Result<Option<ReceivedMessage>> {
        let parts = items(entry);
        let (Some(id), Some(fields)) = (parts.first().and_then(text), parts.get(1)) else {
            return Ok(None);
        };
        let fields = items(fields);
        if fields.is_empty() {
            return Ok(None); // deleted entry
        }
        let mut message = ReceivedMessage {
            id: MessageId::new(topic, None, position(&id)?),
            payload: Vec::new(),
            content_type: None,
            metadata: Metadata::new(),
            partition_key: None,
            attempt,
            publish_time: UNIX_EPOCH + Duration::from_millis(position(&id)? >> 22),
        };
        for pair in fields.chunks(2) {
            let (Some(name), Some(value)) = (pair.first().and_then(text), pair.get(1)) else {
                continue;
            };
            match name.as_str() {
                "payload" => message.payload = bytes(value),
                "ct" => message.content_type = text(value),
                "md" => {
                    message.metadata = serde_json::from_slice(&bytes(value)).unwrap_or_default()
                }
                "pk" => message.partition_key = text(value),
                _ => {}
            }
        }
        Ok(Some(message))
    }

    /// Claims entries idle past `claim_idle` (released, negatively acknowledged or
    /// left by a dead member), with their delivery counts.
    async fn claim(&self, max: usize, only: Option<&str>) -> Result<Vec<ReceivedMessage>> {
        let mut conn = self.connection.clone();
        let mut out = Vec::new();
        for topic in self.topics() {
            if only.is_some_and(|o| o != topic) || out.len() >= max {
                continue;
            }
            let reply: Value = redis::cmd("XAUTOCLAIM")
                .arg(self.key(&topic))
                .arg(&self.spec.group)
                .arg(&self.name)
                .arg(self.claim_idle.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(max - out.len())
                .query_async(&mut conn)
                .await
                .map_err(broker("claiming idle entries"))?;
            // Each claimed entry with its id, its delivery count and due time read for
            // all of them in one round trip.
            let claimed: Vec<(String, &Value)> = items(items(&reply).get(1).unwrap_or(&Value::Nil))
                .iter()
                .filter_map(|entry| Some((items(entry).first().and_then(text)?, entry)))
                .collect();
            if claimed.is_empty() {
                continue;
            }
            let mut lookups = redis::pipe();
            for (id, _) in &claimed {
                lookups
                    .cmd("XPENDING")
                    .arg(self.key(&topic))
                    .arg(&self.spec.group)
                    .arg(id)
                    .arg(id)
                    .arg(1)
                    .cmd("HGET")
                    .arg(self.due_key(&topic))
                    .arg(id);
            }
            let answers: Vec<Value> = lookups
                .query_async(&mut conn)
                .await
                .map_err(broker("reading delivery counts and due times"))?;
            for ((id, entry), answer) in claimed.iter().zip(answers.chunks(2)) {
                let attempt: u32 = items(items(&answer[0]).first().unwrap_or(&Value::Nil))
                    .get(3)
                    .and_then(text)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(2);
                let due = answer.get(1).and_then(text).and_then(|d| d.parse().ok());
                if self.still_deferred(&topic, id, attempt, due).await? {
                    continue;
                }
                if let Some(message) = self.entry(&topic, entry, attempt)? {
                    out.push(message);
                }
            }
        }
        Ok(out)
    }

    /// The hash holding due times of entries negatively acknowledged with a delay
    /// longer than the claim idle time (which alone cannot hold them that long).
    fn due_key(&self, topic: &str) -> String {
        // Not under `{prefix}:`, where pattern subscriptions look for streams.
        format!("{}-due:{}:{topic}", self.prefix, self.spec.group)
    }

    /// For an entry just claimed with its recorded `due` time: when it was negatively
    /// acknowledged with a delay beyond the claim idle time and is not due yet, hands
    /// it back (idle again, its delivery count as it was) and answers true; else
    /// forgets its due time.
    async fn still_deferred(
        &self,
        topic: &str,
        id: &str,
        attempt: u32,
        due: Option<u64>,
    ) -> Result<bool> {
        let mut conn = self.connection.clone();
        let Some(due) = due else {
            return Ok(false);
        };
        let now = millis_since_epoch(SystemTime::now());
        if due <= now {
            redis::cmd("HDEL")
                .arg(self.due_key(topic))
                .arg(id)
                .query_async::<Value>(&mut conn)
                .await
                .map_err(broker("clearing a redelivery due time"))?;
            return Ok(false);
        }
        let remaining = Duration::from_millis(due - now);
        let idle = self.claim_idle.saturating_sub(remaining).as_millis() as u64;
        redis::cmd("XCLAIM")
            .arg(self.key(topic))
            .arg(&self.spec.group)
            .arg(&self.name)
            .arg(0)
            .arg(id)
            .arg("IDLE")
            .arg(idle)
            .arg("RETRYCOUNT")
            .arg(attempt.saturating_sub(1))
            .arg("JUSTID")
            .query_async::<Value>(&mut conn)
            .await
            .map_err(broker("deferring an entry again"))?;
        Ok(true)
    }

    /// Reads new entries, blocking up to `wait`.
    async fn read_new(
        &self,
        max: usize,
        wait: Duration,
        only: Option<&str>,
    ) -> Result<Vec<ReceivedMessage>> {
        let topics: Vec<String> = self
            .topics()
            .into_iter()
            .filter(|t| only.is_none_or(|o| o == t))
            .collect();
        if topics.is_empty() {
            tokio::time::sleep(wait.min(Duration::from_millis(100))).await;
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.spec.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(max);
        let block = wait.as_millis() as u64;
        if block > 0 {
            cmd.arg("BLOCK").arg(block);
        }
        cmd.arg("STREAMS");
        for topic in &topics {
            cmd.arg(self.key(topic));
        }
        for _ in &topics {
            cmd.arg(">");
        }
        let mut conn = self.connection.clone();
        let reply: Value = cmd
            .query_async(&mut conn)
            .await
            .map_err(broker("reading with XREADGROUP"))?;
        let prefix = format!("{}:", self.prefix);
        let mut out = Vec::new();
        let streams: Vec<(String, Value)> = match &reply {
            Value::Map(pairs) => pairs
                .iter()
                .map(|(k, v)| (text(k).unwrap_or_default(), v.clone()))
                .collect(),
            other => items(other)
                .iter()
                .filter_map(|s| {
                    let parts = items(s);
                    Some((text(parts.first()?)?, parts.get(1)?.clone()))
                })
                .collect(),
        };
        for (key, entries) in streams {
            let topic = key.strip_prefix(&prefix).unwrap_or(&key).to_string();
            for entry in items(&entries) {
                if let Some(message) = self.entry(&topic, entry, 1)? {
                    out.push(message);
                }
            }
        }
        Ok(out)
    }

    async fn take(
        &self,
        max: usize,
        wait: Duration,
        only: Option<&str>,
    ) -> Result<Vec<ReceivedMessage>> {
        self.ensure_open()?;
        if matches!(self.spec.topics, TopicSelector::Pattern(_)) {
            self.refresh_streams().await?;
        }
        let claimed = self.claim(max, only).await?;
        if !claimed.is_empty() {
            return Ok(claimed);
        }
        // Block in short steps so that due redeliveries are not held up.
        self.read_new(max, wait.min(Duration::from_millis(100)), only)
            .await
    }

    /// Checks that this consumer may settle `id`, and names its stream.
    fn owned(&self, id: &MessageId) -> Result<String> {
        owner_topic(id, &self.spec.topics).map(|topic| self.key(&topic))
    }

    /// The stream entry ids of `ids` by stream key; refused whole if one is not owned.
    fn by_stream(
        &self,
        ids: &[MessageId],
    ) -> Result<std::collections::BTreeMap<String, Vec<String>>> {
        let mut by_stream: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for id in ids {
            by_stream
                .entry(self.owned(id)?)
                .or_default()
                .push(stream_id(id.position));
        }
        Ok(by_stream)
    }

    /// Hands back entries read but never handed to the application: claimable at
    /// once, their delivery count back to what it was before the read that took them
    /// (`attempt` less one), so that the claim that delivers them counts that attempt
    /// again, not a first one for a redelivery nor one more for the read.
    async fn unread(&self, key: &str, ids: &[String], attempt: u32) -> Result<()> {
        self.xclaim(key, ids, Duration::ZERO, Some(attempt.saturating_sub(1)))
            .await
            .map_err(broker("handing back entries of another topic"))
    }

    /// The ids of this member's pending entries of the stream `key` from `start` to
    /// `end` (stream ids, `-` and `+` for either end), at most `count` of them.
    async fn pending_here(
        &self,
        key: &str,
        start: &str,
        end: &str,
        count: usize,
    ) -> Result<Vec<String>> {
        let mut conn = self.connection.clone();
        let pending: Value = redis::cmd("XPENDING")
            .arg(key)
            .arg(&self.spec.group)
            .arg(start)
            .arg(end)
            .arg(count)
            .arg(&self.name)
            .query_async(&mut conn)
            .await
            .map_err(broker("listing pending entries"))?;
        Ok(items(&pending)
            .iter()
            .filter_map(|entry| items(entry).first().and_then(text))
            .collect())
    }

    /// Makes pending entries claimable after `after` by setting their idle time.
    async fn release(&self, key: &str, ids: &[String], after: Duration) -> Result<()> {
        self.xclaim(key, ids, after, None)
            .await
            .map_err(broker("releasing entries"))
    }

    /// Keeps `ids` with this member, claimable by any after `after`; with
    /// `retry_count`, their delivery count set to it (else kept as it is).
    async fn xclaim(
        &self,
        key: &str,
        ids: &[String],
        after: Duration,
        retry_count: Option<u32>,
    ) -> std::result::Result<(), redis::RedisError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(key).arg(&self.spec.group).arg(&self.name).arg(0);
        for id in ids {
            cmd.arg(id);
        }
        cmd.arg("IDLE")
            .arg(self.claim_idle.saturating_sub(after).as_millis() as u64);
        if let Some(count) = retry_count {
            cmd.arg("RETRYCOUNT").arg(count);
        }
        cmd.arg("JUSTID");
        let mut conn = self.connection.clone();
        cmd.query_async::<Value>(&mut conn).await.map(|_| ())
    }
}

#[async_trait]
impl Consumer for RedisConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let got = self.take(max.max(1), left, None).await?;
            if !got.is_empty() || left.is_zero() {
                return Ok(got);
            }
        }
    }

    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };

        let mut batch = self.receive(max, max_await).await?;
        let Some(first) = batch.first() else {
            return Ok(batch);
        };
        let topic = first.topic().to_string();
        // Entries of other topics go back at once, for the next batch, each with the
        // delivery count it had.
        let (same, other): (Vec<_>, Vec<_>) = batch.drain(..).partition(|m| m.topic() == topic);
        let mut by_attempt: std::collections::BTreeMap<u32, Vec<MessageId>> = Default::default();
        for message in other {
            by_attempt
                .entry(message.attempt)
                .or_default()
                .push(message.id);
        }
        for (attempt, ids) in by_attempt {
            for (key, entries) in self.by_stream(&ids)? {
                self.unread(&key, &entries, attempt).await?;
            }
        }
        batch = same;
        let since_arrival = SystemTime::now()
            .duration_since(batch[0].publish_time)
            .unwrap_or_default();
        let deadline = Instant::now() + max_await.saturating_sub(since_arrival);
        while batch.len() < max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            batch.extend(self.take(max - batch.len(), left, Some(&topic)).await?);
        }
        Ok(batch)
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        // One XACK per stream, all in one pipeline; every id is checked first.
        let by_stream = self.by_stream(ids)?;
        if by_stream.is_empty() {
            return Ok(());
        }
        let mut pipeline = redis::pipe();
        for (key, entries) in &by_stream {
            pipeline
                .cmd("XACK")
                .arg(key)
                .arg(&self.spec.group)
                .arg(entries)
                .ignore();
        }
        let mut conn = self.connection.clone();
        pipeline
            .query_async::<()>(&mut conn)
            .await
            .map_err(broker("acknowledging with XACK"))?;
        Ok(())
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.ack_many(std::slice::from_ref(id)).await
    }

    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let key = self.owned(id)?;
        let mut conn = self.connection.clone();
        // This member's pending entries up to `id`, in pages.
        let end = stream_id(id.position);
        let mut start = "-".to_string();
        loop {
            let entries = self.pending_here(&key, &start, &end, 500).await?;
            let Some(last) = entries.last().cloned() else {
                return Ok(());
            };
            let mut ack = redis::cmd("XACK");
            ack.arg(&key).arg(&self.spec.group);
            for entry in &entries {
                ack.arg(entry);
            }
            ack.query_async::<Value>(&mut conn)
                .await
                .map_err(broker("acknowledging with XACK"))?;
            if entries.len() < 500 {
                return Ok(());
            }
            start = format!("({last}");
        }
    }

    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        self.ensure_open()?;
        let by_stream = self.by_stream(ids)?;
        for (key, entries) in by_stream {
            // Idle time back to zero: no member may claim them for another lease.
            self.release(&key, &entries, self.claim_idle).await?;
        }
        Ok(())
    }

    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        self.ensure_open()?;
        // Each entry gets a due time when the idle time cannot hold its delay (then
        // `claim` hands it back until due), then the idle time; all in one pipeline:
        // the runtime defers every delayed message beyond what it holds after each
        // receive, and hundreds of round trips one after another starve what is due
        // meanwhile.
        let now = SystemTime::now();
        let mut pipeline = redis::pipe();
        let mut first_error = None;
        let mut queued = 0;
        for (id, delay) in deferrals {
            let (key, topic) = match (self.owned(id), owner_topic(id, &self.spec.topics)) {
                (Ok(key), Ok(topic)) => (key, topic),
                (Err(e), _) | (_, Err(e)) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            queued += 1;
            let entry = stream_id(id.position);
            if *delay > self.claim_idle {
                pipeline
                    .cmd("HSET")
                    .arg(self.due_key(&topic))
                    .arg(&entry)
                    .arg(millis_since_epoch(now + *delay))
                    .ignore();
            }
            pipeline
                .cmd("XCLAIM")
                .arg(&key)
                .arg(&self.spec.group)
                .arg(&self.name)
                .arg(0)
                .arg(&entry)
                .arg("IDLE")
                .arg(self.claim_idle.saturating_sub(*delay).as_millis() as u64)
                .arg("JUSTID")
                .ignore();
        }
        // Redis refuses an empty pipeline: nothing to defer (an empty list, or every
        // id refused) is no round trip.
        if queued > 0 {
            let mut conn = self.connection.clone();
            pipeline
                .query_async::<()>(&mut conn)
                .await
                .map_err(broker("deferring entries"))?;
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        // A due time when the idle time cannot hold the delay, then the idle time.
        self.defer_many(&[(id.clone(), delay)]).await
    }

    async fn seek(&self, id: &MessageId) -> Result<()> {
        self.ensure_open()?;
        let key = self.owned(id)?;
        let mut conn = self.connection.clone();
        redis::cmd("XGROUP")
            .arg("SETID")
            .arg(key)
            .arg(&self.spec.group)
            .arg(stream_id_before(id.position))
            .query_async::<Value>(&mut conn)
            .await
            .map_err(broker("seeking with XGROUP SETID"))?;
        Ok(())
    }

    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        self.ensure_open()?;
        let mut conn = self.connection.clone();
        let mut out = Vec::new();
        for topic in self.topics() {
            let reply: Value = redis::cmd("XREVRANGE")
                .arg(self.key(&topic))
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut conn)
                .await
                .map_err(broker("reading the last entry"))?;
            if let Some(id) = items(&reply)
                .first()
                .and_then(|e| items(e).first())
                .and_then(text)
            {
                out.push(MessageId::new(topic, None, position(&id)?));
            }
        }
        Ok(out)
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Hand what this member still holds back to the group at once.
        for topic in self.topics() {
            let key = self.key(&topic);
            let ids = self.pending_here(&key, "-", "+", 10_000).await?;
            self.release(&key, &ids, Duration::ZERO).await?;
        }
        Ok(())
    }
}
