//! NATS, for the NATS JetStream component: a `nats-server` with JetStream on, NATS
//! from Debian's releases for the versions axis, and async publishes awaiting their
//! acks for the bench's raw comparison.

use crate::provision::axis::{points, AxisPoint};
use crate::provision::spec::{BrokerSpec, ContainerImage, Source, NO_ENV};

/// How to run NATS.
pub(super) fn spec() -> BrokerSpec {
    let upstream = &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "/data"];
    BrokerSpec {
        args: &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "{dir}"],
        ..BrokerSpec::new(
            "nats",
            "nats-server",
            Source::Debian("nats-server"),
            ContainerImage::new("nats", "2.10.22-alpine", upstream, NO_ENV),
        )
    }
}

/// NATS in Debian's releases.
pub(super) const VERSIONS: &[AxisPoint] = points! {
    "nats": bookworm "2.9.10", trixie "2.10.27", forky "2.15.1"
};

/// The bench's raw client: async publishes, then their acks, the same work without the
/// component.
#[cfg(feature = "nats")]
pub(super) mod raw {
    use crate::bench::raw::run_id;
    use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

    /// A JetStream context, and the stream the messages go to.
    pub struct Client {
        context: async_nats::jetstream::Context,
        stream: String,
    }

    impl RawClient for Client {
        const LABELS: Labels = Labels {
            one: "publish, await ack, one at a time",
            batched: "{batch} async publishes, then their acks",
        };

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
    }
}
