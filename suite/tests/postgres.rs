//! The whole catalogue against the PostgreSQL queue component (`fixtures/postgres.yaml`),
//! on the server in its connection string or `PUBSUB_POSTGRES_ENDPOINT`.

fn main() {
    pubsub_conformance::harness::run_fixture("postgres")
}
