//! The whole catalogue against Redis Streams (`fixtures/redis.yaml`), on a spawned
//! redis-server per case, or the endpoint in `PUBSUB_REDIS_ENDPOINT`.

fn main() {
    pubsub_conformance::harness::run_fixture("redis")
}
