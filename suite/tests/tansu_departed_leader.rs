//! Broker-only reproductions of tansu 0.6.0's group coordinator keeping members that
//! are gone: as the group's leader (below), and as the holder of a partition (the
//! second test, at the end), recorded as expected failures of `kafka via attached
//! sidecar` and `kafka via serve` in `fixtures/expectations/kafka.yaml`. It uses
//! rdkafka and the `tansu` binary only, none of this project's code:
//!
//! 1. start `tansu broker` on a free port with in-memory storage, and create three
//!    topics of one partition;
//! 2. in a group, a member of `a` (the group's leader) and then a member of `b` are
//!    both assigned; the member of `b` closes (LeaveGroup), which starts a rebalance,
//!    and the leader closes at once, before it rejoins;
//! 3. a new member of `c` joins that group and polls;
//! 4. control: the same in another group, but the leader closes only once the group
//!    has formed again without the member of `b` (the leader's third assignment).
//!
//! In tansu 0.6.0 a LeaveGroup while the group is forming removes the member but keeps
//! it as the group's leader (`coordinator/group/administrator.rs`, `leave` of the
//! forming state). Every member that joins later is answered as a follower of the
//! departed leader, pauses, sends an empty SyncGroup, and is never assigned anything:
//! the group delivers nothing for the life of the broker. An attached sidecar meets it
//! because every subscription of one app id is one consumer group, and a case that
//! ends two subscriptions (a topic and its dead-letter topic) one after the other makes
//! the leader leave mid-rebalance.
//!
//! The test asserts that the defect is still there (the control is assigned, the new
//! member is not); when tansu fixes it, the assertion says which entries to remove.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a member of a healthy group may take to be assigned (tansu pauses a
/// joining follower 3 s; 20 s was overrun twice on 2026-12-07 while the CI's
/// fresh-clone build shared the two cores: a healthy group forms as soon as it can, so
/// this wait only ends the test later where something is wrong).
const ASSIGN_BOUND: Duration = Duration::from_secs(60);
/// How long the new member of the broken group is watched.
const WATCH: Duration = Duration::from_secs(20);
/// How long the broker may take to accept connections.
const START_BOUND: Duration = Duration::from_secs(30);

/// A tansu broker of the test's own, stopped when dropped.
struct Broker {
    child: Child,
    address: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_broker() -> Broker {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let url = format!("tcp://{address}");
    let child = Command::new("tansu")
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tansu on the PATH (scripts/install.sh builds it)");
    let broker = Broker { child, address };
    let started = Instant::now();
    while std::net::TcpStream::connect(&broker.address).is_err() {
        assert!(
            started.elapsed() < START_BOUND,
            "tansu did not listen on {} within {START_BOUND:?}",
            broker.address
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    broker
}

fn config(broker: &Broker) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &broker.address);
    config
}

async fn create_topics(broker: &Broker, topics: &[&str]) {
    let admin: AdminClient<DefaultClientContext> = config(broker).create().unwrap();
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1)))
        .collect();
    for result in admin
        .create_topics(&new, &AdminOptions::new())
        .await
        .expect("creating the topics")
    {
        result.expect("creating a topic");
    }
}

/// Counts the assignments a member was handed (one per rebalance it took part in).
#[derive(Default)]
struct Assignments(AtomicUsize);

impl ClientContext for Assignments {}

impl ConsumerContext for Assignments {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if matches!(rebalance, Rebalance::Assign(_)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

type Member = BaseConsumer<Assignments>;

/// A member of `group` subscribed to `topic`, with the settings of the Kafka
/// component (range assignment, 6 s session).
fn member(broker: &Broker, group: &str, topic: &str) -> Member {
    static_member(broker, group, topic, None)
}

fn assigned(consumer: &Member) -> bool {
    consumer
        .assignment()
        .is_ok_and(|a| !a.elements().is_empty())
}

/// Polls every member until each is assigned a partition, or `within` passes.
fn poll_until_assigned(members: &[&Member], within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        for member in members {
            let _ = member.poll(Duration::from_millis(50));
        }
        if members.iter().all(|m| assigned(m)) {
            return Some(started.elapsed());
        }
    }
    None
}

/// In `group`: a leader of `a` and a follower of `b`, both assigned; the follower
/// leaves, then the leader (at once, or once the group formed again without the
/// follower: `reformed`); then a newcomer of `c` joins. When it was assigned.
fn members_leave(broker: &Broker, group: &str, reformed: bool) -> Option<Duration> {
    let leader = member(broker, group, "a");
    poll_until_assigned(&[&leader], ASSIGN_BOUND).expect("the leader assigned");
    let follower = member(broker, group, "b");
    poll_until_assigned(&[&leader, &follower], ASSIGN_BOUND)
        .expect("the leader and its follower assigned");
    drop(follower);
    if reformed {
        let started = Instant::now();
        while leader.context().0.load(Ordering::SeqCst) < 3 {
            assert!(
                started.elapsed() < ASSIGN_BOUND,
                "the leader was not assigned again within {ASSIGN_BOUND:?} after its follower left"
            );
            let _ = leader.poll(Duration::from_millis(50));
        }
    }
    drop(leader);
    let newcomer = member(broker, group, "c");
    poll_until_assigned(&[&newcomer], WATCH)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_leaves_mid_rebalance_stays_the_groups_leader() {
    let broker = start_broker();
    create_topics(&broker, &["a", "b", "c"]).await;

    // Control: the same, but the leader leaves once the group has formed again
    // without its follower (its third assignment); the newcomer is assigned.
    let control = members_leave(&broker, "control", true);
    assert!(
        control.is_some(),
        "control: a member joining a group whose members all left after it formed again was not assigned within {ASSIGN_BOUND:?}"
    );

    // The leader leaves while the group is forming after its follower left.
    let after = members_leave(&broker, "departed", false);
    println!(
        "control member assigned after {control:?}; newcomer after the departed leader: {after:?}"
    );
    assert!(
        after.is_none(),
        "tansu assigned the newcomer after {after:?}: a leader that leaves mid-rebalance no longer stays the group's leader. Remove the entries of 'kafka via attached sidecar' in fixtures/expectations/kafka.yaml (and that of 'kafka via serve' once the other test here passes too)"
    );
}

/// A member of `group` on `topic`, with the settings of the Kafka component, static
/// (`group.instance.id`) when `instance` is given. librdkafka sends no LeaveGroup when
/// a static member closes, which is how a member that crashes, or stops mid-join,
/// looks to the broker.
fn static_member(broker: &Broker, group: &str, topic: &str, instance: Option<&str>) -> Member {
    let mut config = config(broker);
    config
        .set("group.id", group)
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .set("auto.offset.reset", "earliest");
    if let Some(instance) = instance {
        config.set("group.instance.id", instance);
    }
    let consumer: Member = config.create_with_context(Assignments::default()).unwrap();
    consumer.subscribe(&[topic]).unwrap();
    consumer
}

/// In `group`, on one topic of one partition: two members, one of them assigned the
/// partition; that one stops, leaving the group (`silently`: without a LeaveGroup, its
/// session left to expire). When the other member was assigned the partition.
fn holder_stops(broker: &Broker, group: &str, silently: bool) -> Option<Duration> {
    let first = static_member(broker, group, "p", silently.then_some("first"));
    poll_until_assigned(&[&first], ASSIGN_BOUND).expect("the first member assigned");
    let second = static_member(broker, group, "p", silently.then_some("second"));
    let started = Instant::now();
    // Both took part in the rebalance the second one's join started, and one holds
    // the partition.
    while second.context().0.load(Ordering::SeqCst) < 1
        || first.context().0.load(Ordering::SeqCst) < 2
        || assigned(&first) == assigned(&second)
    {
        assert!(
            started.elapsed() < ASSIGN_BOUND,
            "the group did not form again with both members, one holding the partition, within {ASSIGN_BOUND:?}"
        );
        let _ = first.poll(Duration::from_millis(50));
        let _ = second.poll(Duration::from_millis(50));
    }
    let (holder, other) = if assigned(&first) {
        (first, second)
    } else {
        (second, first)
    };
    // A consumer's drop closes it and waits for the group's answer, which tansu does
    // not always give (a drop was seen waiting for ever): members stop on threads of
    // their own, which the test does not wait for.
    std::thread::spawn(move || drop(holder));
    let assigned = poll_until_assigned(&[&other], WATCH);
    std::thread::spawn(move || drop(other));
    assigned
}

/// Through serve a group is created by a sidecar that subscribes and stops at once
/// (`groups.distinct-names`): its member can stop before it ever leaves. tansu 0.6.0
/// keeps such a member's partition after its session timeout (6 s), so the member that
/// stays is never assigned; a member that leaves with a LeaveGroup (the control) hands
/// its partition over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_without_leaving_keeps_its_partition_past_its_session() {
    // Each on a broker of its own: a group left mid-close on one broker (above) cannot
    // hold up the other.
    let control_broker = start_broker();
    create_topics(&control_broker, &["p"]).await;
    let control = holder_stops(&control_broker, "leaves", false);
    assert!(
        control.is_some(),
        "control: the partition of a member that left was not handed to the other member within {WATCH:?}"
    );

    let broker = start_broker();
    create_topics(&broker, &["p"]).await;
    let after = holder_stops(&broker, "vanishes", true);
    println!(
        "control member assigned after {control:?}; after a silent stop (6 s session): {after:?}"
    );
    assert!(
        after.is_none(),
        "tansu handed over the partition of a member that stopped without leaving after {after:?}: remove the entry of 'kafka via serve' groups.distinct-names in fixtures/expectations/kafka.yaml, unless its departed-leader shape still shows"
    );
}
