//! Redis, for the Redis Streams component: a `redis-server` spawned with its data kept
//! in an append-only file, Redis and Valkey from Debian's releases for the versions
//! axis, and pipelined XADDs for the bench's raw comparison.

#[cfg(feature = "redis")]
pub(super) mod raw;

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
