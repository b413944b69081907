//! A broker-only reproduction of the RabbitMQ quorum-queue stall after a kill, recorded
//! as expected failures in `fixtures/expectations/rabbitmq.yaml` (RabbitMQ 3.10.8 and
//! 4.0.5). It uses lapin and the docker CLI only, none of this project's code:
//!
//! 1. start the image (host network, `PCS_PORT` as the pcs images take it);
//! 2. declare a durable topic exchange and a durable quorum queue bound to it (the
//!    arguments a subscription of the component declares: `x-queue-type`, `x-expires`),
//!    consume it with manual acks, publish 10 persistent messages with confirms, and
//!    receive and ack them;
//! 3. kill the node with SIGKILL while the consumer is attached, start it again on the
//!    same data;
//! 4. reconnect and publish one persistent message to a routing key no queue is bound to
//!    (the control), then one to the queue's routing key, waiting for each confirm
//!    (the queue's up to 30 s, to tell a stall from a slow recovery); then consume the
//!    queue.
//!
//! The test asserts that the defect is still there: the control is confirmed and
//! consuming the queue answers INTERNAL_ERROR; it prints whether the queue's publish
//! was confirmed within 15 s (the recovery bound of `certification.broker-restart`). On
//! RabbitMQ 3.10.8 by default; another version with
//! `REPRO_IMAGE=pcs/rabbitmq:trixie cargo test -p pubsub-conformance --test
//! rabbitmq_restart_stall -- --nocapture` (images from `scripts/images.sh
//! rabbitmq@trixie`). Seen 2026-12-05: on 3.10.8 and 4.0.5 every consume answered
//! INTERNAL_ERROR (12 of 12; 65 s after it was sent where measured), and a publish
//! issued alone was never confirmed (8 of 8 rounds, waiting 15, 30 or 60 s; issued
//! beside the consume on 3.10.8, 1 of 3 was confirmed); 4.3.6 confirms in 1-8 ms and
//! consumes (5 of 5); without `x-expires` 4.0.5 stalls the same. The declarations
//! repeat the component's (components/src/rabbitmq) on purpose: the reproduction
//! stands alone for the broker's maintainers.

use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use std::process::Command;
use std::time::{Duration, Instant};

/// The recovery bound of `certification.broker-restart`.
const RECOVERY_BOUND: Duration = Duration::from_secs(15);
/// How long a started node may take to accept connections.
const START_BOUND: Duration = Duration::from_secs(90);

/// What one round saw after the restart.
struct Round {
    restart: Duration,
    queue_confirm: Result<Duration, String>,
    unrouted_confirm: Result<Duration, String>,
    consume: Result<(), String>,
}

fn docker(args: &[&str]) -> Result<String, String> {
    let output = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Connects as soon as the node accepts AMQP connections, within `START_BOUND`.
async fn connect(uri: &str) -> Result<Connection, String> {
    let started = Instant::now();
    loop {
        match Connection::connect(uri, ConnectionProperties::default()).await {
            Ok(connection) => return Ok(connection),
            Err(e) if started.elapsed() > START_BOUND => {
                return Err(format!("no AMQP connection within {START_BOUND:?}: {e}"))
            }
            // The node gives no readiness event: a refused connection is retried.
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn confirming_channel(connection: &Connection) -> Result<Channel, String> {
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| format!("channel: {e}"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| format!("confirm.select: {e}"))?;
    Ok(channel)
}

/// How long the reproduction keeps waiting for the queue's confirm, to tell a stall
/// from a slow recovery: twice the bound.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long a basic.consume on the queue may take to answer.
const CONSUME_PATIENCE: Duration = Duration::from_secs(90);

/// Publishes one persistent message and waits up to `bound` for its confirm.
async fn publish(
    channel: &Channel,
    exchange: &str,
    key: &str,
    bound: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    let confirm = channel
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            b"after the restart",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .map_err(|e| format!("basic.publish: {e}"))?;
    match tokio::time::timeout(bound, confirm).await {
        Err(_) => Err(format!("no confirm within {bound:?}")),
        Ok(Err(e)) => Err(format!("confirm failed after {:?}: {e}", started.elapsed())),
        Ok(Ok(confirmation)) if confirmation.is_nack() => {
            Err(format!("nacked after {:?}", started.elapsed()))
        }
        Ok(Ok(_)) => Ok(started.elapsed()),
    }
}

async fn round(image: &str) -> Result<Round, String> {
    let port = free_port();
    let container = docker(&[
        "run",
        "-d",
        "--network",
        "host",
        "-e",
        &format!("PCS_PORT={port}"),
        "-e",
        &format!("PCS_AUX_PORT={}", free_port()),
        image,
    ])?;
    let outcome = round_on(&container, port).await;
    let _ = docker(&["rm", "-f", &container]);
    outcome
}

async fn round_on(container: &str, port: u16) -> Result<Round, String> {
    let uri = format!("amqp://guest:guest@127.0.0.1:{port}/%2f");
    let connection = connect(&uri).await?;
    let channel = confirming_channel(&connection).await?;
    let (exchange, queue, key) = ("repro", "repro.group.topic", "topic");
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("exchange.declare: {e}"))?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    arguments.insert("x-expires".into(), AMQPValue::LongLongInt(3_600_000));
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            arguments,
        )
        .await
        .map_err(|e| format!("queue.declare: {e}"))?;
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("queue.bind: {e}"))?;
    let consuming = connection
        .create_channel()
        .await
        .map_err(|e| format!("channel: {e}"))?;
    consuming
        .basic_qos(10, BasicQosOptions::default())
        .await
        .map_err(|e| format!("basic.qos: {e}"))?;
    let mut consumer = consuming
        .basic_consume(
            queue.into(),
            "repro".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .map_err(|e| format!("basic.consume: {e}"))?;
    for _ in 0..10 {
        publish(&channel, exchange, key, RECOVERY_BOUND)
            .await
            .map_err(|e| format!("before the kill: {e}"))?;
    }
    for _ in 0..10 {
        let delivery = tokio::time::timeout(RECOVERY_BOUND, consumer.next())
            .await
            .map_err(|_| "before the kill: a message not delivered".to_string())?
            .ok_or("before the kill: the consumer ended")?
            .map_err(|e| format!("before the kill: {e}"))?;
        delivery
            .ack(BasicAckOptions::default())
            .await
            .map_err(|e| format!("basic.ack: {e}"))?;
    }

    let killed = Instant::now();
    docker(&["kill", "--signal", "KILL", container])?;
    docker(&["start", container])?;
    let connection = connect(&uri).await?;
    let restart = killed.elapsed();
    // The control first, on its own channel: confirms of one channel come in order.
    let control = confirming_channel(&connection).await?;
    let unrouted_confirm = publish(
        &control,
        exchange,
        "no-queue-is-bound-to-this",
        RECOVERY_BOUND,
    )
    .await;
    let channel = confirming_channel(&connection).await?;
    // The publish and the consume wait at the same time (the consume's answer takes
    // over a minute on a stalled queue).
    let consume_started = Instant::now();
    let consuming = async {
        match connection.create_channel().await {
            Err(e) => Err(format!("channel: {e}")),
            Ok(channel) => match tokio::time::timeout(
                CONSUME_PATIENCE,
                channel.basic_consume(
                    queue.into(),
                    "repro-after".into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await
            {
                Err(_) => Err(format!(
                    "basic.consume: no answer within {CONSUME_PATIENCE:?}"
                )),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!(
                    "basic.consume answered after {:?}: {e}",
                    consume_started.elapsed()
                )),
            },
        }
    };
    let (queue_confirm, consume) =
        tokio::join!(publish(&channel, exchange, key, PATIENCE), consuming);
    Ok(Round {
        restart,
        queue_confirm,
        unrouted_confirm,
        consume,
    })
}

/// The image the reproduction runs: RabbitMQ 3.10.8 (Debian 12, built by
/// `scripts/install.sh`) unless `REPRO_IMAGE` names another.
fn image() -> String {
    std::env::var("REPRO_IMAGE").unwrap_or_else(|_| "pcs/rabbitmq:bookworm".into())
}

#[tokio::test]
async fn a_quorum_queue_stalls_after_the_node_is_killed() {
    let image = image();
    let version = docker(&[
        "image",
        "inspect",
        "--format",
        "{{index .Config.Labels \"org.pcs.version\"}}",
        &image,
    ])
    .unwrap_or_else(|e| panic!("{e}: build it with scripts/images.sh"));
    let seen = round(&image)
        .await
        .unwrap_or_else(|e| panic!("the reproduction could not run on {image}: {e}"));
    let show = |r: &Result<Duration, String>| match r {
        Ok(took) => format!("confirmed in {took:?}"),
        Err(e) => e.clone(),
    };
    let summary = format!(
        "{image} ({version}): restart {:?}; publish routed nowhere: {}; publish to the quorum queue: {}; consume: {}",
        seen.restart,
        show(&seen.unrouted_confirm),
        show(&seen.queue_confirm),
        seen.consume.as_ref().map(|_| "ok".to_string()).unwrap_or_else(|e| e.clone()),
    );
    println!("{summary}");
    // The node is up and routes: the control is confirmed at once.
    assert!(seen.unrouted_confirm.is_ok(), "{summary}");
    // The defect: the queue is not served after the restart: consuming it answers
    // INTERNAL_ERROR (after about 65 s), every time so far; a publish to it mostly
    // waits for its confirm past the bound (not asserted: once in three runs it was
    // confirmed while the consume waited). When this fails, the broker recovers: the
    // expected failures of this version in fixtures/expectations/rabbitmq.yaml must go.
    assert!(
        seen.consume
            .as_ref()
            .is_err_and(|e| e.contains("INTERNAL_ERROR")),
        "the stall is gone: {summary}"
    );
}
