//! The whole catalogue against RabbitMQ (`fixtures/rabbitmq.yaml`), at the endpoint in
//! `PUBSUB_RABBITMQ_ENDPOINT` or the definition's connection string.

fn main() {
    pubsub_conformance::harness::run_fixture("rabbitmq")
}
