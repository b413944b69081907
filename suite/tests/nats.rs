//! The whole catalogue against NATS JetStream (`fixtures/nats.yaml`), on a spawned
//! nats-server per case, or the endpoint in `PUBSUB_NATS_ENDPOINT`.

fn main() {
    pubsub_conformance::harness::run_fixture("nats")
}
