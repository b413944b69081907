//! Provisioning: how the broker behind a component is obtained. Four kinds exist
//! (container, local process, external endpoint, in-process); each component type
//! lists the ones that can serve it in `auto` order, and every kind that cannot serve
//! says why and how to get one (NOT PROVISIONED), never hangs.

mod process;

pub use process::BrokerProcess;

use async_trait::async_trait;
use pubsub_components::config::ComponentDefinition;
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

/// A component ready to certify, with whatever keeps its broker alive.
pub struct Provisioned {
    pub kind: ProvisionKind,
    pub endpoint: Option<String>,
    pub component: Arc<dyn Component>,
    /// Dropped when the run ends (stops a spawned broker, for example).
    pub guard: Option<Box<dyn Send + Sync>>,
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

/// A command line: the program (see [`process::resolve_program`]) and its arguments.
pub type CommandLine = &'static [&'static str];

/// How to run a broker type as a local process or a container. In every template,
/// `{port}` is the broker's port, `{aux_port}` a second free port and `{dir}` its
/// data directory.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerSpec {
    /// A short name for data directories and messages.
    pub name: &'static str,
    /// The installed binary.
    pub program: &'static str,
    /// Debian packages that provide it.
    pub package: &'static str,
    pub args: &'static [&'static str],
    pub env: &'static [(&'static str, &'static str)],
    /// Files written into the data directory before the first start: (name, content).
    pub files: &'static [(&'static str, &'static str)],
    /// Run once before the first start (e.g. initdb).
    pub init: &'static [CommandLine],
    /// Run once after the first start (e.g. createdb).
    pub after_start: &'static [CommandLine],
    /// When the suite runs as root: the user the broker must run as.
    pub run_as: Option<&'static str>,
    /// How long starting may take before the broker accepts connections.
    pub ready_within: Duration,
    /// Slow to start: the definition's endpoint is tried before spawning one.
    pub prefer_external: bool,
    /// The container image and tag, for the container kind.
    pub image: &'static str,
    pub tag: &'static str,
    /// The port the broker listens on inside the container.
    pub container_port: u16,
}

/// True for component types that talk to a broker.
pub fn needs_broker(component_type: &str) -> bool {
    component_type != "in-memory"
}

const NO_FILES: &[(&str, &str)] = &[];
const NO_ENV: &[(&str, &str)] = &[];
const NO_COMMANDS: &[CommandLine] = &[];
const POSTGRES_BIN: &str = "/usr/lib/postgresql/*/bin/postgres";

/// How to spawn the broker a component type needs, where this suite knows how.
pub fn broker_spec(component_type: &str) -> Option<BrokerSpec> {
    let quick = Duration::from_secs(15);
    match component_type {
        "redis-streams" => Some(BrokerSpec {
            name: "redis",
            program: "redis-server",
            package: "redis-server",
            args: &[
                "--port",
                "{port}",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                "{dir}",
            ],
            env: NO_ENV,
            files: NO_FILES,
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: quick,
            prefer_external: false,
            image: "redis",
            tag: "7-alpine",
            container_port: 6379,
        }),
        "nats-jetstream" => Some(BrokerSpec {
            name: "nats",
            program: "nats-server",
            package: "nats-server",
            args: &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "{dir}"],
            env: NO_ENV,
            files: NO_FILES,
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: quick,
            prefer_external: false,
            image: "nats",
            tag: "2.10-alpine",
            container_port: 4222,
        }),
        "mqtt5" => Some(BrokerSpec {
            name: "mosquitto",
            program: "mosquitto",
            package: "mosquitto",
            args: &["-c", "{dir}/mosquitto.conf"],
            env: NO_ENV,
            files: &[(
                "mosquitto.conf",
                "listener {port} 127.0.0.1\nallow_anonymous true\n\
                 max_queued_messages 0\nset_tcp_nodelay true\npersistence true\npersistence_location {dir}/\n",
            )],
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: quick,
            prefer_external: false,
            image: "eclipse-mosquitto",
            tag: "2",
            container_port: 1883,
        }),
        "rabbitmq" => Some(BrokerSpec {
            name: "rabbitmq",
            // The Debian wrapper in /usr/sbin switches user and ignores the environment.
            program: "/usr/lib/rabbitmq/bin/rabbitmq-server",
            package: "rabbitmq-server",
            args: &[],
            env: &[
                ("RABBITMQ_NODENAME", "pcs-{port}@localhost"),
                ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1"),
                ("RABBITMQ_NODE_PORT", "{port}"),
                ("RABBITMQ_DIST_PORT", "{aux_port}"),
                ("RABBITMQ_MNESIA_BASE", "{dir}/mnesia"),
                ("RABBITMQ_LOG_BASE", "{dir}/log"),
                ("RABBITMQ_CONFIG_FILE", "{dir}/rabbitmq.conf"),
                ("RABBITMQ_CONF_ENV_FILE", "{dir}/rabbitmq-env.conf"),
                ("RABBITMQ_ENABLED_PLUGINS_FILE", "{dir}/enabled_plugins"),
            ],
            files: &[
                (
                    "rabbitmq.conf",
                    "listeners.tcp.1 = 127.0.0.1:{port}\nloopback_users = none\n",
                ),
                ("rabbitmq-env.conf", ""),
                ("enabled_plugins", "[].\n"),
            ],
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: Duration::from_secs(60),
            prefer_external: true,
            image: "rabbitmq",
            tag: "3-alpine",
            container_port: 5672,
        }),
        "postgres" => Some(BrokerSpec {
            name: "postgres",
            program: POSTGRES_BIN,
            package: "postgresql",
            args: &[
                "-D",
                "{dir}/data",
                "-p",
                "{port}",
                "-k",
                "{dir}",
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
            ],
            env: NO_ENV,
            files: NO_FILES,
            init: &[&[
                "/usr/lib/postgresql/*/bin/initdb",
                "-D",
                "{dir}/data",
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ]],
            after_start: &[&[
                "/usr/lib/postgresql/*/bin/createdb",
                "-h",
                "127.0.0.1",
                "-p",
                "{port}",
                "-U",
                "postgres",
                "test",
            ]],
            // PostgreSQL refuses to run as root.
            run_as: Some("postgres"),
            ready_within: Duration::from_secs(60),
            prefer_external: true,
            image: "postgres",
            tag: "16-alpine",
            container_port: 5432,
        }),
        _ => None,
    }
}

fn not(kind: ProvisionKind, reason: impl Into<String>, hint: impl Into<String>) -> NotProvisioned {
    NotProvisioned {
        kind,
        reason: reason.into(),
        hint: hint.into(),
    }
}

async fn build(
    kind: ProvisionKind,
    definition: &ComponentDefinition,
    endpoint: Option<String>,
    guard: Option<Box<dyn Send + Sync>>,
) -> Result<Provisioned, NotProvisioned> {
    let component = registry::build(definition, endpoint.as_deref())
        .await
        .map_err(|e| {
            not(
                kind,
                e.to_string(),
                format!("check {} and the broker", definition.source.display()),
            )
        })?;
    Ok(Provisioned {
        kind,
        endpoint,
        component,
        guard,
    })
}

/// Builds components that need no broker at all.
pub struct InProcess;

#[async_trait]
impl Provisioner for InProcess {
    fn kind(&self) -> ProvisionKind {
        ProvisionKind::InProcess
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        if needs_broker(&definition.component_type) {
            return Err(not(
                self.kind(),
                format!("type pubsub.{} needs a broker", definition.component_type),
                "use another provisioning kind",
            ));
        }
        build(self.kind(), definition, None, None).await
    }
}

/// Spawns the installed broker binary on a free loopback port with a fresh data dir.
pub struct LocalProcess;

#[async_trait]
impl Provisioner for LocalProcess {
    fn kind(&self) -> ProvisionKind {
        ProvisionKind::LocalProcess
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        let spec = broker_spec(&definition.component_type).ok_or_else(|| {
            not(
                self.kind(),
                "no broker to spawn for this type",
                "use in-process",
            )
        })?;
        let process = BrokerProcess::spawn(&spec).await.map_err(|e| {
            not(
                self.kind(),
                e,
                format!("install Debian's {} (scripts/install.sh)", spec.package),
            )
        })?;
        let endpoint = format!("127.0.0.1:{}", process.port());
        build(
            self.kind(),
            definition,
            Some(endpoint),
            Some(Box::new(process)),
        )
        .await
    }
}

/// The environment variable naming an external endpoint for a component.
pub fn endpoint_variable(name: &str) -> String {
    format!("PUBSUB_{}_ENDPOINT", name.to_uppercase().replace('-', "_"))
}

/// Uses a broker the user names: `PUBSUB_<NAME>_ENDPOINT`, else the definition's host.
pub struct External;

#[async_trait]
impl Provisioner for External {
    fn kind(&self) -> ProvisionKind {
        ProvisionKind::External
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        let variable = endpoint_variable(&definition.name);
        let endpoint = match std::env::var(&variable) {
            Ok(endpoint) => endpoint,
            Err(_) => registry::validate(definition)
                .ok()
                .and_then(|s| registry::endpoint(&s))
                .ok_or_else(|| {
                    not(
                        self.kind(),
                        "no endpoint named",
                        format!("set {variable}=host:port"),
                    )
                })?,
        };
        let reachable = tokio::time::timeout(
            Duration::from_secs(3),
            tokio::net::TcpStream::connect(&endpoint),
        )
        .await;
        if !matches!(reachable, Ok(Ok(_))) {
            return Err(not(
                self.kind(),
                format!("nothing answers at {endpoint}"),
                format!("start the broker (scripts/services.sh) or set {variable}"),
            ));
        }
        build(self.kind(), definition, Some(endpoint), None).await
    }
}

/// The container kind: only reports whether a Docker engine answers.
pub struct Container;

#[async_trait]
impl Provisioner for Container {
    fn kind(&self) -> ProvisionKind {
        ProvisionKind::Container
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        let spec = broker_spec(&definition.component_type);
        let probe = tokio::process::Command::new("docker")
            .args(["info", "--format", "{{.ServerVersion}}"])
            .kill_on_drop(true)
            .output();
        let reason = match tokio::time::timeout(Duration::from_secs(5), probe).await {
            Err(_) => "the Docker engine did not answer within 5 s".to_string(),
            Ok(Err(e)) => format!("cannot run docker: {e}"),
            Ok(Ok(out)) if !out.status.success() => format!(
                "no Docker engine is reachable: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .next()
                    .unwrap_or("docker info failed")
                    .trim()
            ),
            Ok(Ok(_)) => match spec {
                Some(spec) => format!(
                    "container provisioning of {}:{} is not built yet",
                    spec.image, spec.tag
                ),
                None => format!(
                    "no container image is known for pubsub.{}",
                    definition.component_type
                ),
            },
        };
        Err(not(
            self.kind(),
            reason,
            "use the local-process or external kind",
        ))
    }
}

/// The provisioners that can serve a component type, in `auto` order: a named external
/// endpoint first, then a spawned process, then the definition's endpoint, then a
/// container; for brokers slow to start, the definition's endpoint before a spawned
/// process.
pub fn auto_order(component_type: &str) -> Vec<Box<dyn Provisioner>> {
    if !registry::KNOWN_TYPES.contains(&component_type) {
        return Vec::new();
    }
    if !needs_broker(component_type) {
        return vec![Box::new(InProcess)];
    }
    match broker_spec(component_type) {
        None => vec![Box::new(External), Box::new(Container)],
        Some(spec) if spec.prefer_external => vec![
            Box::new(External),
            Box::new(LocalProcess),
            Box::new(Container),
        ],
        Some(_) => vec![
            Box::new(LocalProcess),
            Box::new(External),
            Box::new(Container),
        ],
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
        reasons.push(not(
            ProvisionKind::External,
            format!(
                "no provisioner knows type pubsub.{}",
                definition.component_type
            ),
            "see README: adding a component",
        ));
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

    #[tokio::test]
    async fn in_process_serves_the_memory_component() {
        let provisioned = provision(&definition("in-memory"), &auto_order("in-memory"))
            .await
            .ok()
            .unwrap();
        assert_eq!(provisioned.kind, ProvisionKind::InProcess);
        assert_eq!(provisioned.component.kind(), "in-memory");
    }

    #[tokio::test]
    async fn unknown_types_are_not_provisioned_with_a_reason() {
        let reasons = provision(&definition("carrier-pigeon"), &auto_order("carrier-pigeon"))
            .await
            .err()
            .unwrap();
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
        let reason = Container
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
        let spec = broker_spec(component_type).unwrap();
        let mut process = BrokerProcess::spawn(&spec)
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
