//! Redis, for the Redis Streams component: a `redis-server` spawned with its data kept
//! in an append-only file, Redis and Valkey from Debian's releases for the versions
//! axis, and pipelined XADDs for the bench's raw comparison.

use crate::provision::axis::{points, AxisPoint};
use crate::provision::spec::{BrokerSpec, ContainerImage, Source, NO_ENV};

/// How to run Redis.
pub(super) fn spec() -> BrokerSpec {
    let upstream = &[
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--port",
        "{port}",
        "--appendonly",
        "yes",
    ];
    BrokerSpec {
        args: &[
            "--port",
            "{port}",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            // Kept across a kill: the append-only file is written before replies go
            // out (fsync is left to the OS: a crash of the process loses nothing).
            "--appendonly",
            "yes",
            "--appendfsync",
            "no",
            // No background rewrite of that file: the suite's brokers live for one
            // run, and a rewrite forks a child that compresses the whole dataset,
            // which on a small machine takes a core from the run (in `bench`, a
            // third of the samples went to it, and to no measured path).
            "--auto-aof-rewrite-percentage",
            "0",
            "--dir",
            "{dir}",
        ],
        ..BrokerSpec::new(
            "redis",
            "redis-server",
            Source::Debian("redis-server"),
            ContainerImage::new("redis", "7.2.4-alpine", upstream, NO_ENV),
        )
    }
}

/// Redis in Debian's releases, then Valkey, a Redis fork users move to (the Redis
/// Streams component serves it).
pub(super) const VERSIONS: &[AxisPoint] = points! {
    "redis": bullseye "6.0.16", bookworm "7.0.15", trixie "8.0.2", forky "8.0.6";
    "valkey": trixie "8.1.1", forky "9.1.2"
};

/// The bench's raw client: pipelined XADDs, the same work without the component.
#[cfg(feature = "redis")]
pub(super) mod raw {
    use crate::bench::raw::run_id;
    use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

    /// A connection, and the stream the messages go to.
    pub struct Client {
        conn: redis::aio::MultiplexedConnection,
        key: String,
    }

    impl RawClient for Client {
        const LABELS: Labels = Labels {
            one: "XADD one at a time",
            batched: "pipelined XADD x{batch}",
        };

        async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
            let client = redis::Client::open(format!("redis://{}/", run.endpoint))?;
            // The client's default 500 ms response timeout failed a whole bench once, when
            // an append-only-file write held a pipeline up on a loaded machine; the
            // component waits as long as the broker needs, and so does its baseline
            // (bounded by the bench's receive timeout).
            let config = redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(run.options.receive_timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let key = format!("pcs-bench-raw-{}", run_id());
            Ok(Client { conn, key })
        }

        async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
            let mut pipe = redis::pipe();
            for message in batch.messages {
                let xadd = pipe
                    .cmd("XADD")
                    .arg(&self.key)
                    .arg("*")
                    .arg("payload")
                    .arg(message.payload);
                if let Some(content_type) = message.content_type {
                    xadd.arg("ct").arg(content_type);
                }
                xadd.arg("md").arg(message.metadata);
            }
            let _: Vec<String> = pipe.query_async(&mut self.conn).await?;
            Ok(())
        }

        async fn finish(mut self) -> anyhow::Result<()> {
            let _: i64 = redis::cmd("DEL")
                .arg(&self.key)
                .query_async(&mut self.conn)
                .await?;
            Ok(())
        }
    }
}
