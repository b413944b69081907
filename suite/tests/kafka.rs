//! The whole catalogue against Kafka (`fixtures/kafka.yaml`), on a spawned tansu (a
//! Kafka-protocol broker) per case, or the endpoint in `PUBSUB_KAFKA_ENDPOINT`.

fn main() {
    pubsub_conformance::harness::run_fixture("kafka")
}
