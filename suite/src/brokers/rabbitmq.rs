//! RabbitMQ, for the RabbitMQ component: a `rabbitmq-server` node of its own (its
//! configuration, data and logs in the data directory), RabbitMQ from Debian's
//! releases for the versions axis, and confirmed publishes for the bench's raw
//! comparison.

use crate::provision::axis::{points, AxisPoint};
use crate::provision::spec::{BrokerSpec, ContainerImage, Source};
use std::time::Duration;

/// How to run RabbitMQ.
pub(super) fn spec() -> BrokerSpec {
    let upstream_env = &[
        ("RABBITMQ_NODENAME", "pcs-c{port}@localhost"),
        ("RABBITMQ_NODE_PORT", "{port}"),
        ("RABBITMQ_DIST_PORT", "{aux_port}"),
    ];
    BrokerSpec {
        env: &[
            ("RABBITMQ_NODENAME", "pcs-{port}@localhost"),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1"),
            ("RABBITMQ_NODE_PORT", "{port}"),
            ("RABBITMQ_DIST_PORT", "{aux_port}"),
            ("RABBITMQ_MNESIA_BASE", "{dir}/mnesia"),
            ("RABBITMQ_LOG_BASE", "{dir}/log"),
            ("RABBITMQ_CONFIG_FILE", "{dir}/rabbitmq.conf"),
            ("RABBITMQ_CONF_ENV_FILE", "{dir}/rabbitmq-env.conf"),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", "{dir}/enabled_plugins"),
        ],
        files: &[
            (
                "rabbitmq.conf",
                "listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n",
            ),
            ("rabbitmq-env.conf", ""),
            ("enabled_plugins", "[].\n"),
        ],
        ready_within: Duration::from_secs(60),
        prefer_external: true,
        ..BrokerSpec::new(
            "rabbitmq",
            // The Debian wrapper in /usr/sbin switches user and ignores the environment.
            "/usr/lib/rabbitmq/bin/rabbitmq-server",
            Source::Debian("rabbitmq-server"),
            ContainerImage::new("rabbitmq", "3.13.7-alpine", &[], upstream_env),
        )
    }
}

/// RabbitMQ in Debian's releases.
pub(super) const VERSIONS: &[AxisPoint] = points! {
    "rabbitmq": bullseye "3.8.9", bookworm "3.10.8", trixie "4.0.5", forky "4.3.6"
};

/// The bench's raw client: confirmed publishes, the same work without the component.
#[cfg(feature = "rabbitmq")]
pub(super) mod raw {
    use crate::bench::raw::run_id;
    use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};
    use lapin::types::{AMQPValue, FieldTable};

    /// A connection, its channel in confirm mode, the exchange the messages go to,
    /// and their routing key.
    pub struct Client {
        connection: lapin::Connection,
        channel: lapin::Channel,
        exchange: String,
        spelled_key: String,
    }

    impl RawClient for Client {
        const LABELS: Labels = Labels {
            one: "publish, await confirm, one at a time",
            batched: "{batch} publishes, then their confirms",
        };

        async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
            let connection = lapin::Connection::connect(
                &format!("amqp://guest:guest@{}/%2f", run.endpoint),
                lapin::ConnectionProperties::default(),
            )
            .await?;
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(lapin::options::ConfirmSelectOptions::default())
                .await?;
            let exchange = format!("pcs-bench-raw-{}", run_id());
            channel
                .exchange_declare(
                    exchange.as_str().into(),
                    lapin::ExchangeKind::Topic,
                    lapin::options::ExchangeDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await?;
            // The component's routing key for a topic of the same length: one word per
            // character (what makes glob patterns AMQP binding patterns).
            let spelled_key = format!("bench-{}-raw-{}", run_id(), run.batch)
                .chars()
                .map(String::from)
                .collect::<Vec<_>>()
                .join(".");
            Ok(Client {
                connection,
                channel,
                exchange,
                spelled_key,
            })
        }

        async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
            let sends = batch.ids.iter().zip(&batch.messages).map(|(i, message)| {
                let mut headers = FieldTable::default();
                headers.insert(
                    "md".into(),
                    AMQPValue::LongString(message.metadata.as_str().into()),
                );
                headers.insert(
                    "topic".into(),
                    AMQPValue::LongString(self.spelled_key.as_str().into()),
                );
                headers.insert("published-ms".into(), AMQPValue::LongLongInt(*i as i64));
                let mut properties = lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_message_id(i.to_string().into())
                    .with_headers(headers);
                if let Some(content_type) = message.content_type {
                    properties = properties.with_content_type(content_type.into());
                }
                self.channel.basic_publish(
                    self.exchange.as_str().into(),
                    self.spelled_key.as_str().into(),
                    lapin::options::BasicPublishOptions::default(),
                    message.payload,
                    properties,
                )
            });
            let confirms = futures::future::try_join_all(sends).await?;
            futures::future::try_join_all(confirms).await?;
            Ok(())
        }

        async fn finish(self) -> anyhow::Result<()> {
            self.channel
                .exchange_delete(
                    self.exchange.as_str().into(),
                    lapin::options::ExchangeDeleteOptions::default(),
                )
                .await?;
            // Closed before returning, so its teardown does not slow the next measurement.
            self.connection.close(200, "bench done".into()).await?;
            Ok(())
        }
    }
}
