//! The bench's raw client: pipelined XADDs, the same work without the component.

use crate::bench::raw::run_id;
use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

/// A connection, and the stream the messages go to.
pub struct Client {
    conn: redis::aio::MultiplexedConnection,
    key: String,
}

impl RawClient for Client {
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

    const LABELS: Labels = Labels {
        one: "XADD one at a time",
        batched: "pipelined XADD x{batch}",
    };
}
