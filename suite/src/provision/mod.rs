//! Provisioning: how the broker behind a component is obtained. Four kinds exist
//! (container, local process, external endpoint, in-process); each component type
//! lists the ones that can serve it in `auto` order (or the order the user gives), and
//! every kind that cannot serve says why and how to get one (NOT PROVISIONED), never
//! hangs. What is provisioned comes with a [`Broker`] handle: its health, watched by
//! the runner, and the faults the certification level injects.

pub mod axis;
pub mod broker;
pub mod container;
pub mod health;
mod ports;
mod process;
pub mod spec;
pub mod versions;

pub use broker::Broker;
pub use container::BrokerContainer;
pub use health::{Health, HealthSender, HealthWatch};
pub use process::BrokerProcess;
pub use spec::{needs_broker, BrokerSpec, CommandLine, ContainerImage, ContainerSpec};

/// How to spawn the broker a component type needs, where this suite knows how (a
/// registered type: the broker of the built-in type it names): its module in
/// `crate::brokers`.
pub fn broker_spec(component_type: &str) -> Option<BrokerSpec> {
    crate::brokers::of(pubsub_components::registry::broker_type(component_type))
        .map(|broker| (broker.spec)())
}

use async_trait::async_trait;
use pubsub_components::config::{ComponentDefinition, CONTAINER_IMAGE_ANNOTATION};
use pubsub_components::{registry, Component};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The ways a broker can be obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionKind {
    /// A container through testcontainers (needs a Docker engine).
    Container,
    /// An installed broker binary spawned on a free port with its own data directory.
    LocalProcess,
    /// A broker the user names (environment or the definition).
    External,
    /// Inside this process (the in-memory component).
    InProcess,
}

impl fmt::Display for ProvisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProvisionKind::Container => "container",
            ProvisionKind::LocalProcess => "local-process",
            ProvisionKind::External => "external",
            ProvisionKind::InProcess => "in-process",
        })
    }
}

impl ProvisionKind {
    /// Parses `container`, `local` (or `local-process`), `external` or `in-process`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "container" => Ok(ProvisionKind::Container),
            "local" | "local-process" => Ok(ProvisionKind::LocalProcess),
            "external" => Ok(ProvisionKind::External),
            "in-process" => Ok(ProvisionKind::InProcess),
            other => Err(format!(
                "unknown provisioning kind '{other}' (expected container, local, external or in-process)"
            )),
        }
    }

    /// Parses a comma-separated order such as `container,local,external`.
    pub fn parse_order(text: &str) -> Result<Vec<Self>, String> {
        let mut kinds = Vec::new();
        for part in text.split(',') {
            let kind = Self::parse(part)?;
            if kinds.contains(&kind) {
                return Err(format!("'{}' is named twice in '{text}'", part.trim()));
            }
            kinds.push(kind);
        }
        Ok(kinds)
    }
}

/// The environment variable that sets the provisioning order for the test targets
/// (what `certify --provision` sets for a run), e.g. `container,local,external`.
pub const ORDER_VARIABLE: &str = "PUBSUB_PROVISION";

/// A component ready to certify, with the broker behind it.
pub struct Provisioned {
    pub kind: ProvisionKind,
    pub endpoint: Option<String>,
    pub component: Arc<dyn Component>,
    /// The broker, watched and faulted by the harness; `None` in process. Dropping it
    /// stops what was started.
    pub broker: Option<Arc<dyn Broker>>,
}

/// Why a kind could not serve a component, and how to get one.
#[derive(Debug, Clone, PartialEq)]
pub struct NotProvisioned {
    pub kind: ProvisionKind,
    pub reason: String,
    pub hint: String,
}

impl fmt::Display for NotProvisioned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (hint: {})", self.kind, self.reason, self.hint)
    }
}

/// One way of obtaining brokers.
#[async_trait]
pub trait Provisioner: Send + Sync {
    /// Which kind this is.
    fn kind(&self) -> ProvisionKind;

    /// Obtains the broker for `definition` and builds the component on it.
    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned>;
}

fn not(kind: ProvisionKind, reason: impl Into<String>, hint: impl Into<String>) -> NotProvisioned {
    NotProvisioned {
        kind,
        reason: reason.into(),
        hint: hint.into(),
    }
}

/// How long a broker the suite just started may refuse the component's first
/// connection while it finishes starting (PostgreSQL accepts connections before it
/// serves them: "the database system is starting up").
const STARTING_UP: Duration = Duration::from_secs(15);

/// Builds the component on what `kind` obtained; a broker this run started is shut
/// down when the component cannot be built on it.
async fn build(
    kind: ProvisionKind,
    definition: &ComponentDefinition,
    broker: Option<Arc<dyn Broker>>,
    endpoint: Option<String>,
) -> Result<Provisioned, NotProvisioned> {
    let deadline = tokio::time::Instant::now() + STARTING_UP;
    let mut built = registry::build(definition, endpoint.as_deref()).await;
    // Only a broker this run started (a container, a process) may still be starting; a
    // configuration error, and any broker the run did not start, is reported at once.
    while broker.is_some()
        && matches!(&built, Err(registry::BuildError::Connect(e)) if e.kind() == pubsub_components::ErrorKind::Broker)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
        built = registry::build(definition, endpoint.as_deref()).await;
    }
    match built {
        Ok(component) => Ok(Provisioned {
            kind,
            endpoint,
            component,
            broker,
        }),
        Err(e) => {
            if let Some(broker) = broker {
                broker.shutdown().await;
            }
            Err(not(
                kind,
                e.to_string(),
                format!("check {} and the broker", definition.source.display()),
            ))
        }
    }
}

/// What a kind obtains for a definition: the broker (none in process), or why there is
/// none and how to get one.
type Obtained = Result<Option<Arc<dyn Broker>>, (String, String)>;

/// One kind's way of obtaining the broker for a definition: each [`Provisioner`] but
/// the component's build, which is the same for all.
#[async_trait]
trait Obtain: Send + Sync {
    const KIND: ProvisionKind;

    async fn obtain(&self, definition: &ComponentDefinition) -> Obtained;
}

#[async_trait]
impl<T: Obtain> Provisioner for T {
    fn kind(&self) -> ProvisionKind {
        T::KIND
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        let broker = match self.obtain(definition).await {
            Ok(broker) => broker,
            Err((reason, hint)) => return Err(not(T::KIND, reason, hint)),
        };
        let endpoint = broker.as_ref().map(|broker| broker.endpoint());
        build(T::KIND, definition, broker, endpoint).await
    }
}

/// Builds components that need no broker at all.
pub struct InProcess;

#[async_trait]
impl Obtain for InProcess {
    const KIND: ProvisionKind = ProvisionKind::InProcess;

    async fn obtain(&self, definition: &ComponentDefinition) -> Obtained {
        if needs_broker(&definition.component_type) {
            return Err((
                format!("type pubsub.{} needs a broker", definition.component_type),
                "use another provisioning kind".into(),
            ));
        }
        Ok(None)
    }
}

/// Spawns the installed broker binary on a free loopback port with a fresh data dir.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalProcess {
    /// For the fault cases, which kill and restart it: the broker keeps its data
    /// ([`BrokerSpec::keeping_data`]).
    pub faulted: bool,
}

#[async_trait]
impl Obtain for LocalProcess {
    const KIND: ProvisionKind = ProvisionKind::LocalProcess;

    async fn obtain(&self, definition: &ComponentDefinition) -> Obtained {
        let spec = broker_spec(&definition.component_type).ok_or_else(|| {
            (
                "no broker to spawn for this type".to_string(),
                "use in-process".to_string(),
            )
        })?;
        let spec = if self.faulted {
            spec.keeping_data()
        } else {
            spec
        };
        let process = BrokerProcess::spawn(&spec)
            .await
            .map_err(|e| (e, spec.install_hint()))?;
        Ok(Some(Arc::new(process)))
    }
}

/// The environment variable naming an external endpoint for a component.
pub fn endpoint_variable(name: &str) -> String {
    format!("PUBSUB_{}_ENDPOINT", name.to_uppercase().replace('-', "_"))
}

/// Uses a broker the user names: `PUBSUB_<NAME>_ENDPOINT`, else the definition's host.
pub struct External;

#[async_trait]
impl Obtain for External {
    const KIND: ProvisionKind = ProvisionKind::External;

    async fn obtain(&self, definition: &ComponentDefinition) -> Obtained {
        let variable = endpoint_variable(&definition.name);
        let endpoint = match std::env::var(&variable) {
            Ok(endpoint) => endpoint,
            Err(_) => registry::validate(definition)
                .ok()
                .and_then(|checked| checked.endpoint)
                .ok_or_else(|| {
                    (
                        "no endpoint named".to_string(),
                        format!("set {variable}=host:port"),
                    )
                })?,
        };
        if probe(&endpoint, Duration::from_secs(3)).await.is_err() {
            return Err((
                format!("nothing answers at {endpoint}"),
                format!("start the broker (scripts/services.sh) or set {variable}"),
            ));
        }
        let broker = ExternalBroker::watch(&definition.component_type, &endpoint);
        Ok(Some(Arc::new(broker)))
    }
}

/// Connects to `endpoint` once, within `within`: how it failed (`failed: <error>` or
/// `timed out`).
async fn probe(endpoint: &str, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, tokio::net::TcpStream::connect(endpoint)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("failed: {e}")),
        Err(_) => Err("timed out".to_string()),
    }
}

/// A broker the user runs: watched by connecting to it every second; the suite
/// cannot fault it.
pub struct ExternalBroker {
    name: String,
    endpoint: String,
    health: HealthSender,
    prober: tokio::task::JoinHandle<()>,
}

/// Consecutive failed probes, a second apart, after which an external broker is gone.
const EXTERNAL_PROBES: u32 = 3;

impl ExternalBroker {
    /// Starts watching `endpoint`.
    pub fn watch(component_type: &str, endpoint: &str) -> Self {
        let health = HealthSender::new();
        let prober = {
            let health = health.clone();
            let endpoint = endpoint.to_string();
            tokio::spawn(async move {
                let mut failures = 0;
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    match probe(&endpoint, Duration::from_secs(1)).await {
                        Ok(()) => failures = 0,
                        Err(how) => {
                            failures += 1;
                            if failures >= EXTERNAL_PROBES {
                                health.down(
                                    format!("the external broker at {endpoint} stopped answering"),
                                    format!("{failures} probes 1 s apart {how}"),
                                );
                            }
                        }
                    }
                }
            })
        };
        ExternalBroker {
            name: broker_spec(component_type)
                .map(|s| s.name.to_string())
                .unwrap_or_else(|| component_type.to_string()),
            endpoint: endpoint.to_string(),
            health,
            prober,
        }
    }
}

#[async_trait]
impl Broker for ExternalBroker {
    fn describe(&self) -> String {
        format!("{} (external) at {}", self.name, self.endpoint)
    }

    fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    fn log_tail(&self) -> String {
        "(an external broker's log is not available to the suite)".into()
    }

    fn can_fault(&self) -> bool {
        false
    }

    async fn kill(&self) -> Result<(), String> {
        Err(broker::cannot_fault(self, "kill"))
    }

    async fn restart(&self) -> Result<(), String> {
        Err(broker::cannot_fault(self, "restart"))
    }

    async fn pause(&self) -> Result<(), String> {
        Err(broker::cannot_fault(self, "pause"))
    }

    async fn resume(&self) -> Result<(), String> {
        Err(broker::cannot_fault(self, "resume"))
    }

    async fn leftover(&self) -> Option<String> {
        None
    }

    async fn shutdown(&self) {
        self.prober.abort();
    }
}

impl Drop for ExternalBroker {
    fn drop(&mut self) {
        self.prober.abort();
    }
}

/// Runs the broker in a container through testcontainers: the upstream image where
/// the engine has it, else the one `scripts/images.sh` builds (or the image named by
/// `PUBSUB_<BROKER>_IMAGE` or the definition's annotation).
#[derive(Debug, Clone, Default)]
pub struct Container {
    /// The engine to use (as `DOCKER_HOST`); `None`: the environment's.
    pub docker_host: Option<String>,
}

#[async_trait]
impl Obtain for Container {
    const KIND: ProvisionKind = ProvisionKind::Container;

    async fn obtain(&self, definition: &ComponentDefinition) -> Obtained {
        if let Some(problem) = container::engine_problem(self.docker_host.as_deref()).await {
            return Err((
                problem,
                "start one (scripts/install.sh starts dockerd), or use the local-process or external kind".into(),
            ));
        }
        let spec = broker_spec(&definition.component_type).ok_or_else(|| {
            (
                format!(
                    "no container image is known for pubsub.{}",
                    definition.component_type
                ),
                "use another provisioning kind".to_string(),
            )
        })?;
        // What scripts/images.sh calls the broker's image.
        let local = spec.container.local.name.trim_start_matches("pcs/");
        let annotated = definition.annotations.get(CONTAINER_IMAGE_ANNOTATION);
        let image =
            container::choose_image(&spec.container, spec.name, annotated.map(String::as_str))
                .await
                .map_err(|reason| (reason, format!("build it: scripts/images.sh {local}")))?;
        let broker = BrokerContainer::start(&spec, &image)
            .await
            .map_err(|reason| {
                (
                    reason,
                    format!("rebuild the image: scripts/images.sh --rebuild {local}"),
                )
            })?;
        Ok(Some(Arc::new(broker)))
    }
}

fn provisioner(kind: ProvisionKind) -> Box<dyn Provisioner> {
    match kind {
        ProvisionKind::Container => Box::new(Container::default()),
        ProvisionKind::LocalProcess => Box::new(LocalProcess::default()),
        ProvisionKind::External => Box::new(External),
        ProvisionKind::InProcess => Box::new(InProcess),
    }
}

/// The provisioners that can serve a component type, in `auto` order: a named external
/// endpoint first, then a spawned process, then the definition's endpoint, then a
/// container; for brokers slow to start, the definition's endpoint before a spawned
/// process.
pub fn auto_order(component_type: &str) -> Vec<Box<dyn Provisioner>> {
    if !registry::is_known(component_type) {
        return Vec::new();
    }
    if !needs_broker(component_type) {
        return vec![Box::new(InProcess)];
    }
    match broker_spec(component_type) {
        None => vec![Box::new(External), Box::new(Container::default())],
        Some(spec) if spec.prefer_external => vec![
            Box::new(External),
            Box::new(LocalProcess::default()),
            Box::new(Container::default()),
        ],
        Some(_) => vec![
            Box::new(LocalProcess::default()),
            Box::new(External),
            Box::new(Container::default()),
        ],
    }
}

/// The order `certify` tries by default: a broker of the run's own first (a local
/// process, even for brokers slow to start: certify hides the start behind other
/// components' cases), so that nothing left on a shared server by earlier runs (a
/// RabbitMQ server deleting hundreds of expired quorum queues stalls every queue
/// declaration meanwhile) weighs on this one; then the auto order's others.
pub fn own_broker_order(component_type: &str) -> Vec<Box<dyn Provisioner>> {
    let mut order = auto_order(component_type);
    if let Some(local) = order
        .iter()
        .position(|p| p.kind() == ProvisionKind::LocalProcess)
    {
        let local = order.remove(local);
        order.insert(0, local);
    }
    order
}

/// The provisioners for a component type in the order the user gave (`None`: the
/// auto order). Components that need no broker are always served in process.
pub fn order_for(
    component_type: &str,
    order: Option<&[ProvisionKind]>,
) -> Vec<Box<dyn Provisioner>> {
    match order {
        None => auto_order(component_type),
        Some(_) if !registry::is_known(component_type) => Vec::new(),
        Some(_) if !needs_broker(component_type) => vec![Box::new(InProcess)],
        Some(kinds) => kinds
            .iter()
            .filter(|k| **k != ProvisionKind::InProcess)
            .map(|k| provisioner(*k))
            .collect(),
    }
}

/// The brokers the fault cases get, in `kinds` order (default: a local process, else
/// a container, which the suite controls: kill, restart, pause, cut off); a local
/// process keeps its data across a kill.
pub fn faults_order(
    component_type: &str,
    kinds: Option<&[ProvisionKind]>,
) -> Vec<Box<dyn Provisioner>> {
    let kinds = kinds.unwrap_or(&[ProvisionKind::LocalProcess, ProvisionKind::Container]);
    let mut order = order_for(component_type, Some(kinds));
    for provisioner in order.iter_mut() {
        if provisioner.kind() == ProvisionKind::LocalProcess {
            *provisioner = Box::new(LocalProcess { faulted: true });
        }
    }
    order
}

/// The order named by `PUBSUB_PROVISION`, if set (an error names a bad value).
pub fn order_from_environment() -> Result<Option<Vec<ProvisionKind>>, String> {
    match std::env::var(ORDER_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => ProvisionKind::parse_order(&text)
            .map(Some)
            .map_err(|e| format!("{ORDER_VARIABLE}: {e}")),
        _ => Ok(None),
    }
}

/// Tries each provisioner in order; returns the first that serves, or every reason.
/// A `PUBSUB_<NAME>_ENDPOINT` variable makes the external kind go first.
pub async fn provision(
    definition: &ComponentDefinition,
    order: &[Box<dyn Provisioner>],
) -> Result<Provisioned, Vec<NotProvisioned>> {
    let mut reasons = Vec::new();
    if std::env::var_os(endpoint_variable(&definition.name)).is_some() {
        match External.provision(definition).await {
            Ok(provisioned) => return Ok(provisioned),
            Err(reason) => reasons.push(reason),
        }
    }
    for provisioner in order {
        match provisioner.provision(definition).await {
            Ok(provisioned) => return Ok(provisioned),
            Err(reason) => reasons.push(reason),
        }
    }
    if reasons.is_empty() {
        reasons.push(match registry::compiled_out(&definition.component_type) {
            Some(feature) => not(
                ProvisionKind::InProcess,
                format!(
                    "this build leaves out type pubsub.{}",
                    definition.component_type
                ),
                format!("build with the cargo feature '{feature}' (on by default)"),
            ),
            None => not(
                ProvisionKind::External,
                format!(
                    "no provisioner knows type pubsub.{}",
                    definition.component_type
                ),
                "see README: adding a component",
            ),
        });
    }
    Err(reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn definition(component_type: &str) -> ComponentDefinition {
        let text = format!(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: x\nspec:\n  type: pubsub.{component_type}\n"
        );
        ComponentDefinition::parse(&text, Path::new("x.yaml")).unwrap()
    }

    /// Provisions a component of `component_type` in the auto order.
    async fn provision_auto(component_type: &str) -> Result<Provisioned, Vec<NotProvisioned>> {
        provision(&definition(component_type), &auto_order(component_type)).await
    }

    #[tokio::test]
    async fn in_process_serves_the_memory_component() {
        let provisioned = provision_auto("in-memory").await.ok().unwrap();
        assert_eq!(provisioned.kind, ProvisionKind::InProcess);
        assert_eq!(provisioned.component.kind(), "in-memory");
    }

    #[tokio::test]
    async fn unknown_types_are_not_provisioned_with_a_reason() {
        let reasons = provision_auto("carrier-pigeon").await.err().unwrap();
        assert!(reasons[0].reason.contains("carrier-pigeon"), "{reasons:?}");
        let in_process = InProcess
            .provision(&definition("redis-streams"))
            .await
            .err()
            .unwrap();
        assert!(in_process.to_string().contains("needs a broker"));
    }

    #[tokio::test]
    async fn without_a_docker_engine_the_container_kind_says_why_quickly() {
        let started = std::time::Instant::now();
        let no_engine = Container {
            docker_host: Some("unix:///nonexistent/docker.sock".into()),
        };
        let reason = no_engine
            .provision(&definition("redis-streams"))
            .await
            .err()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(8));
        assert_eq!(reason.kind, ProvisionKind::Container);
        assert!(
            !reason.reason.is_empty() && !reason.hint.is_empty(),
            "{reason}"
        );
    }

    /// Spawns the broker of `component_type`, checks it answers, kills it, checks it
    /// is gone, restarts it on the same port and checks it answers again.
    async fn spawn_kill_restart(component_type: &str) {
        // As the fault cases spawn it: its data kept across the kill.
        let spec = broker_spec(component_type).unwrap().keeping_data();
        let process = BrokerProcess::spawn(&spec)
            .await
            .unwrap_or_else(|e| panic!("spawning {}: {e}", spec.name));
        let port = process.port();
        let answers = || tokio::net::TcpStream::connect(("127.0.0.1", port));
        assert!(answers().await.is_ok());
        process.kill().await;
        assert!(answers().await.is_err(), "{} still answers", spec.name);
        process
            .restart()
            .await
            .unwrap_or_else(|e| panic!("restarting {}: {e}", spec.name));
        assert!(answers().await.is_ok());
        assert!(
            process.leftover().await.is_some(),
            "a running broker is reported"
        );
        process.shutdown().await;
        assert_eq!(
            process.leftover().await,
            None,
            "nothing is left after shutdown"
        );
    }

    #[tokio::test]
    async fn a_local_redis_is_spawned_killed_and_restarted() {
        spawn_kill_restart("redis-streams").await;
    }

    #[tokio::test]
    async fn a_local_mosquitto_is_spawned_killed_and_restarted() {
        spawn_kill_restart("mqtt5").await;
    }

    #[tokio::test]
    async fn a_local_postgres_is_initialised_spawned_killed_and_restarted() {
        spawn_kill_restart("postgres").await;
    }

    #[tokio::test]
    async fn a_local_rabbitmq_is_spawned_killed_and_restarted() {
        spawn_kill_restart("rabbitmq").await;
    }

    /// tansu, the Kafka-protocol broker (built by scripts/install.sh), keyed by the
    /// Kafka component's type.
    #[tokio::test]
    async fn a_local_tansu_is_spawned_killed_and_restarted() {
        spawn_kill_restart("kafka").await;
    }

    /// Starts the broker of `component_type` in a container, checks it answers, kills
    /// it (the watch says the suite did it), restarts it on the same port, then kills
    /// it from outside (the watch reports the exit code within seconds), and checks
    /// that shutting down removes the container.
    async fn container_kill_restart(component_type: &str) {
        let spec = broker_spec(component_type).unwrap();
        let image = container::choose_image(&spec.container, spec.name, None)
            .await
            .unwrap_or_else(|e| panic!("{e} (run scripts/images.sh)"));
        let broker = BrokerContainer::start(&spec, &image)
            .await
            .unwrap_or_else(|e| panic!("starting {}: {e}", spec.name));
        let health = broker.health();
        broker.answers(Duration::from_secs(2)).await.unwrap();
        broker.kill().await.unwrap();
        assert!(broker.answers(Duration::from_secs(1)).await.is_err());
        assert!(matches!(health.current(), Health::Faulted(_)));
        broker.restart().await.unwrap();
        broker.answers(Duration::from_secs(2)).await.unwrap();
        assert_eq!(health.current(), Health::Up);
        let killed = std::process::Command::new("docker")
            .args(["kill", "--signal", "KILL", broker.id()])
            .output()
            .unwrap();
        assert!(killed.status.success());
        let reason = broker
            .health()
            .gone_within(Duration::from_secs(5))
            .await
            .expect("an outside kill is reported");
        assert!(reason.contains("code 137 (signal 9)"), "{reason}");
        let id = broker.id().to_string();
        broker.shutdown().await;
        assert_eq!(broker.leftover().await, None);
        let left = container::leftovers(Some(std::process::id()))
            .await
            .unwrap();
        assert!(
            !left.iter().any(|(c, _)| id.starts_with(c.as_str())),
            "{left:?}"
        );
    }

    #[tokio::test]
    async fn a_redis_container_is_killed_restarted_and_watched() {
        container_kill_restart("redis-streams").await;
    }

    #[tokio::test]
    async fn a_nats_container_is_killed_restarted_and_watched() {
        container_kill_restart("nats-jetstream").await;
    }

    #[tokio::test]
    async fn a_mosquitto_container_is_killed_restarted_and_watched() {
        container_kill_restart("mqtt5").await;
    }

    #[tokio::test]
    async fn a_postgres_container_is_killed_restarted_and_watched() {
        container_kill_restart("postgres").await;
    }

    #[tokio::test]
    async fn a_tansu_container_is_killed_restarted_and_watched() {
        container_kill_restart("kafka").await;
    }

    #[tokio::test]
    async fn a_rabbitmq_container_is_killed_restarted_and_watched() {
        container_kill_restart("rabbitmq").await;
    }

    #[test]
    fn provisioning_orders_parse_and_bad_ones_are_named() {
        assert_eq!(
            ProvisionKind::parse_order("container,local,external").unwrap(),
            vec![
                ProvisionKind::Container,
                ProvisionKind::LocalProcess,
                ProvisionKind::External
            ]
        );
        let bad = ProvisionKind::parse_order("container,kubernetes").unwrap_err();
        assert!(bad.contains("'kubernetes'"), "{bad}");
        let twice = ProvisionKind::parse_order("local,local-process").unwrap_err();
        assert!(twice.contains("named twice"), "{twice}");
        let kinds: Vec<_> = order_for("redis-streams", Some(&[ProvisionKind::Container]))
            .iter()
            .map(|p| p.kind())
            .collect();
        assert_eq!(kinds, vec![ProvisionKind::Container]);
        let memory: Vec<_> = order_for("in-memory", Some(&[ProvisionKind::Container]))
            .iter()
            .map(|p| p.kind())
            .collect();
        assert_eq!(memory, vec![ProvisionKind::InProcess]);
    }

    #[tokio::test]
    async fn a_local_process_killed_from_outside_is_reported_with_its_signal() {
        let spec = broker_spec("redis-streams").unwrap();
        let process = BrokerProcess::spawn(&spec).await.unwrap();
        let mut health = process.health();
        let pid = process.pid().unwrap();
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        let reason = health
            .gone_within(Duration::from_secs(2))
            .await
            .expect("the exit is reported");
        assert!(
            reason.contains("redis (pid") && reason.contains("signal 9 (SIGKILL)"),
            "{reason}"
        );
        assert!(reason.contains("its log tail"), "{reason}");
    }

    #[tokio::test]
    async fn an_external_endpoint_that_stops_answering_is_reported_gone() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = listener.local_addr().unwrap().to_string();
        let broker = ExternalBroker::watch("redis-streams", &endpoint);
        let mut health = broker.health();
        assert_eq!(health.gone_within(Duration::from_millis(1500)).await, None);
        drop(listener);
        let reason = health
            .gone_within(Duration::from_secs(6))
            .await
            .expect("reported gone after three failed probes");
        assert!(
            reason.contains(&endpoint) && reason.contains("stopped answering"),
            "{reason}"
        );
        assert!(!broker.can_fault());
        assert!(broker
            .kill()
            .await
            .unwrap_err()
            .contains("does not control"));
    }

    #[tokio::test]
    async fn slow_brokers_try_the_named_endpoint_before_spawning() {
        for (component_type, first) in [
            ("postgres", ProvisionKind::External),
            ("rabbitmq", ProvisionKind::External),
            ("redis-streams", ProvisionKind::LocalProcess),
            ("mqtt5", ProvisionKind::LocalProcess),
        ] {
            assert_eq!(
                auto_order(component_type)[0].kind(),
                first,
                "{component_type}"
            );
        }
    }
}
