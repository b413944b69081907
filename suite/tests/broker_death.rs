//! A broker that dies mid-run is the environment's failure, not the component's: the
//! case that was running and every later case of that component are ERROR naming the
//! exit, the component's run ends within 30 s of the death, and the other components
//! of the run are unaffected. A component that fails while its broker is healthy
//! still FAILs, and its evidence says the broker was checked.

use async_trait::async_trait;
use pubsub_conformance::catalogue::{find, Level};
use pubsub_conformance::certify::{certify, CertifyOptions, Progress, Selection};
use pubsub_conformance::components::config::ComponentDefinition;
use pubsub_conformance::components::runtime::Runtime;
use pubsub_conformance::components::{
    Capabilities, Component, Consumer, ConsumerSpec, MessageId, OutgoingMessage, PubSubError,
    Result,
};
use pubsub_conformance::harness::describe;
use pubsub_conformance::provision::{self, container, ProvisionKind};
use pubsub_conformance::reports::{ComponentReport, Status};
use pubsub_conformance::runner::{run_case_in, CaseEnvironment, RunOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> ComponentDefinition {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(format!("{name}.yaml"));
    ComponentDefinition::from_file(&path).unwrap()
}

/// When each progress line was heard, since the run started.
type Heard = Arc<Mutex<Vec<(Duration, String)>>>;

/// Certifies `definitions` (core cases) with `kill` run on another thread once the
/// first component has finished `after` cases plus `delay`; returns the report, the
/// progress lines and when the kill happened.
fn certify_with_kill(
    definitions: Vec<ComponentDefinition>,
    order: Vec<ProvisionKind>,
    after: usize,
    delay: Duration,
    kill: impl Fn() -> String + Send + Sync + 'static,
) -> (Vec<ComponentReport>, Vec<(Duration, String)>, Duration) {
    let cases = Selection {
        components: Vec::new(),
        case_glob: None,
        level: Some(Level::Core),
    }
    .cases()
    .unwrap();
    let options = CertifyOptions {
        run: RunOptions::default(),
        provision: Some(order),
        restart_broker: false,
        jobs: 4,
        ..CertifyOptions::default()
    };
    let started = Instant::now();
    let heard: Heard = Arc::default();
    let killed_at: Arc<Mutex<Option<Duration>>> = Arc::default();
    let kill = Arc::new(kill);
    let first = definitions[0].name.clone();
    let progress: Progress = {
        let heard = heard.clone();
        let killed_at = killed_at.clone();
        Arc::new(move |_: &str, line: &str| {
            heard
                .lock()
                .unwrap()
                .push((started.elapsed(), line.to_string()));
            if line.starts_with(&format!("{first}: [{after}/")) {
                let kill = kill.clone();
                let killed_at = killed_at.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(delay);
                    let what = kill();
                    *killed_at.lock().unwrap() = Some(started.elapsed());
                    eprintln!("killed: {what}");
                });
            }
        })
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let report = tokio.block_on(certify(&definitions, &cases, &options, progress));
    let killed_at = killed_at.lock().unwrap().expect("the broker was killed");
    let heard = heard.lock().unwrap().clone();
    (report.components, heard, killed_at)
}

/// The checks every death must pass: none FAIL, every ERROR names `exit`, what
/// finished well after the kill is ERROR, and the component's last cell came within
/// 30 s.
fn assert_reported_as_death(
    component: &ComponentReport,
    heard: &[(Duration, String)],
    killed_at: Duration,
    exit: &str,
) {
    let errors: Vec<_> = component
        .cases
        .iter()
        .filter(|c| c.status == Status::Error)
        .collect();
    assert!(
        !errors.is_empty(),
        "no ERROR cell after the kill: {:?}",
        component
            .cases
            .iter()
            .map(|c| (&c.id, c.status))
            .collect::<Vec<_>>()
    );
    for cell in &component.cases {
        assert_ne!(
            cell.status,
            Status::Fail,
            "a dead broker was blamed on the component:\n{}",
            describe(cell)
        );
    }
    // Cases run concurrently: what finished well after the kill (the health watch
    // reports a death within a second or two) is ERROR naming the exit; a case in
    // flight at the kill may have finished its work before it.
    let prefix = format!("{}: [", component.name);
    for (at, line) in heard {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some(id) = rest.split_whitespace().nth(1) else {
            continue;
        };
        let cell = component.cases.iter().find(|c| c.id == id).unwrap();
        if *at > killed_at + Duration::from_secs(3) {
            assert_eq!(cell.status, Status::Error, "{}", describe(cell));
        }
    }
    for cell in errors {
        let notes = cell.evidence.notes.join(" ");
        assert!(
            notes.contains(exit) && notes.contains("says nothing about the component"),
            "the ERROR does not name the exit '{exit}':\n{}",
            describe(cell)
        );
    }
    let last = heard
        .iter()
        .filter(|(_, line)| line.starts_with(&format!("{}: [", component.name)))
        .map(|(at, _)| *at)
        .max()
        .unwrap();
    assert!(
        last.saturating_sub(killed_at) < Duration::from_secs(30),
        "the run went on {:?} after the kill",
        last.saturating_sub(killed_at)
    );
}

fn kill_children_named(program: &'static str) -> impl Fn() -> String + Send + Sync {
    move || {
        let out = std::process::Command::new("pkill")
            .args([
                "-KILL",
                "-P",
                &std::process::id().to_string(),
                "-x",
                program,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "no {program} child to kill");
        format!("{program} (SIGKILL)")
    }
}

#[test]
fn a_local_broker_killed_mid_run_gives_error_cells_naming_the_exit() {
    let (components, heard, killed_at) = certify_with_kill(
        vec![fixture("nats"), fixture("memory")],
        vec![ProvisionKind::LocalProcess],
        3,
        Duration::from_millis(300),
        kill_children_named("nats-server"),
    );
    assert_eq!(components[0].provisioning.kind, "local-process");
    assert_reported_as_death(&components[0], &heard, killed_at, "signal 9 (SIGKILL)");
    let notes = components[0]
        .cases
        .iter()
        .find(|c| c.status == Status::Error)
        .unwrap()
        .evidence
        .notes
        .join(" ");
    assert!(
        notes.contains("nats (pid") && notes.contains("log tail"),
        "{notes}"
    );
    assert!(
        heard
            .iter()
            .any(|(_, line)| line == "cleanup: nothing this run started is still running"),
        "{heard:?}"
    );
    // The next component of the run is unaffected.
    for cell in &components[1].cases {
        assert_eq!(cell.status, Status::Pass, "{}", describe(cell));
    }
}

#[test]
fn a_broker_container_killed_mid_run_gives_error_cells_naming_the_exit() {
    let kill = || {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let ours = tokio
            .block_on(container::leftovers(Some(std::process::id())))
            .unwrap();
        assert_eq!(ours.len(), 1, "one container expected: {ours:?}");
        let out = std::process::Command::new("docker")
            .args(["kill", "--signal", "KILL", &ours[0].0])
            .output()
            .unwrap();
        assert!(out.status.success());
        format!("container {}", ours[0].0)
    };
    let (components, heard, killed_at) = certify_with_kill(
        vec![fixture("redis")],
        vec![ProvisionKind::Container],
        3,
        Duration::from_millis(200),
        kill,
    );
    assert_eq!(components[0].provisioning.kind, "container");
    assert_reported_as_death(&components[0], &heard, killed_at, "code 137 (signal 9)");
    // Nothing it started is left behind, and the run said so.
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let left = tokio
        .block_on(container::leftovers(Some(std::process::id())))
        .unwrap();
    assert!(left.is_empty(), "containers left behind: {left:?}");
    assert!(
        heard
            .iter()
            .any(|(_, line)| line == "cleanup: nothing this run started is still running"),
        "{heard:?}"
    );
}

#[test]
fn with_restart_broker_the_remaining_cases_run_on_a_restarted_broker() {
    let cases = Selection {
        components: Vec::new(),
        case_glob: Some("publish.*".into()),
        level: None,
    }
    .cases()
    .unwrap();
    let options = CertifyOptions {
        run: RunOptions::default(),
        provision: Some(vec![ProvisionKind::LocalProcess]),
        restart_broker: true,
        // One case at a time: the kill comes between two cases, not during one.
        jobs: 1,
        ..CertifyOptions::default()
    };
    let progress: Progress = Arc::new(|_: &str, line: &str| {
        if line.starts_with("redis: [1/") {
            kill_children_named("redis-server")();
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let report = tokio.block_on(certify(&[fixture("redis")], &cases, &options, progress));
    let cells = &report.components[0].cases;
    assert_eq!(cells[0].status, Status::Pass, "{}", describe(&cells[0]));
    for cell in &cells[1..] {
        assert_eq!(cell.status, Status::Pass, "{}", describe(cell));
        assert!(
            cell.evidence
                .notes
                .iter()
                .any(|n| n.contains("restarted broker") && n.contains("signal 9")),
            "{}",
            describe(cell)
        );
    }
}

/// A component whose publishes fail now and then although its broker is fine.
struct FailsOneIn {
    inner: Arc<dyn Component>,
    every: u64,
    count: AtomicU64,
}

#[async_trait]
impl Component for FailsOneIn {
    fn kind(&self) -> &str {
        self.inner.kind()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn broker_version(&self) -> Result<String> {
        self.inner.broker_version().await
    }
    async fn publish(&self, message: OutgoingMessage) -> Result<MessageId> {
        if self.count.fetch_add(1, Ordering::SeqCst) % self.every == self.every - 1 {
            return Err(PubSubError::broker(
                "publishing",
                "connection reset by peer",
            ));
        }
        self.inner.publish(message).await
    }
    async fn consumer(&self, spec: ConsumerSpec) -> Result<Box<dyn Consumer>> {
        self.inner.consumer(spec).await
    }
    async fn create_group(&self, spec: &ConsumerSpec) -> Result<()> {
        self.inner.create_group(spec).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_errs_while_its_broker_is_healthy_still_fails() {
    let definition = fixture("redis");
    let provisioned = provision::provision(
        &definition,
        &provision::order_for("redis-streams", Some(&[ProvisionKind::LocalProcess])),
    )
    .await
    .ok()
    .unwrap();
    let faulty = Arc::new(FailsOneIn {
        inner: provisioned.component.clone(),
        every: 7,
        count: AtomicU64::new(0),
    });
    let runtime = Runtime::new("redis-fails-one-in-7", faulty);
    let environment = CaseEnvironment::of(provisioned.broker.clone());
    let result = run_case_in(
        find("publish.delivery").unwrap(),
        &runtime,
        &RunOptions::once(),
        &environment,
    )
    .await;
    assert_eq!(result.status, Status::Fail, "{}", describe(&result));
    assert!(
        result
            .evidence
            .notes
            .iter()
            .any(|n| n.contains("checked the broker")
                && n.contains("the failure is the component's")),
        "{}",
        describe(&result)
    );
    if let Some(broker) = provisioned.broker {
        broker.shutdown().await;
    }
}
