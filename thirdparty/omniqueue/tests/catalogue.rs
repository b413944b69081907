//! The whole catalogue against omniqueue's three backends (`fixtures/*.yaml`), trials
//! named `<component>/<case id>`, on brokers the suite spawns (as for its own
//! components), with the expected failures in `fixtures/expectations/`.

use std::path::PathBuf;

fn main() {
    certify_omniqueue::register();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    pubsub_conformance::harness::run_definitions(&[
        fixtures.join("omniqueue-memory.yaml"),
        fixtures.join("omniqueue-redis.yaml"),
        fixtures.join("omniqueue-rabbitmq.yaml"),
    ])
}
