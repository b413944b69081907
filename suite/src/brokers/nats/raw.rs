//! The bench's raw client: async publishes, then their acks, the same work without the
//! component.

use crate::bench::raw::run_id;
use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

/// A JetStream context, and the stream the messages go to.
pub struct Client {
    context: async_nats::jetstream::Context,
    stream: String,
}

impl RawClient for Client {
    async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
        let client = async_nats::connect(run.endpoint).await?;
        let context = async_nats::jetstream::new(client);
        let stream = format!("PCS_BENCH_RAW_{}", run_id());
        context
            .create_stream(async_nats::jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{stream}.>")],
                ..Default::default()
            })
            .await?;
        Ok(Client { context, stream })
    }

    async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
        let mut acks = Vec::with_capacity(batch.ids.len());
        for message in batch.messages {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Pcs-Metadata", message.metadata.as_str());
            if let Some(content_type) = message.content_type {
                headers.insert("Content-Type", content_type);
            }
            acks.push(
                self.context
                    .publish_with_headers(
                        format!("{}.raw", self.stream),
                        headers,
                        bytes::Bytes::copy_from_slice(message.payload),
                    )
                    .await?,
            );
        }
        for ack in acks {
            ack.await?;
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.context.delete_stream(&self.stream).await?;
        Ok(())
    }

    const LABELS: Labels = Labels {
        one: "publish, await ack, one at a time",
        batched: "{batch} async publishes, then their acks",
    };
}
