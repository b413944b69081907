//! tansu, serving Kafka's protocol for the Kafka component (no JVM Kafka can be had
//! here; scripts/install.sh builds tansu from crates.io): no versions axis, and
//! librdkafka's producer for the bench's raw comparison.

use crate::fault_proxy::Wire;
use crate::provision::axis::AxisPoint;
use crate::provision::spec::{BrokerSpec, ContainerImage, Source, NO_ENV};

/// tansu's arguments: a broker listening on (and advertising) the suite's port,
/// with the given storage engine.
macro_rules! tansu_args {
    ($storage:literal) => {
        &[
            "broker",
            "--listener-url",
            "tcp://127.0.0.1:{port}",
            "--advertised-listener-url",
            "tcp://127.0.0.1:{port}",
            "--storage-engine",
            $storage,
        ]
    };
}

/// How to run tansu.
pub(super) fn spec() -> BrokerSpec {
    let upstream = tansu_args!("memory://tansu/");
    BrokerSpec {
        // In memory: tansu 0.6.0's SQLite storage stalls under load (README,
        // "Kafka"); the fault cases' broker keeps its data (durable_args).
        args: tansu_args!("memory://tansu/"),
        env: &[("NO_COLOR", "1")],
        proxy_wire: Wire::Kafka,
        version_args: &["--version"],
        // SQLite storage keeps what tansu acknowledged across a kill; it stalls
        // under load (hence memory for every other case), and with in-memory
        // storage a restarted tansu hands librdkafka Fetch replies that crash it
        // (leader-change tags with a zero topic id: a NULL topic name
        // dereferenced in rd_kafka_metadata_update_op).
        // The data directory is the working directory: tansu takes an absolute
        // path as relative too.
        durable_args: Some(tansu_args!("sqlite://tansu.db")),
        ..BrokerSpec::new(
            "tansu",
            "tansu",
            Source::Built(
                "build tansu, the Kafka-protocol broker (scripts/install.sh --broker kafka; about 15 minutes once, then cached)",
            ),
            ContainerImage::new("ghcr.io/tansu-io/tansu", "0.6.0", upstream, NO_ENV),
        )
    }
}

/// No versions axis: Debian has no Kafka-protocol broker.
pub(super) const VERSIONS: &[AxisPoint] = &[];

/// The bench's raw client: records handed to librdkafka's producer (configured as the
/// component's: acks all, linger 1 ms), then their delivery reports awaited; the same
/// work without the component.
#[cfg(feature = "kafka")]
pub(super) mod raw {
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
        const LABELS: Labels = Labels {
            one: "produce, await the delivery report, one at a time",
            batched: "{batch} records produced, then their delivery reports",
        };

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
                result
                    .map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
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
    }
}
