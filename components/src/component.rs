//! The traits a broker adapter implements. They are deliberately broker-shaped
//! (publish, pull, ack, nack); everything an application sees on top of them lives
//! in [`crate::runtime`].

use crate::capability::Capabilities;
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Which topics a consumer covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSelector {
    /// One topic.
    Single(String),
    /// Several named topics.
    List(Vec<String>),
    /// Every topic whose name matches a glob where `*` matches any run of characters,
    /// including topics created after the consumer opened.
    Pattern(String),
}

impl TopicSelector {
    /// True when the selector may cover more than one topic.
    pub fn is_multi_topic(&self) -> bool {
        !matches!(self, TopicSelector::Single(_))
    }

    /// True when `topic` is covered by this selector.
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicSelector::Single(t) => t == topic,
            TopicSelector::List(ts) => ts.iter().any(|t| t == topic),
            TopicSelector::Pattern(p) => glob_match(p, topic),
        }
    }

    /// A short description for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            TopicSelector::Single(t) => t.clone(),
            TopicSelector::List(ts) => ts.join(","),
            TopicSelector::Pattern(p) => format!("pattern {p}"),
        }
    }
}

/// Glob matching where `*` matches any (possibly empty) run of characters.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartPosition {
    /// From the oldest retained message.
    #[default]
    Earliest,
    /// Only messages published after the group comes into being: when its first
    /// member opens, or where `create_group` made it first, then or at the first
    /// member, as the broker keeps groups. Later members read on from the group's
    /// position.
    Latest,
}

/// What a consumer is opened for. Fields for native features are only read by
/// components that declare those features native.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub topics: TopicSelector,
    /// The consumer group: members of one group share the messages.
    pub group: String,
    pub start: StartPosition,
    /// For native dead-lettering: attempts before a message is dead-lettered.
    pub max_deliveries: Option<u32>,
    /// For native dead-lettering.
    pub dead_letter_topic: Option<String>,
    /// For native delayed delivery: hold each message until publish time + delay.
    pub receiver_delay: Option<Duration>,
}

impl ConsumerSpec {
    /// A consumer of one topic in one group, starting at the earliest message.
    pub fn new(topics: TopicSelector, group: impl Into<String>) -> Self {
        ConsumerSpec {
            topics,
            group: group.into(),
            start: StartPosition::Earliest,
            max_deliveries: None,
            dead_letter_topic: None,
            receiver_delay: None,
        }
    }
}

/// One partition-count change of a topic, as seen by a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionUpdate {
    /// Increases by one with each change; the first notification carries the current one.
    pub version: u64,
    pub partitions: u32,
}

/// A stream of partition updates for one topic.
///
/// A client that takes a notification but cannot apply it (its producers or
/// consumers could not be moved to the new count) says so with
/// [`PartitionWatch::reject`]; the component then sends the topic's current state
/// again within its discovery bound, as Pulsar's watchers re-send an update the
/// client answered with a failure.
pub struct PartitionWatch {
    receiver: mpsc::UnboundedReceiver<PartitionUpdate>,
    rejections: Option<mpsc::UnboundedSender<PartitionUpdate>>,
}

impl PartitionWatch {
    /// Wraps the receiving end a component feeds, for a component that does not
    /// re-send rejected notifications.
    pub fn new(receiver: mpsc::UnboundedReceiver<PartitionUpdate>) -> Self {
        PartitionWatch {
            receiver,
            rejections: None,
        }
    }

    /// Wraps the receiving end a component feeds; the component hears rejected
    /// notifications on `rejections` and answers each with the current state.
    pub fn with_rejections(
        receiver: mpsc::UnboundedReceiver<PartitionUpdate>,
        rejections: mpsc::UnboundedSender<PartitionUpdate>,
    ) -> Self {
        PartitionWatch {
            receiver,
            rejections: Some(rejections),
        }
    }

    /// Tells the component the client could not apply `update`: the current state
    /// is to be sent again. Does nothing on a component that does not re-send.
    pub fn reject(&self, update: PartitionUpdate) {
        if let Some(rejections) = &self.rejections {
            // A closed channel means the component stopped watching; `next` then
            // returns `None`, which is what the client sees.
            let _ = rejections.send(update);
        }
    }

    /// Splits the watch into its stream and its rejection channel (for wrappers
    /// that pass rejections on).
    pub fn into_parts(
        self,
    ) -> (
        mpsc::UnboundedReceiver<PartitionUpdate>,
        Option<mpsc::UnboundedSender<PartitionUpdate>>,
    ) {
        (self.receiver, self.rejections)
    }

    /// The next update, or `None` once the component stops watching.
    pub async fn next(&mut self) -> Option<PartitionUpdate> {
        self.receiver.recv().await
    }

    /// The next update if one arrives within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<PartitionUpdate> {
        tokio::time::timeout(wait, self.receiver.recv())
            .await
            .ok()
            .flatten()
    }
}

/// One notification of a watcher over several topics: the current state of every
/// watched topic (version and partition count), after a change of any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionsState {
    /// The topic whose change this notification reports (for the first notification,
    /// the first topic).
    pub changed: String,
    /// Every watched topic's latest update.
    pub topics: std::collections::BTreeMap<String, PartitionUpdate>,
}

/// A stream of [`PartitionsState`] notifications for several topics.
pub struct PartitionsWatch {
    receiver: mpsc::UnboundedReceiver<PartitionsState>,
}

impl PartitionsWatch {
    /// Wraps the receiving end a component feeds.
    pub fn new(receiver: mpsc::UnboundedReceiver<PartitionsState>) -> Self {
        PartitionsWatch { receiver }
    }

    /// The next notification if one arrives within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<PartitionsState> {
        tokio::time::timeout(wait, self.receiver.recv())
            .await
            .ok()
            .flatten()
    }
}

/// The most messages one receive takes, whatever its `max` asks: what a client
/// library can request at once (JetStream takes a batch size that fits an int, Redis a
/// COUNT that fits a long).
pub const RECEIVE_CAP: usize = 10_000;

/// How many messages a receive asked for at most `max` takes: `None` for none (a
/// receive of at most 0 returns at once, empty, taking nothing), else `max` up to
/// [`RECEIVE_CAP`].
pub fn receive_limit(max: usize) -> Option<usize> {
    (max > 0).then(|| max.min(RECEIVE_CAP))
}

/// A broker adapter. Usable as `Arc<dyn Component>`.
#[async_trait]
pub trait Component: Send + Sync + 'static {
    /// The component type, e.g. `in-memory` or `redis-streams`.
    fn kind(&self) -> &str;

    /// What the component does natively.
    fn capabilities(&self) -> Capabilities;

    /// The broker and its version, for the report's evidence.
    async fn broker_version(&self) -> Result<String>;

    /// The client library the component reaches its broker through, with its version
    /// (`librdkafka 2.12.1`), where a defect may be the library's: an expected failure
    /// can name it. `None` (the default): nothing worth naming.
    fn client_version(&self) -> Option<String> {
        None
    }

    /// What the report says of the broker: [`Component::broker_version`], with the
    /// client library's version where the component names one
    /// (`...; client librdkafka 2.12.1`).
    async fn version_text(&self) -> Result<String> {
        let broker = self.broker_version().await?;
        Ok(match self.client_version() {
            Some(client) => format!("{broker}; client {client}"),
            None => broker,
        })
    }

    /// What the broker lacks that the component needs (a command, a queue argument),
    /// checked before anything is certified: e.g. "needs Redis >= 6.2 (XAUTOCLAIM);
    /// the broker answered: ERR unknown command 'XAUTOCLAIM'". `None`: nothing lacking
    /// (the default, for components that need nothing a broker version may lack).
    async fn unmet_broker_requirement(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// Publishes one message; returns its id once the broker accepted it.
    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId>;

    /// Native bulk publish: one result per message, in order. Only called when the
    /// component declares `bulk_publish` native.
    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let _ = messages;
        Err(PubSubError::unsupported(self.kind(), "native bulk publish"))
    }

    /// Opens a consumer.
    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>>;

    /// Creates the consumer group `spec` describes without consuming, so that
    /// messages published from now on are kept for it. Brokers whose new groups see
    /// earlier messages (logs, streams, tables) need nothing; queue and session
    /// brokers declare the group's queue or session here.
    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        let _ = spec;
        Ok(())
    }

    /// Lets go of a topic its caller is done with (a benchmark's run): what the
    /// component holds of it in this process may be freed. A broker keeps what it
    /// stores; the default does nothing.
    async fn discard_topic(&self, topic: &str) -> Result<()> {
        let _ = topic;
        Ok(())
    }

    /// Creates a topic with the given partition count (no-op if it exists with it).
    async fn create_topic(&self, topic: &str, partitions: u32) -> Result<()> {
        let _ = (topic, partitions);
        Err(PubSubError::unsupported(self.kind(), "partitioned topics"))
    }

    /// Raises a topic's partition count while it is in use.
    async fn update_partitions(&self, topic: &str, partitions: u32) -> Result<()> {
        let _ = (topic, partitions);
        Err(PubSubError::unsupported(self.kind(), "partition updates"))
    }

    /// Watches a topic's partition count. Watching a topic that does not exist is an error.
    async fn watch_partitions(&self, topic: &str) -> Result<PartitionWatch> {
        let _ = topic;
        Err(PubSubError::unsupported(self.kind(), "partition watches"))
    }

    /// Watches several topics with one watcher: a notification once every topic's
    /// current state is known, then one per change, each carrying the state of every
    /// watched topic. The default merges one [`Component::watch_partitions`] per topic.
    async fn watch_partitions_of(&self, topics: &[String]) -> Result<PartitionsWatch> {
        if topics.is_empty() {
            return Err(PubSubError::InvalidRequest(
                "a partition watcher needs at least one topic".into(),
            ));
        }
        let (updates, mut merged) = mpsc::unbounded_channel::<(String, PartitionUpdate)>();
        for topic in topics {
            let mut watch = self.watch_partitions(topic).await?;
            let updates = updates.clone();
            let topic = topic.clone();
            tokio::spawn(async move {
                while let Some(update) = watch.next().await {
                    if updates.send((topic.clone(), update)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(updates);
        let (sender, receiver) = mpsc::unbounded_channel();
        let count = topics.len();
        tokio::spawn(async move {
            let mut state = std::collections::BTreeMap::new();
            while let Some((topic, update)) = merged.recv().await {
                state.insert(topic.clone(), update);
                if state.len() < count {
                    continue;
                }
                let notification = PartitionsState {
                    changed: topic,
                    topics: state.clone(),
                };
                if sender.send(notification).is_err() {
                    break;
                }
            }
        });
        Ok(PartitionsWatch::new(receiver))
    }
}

/// A consumer in a consumer group. Messages are redelivered until acknowledged.
#[async_trait]
pub trait Consumer: Send + Sync {
    /// Waits up to `wait` for at least one message; returns at most `max` (none, at
    /// once, for a `max` of 0: see [`receive_limit`]). A zero `wait` returns at once
    /// with what is ready (possibly nothing): the runtime polls with short waits and
    /// must not be blocked. A receive that returns empty, times
    /// out or is cancelled loses nothing: its messages stay deliverable.
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>>;

    /// Native bulk receive: a batch of one topic with at most `max` messages, handed
    /// over once full or once `max_await` has passed since its first message arrived;
    /// an empty vector when nothing arrived within `max_await`. Only called when the
    /// component declares `bulk_subscribe` native.
    async fn receive_batch(&self, max: usize, max_await: Duration) -> Result<Vec<ReceivedMessage>> {
        let _ = (max, max_await);
        Err(PubSubError::unsupported("consumer", "native bulk receive"))
    }

    /// Acknowledges a message on its owner topic.
    async fn ack(&self, id: &MessageId) -> Result<()>;

    /// Asks for a redelivery of this message no sooner than `delay` from now.
    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()>;

    /// Hands a received message back to the broker until `delay` has passed, without
    /// counting a delivery attempt where the broker allows it (the runtime defers
    /// delayed messages it cannot hold). Defaults to [`Consumer::nack`].
    async fn defer(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.nack(id, delay).await
    }

    /// Defers several messages at once (the runtime hands back every delayed message
    /// beyond what it holds after each receive). Each is deferred or stays with the
    /// member as it was; the first error is returned after trying them all. The
    /// default defers them one after another; a component whose deferral waits on the
    /// broker (a confirm, a disk write) should pipeline them.
    async fn defer_many(&self, deferrals: &[(MessageId, Duration)]) -> Result<()> {
        let mut first_error = None;
        for (id, delay) in deferrals {
            if let Err(e) = self.defer(id, *delay).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Keeps received, unsettled messages with this member for another lease (the
    /// runtime holds delayed messages longer than the lease). Only called where the
    /// component declares a lease. The default refuses with `Unsupported`: the runtime
    /// then holds no delayed message longer than half the lease, and defers the rest
    /// ([`Consumer::defer`]) until nearly due. A component whose member keeps what it
    /// received for as long as it lives answers `Ok` without doing anything.
    async fn extend_lease(&self, ids: &[MessageId]) -> Result<()> {
        let _ = ids;
        Err(PubSubError::unsupported("consumer", "extending a lease"))
    }

    /// Of `ids` (received, unsettled), those the member has handed back to its group
    /// since it received them: a rebalance gave their partition to another member, and
    /// copies of them go there. The runtime then drops what it still holds of them (a
    /// delayed message, an entry of a batch being filled) rather than deliver a message
    /// a second member gets too. The default: none, for a member that keeps what it
    /// received until it settles it or closes.
    async fn handed_back(&self, ids: &[MessageId]) -> Result<Vec<MessageId>> {
        let _ = ids;
        Ok(Vec::new())
    }

    /// Native dead-lettering: gives up on the message, routing it to the dead-letter
    /// topic with `reason`. Only called when the component declares `dead_letter` native.
    async fn reject(&self, id: &MessageId, reason: &str) -> Result<()> {
        let _ = (id, reason);
        Err(PubSubError::unsupported(
            "consumer",
            "native dead-lettering",
        ))
    }

    /// Repositions the owner topic of `id` so that `id` is the next message delivered.
    async fn seek(&self, id: &MessageId) -> Result<()> {
        let _ = id;
        Err(PubSubError::unsupported("consumer", "seek"))
    }

    /// Repositions every covered topic: to its oldest retained message (`Earliest`) or
    /// past its last one (`Latest`). The default seeks each topic that has messages
    /// through [`Consumer::seek`], using [`Consumer::last_message_ids`].
    async fn seek_all(&self, position: StartPosition) -> Result<()> {
        for last in self.last_message_ids().await? {
            let target = match position {
                StartPosition::Earliest => 0,
                StartPosition::Latest => last.position + 1,
            };
            self.seek(&MessageId {
                position: target,
                ..last
            })
            .await?;
        }
        Ok(())
    }

    /// Acknowledges several messages, each on its owner topic. Every id is checked
    /// before any is acknowledged: one the consumer may not settle (another topic, no
    /// owner topic on a multi-topic consumer) refuses the whole call.
    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        let _ = ids;
        Err(PubSubError::unsupported(
            "consumer",
            "acknowledging several ids",
        ))
    }

    /// Acknowledges, on the owner topic (and partition) of `id`, every message this
    /// member received up to and including `id`; other topics are untouched. Refused
    /// like `ack` for ids the consumer may not settle.
    async fn ack_cumulative(&self, id: &MessageId) -> Result<()> {
        let _ = id;
        Err(PubSubError::unsupported(
            "consumer",
            "cumulative acknowledgement",
        ))
    }

    /// The id of the last message of each owner topic (and partition) covered.
    async fn last_message_ids(&self) -> Result<Vec<MessageId>> {
        Err(PubSubError::unsupported("consumer", "last message ids"))
    }

    /// Leaves the group; unacknowledged messages become available to other members.
    /// After it returns nothing more is received through this consumer (receives
    /// answer `PubSubError::Closed`), and closing twice is not an error.
    async fn close(&self) -> Result<()>;
}

/// The owner topic of `id` for a consumer over `topics`: refuses (NotAllowed) ids of
/// topics it does not cover, and ids without an owner topic on a multi-topic consumer.
pub fn owner_topic(id: &MessageId, topics: &TopicSelector) -> Result<String> {
    match (&id.topic, topics) {
        (Some(topic), selector) if selector.matches(topic) => Ok(topic.clone()),
        (Some(topic), selector) => Err(PubSubError::NotAllowed(format!(
            "message id {id} belongs to topic '{topic}', which this consumer ({}) does not subscribe",
            selector.describe()
        ))),
        (None, TopicSelector::Single(topic)) => Ok(topic.clone()),
        (None, selector) => Err(PubSubError::NotAllowed(format!(
            "message id {id} names no owner topic; a multi-topic consumer ({}) needs topic-qualified ids",
            selector.describe()
        ))),
    }
}

/// Refuses work on a closed consumer with `Closed` ("<consumer> was closed", the
/// consumer as `consumer` describes it).
pub(crate) fn ensure_open(closed: &AtomicBool, consumer: impl FnOnce() -> String) -> Result<()> {
    if closed.load(Ordering::Acquire) {
        return Err(PubSubError::Closed(format!("{} was closed", consumer())));
    }
    Ok(())
}

/// A group member as errors name it: "consumer of <topics> in group '<group>'".
pub(crate) fn member_of(spec: &ConsumerSpec) -> String {
    format!(
        "consumer of {} in group '{}'",
        spec.topics.describe(),
        spec.group
    )
}

/// [`Consumer::ack_many`] for components that acknowledge one id at a time: checks
/// every owner topic first, then acknowledges each.
pub async fn ack_each(
    consumer: &dyn Consumer,
    ids: &[MessageId],
    topics: &TopicSelector,
) -> Result<()> {
    for id in ids {
        owner_topic(id, topics)?;
    }
    for id in ids {
        consumer.ack(id).await?;
    }
    Ok(())
}

/// Acknowledges each id after checking them all, the acknowledgements sent together
/// rather than one round trip after another: for clients whose ack is a message of
/// its own (AMQP basic.ack, a JetStream ack).
pub async fn ack_together(
    consumer: &dyn Consumer,
    ids: &[MessageId],
    topics: &TopicSelector,
) -> Result<()> {
    for id in ids {
        owner_topic(id, topics)?;
    }
    futures::future::try_join_all(ids.iter().map(|id| consumer.ack(id)))
        .await
        .map(drop)
}

/// A stable 64-bit FNV-1a hash (the same on every run and platform), for key routing
/// and for short names derived from longer ones.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// A random message position, for brokers that have no positions of their own.
pub fn random_position() -> u64 {
    (uuid::Uuid::new_v4().as_u128() as u64) >> 1
}

/// Milliseconds since the Unix epoch (0 before it), for timestamps in headers.
pub fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Refuses a payload over the component's declared maximum, as its broker would.
pub fn check_message_size(message: &OutgoingMessage, max_bytes: usize) -> Result<()> {
    if message.payload.len() > max_bytes {
        return Err(PubSubError::InvalidRequest(format!(
            "message of {} bytes for topic '{}' exceeds the maximum message size of {max_bytes} bytes",
            message.payload.len(),
            message.topic,
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::glob_match;
    use rstest::rstest;

    #[rstest]
    #[case("orders.*", "orders.eu", true)]
    #[case("orders.*", "orders.", true)]
    #[case("orders.*", "order.eu", false)]
    #[case("*.eu", "orders.eu", true)]
    #[case("a*b*c", "axxbyyc", true)]
    #[case("a*b*c", "axxbyy", false)]
    #[case("exact", "exact", true)]
    #[case("exact", "exactly", false)]
    #[case("a*a", "a", false)]
    fn glob_matches(#[case] pattern: &str, #[case] text: &str, #[case] expected: bool) {
        assert_eq!(glob_match(pattern, text), expected);
    }
}
