//! The bench's raw client: QoS 1 publishes, then their PUBACKs, the same work without
//! the component.

use crate::bench::raw::run_id;
use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

/// A client, the task polling its connection (which counts the PUBACKs), and the
/// topic the messages go to.
pub struct Client {
    client: AsyncClient,
    poller: tokio::task::JoinHandle<()>,
    acks: tokio::sync::mpsc::UnboundedReceiver<()>,
    topic: String,
}

impl RawClient for Client {
    async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
        let endpoint = run.endpoint;
        let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "1883"));
        let mut mqtt_options =
            MqttOptions::new(format!("pcs-bench-raw-{}", run_id()), host, port.parse()?);
        mqtt_options.set_outgoing_inflight_upper_limit(1000);
        let mut network = rumqttc::NetworkOptions::new();
        network.set_tcp_nodelay(true);
        mqtt_options.set_network_options(network);
        let (client, mut events) = AsyncClient::new(mqtt_options, 1024);
        let (acked, acks) = tokio::sync::mpsc::unbounded_channel();
        let poller = tokio::spawn(async move {
            while let Ok(event) = events.poll().await {
                if let Event::Incoming(Packet::PubAck(_)) = event {
                    let _ = acked.send(());
                }
            }
        });
        let topic = format!("pcs/bench-raw-{}", run_id());
        Ok(Client {
            client,
            poller,
            acks,
            topic,
        })
    }

    async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
        for message in batch.messages {
            let properties = PublishProperties {
                user_properties: vec![("md".into(), message.metadata)],
                content_type: message.content_type.map(str::to_string),
                ..Default::default()
            };
            self.client
                .publish_with_properties(
                    self.topic.as_str(),
                    QoS::AtLeastOnce,
                    false,
                    message.payload.to_vec(),
                    properties,
                )
                .await?;
        }
        for _ in batch.ids {
            self.acks
                .recv()
                .await
                .ok_or_else(|| anyhow::anyhow!("the MQTT connection closed"))?;
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.poller.abort();
        Ok(())
    }

    const LABELS: Labels = Labels {
        one: "QoS 1 publish, await PUBACK, one at a time",
        batched: "{batch} QoS 1 publishes, then their PUBACKs",
    };
}
