//! NATS, for the NATS JetStream component: a `nats-server` with JetStream on, NATS
//! from Debian's releases for the versions axis, and async publishes awaiting their
//! acks for the bench's raw comparison.

#[cfg(feature = "nats")]
pub(super) mod raw;

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
