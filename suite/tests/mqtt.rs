//! The whole catalogue against MQTT 5 on Mosquitto (`fixtures/mqtt.yaml`), on a
//! spawned mosquitto per case, or the endpoint in `PUBSUB_MQTT_ENDPOINT`.

fn main() {
    pubsub_conformance::harness::run_fixture("mqtt")
}
