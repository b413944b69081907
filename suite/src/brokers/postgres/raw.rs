//! The bench's raw client: multi-row INSERTs into a queue-shaped table, the same work
//! without the component.

use crate::bench::raw::run_id;
use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

/// A connection, and the table the messages go to.
pub struct Client {
    client: tokio_postgres::Client,
    table: String,
}

impl RawClient for Client {
    async fn connect(run: &RawRun<'_>) -> anyhow::Result<Self> {
        let endpoint = run.endpoint;
        let (host, port) = endpoint.rsplit_once(':').unwrap_or((endpoint, "5432"));
        let (client, connection) = tokio_postgres::connect(
            &format!("host={host} port={port} user=postgres dbname=test"),
            tokio_postgres::NoTls,
        )
        .await?;
        tokio::spawn(connection);
        let table = format!("pcs_bench_raw_{}", run_id());
        // The shape of a queue table readers can use: the topic index, a wake-up
        // notification per insert statement.
        client
            .batch_execute(&format!("CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, topic TEXT, payload BYTEA, content_type TEXT, metadata TEXT);
                             CREATE INDEX ON {table} (topic, id)"))
            .await?;
        Ok(Client { client, table })
    }

    async fn publish(&mut self, batch: RawBatch<'_>) -> anyhow::Result<()> {
        let table = &self.table;
        let messages = batch.messages;
        let topics: Vec<&str> = batch.ids.iter().map(|_| "raw").collect();
        let payloads: Vec<&[u8]> = messages.iter().map(|m| m.payload).collect();
        let content_types: Vec<Option<&str>> = messages.iter().map(|m| m.content_type).collect();
        let metadata: Vec<&str> = messages.iter().map(|m| m.metadata.as_str()).collect();
        self.client
            .query(
                &format!("WITH inserted AS (INSERT INTO {table} (topic, payload, content_type, metadata) SELECT * FROM UNNEST($1::text[], $2::bytea[], $3::text[], $4::text[]) RETURNING id),
                          woken AS (SELECT pg_notify('{table}', ''))
                          SELECT id FROM inserted, woken ORDER BY id"),
                &[&topics, &payloads, &content_types, &metadata],
            )
            .await?;
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<()> {
        let table = &self.table;
        self.client
            .batch_execute(&format!("DROP TABLE {table}"))
            .await?;
        Ok(())
    }

    const LABELS: Labels = Labels {
        one: "INSERT one at a time",
        batched: "multi-row INSERT x{batch}",
    };
}
