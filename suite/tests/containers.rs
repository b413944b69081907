//! The whole catalogue against Redis Streams and NATS JetStream with each broker in a
//! container (through testcontainers; one container per case): the local images
//! `scripts/images.sh` builds, or the upstream ones where the engine has them.
//! Without a Docker engine every case fails with NOT PROVISIONED and the reason.

use pubsub_conformance::harness::run_fixtures_with;
use pubsub_conformance::provision::ProvisionKind;

fn main() {
    run_fixtures_with(&["redis", "nats"], Some(vec![ProvisionKind::Container]))
}
