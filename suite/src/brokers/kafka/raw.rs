//! The bench's raw client: records handed to librdkafka's producer (configured as the
//! component's: acks all, linger 1 ms), then their delivery reports awaited; the same
//! work without the component.

use crate::bench::raw::run_id;
use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

/// The admin client that creates and deletes the topic, the producer, and the topic.
pub struct Client {
    admin: AdminClient<DefaultClientContext>,
    producer: FutureProducer,
    topic: String,
}

impl RawClient for Client {
    async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", run.endpoint)
            .set("log_level", "2");
        let admin: AdminClient<DefaultClientContext> = config.create()?;
        let topic = format!("pcs-bench-raw-{}", run_id());
        for result in admin
            .create_topics(
                &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await?
        {
            result.map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
        }
        let producer: FutureProducer = config
            .clone()
            .set("acks", "all")
            .set("linger.ms", "1")
            .create()?;
        Ok(Client {
            admin,
            producer,
            topic,
        })
    }

    async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
        let mut reports = Vec::with_capacity(batch.ids.len());
        for message in batch.messages {
            let mut headers = OwnedHeaders::new().insert(Header {
                key: "pcs-md",
                value: Some(message.metadata.as_bytes()),
            });
            if let Some(content_type) = message.content_type {
                headers = headers.insert(Header {
                    key: "pcs-ct",
                    value: Some(content_type.as_bytes()),
                });
            }
            let record = FutureRecord::<str, [u8]>::to(&self.topic)
                .payload(message.payload)
                .headers(headers);
            reports.push(
                self.producer
                    .send_result(record)
                    .map_err(|(e, _)| anyhow::anyhow!("queueing a record: {e}"))?,
            );
        }
        for report in reports {
            report
                .await?
                .map_err(|(e, _)| anyhow::anyhow!("producing a record: {e}"))?;
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.admin
            .delete_topics(&[self.topic.as_str()], &AdminOptions::new())
            .await?;
        Ok(())
    }

    const LABELS: Labels = Labels {
        one: "produce, await the delivery report, one at a time",
        batched: "{batch} records produced, then their delivery reports",
    };
}
