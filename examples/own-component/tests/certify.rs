//! The whole catalogue against the example's component: `cargo test` here runs one
//! trial per case (`own-queue/<case id>`), and fails on any FAIL, FLAKY or ERROR.

use std::path::PathBuf;

fn main() {
    own_component::register();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/own-queue.yaml");
    pubsub_conformance::harness::run_definitions(&[fixture])
}
