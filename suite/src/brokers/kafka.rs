//! tansu, serving Kafka's protocol for the Kafka component (no JVM Kafka can be had
//! here; scripts/install.sh builds tansu from crates.io): no versions axis, and
//! librdkafka's producer for the bench's raw comparison.

#[cfg(feature = "kafka")]
pub(super) mod raw;

use crate::fault_proxy::Wire;
use crate::provision::spec::{BrokerSpec, ContainerImage, Source, NO_ENV};

/// tansu's arguments: a broker listening on (and advertising) the suite's port,
/// with the given storage engine.
macro_rules! tansu_args {
    ($storage:literal) => {
        &[
            "broker",
            "--listener-url",
            "tcp://127.0.0.1:{port}",
            "--advertised-listener-url",
            "tcp://127.0.0.1:{port}",
            "--storage-engine",
            $storage,
        ]
    };
}

/// How to run tansu.
pub(super) fn spec() -> BrokerSpec {
    let upstream = tansu_args!("memory://tansu/");
    BrokerSpec {
        // In memory: tansu 0.6.0's SQLite storage stalls under load (README,
        // "Kafka"); the fault cases' broker keeps its data (durable_args).
        args: tansu_args!("memory://tansu/"),
        env: &[("NO_COLOR", "1")],
        proxy_wire: Wire::Kafka,
        version_args: &["--version"],
        // SQLite storage keeps what tansu acknowledged across a kill; it stalls
        // under load (hence memory for every other case), and with in-memory
        // storage a restarted tansu hands librdkafka Fetch replies that crash it
        // (leader-change tags with a zero topic id: a NULL topic name
        // dereferenced in rd_kafka_metadata_update_op).
        // The data directory is the working directory: tansu takes an absolute
        // path as relative too.
        durable_args: Some(tansu_args!("sqlite://tansu.db")),
        ..BrokerSpec::new(
            "tansu",
            "tansu",
            Source::Built(
                "build tansu, the Kafka-protocol broker (scripts/install.sh --broker kafka; about 15 minutes once, then cached)",
            ),
            ContainerImage::new("ghcr.io/tansu-io/tansu", "0.6.0", upstream, NO_ENV),
        )
    }
}
