//! MQTT 5 component (`rumqttc`, tested against Mosquitto): QoS 1 publishes whose
//! PUBACKs are mapped back to each request and bulk entry, manual acks, user
//! properties for metadata, the content-type property, shared subscriptions
//! (`$share/<group>/<topic>`) for consumer groups, and persistent sessions so a group
//! keeps what is published while none of its members is connected.
//!
//! What follows from MQTT itself, declared in the capabilities:
//! * MQTT has no negative ack and a broker redelivers only when a session resumes, so
//!   a nack keeps the message unacknowledged and the consumer hands it out again
//!   itself once the delay has passed (redelivery is local to the consumer).
//! * A broker drops a message whose expiry interval passed without dead-lettering
//!   it, which the contract requires, so TTL is emulated by the runtime; the expiry
//!   interval is still set (TTL plus `expiryGraceMs`) so the broker does not keep
//!   expired messages for ever.
//! * One member per group and process holds the group's persistent session (the
//!   anchor); further members use clean sessions. When the anchor leaves while others
//!   stay, one of them resumes its session, so what it held comes back (see
//!   [`members`]).
//! * Patterns subscribe the deepest literal level with `#` and are filtered here.

mod members;
mod records;
mod settings;

pub use settings::MqttConfig;

use crate::capability::Capabilities;
use crate::component::{
    check_message_size, millis_since_epoch, owner_topic, random_position, stable_hash, Component,
    Consumer, ConsumerSpec, TopicSelector,
};
use crate::error::{PubSubError, Result};
use crate::message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
use async_trait::async_trait;
use records::RetainedRecords;
use rumqttc::v5::mqttbytes::v5::{
    Filter, Packet, PubAckReason, Publish, PublishProperties, SubscribeReasonCode,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::Outgoing;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// User properties the component owns; metadata entries are `m:<key>`.
const PROP_ID: &str = "i:id";
const PROP_PUBLISHED: &str = "i:published-ms";
const PROP_KEY: &str = "i:partition-key";
const METADATA_PREFIX: &str = "m:";
/// The prefix of a metadata entry whose key or value holds a character an MQTT
/// UTF-8 string must not carry (control characters: Mosquitto closes the connection
/// of a client that sends one): key and value are percent-encoded ([`escape`]).
const ESCAPED_METADATA_PREFIX: &str = "e:";

/// Whether MQTT 5 strings refuse `c` (MQTT 5.0 1.5.4: the null character MUST NOT
/// appear, control characters SHOULD NOT, and brokers close the connection on them).
fn mqtt_unsafe(c: char) -> bool {
    matches!(u32::from(c), 0x00..=0x1F | 0x7F..=0x9F)
}

/// `text` with `%` and every [`mqtt_unsafe`] character percent-encoded (per UTF-8
/// byte), so that it travels as an MQTT string and [`unescape`] gives it back.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' || mqtt_unsafe(c) {
            let mut bytes = [0u8; 4];
            for byte in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The text [`escape`] encoded.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The user property carrying metadata entry `key`: `value`.
fn metadata_property(key: &str, value: &str) -> (String, String) {
    if key.chars().chain(value.chars()).any(mqtt_unsafe) {
        (
            format!("{ESCAPED_METADATA_PREFIX}{}", escape(key)),
            escape(value),
        )
    } else {
        (format!("{METADATA_PREFIX}{key}"), value.to_string())
    }
}
/// Requests queued towards one connection's event loop.
const REQUEST_CAPACITY: usize = 1024;
/// QoS 1 messages in flight per connection, each way.
const IN_FLIGHT: u16 = 1000;
/// Room for a packet's topic and properties (metadata) beyond its payload.
const PACKET_OVERHEAD: usize = 256 * 1024;
/// How long connecting and subscribing may take.
const SETUP_BOUND: Duration = Duration::from_secs(10);

fn mqtt<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> PubSubError + '_ {
    move |e| PubSubError::broker(context, e)
}

fn split_host(host: &str) -> Result<(String, u16)> {
    let (name, port) = host
        .rsplit_once(':')
        .ok_or_else(|| PubSubError::InvalidRequest(format!("expected host:port, got '{host}'")))?;
    let port = port
        .parse()
        .map_err(|_| PubSubError::InvalidRequest(format!("bad port in '{host}'")))?;
    Ok((name.to_string(), port))
}

pub(crate) fn options(
    config: &MqttConfig,
    client_id: &str,
    session: Option<Duration>,
) -> Result<MqttOptions> {
    let (host, port) = split_host(&config.host)?;
    let mut options = MqttOptions::new(client_id, host, port);
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_manual_acks(true)
        .set_receive_maximum(Some(IN_FLIGHT))
        .set_outgoing_inflight_upper_limit(IN_FLIGHT)
        .set_max_packet_size(Some(
            (config.max_message_bytes + PACKET_OVERHEAD).min(u32::MAX as usize) as u32,
        ))
        .set_network_options({
            // PUBACKs and acks are small packets; do not let Nagle hold them back.
            let mut network = rumqttc::NetworkOptions::new();
            network.set_tcp_nodelay(true);
            network
        })
        .set_clean_start(session.is_none())
        .set_session_expiry_interval(session.map(|s| s.as_secs().min(u32::MAX as u64) as u32));
    Ok(options)
}

/// Publishes waiting for their PUBACK. The event loop reports each publish's packet
/// id in request order, so a FIFO of waiters maps packet ids back to requests.
#[derive(Default)]
struct Acks {
    queued: VecDeque<oneshot::Sender<Result<()>>>,
    in_flight: HashMap<u16, oneshot::Sender<Result<()>>>,
}

impl Acks {
    fn sent(&mut self, pkid: u16) {
        if let Some(waiter) = self.queued.pop_front() {
            self.in_flight.insert(pkid, waiter);
        }
    }

    fn acked(&mut self, pkid: u16, reason: PubAckReason) {
        if let Some(waiter) = self.in_flight.remove(&pkid) {
            let result = match reason {
                PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Ok(()),
                other => Err(PubSubError::broker(
                    "publishing",
                    format!("the broker refused the message: {other:?}"),
                )),
            };
            let _ = waiter.send(result);
        }
    }

    fn fail_all(&mut self, why: &str) {
        for waiter in self
            .queued
            .drain(..)
            .chain(self.in_flight.drain().map(|(_, w)| w))
        {
            let _ = waiter.send(Err(PubSubError::broker("publishing", why)));
        }
    }
}

/// The MQTT 5 component.
pub struct Mqtt5 {
    config: MqttConfig,
    client: AsyncClient,
    acks: Arc<Mutex<Acks>>,
    /// Keeps queueing a waiter and handing its publish over in the same order.
    send_order: tokio::sync::Mutex<()>,
    /// The members of each group in this process, and who holds its persistent
    /// session.
    groups: members::Groups,
    publisher: JoinHandle<()>,
    /// Partition records, connected on first use.
    records: tokio::sync::OnceCell<RetainedRecords>,
}

impl Drop for Mqtt5 {
    fn drop(&mut self) {
        self.publisher.abort();
    }
}

impl Mqtt5 {
    /// Connects the publishing session (and waits for the broker to accept it).
    pub async fn connect(config: MqttConfig) -> Result<Self> {
        let client_id = format!("pcs-pub-{}", uuid::Uuid::new_v4().simple());
        let (client, mut events) =
            AsyncClient::new(options(&config, &client_id, None)?, REQUEST_CAPACITY);
        let connected = tokio::time::timeout(SETUP_BOUND, async {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
            }
        })
        .await;
        let context = format!("connecting to MQTT at {}", config.host);
        match connected {
            Err(_) => return Err(PubSubError::broker(context, "no CONNACK within 10 s")),
            Ok(Err(e)) => return Err(PubSubError::broker(context, e)),
            Ok(Ok(())) => {}
        }
        let acks = Arc::new(Mutex::new(Acks::default()));
        let publisher = tokio::spawn(run_publisher(events, acks.clone()));
        Ok(Mqtt5 {
            config,
            client,
            acks,
            send_order: tokio::sync::Mutex::new(()),
            groups: members::Groups::default(),
            publisher,
            records: tokio::sync::OnceCell::new(),
        })
    }

    fn broker_topic(&self, topic: &str) -> String {
        format!("{}{topic}", self.config.topic_prefix)
    }

    /// Hands one publish to the event loop; the receiver resolves on its PUBACK.
    async fn send(
        &self,
        message: &OutgoingMessage,
    ) -> Result<(MessageId, oneshot::Receiver<Result<()>>)> {
        check_message_size(message, self.config.max_message_bytes)?;
        let position = random_position();
        let mut user_properties = vec![
            (PROP_ID.to_string(), position.to_string()),
            (
                PROP_PUBLISHED.to_string(),
                millis_since_epoch(SystemTime::now()).to_string(),
            ),
        ];
        if let Some(key) = &message.partition_key {
            user_properties.push((PROP_KEY.to_string(), key.clone()));
        }
        user_properties.extend(
            message
                .metadata
                .iter()
                .map(|(k, v)| metadata_property(k, v)),
        );
        let message_expiry_interval = message.expires_at.map(|at| {
            let left = at.duration_since(SystemTime::now()).unwrap_or_default();
            (left + self.config.expiry_grace)
                .as_secs()
                .clamp(1, u64::from(u32::MAX)) as u32
        });
        let properties = PublishProperties {
            content_type: message.content_type.clone(),
            user_properties,
            message_expiry_interval,
            ..Default::default()
        };
        let (waiter, acked) = oneshot::channel();
        let _order = self.send_order.lock().await;
        self.acks
            .lock()
            .expect("acks lock")
            .queued
            .push_back(waiter);
        let handed = self
            .client
            .publish_with_properties(
                self.broker_topic(&message.topic),
                QoS::AtLeastOnce,
                false,
                message.payload.clone(),
                properties,
            )
            .await;
        if let Err(e) = handed {
            self.acks.lock().expect("acks lock").queued.pop_back();
            return Err(PubSubError::broker("publishing", e));
        }
        Ok((MessageId::new(&message.topic, None, position), acked))
    }

    /// The broker-side filters of a selector, and whether deliveries need filtering.
    fn filters(&self, spec: &ConsumerSpec) -> Result<Vec<String>> {
        if spec.group.is_empty() || spec.group.contains(['/', '+', '#']) {
            return Err(PubSubError::InvalidRequest(format!(
                "group '{}' cannot name an MQTT shared subscription (no '/', '+' or '#')",
                spec.group
            )));
        }
        let share = |filter: String| format!("$share/{}/{filter}", spec.group);
        Ok(match &spec.topics {
            TopicSelector::Single(topic) => vec![share(self.broker_topic(topic))],
            TopicSelector::List(topics) => {
                topics.iter().map(|t| share(self.broker_topic(t))).collect()
            }
            TopicSelector::Pattern(pattern) => {
                let literal = pattern.split('*').next().unwrap_or("");
                let level = literal.rfind('/').map_or("", |i| &literal[..=i]);
                // The filter covers more than the pattern (deliveries are filtered),
                // so a group's patterns each get a share of their own: sharing one
                // filter, two patterns of a group (two partitioned topics) would split
                // each other's messages, and each drop what is not its own.
                let digest = stable_hash(pattern.as_bytes());
                vec![format!(
                    "$share/{}.{digest:08x}/{}{level}#",
                    spec.group, self.config.topic_prefix
                )]
            }
        })
    }

    /// The client id of a group's persistent session in this component.
    fn anchor_id(spec: &ConsumerSpec) -> String {
        let digest =
            stable_hash(format!("{}\u{0}{}", spec.group, spec.topics.describe()).as_bytes());
        format!("pcs-group-{digest:016x}")
    }
}

/// Partitioned topics are emulated (see [`crate::partitioned`]) with retained
/// records (see [`records`]).
#[async_trait]
impl crate::partitioned::PartitionStore for Mqtt5 {
    async fn read_partitions(&self, topic: &str) -> Result<Option<crate::PartitionUpdate>> {
        self.records().await?.read(topic).await
    }

    async fn write_partitions(&self, topic: &str, record: crate::PartitionUpdate) -> Result<()> {
        self.records().await?.write(topic, record).await
    }

    async fn incarnation(&self) -> Result<String> {
        Ok(self.records().await?.incarnation())
    }
}

impl Mqtt5 {
    async fn records(&self) -> Result<&RetainedRecords> {
        self.records
            .get_or_try_init(|| RetainedRecords::connect(&self.config))
            .await
    }
}

async fn run_publisher(mut events: EventLoop, acks: Arc<Mutex<Acks>>) {
    loop {
        match events.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                acks.lock().expect("acks lock").sent(pkid)
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                acks.lock().expect("acks lock").acked(ack.pkid, ack.reason)
            }
            Ok(_) => {}
            Err(e) => {
                acks.lock()
                    .expect("acks lock")
                    .fail_all(&format!("the connection failed: {e}"));
                // The next poll reconnects; do not spin while the broker is away.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

impl MqttConfig {
    /// What the component declares, decided by its settings alone. No lease (the
    /// baseline's zero): the broker hands a shared-subscription message on when its
    /// session ends.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            seek: false,
            max_message_bytes: Some(self.max_message_bytes),
            // Mosquitto writes its persistence file on autosave (and on a clean stop), so a
            // crash loses what it stored since: not durable across a kill.
            durable: false,
            ..Capabilities::default()
        }
    }
}

#[async_trait]
impl Component for Mqtt5 {
    async fn broker_version(&self) -> Result<String> {
        let client_id = format!("pcs-probe-{}", uuid::Uuid::new_v4().simple());
        let probe = open_session(
            &self.config,
            &client_id,
            false,
            vec!["$SYS/broker/version".into()],
        )
        .await;
        let version = match probe {
            Ok((client, mut events, early)) => {
                let retained = async {
                    if let Some(p) = early.into_iter().next() {
                        return Some(p);
                    }
                    loop {
                        match events.poll().await {
                            Ok(Event::Incoming(Packet::Publish(p))) => return Some(p),
                            Ok(_) => {}
                            Err(_) => return None,
                        }
                    }
                };
                let found = tokio::time::timeout(Duration::from_secs(2), retained)
                    .await
                    .ok()
                    .flatten();
                let _ = client.try_disconnect();
                found.map(|p| String::from_utf8_lossy(&p.payload).into_owned())
            }
            Err(_) => None,
        };
        Ok(format!(
            "{} at {} (MQTT 5)",
            version.unwrap_or_else(|| "MQTT broker (version unknown)".into()),
            self.config.host
        ))
    }

    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        let (id, acked) = self.send(&message).await?;
        settle(acked).await.map(|_| id)
    }

    async fn publish_batch(
        &self,
        messages: Vec<OutgoingMessage>,
    ) -> Result<Vec<Result<MessageId>>> {
        let mut pending = Vec::with_capacity(messages.len());
        for message in &messages {
            pending.push(self.send(message).await);
        }
        let mut results = Vec::with_capacity(pending.len());
        for sent in pending {
            results.push(match sent {
                Ok((id, acked)) => settle(acked).await.map(|_| id),
                Err(e) => Err(e),
            });
        }
        Ok(results)
    }

    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        let anchor = Self::anchor_id(spec);
        if members::is_held(&self.groups, &anchor) {
            return Ok(()); // a live member holds the session already
        }
        let (client, mut events, _) =
            open_session(&self.config, &anchor, true, self.filters(spec)?).await?;
        client.disconnect().await.map_err(mqtt("disconnecting"))?;
        // The session stays on the broker.
        drain_until_closed(&mut events).await;
        Ok(())
    }

    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        let (member, incoming) = members::Member::join(
            self.config.clone(),
            self.filters(&spec)?,
            spec.topics.clone(),
            self.groups.clone(),
            Self::anchor_id(&spec),
        )
        .await?;
        Ok(Box::new(MqttConsumer {
            topics: spec.topics,
            incoming: tokio::sync::Mutex::new(incoming),
            member,
        }))
    }

    fn kind(&self) -> &str {
        "mqtt5"
    }

    fn capabilities(&self) -> Capabilities {
        self.config.capabilities()
    }
}

/// Connects a session and subscribes; returns it with whatever was delivered
/// before the SUBACK (a resumed session's backlog).
async fn open_session(
    config: &MqttConfig,
    client_id: &str,
    persistent: bool,
    filters: Vec<String>,
) -> Result<(AsyncClient, EventLoop, Vec<Publish>)> {
    let session = persistent.then_some(config.session_expiry);
    let (client, mut events) =
        AsyncClient::new(options(config, client_id, session)?, REQUEST_CAPACITY);
    client
        .subscribe_many(
            filters
                .iter()
                .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce)),
        )
        .await
        .map_err(mqtt("subscribing"))?;
    let mut early = Vec::new();
    let subscribed = tokio::time::timeout(SETUP_BOUND, async {
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::SubAck(ack))) => return Ok(ack),
                Ok(Event::Incoming(Packet::Publish(publish))) => early.push(publish),
                Ok(_) => {}
                Err(e) => return Err(PubSubError::broker("subscribing", e)),
            }
        }
    })
    .await
    .map_err(|_| PubSubError::broker("subscribing", "no SUBACK within 10 s"))??;
    if let Some(refused) = subscribed
        .return_codes
        .iter()
        .find(|code| !matches!(code, SubscribeReasonCode::Success(_)))
    {
        return Err(PubSubError::broker(
            "subscribing",
            format!("the broker refused {filters:?}: {refused:?}"),
        ));
    }
    Ok((client, events, early))
}

/// Polls a connection that was asked to disconnect until the broker has closed it,
/// so everything queued before the DISCONNECT (acks) went out.
async fn drain_until_closed(events: &mut EventLoop) {
    let _ = tokio::time::timeout(SETUP_BOUND, async { while events.poll().await.is_ok() {} }).await;
}

/// Waits for a publish's PUBACK.
async fn settle(acked: oneshot::Receiver<Result<()>>) -> Result<()> {
    acked.await.unwrap_or_else(|_| {
        Err(PubSubError::Closed(
            "the MQTT connection closed before the PUBACK".into(),
        ))
    })
}

fn convert(topic: String, publish: &Publish) -> ReceivedMessage {
    let empty = PublishProperties::default();
    let properties = publish.properties.as_ref().unwrap_or(&empty);
    let property = |name: &str| {
        properties
            .user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let metadata: Metadata = properties
        .user_properties
        .iter()
        .filter_map(|(k, v)| {
            if let Some(key) = k.strip_prefix(METADATA_PREFIX) {
                Some((key.to_string(), v.clone()))
            } else {
                let key = k.strip_prefix(ESCAPED_METADATA_PREFIX)?;
                Some((unescape(key), unescape(v)))
            }
        })
        .collect();
    let position = property(PROP_ID)
        .and_then(|id| id.parse().ok())
        .unwrap_or(u64::from(publish.pkid));
    let published = property(PROP_PUBLISHED)
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
        .unwrap_or_else(SystemTime::now);
    ReceivedMessage {
        id: MessageId::new(topic, None, position),
        payload: publish.payload.to_vec(),
        content_type: properties.content_type.clone(),
        metadata,
        partition_key: property(PROP_KEY),
        // A resumed session redelivers with DUP set; how often is not known.
        attempt: if publish.dup { 2 } else { 1 },
        publish_time: published,
    }
}

struct MqttConsumer {
    topics: TopicSelector,
    incoming: tokio::sync::Mutex<mpsc::UnboundedReceiver<ReceivedMessage>>,
    /// Its sessions, what they hand out and its place in the group; local
    /// redeliveries go back into its queue.
    member: Arc<members::Member>,
}

impl MqttConsumer {
    fn unsettled(&self, id: &MessageId) -> Result<()> {
        owner_topic(id, &self.topics)?;
        if self
            .member
            .unacked
            .lock()
            .expect("unacked lock")
            .contains_key(id)
        {
            Ok(())
        } else {
            Err(PubSubError::NotFound(format!(
                "message {id} is not awaiting settlement"
            )))
        }
    }
}

impl Drop for MqttConsumer {
    /// A member dropped without a close leaves as a close does (a DISCONNECT, its
    /// readers running until the connection closed), so that the broker hands what it
    /// held to the other members; an abrupt end would strand it.
    fn drop(&mut self) {
        self.member.leave_in_background();
    }
}

#[async_trait]
impl Consumer for MqttConsumer {
    async fn receive(&self, max: usize, wait: Duration) -> Result<Vec<ReceivedMessage>> {
        let Some(max) = crate::component::receive_limit(max) else {
            return Ok(Vec::new());
        };
        let mut incoming = self.incoming.lock().await;
        let first = match tokio::time::timeout(wait, incoming.recv()).await {
            Err(_) => return Ok(Vec::new()),
            Ok(None) => return Err(PubSubError::Closed("the consumer was closed".into())),
            Ok(Some(message)) => message,
        };
        let mut received = vec![first];
        while received.len() < max {
            match incoming.try_recv() {
                Ok(message) => received.push(message),
                Err(_) => break,
            }
        }
        let ids: Vec<MessageId> = received.iter().map(|m| m.id.clone()).collect();
        self.member.handed_out(&ids);
        Ok(received)
    }

    async fn ack_many(&self, ids: &[MessageId]) -> Result<()> {
        crate::component::ack_each(self, ids, &self.topics).await
    }

    async fn ack(&self, id: &MessageId) -> Result<()> {
        self.unsettled(id)?;
        let held = self.member.unacked.lock().expect("unacked lock").remove(id);
        match held {
            Some(held) => held
                .client
                .ack(&held.publish)
                .await
                .map_err(mqtt("acknowledging")),
            None => Ok(()),
        }
    }

    async fn nack(&self, id: &MessageId, delay: Duration) -> Result<()> {
        self.unsettled(id)?;
        let again = {
            let mut unacked = self.member.unacked.lock().expect("unacked lock");
            let Some(held) = unacked.get_mut(id) else {
                return Ok(());
            };
            held.message.attempt += 1;
            // Back in the queue: not the application's until received again.
            held.handed_out = false;
            held.message.clone()
        };
        // No negative ack in MQTT: hand it out again from here once the delay passed.
        let deliveries = self.member.deliveries.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = deliveries.send(again);
        });
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        self.member.leave().await;
        self.incoming.lock().await.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any metadata entry travels as MQTT strings without a character MQTT
        /// refuses, and comes back as it was.
        #[test]
        fn metadata_with_any_characters_round_trips(key in "\\PC{0,12}[\t\u{0}\u{7f}%]?", value in ".{0,40}[\t\r\n\u{1f}\u{85}%]?[ ]{0,2}") {
            let (name, text) = metadata_property(&key, &value);
            prop_assert!(!name.chars().chain(text.chars()).any(mqtt_unsafe), "{name:?}: {text:?}");
            let back = match name.strip_prefix(METADATA_PREFIX) {
                Some(plain) => (plain.to_string(), text.clone()),
                None => (
                    unescape(name.strip_prefix(ESCAPED_METADATA_PREFIX).unwrap()),
                    unescape(&text),
                ),
            };
            prop_assert_eq!(back, (key, value));
        }
    }

    fn spec(topics: TopicSelector) -> ConsumerSpec {
        ConsumerSpec::new(topics, "g1")
    }

    #[test]
    fn acks_map_packet_ids_back_to_requests_in_order() {
        let mut acks = Acks::default();
        let (first, mut first_rx) = oneshot::channel();
        let (second, mut second_rx) = oneshot::channel();
        acks.queued.push_back(first);
        acks.queued.push_back(second);
        acks.sent(7);
        acks.sent(8);
        acks.acked(8, PubAckReason::QuotaExceeded);
        acks.acked(7, PubAckReason::Success);
        assert!(first_rx.try_recv().unwrap().is_ok());
        let refused = second_rx.try_recv().unwrap().unwrap_err();
        assert!(refused.to_string().contains("QuotaExceeded"), "{refused}");
    }

    #[test]
    fn anchors_differ_by_group_and_topics() {
        let a = Mqtt5::anchor_id(&spec(TopicSelector::Single("a".into())));
        let b = Mqtt5::anchor_id(&spec(TopicSelector::Single("b".into())));
        assert_ne!(a, b);
        assert_eq!(
            a,
            Mqtt5::anchor_id(&spec(TopicSelector::Single("a".into())))
        );
    }
}
