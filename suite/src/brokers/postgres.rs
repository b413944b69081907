//! PostgreSQL, for the PostgreSQL component: a `postgres` server initialised with
//! `initdb` and given a `test` database, PostgreSQL from Debian's releases for the
//! versions axis, and multi-row INSERTs into a queue-shaped table for the bench's raw
//! comparison.

use crate::provision::axis::{points, AxisPoint};
use crate::provision::spec::{BrokerSpec, ContainerImage, Source};
use std::time::Duration;

/// How to run PostgreSQL.
pub(super) fn spec() -> BrokerSpec {
    let upstream = &[
        "postgres",
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "fsync=off",
    ];
    let upstream_env = &[
        ("POSTGRES_HOST_AUTH_METHOD", "trust"),
        ("POSTGRES_DB", "test"),
        ("PGPORT", "{port}"),
    ];
    BrokerSpec {
        args: &[
            "-D",
            "{dir}/data",
            "-p",
            "{port}",
            "-k",
            "{dir}",
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "fsync=off",
        ],
        init: &[&[
            "/usr/lib/postgresql/*/bin/initdb",
            "-D",
            "{dir}/data",
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        ]],
        after_start: &[&[
            "/usr/lib/postgresql/*/bin/createdb",
            "-h",
            "127.0.0.1",
            "-p",
            "{port}",
            "-U",
            "postgres",
            "test",
        ]],
        // PostgreSQL refuses to run as root.
        run_as: Some("postgres"),
        ready_within: Duration::from_secs(60),
        prefer_external: true,
        ..BrokerSpec::new(
            "postgres",
            "/usr/lib/postgresql/*/bin/postgres",
            Source::Debian("postgresql"),
            ContainerImage::new("postgres", "16.4-alpine", upstream, upstream_env),
        )
    }
}

/// PostgreSQL in Debian's releases (its major versions).
pub(super) const VERSIONS: &[AxisPoint] = points! {
    "postgres": bullseye "13", bookworm "15", trixie "17", forky "18"
};

/// The bench's raw client: multi-row INSERTs into a queue-shaped table, the same work
/// without the component.
#[cfg(feature = "postgres")]
pub(super) mod raw {
    use crate::bench::raw::run_id;
    use crate::bench::raw::{Labels, RawBatch, RawClient, RawRun};

    /// A connection, and the table the messages go to.
    pub struct Client {
        client: tokio_postgres::Client,
        table: String,
    }

    impl RawClient for Client {
        const LABELS: Labels = Labels {
            one: "INSERT one at a time",
            batched: "multi-row INSERT x{batch}",
        };

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
            let content_types: Vec<Option<&str>> =
                messages.iter().map(|m| m.content_type).collect();
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
    }
}
