//! Partition records for the MQTT component, kept in the broker as retained messages.
//!
//! Each partitioned topic's record (version and partition count) is the retained
//! message of `<prefix>__pcs/partitions/<topic>`. One connection per component
//! subscribes to all of them and keeps the latest in a map. Reads first pass a
//! barrier: the connection publishes a numbered marker to a topic only it
//! subscribes to and waits for it to come back; the broker handles one
//! connection's packets in order, so by then every record the broker held when
//! the marker was sent has arrived.
//!
//! Mosquitto saves retained messages at its autosave interval, so a killed broker
//! can come back without a record written shortly before. After each reconnect the
//! first barrier publishes again every record the broker did not send back (the
//! records only grow in version, so the highest one known is the right one).

use crate::component::PartitionUpdate;
use crate::error::{PubSubError, Result};
use crate::mqtt::{options, MqttConfig};
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, SubscribeReasonCode};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The topic level under the component's prefix that holds its own records.
pub(crate) const RESERVED: &str = "__pcs/";
/// How long one barrier marker may take to come back before it is sent again.
const MARKER_WAIT: Duration = Duration::from_secs(1);
/// How many markers a barrier sends before it gives up.
const MARKER_TRIES: u32 = 5;
/// How long connecting and subscribing may take.
const SETUP_BOUND: Duration = Duration::from_secs(10);

/// What the connection's event loop has learnt.
#[derive(Default)]
struct Known {
    /// The latest record of each topic.
    records: HashMap<String, PartitionUpdate>,
    /// Topics whose record the broker sent since the last (re)connect.
    sent_since_connect: HashSet<String>,
    /// Connections made (1 after the first; each reconnect adds one).
    connects: u64,
    /// The connection count when records were last re-published.
    repaired_at: u64,
}

/// The retained partition records of one MQTT component.
pub(crate) struct RetainedRecords {
    client: AsyncClient,
    record_prefix: String,
    marker_topic: String,
    known: Arc<Mutex<Known>>,
    markers_seen: watch::Receiver<u64>,
    next_marker: AtomicU64,
    events: JoinHandle<()>,
}

impl Drop for RetainedRecords {
    fn drop(&mut self) {
        self.events.abort();
    }
}

impl RetainedRecords {
    /// Connects and subscribes to every record and to its own marker topic.
    pub(crate) async fn connect(config: &MqttConfig) -> Result<Self> {
        let client_id = format!("pcs-records-{}", uuid::Uuid::new_v4().simple());
        let record_prefix = format!("{}{RESERVED}partitions/", config.topic_prefix);
        let marker_topic = format!("{}{RESERVED}markers/{client_id}", config.topic_prefix);
        let mut mqtt_options = options(config, &client_id, None)?;
        mqtt_options.set_manual_acks(false);
        let (client, mut events) = AsyncClient::new(mqtt_options, 64);
        let filters = [format!("{record_prefix}#"), marker_topic.clone()];
        subscribe(&client, &filters)?;
        let known = Arc::new(Mutex::new(Known::default()));
        let (markers, markers_seen) = watch::channel(0);
        let context = format!("connecting the partition records client to {}", config.host);
        let ready = tokio::time::timeout(SETUP_BOUND, async {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => lock(&known).connects = 1,
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        return match ack
                            .return_codes
                            .iter()
                            .find(|code| !matches!(code, SubscribeReasonCode::Success(_)))
                        {
                            Some(refused) => {
                                Err(format!("the broker refused {filters:?}: {refused:?}"))
                            }
                            None => Ok(()),
                        };
                    }
                    Ok(Event::Incoming(Packet::Publish(publish))) => {
                        take(&known, &markers, &record_prefix, &marker_topic, &publish)
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await;
        match ready {
            Err(_) => return Err(PubSubError::broker(context, "no SUBACK within 10 s")),
            Ok(Err(e)) => return Err(PubSubError::broker(context, e)),
            Ok(Ok(())) => {}
        }
        let events = tokio::spawn(run_events(
            events,
            client.clone(),
            filters,
            known.clone(),
            markers,
            record_prefix.clone(),
            marker_topic.clone(),
        ));
        Ok(RetainedRecords {
            client,
            record_prefix,
            marker_topic,
            known,
            markers_seen,
            next_marker: AtomicU64::new(1),
            events,
        })
    }

    /// The topic's record as the broker holds it now.
    pub(crate) async fn read(&self, topic: &str) -> Result<Option<PartitionUpdate>> {
        self.barrier().await?;
        Ok(lock(&self.known).records.get(topic).copied())
    }

    /// Stores the topic's record, and returns once the broker has it.
    pub(crate) async fn write(&self, topic: &str, record: PartitionUpdate) -> Result<()> {
        lock(&self.known).records.insert(topic.to_string(), record);
        self.publish_record(topic, record).await?;
        self.barrier().await
    }

    /// Names the current connection: it changes when the connection was made again
    /// (the broker restarted or the network failed).
    pub(crate) fn incarnation(&self) -> String {
        lock(&self.known).connects.to_string()
    }

    async fn publish_record(&self, topic: &str, record: PartitionUpdate) -> Result<()> {
        let payload = serde_json::json!({
            "version": record.version,
            "partitions": record.partitions,
        })
        .to_string();
        self.client
            .publish(
                format!("{}{topic}", self.record_prefix),
                QoS::AtLeastOnce,
                true,
                payload,
            )
            .await
            .map_err(|e| PubSubError::broker("publishing a partition record", e))
    }

    /// Returns once every record the broker held when it was called has arrived;
    /// after a reconnect, first re-publishes the records the broker lost.
    async fn barrier(&self) -> Result<()> {
        let connects = lock(&self.known).connects;
        self.pass_marker().await?;
        let lost: Vec<(String, PartitionUpdate)> = {
            let mut known = lock(&self.known);
            if known.repaired_at >= connects || connects <= 1 {
                Vec::new()
            } else {
                known.repaired_at = connects;
                known
                    .records
                    .iter()
                    .filter(|(topic, _)| !known.sent_since_connect.contains(*topic))
                    .map(|(topic, record)| (topic.clone(), *record))
                    .collect()
            }
        };
        if lost.is_empty() {
            return Ok(());
        }
        for (topic, record) in &lost {
            tracing::warn!(
                topic,
                ?record,
                "the MQTT broker lost a partition record; publishing it again"
            );
            self.publish_record(topic, *record).await?;
        }
        self.pass_marker().await
    }

    /// Sends a marker and waits for it to come back (sent again if lost while the
    /// connection was being made again).
    async fn pass_marker(&self) -> Result<()> {
        let mut seen = self.markers_seen.clone();
        for _ in 0..MARKER_TRIES {
            let marker = self.next_marker.fetch_add(1, Ordering::Relaxed);
            self.client
                .publish(
                    self.marker_topic.clone(),
                    QoS::AtLeastOnce,
                    false,
                    marker.to_string(),
                )
                .await
                .map_err(|e| PubSubError::broker("publishing a partition records marker", e))?;
            let back = tokio::time::timeout(MARKER_WAIT, seen.wait_for(|last| *last >= marker));
            if let Ok(Ok(_)) = back.await {
                return Ok(());
            }
        }
        Err(PubSubError::broker(
            "reading partition records",
            format!(
                "no marker came back on {} within {} tries of {MARKER_WAIT:?}",
                self.marker_topic, MARKER_TRIES
            ),
        ))
    }
}

fn lock(known: &Mutex<Known>) -> std::sync::MutexGuard<'_, Known> {
    known.lock().unwrap_or_else(|p| p.into_inner())
}

fn subscribe(client: &AsyncClient, filters: &[String]) -> Result<()> {
    client
        .try_subscribe_many(
            filters
                .iter()
                .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce)),
        )
        .map_err(|e| PubSubError::broker("subscribing to partition records", e))
}

/// Files one incoming publish: a record, or a marker coming back.
fn take(
    known: &Mutex<Known>,
    markers: &watch::Sender<u64>,
    record_prefix: &str,
    marker_topic: &str,
    publish: &rumqttc::v5::mqttbytes::v5::Publish,
) {
    let topic = String::from_utf8_lossy(&publish.topic);
    if topic == marker_topic {
        if let Some(marker) = std::str::from_utf8(&publish.payload)
            .ok()
            .and_then(|p| p.parse::<u64>().ok())
        {
            markers.send_if_modified(|last| {
                let newer = marker > *last;
                if newer {
                    *last = marker;
                }
                newer
            });
        }
        return;
    }
    let Some(name) = topic.strip_prefix(record_prefix) else {
        return;
    };
    let record = serde_json::from_slice::<serde_json::Value>(&publish.payload)
        .ok()
        .and_then(|v| {
            Some(PartitionUpdate {
                version: v.get("version")?.as_u64()?,
                partitions: u32::try_from(v.get("partitions")?.as_u64()?).ok()?,
            })
        });
    let Some(record) = record else {
        tracing::warn!(topic = %topic, "ignoring a partition record that is not {{version, partitions}}");
        return;
    };
    let mut known = lock(known);
    let newest = known
        .records
        .get(name)
        .is_none_or(|held| held.version <= record.version);
    // An older record than the one held counts as lost: the next barrier after a
    // reconnect publishes the held one again.
    if newest {
        known.sent_since_connect.insert(name.to_string());
        known.records.insert(name.to_string(), record);
    }
}

async fn run_events(
    mut events: EventLoop,
    client: AsyncClient,
    filters: [String; 2],
    known: Arc<Mutex<Known>>,
    markers: watch::Sender<u64>,
    record_prefix: String,
    marker_topic: String,
) {
    loop {
        match events.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                {
                    let mut known = lock(&known);
                    known.connects += 1;
                    known.sent_since_connect.clear();
                }
                // A clean session: subscriptions are made again on every connection.
                if let Err(e) = subscribe(&client, &filters) {
                    tracing::warn!(error = %e, "partition records: cannot subscribe again");
                }
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                take(&known, &markers, &record_prefix, &marker_topic, &publish)
            }
            Ok(_) => {}
            Err(_) => {
                // The next poll reconnects; do not spin while the broker is away.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
