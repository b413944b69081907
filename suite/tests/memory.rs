//! The whole catalogue against the in-memory component defined in `fixtures/memory.yaml`:
//! one test per case, named by its id (`cargo test --test memory -- bulk-publish`).

fn main() {
    pubsub_conformance::harness::run_fixture("memory")
}
