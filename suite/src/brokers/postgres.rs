//! PostgreSQL, for the PostgreSQL component: a `postgres` server initialised with
//! `initdb` and given a `test` database, PostgreSQL from Debian's releases for the
//! versions axis, and multi-row INSERTs into a queue-shaped table for the bench's raw
//! comparison.

#[cfg(feature = "postgres")]
pub(super) mod raw;

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
