//! The bench's raw client: confirmed publishes, the same work without the component.

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

    const LABELS: Labels = Labels {
        one: "publish, await confirm, one at a time",
        batched: "{batch} publishes, then their confirms",
    };
}
