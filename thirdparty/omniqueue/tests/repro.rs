//! Minimal reproductions of the omniqueue 0.3.0 defects the catalogue found, each with
//! omniqueue alone (plus the one command omniqueue leaves to its user: creating a
//! stream's consumer group, or declaring nothing at all on RabbitMQ), so that they can
//! be handed to its maintainers. Each test asserts that the defect is still there: when
//! one starts failing, the defect is fixed, and its expected failures in
//! `fixtures/expectations/` must go.
//!
//! They need a Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`) and a RabbitMQ
//! at `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), as
//! `scripts/services.sh start` provides.

use omniqueue::backends::{
    InMemoryBackend, RabbitMqBackend, RabbitMqConfig, RedisBackend, RedisConfig,
};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A name no other run uses.
fn unique(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("repro-{what}-{nanos}")
}

fn redis_config(stream: &str, group: &str, member: &str, ack_deadline_ms: i64) -> RedisConfig {
    RedisConfig {
        dsn: redis_url(),
        max_connections: 4,
        reinsert_on_nack: true,
        queue_key: stream.to_string(),
        delayed_queue_key: format!("{stream}:delayed"),
        delayed_lock_key: format!("{stream}:delayed-lock"),
        consumer_group: group.to_string(),
        consumer_name: member.to_string(),
        payload_key: "payload".into(),
        ack_deadline_ms,
        dlq_config: None,
        sentinel_config: None,
    }
}

/// omniqueue expects the stream's consumer groups to exist.
async fn create_group(stream: &str, group: &str) {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("$")
        .arg("MKSTREAM")
        .query_async(&mut connection)
        .await
        .unwrap();
}

/// Consumer groups are Redis Streams' fan-out: each group gets every entry. omniqueue's
/// ack runs XACK and then XDEL, so the first group to acknowledge an entry deletes it
/// for every other group (catalogue: subscribe.fan-out, certification.backlog,
/// certification.broker-restart).
#[tokio::test]
async fn redis_ack_in_one_group_deletes_the_entry_for_every_other_group() {
    let stream = unique("fan-out");
    create_group(&stream, "a").await;
    create_group(&stream, "b").await;
    let (producer, mut group_a) = RedisBackend::builder(redis_config(&stream, "a", "a1", 60_000))
        .build_pair()
        .await
        .unwrap();
    let mut group_b = RedisBackend::builder(redis_config(&stream, "b", "b1", 60_000))
        .build_consumer()
        .await
        .unwrap();
    producer.send_raw(b"for both groups").await.unwrap();

    let delivery = group_a.receive().await.unwrap();
    delivery.ack().await.map_err(|(e, _)| e).unwrap();
    let for_b = group_b
        .receive_all(1, Duration::from_millis(500))
        .await
        .unwrap();

    assert!(
        for_b.is_empty(),
        "fixed: group b received the entry group a acknowledged"
    );
}

/// A receive dropped while its `XREADGROUP ... BLOCK` waits on an empty stream is not
/// withdrawn from Redis: the entry published next goes to that abandoned read, into the
/// member's pending entries, and neither the member's next receive nor another member of
/// the group gets it until the reclaim after ack_deadline_ms (catalogue:
/// subscribe.cancelled-receive, which judges within the delivery bound).
#[tokio::test]
async fn redis_dropped_receive_strands_the_next_entry_until_the_ack_deadline() {
    let stream = unique("dropped-receive");
    create_group(&stream, "g").await;
    let (producer, mut member) = RedisBackend::builder(redis_config(&stream, "g", "m1", 60_000))
        .build_pair()
        .await
        .unwrap();
    let mut other = RedisBackend::builder(redis_config(&stream, "g", "m2", 60_000))
        .build_consumer()
        .await
        .unwrap();

    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        member.receive_all(10, Duration::from_secs(5)),
    )
    .await;
    assert!(dropped.is_err(), "the receive waits on the empty stream");
    producer.send_raw(b"after a dropped receive").await.unwrap();
    let next = member
        .receive_all(10, Duration::from_secs(2))
        .await
        .unwrap();
    let elsewhere = other.receive_all(10, Duration::from_secs(2)).await.unwrap();

    assert!(
        next.is_empty() && elsewhere.is_empty(),
        "fixed: the entry published after a dropped receive reached a member"
    );
}

/// `receive_all(n, Duration::ZERO)` sends `XREADGROUP ... BLOCK 0`, which Redis reads
/// as "wait for ever": on an empty stream the call does not return, where the
/// in-memory backend returns at once with nothing.
#[tokio::test]
async fn redis_receive_all_with_a_zero_deadline_waits_for_ever() {
    let stream = unique("block-zero");
    create_group(&stream, "g").await;
    let mut consumer = RedisBackend::builder(redis_config(&stream, "g", "m", 60_000))
        .build_consumer()
        .await
        .unwrap();
    let (_producer, mut in_memory) = InMemoryBackend::builder().build_pair().await.unwrap();

    let memory = tokio::time::timeout(
        Duration::from_secs(2),
        in_memory.receive_all(10, Duration::ZERO),
    )
    .await;
    let redis = tokio::time::timeout(
        Duration::from_secs(2),
        consumer.receive_all(10, Duration::ZERO),
    )
    .await;

    assert!(
        matches!(memory, Ok(Ok(ref got)) if got.is_empty()),
        "the in-memory backend returns at once"
    );
    assert!(
        redis.is_err(),
        "fixed: receive_all(10, 0) returned within 2 s on an empty stream"
    );
}

/// `nack` on the Redis backend only marks the delivery settled: nothing goes back on
/// the stream although `reinsert_on_nack` is true (the setting is never read). The
/// message comes back only when the pending-entry reclaim finds it, after
/// `ack_deadline_ms` (catalogue: retry.*, dead-letter.max-deliveries,
/// bulk-subscribe.statuses; a leaving member handing nothing back is declared instead).
#[tokio::test]
async fn redis_nack_does_not_reinsert_despite_reinsert_on_nack() {
    let stream = unique("nack");
    create_group(&stream, "g").await;
    let (producer, mut consumer) = RedisBackend::builder(redis_config(&stream, "g", "m", 3_000))
        .build_pair()
        .await
        .unwrap();
    producer.send_raw(b"retry me").await.unwrap();

    let delivery = consumer.receive().await.unwrap();
    let nacked = Instant::now();
    delivery.nack().await.map_err(|(e, _)| e).unwrap();
    let soon = consumer
        .receive_all(1, Duration::from_millis(1500))
        .await
        .unwrap();
    let later = consumer
        .receive_all(1, Duration::from_secs(5))
        .await
        .unwrap();

    assert!(
        soon.is_empty(),
        "fixed: the nacked message came back within 1.5 s"
    );
    assert_eq!(later.len(), 1, "the reclaim brings it back");
    assert!(
        nacked.elapsed() >= Duration::from_millis(2900),
        "it came back only after the ack deadline"
    );
}

/// A scheduled send is due in whole seconds (`unix_timestamp` truncates), and the mover
/// takes only what is a full second overdue (to be "exclusive"), polling every 500 ms:
/// a 100 ms delay sent just after a second boundary arrives about a second late
/// (catalogue: delay.deliver-at, delay.deliver-after, delay.beyond-lease).
#[tokio::test]
async fn redis_scheduled_send_arrives_about_a_second_late() {
    let stream = unique("delay");
    create_group(&stream, "g").await;
    let (producer, mut consumer) = RedisBackend::builder(redis_config(&stream, "g", "m", 60_000))
        .build_pair()
        .await
        .unwrap();
    // Just after a second boundary.
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(
        1050 - into_second.min(1000),
    )))
    .await;

    let sent = Instant::now();
    let delay = Duration::from_millis(100);
    producer
        .send_raw_scheduled(b"due in 100 ms", delay)
        .await
        .unwrap();
    let delivery = consumer.receive().await.unwrap();
    let late = sent.elapsed().saturating_sub(delay);
    delivery.ack().await.map_err(|(e, _)| e).unwrap();

    assert!(
        late >= Duration::from_millis(700),
        "fixed: a 100 ms delay arrived only {late:?} late"
    );
}

/// The RabbitMQ backend's send returns once the frames are written, without waiting
/// for the broker (no publisher confirms): a send to an exchange that does not exist
/// succeeds, though the broker refuses it and closes the channel, and the message is
/// lost (catalogue: certification.network-cut-single-publishes).
#[tokio::test]
async fn rabbitmq_send_succeeds_for_a_message_the_broker_refuses() {
    let config = RabbitMqConfig {
        uri: amqp_url(),
        connection_properties: Default::default(),
        publish_exchange: unique("no-such-exchange"),
        publish_routing_key: String::new(),
        publish_options: Default::default(),
        publish_properties: Default::default(),
        consume_queue: String::new(),
        consumer_tag: String::new(),
        consume_options: Default::default(),
        consume_arguments: Default::default(),
        consume_prefetch_count: None,
        requeue_on_nack: true,
    };
    let producer = RabbitMqBackend::builder(config)
        .build_producer()
        .await
        .unwrap();

    let first = producer.send_raw(b"lost").await;
    // The broker's refusal closes the channel: a later send fails once the close has
    // arrived (within 5 s).
    let refused_at = Instant::now() + Duration::from_secs(5);
    let mut later = producer.send_raw(b"after the refusal").await;
    while later.is_ok() && Instant::now() < refused_at {
        tokio::time::sleep(Duration::from_millis(20)).await;
        later = producer.send_raw(b"after the refusal").await;
    }

    assert!(
        first.is_ok(),
        "fixed: the send to a missing exchange failed: {first:?}"
    );
    assert!(
        later.is_err(),
        "the broker closed the channel (404 NOT_FOUND) behind the first send"
    );
}

/// `receive_all(max, deadline)`, omniqueue's batch receive, returns as soon as one
/// message is there, with what is ready at that moment: messages arriving a few
/// milliseconds later, well within the deadline, are left for the next call, so a
/// trickle comes as batches of one (catalogue: bulk-subscribe.max-await, on every
/// backend). Shown on the in-memory backend and on Redis.
#[tokio::test]
async fn receive_all_hands_over_a_partial_batch_long_before_its_deadline() {
    async fn trickle(send: impl Fn(usize) -> futures::future::BoxFuture<'static, ()>) {
        for i in 0..5 {
            send(i).await;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }

    let (producer, mut in_memory) = InMemoryBackend::builder().build_pair().await.unwrap();
    let producer = std::sync::Arc::new(producer);
    let sending = tokio::spawn(trickle(move |i| {
        let producer = producer.clone();
        Box::pin(async move {
            producer
                .send_raw(format!("m-{i}").as_bytes())
                .await
                .unwrap()
        })
    }));
    let started = Instant::now();
    let batch = in_memory
        .receive_all(5, Duration::from_secs(2))
        .await
        .unwrap();
    let memory = (batch.len(), started.elapsed());
    sending.await.unwrap();

    let stream = unique("batch");
    create_group(&stream, "g").await;
    let (producer, mut redis) = RedisBackend::builder(redis_config(&stream, "g", "m", 60_000))
        .build_pair()
        .await
        .unwrap();
    let producer = std::sync::Arc::new(producer);
    let sending = tokio::spawn(trickle(move |i| {
        let producer = producer.clone();
        Box::pin(async move {
            producer
                .send_raw(format!("m-{i}").as_bytes())
                .await
                .unwrap()
        })
    }));
    let started = Instant::now();
    let batch = redis.receive_all(5, Duration::from_secs(2)).await.unwrap();
    let redis_batch = (batch.len(), started.elapsed());
    sending.await.unwrap();

    for (backend, (size, after)) in [("in-memory", memory), ("redis", redis_batch)] {
        assert!(
            size < 5 && after < Duration::from_millis(500),
            "fixed on {backend}: receive_all(5, 2 s) waited {after:?} for a batch of {size}"
        );
    }
}

/// `receive_all(usize::MAX, deadline)` on the in-memory backend reserves room for that
/// many deliveries before it looks for any, and panics ("capacity overflow") instead
/// of returning what is there (catalogue: subscribe.method-edges, a receive of at most
/// `usize::MAX`; the component takes at most `RECEIVE_CAP` per receive since).
#[tokio::test]
async fn in_memory_receive_all_of_the_largest_count_panics() {
    let (producer, mut consumer) = InMemoryBackend::builder().build_pair().await.unwrap();
    producer.send_raw(b"m").await.unwrap();
    let receiving = tokio::spawn(async move {
        consumer
            .receive_all(usize::MAX, Duration::from_millis(100))
            .await
            .map(|batch| batch.len())
    });
    let outcome = receiving.await;
    let panicked = outcome.as_ref().err().is_some_and(|e| e.is_panic());
    assert!(
        panicked,
        "receive_all(usize::MAX) no longer panics: {outcome:?} (the defect is fixed)"
    );
}
