//! What the suite knows about running each broker type: the installed binary and
//! its arguments for the local-process kind, and the images for the container kind.

use crate::fault_proxy::Wire;
use std::time::Duration;

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
    /// Where the program comes from (for the NOT PROVISIONED hint).
    pub source: Source,
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
    /// The images for the container kind.
    pub container: ContainerSpec,
    /// How a fault proxy relays its protocol.
    pub proxy_wire: Wire,
    /// The arguments that make the program print its version, for brokers whose
    /// protocol does not tell a client which software it talks to (empty: it does).
    pub version_args: &'static [&'static str],
    /// Arguments that keep the broker's data across a kill, for the brokers the fault
    /// cases kill and restart, where `args` keep it in memory; `None`: `args` do.
    pub durable_args: Option<&'static [&'static str]>,
}

/// Where a broker's program comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Debian package, installed by `scripts/install.sh`.
    Debian(&'static str),
    /// Built by `scripts/install.sh`: how to get it.
    Built(&'static str),
}

impl BrokerSpec {
    /// The spec for a broker the fault cases kill and restart: its data kept.
    pub fn keeping_data(mut self) -> BrokerSpec {
        if let Some(args) = self.durable_args {
            self.args = args;
        }
        self
    }

    /// How to get the broker's program, for a NOT PROVISIONED hint.
    pub fn install_hint(&self) -> String {
        match self.source {
            Source::Debian(package) => {
                format!("install Debian's {package} (scripts/install.sh)")
            }
            Source::Built(how) => how.to_string(),
        }
    }
}

/// True for component types that talk to a broker (a registered type: when the
/// built-in type it names does).
pub fn needs_broker(component_type: &str) -> bool {
    pubsub_components::registry::broker_type(component_type) != "in-memory"
}

/// tansu's arguments: a broker listening on (and advertising) the suite's port,
/// with the given storage engine.
macro_rules! tansu_args {
    ($storage:literal) => {
        &[
            "broker",
            "--listener-url",
            "tcp://127.0.0.1:{port}",
            "--advertised-listener-url",
            "tcp://127.0.0.1:{port}",
            "--storage-engine",
            $storage,
        ]
    };
}

const NO_FILES: &[(&str, &str)] = &[];
const NO_ENV: &[(&str, &str)] = &[];
const NO_COMMANDS: &[CommandLine] = &[];
const POSTGRES_BIN: &str = "/usr/lib/postgresql/*/bin/postgres";

/// How to spawn the broker a component type needs, where this suite knows how (a
/// registered type: the broker of the built-in type it names).
pub fn broker_spec(component_type: &str) -> Option<BrokerSpec> {
    let quick = Duration::from_secs(15);
    match pubsub_components::registry::broker_type(component_type) {
        "redis-streams" => Some(BrokerSpec {
            name: "redis",
            program: "redis-server",
            source: Source::Debian("redis-server"),
            args: &[
                "--port",
                "{port}",
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                // Kept across a kill: the append-only file is written before replies go
                // out (fsync is left to the OS: a crash of the process loses nothing).
                "--appendonly",
                "yes",
                "--appendfsync",
                "no",
                // No background rewrite of that file: the suite's brokers live for one
                // run, and a rewrite forks a child that compresses the whole dataset,
                // which on a small machine takes a core from the run (in `bench`, a
                // third of the samples went to it, and to no measured path).
                "--auto-aof-rewrite-percentage",
                "0",
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
            container: ContainerSpec {
                upstream: ContainerImage::new("redis", "7.2.4-alpine", &["redis-server", "--bind", "127.0.0.1", "--port", "{port}", "--appendonly", "yes"], NO_ENV),
                local: ContainerImage::local("redis"),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }),
        "nats-jetstream" => Some(BrokerSpec {
            name: "nats",
            program: "nats-server",
            source: Source::Debian("nats-server"),
            args: &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "{dir}"],
            env: NO_ENV,
            files: NO_FILES,
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: quick,
            prefer_external: false,
            container: ContainerSpec {
                upstream: ContainerImage::new("nats", "2.10.22-alpine", &["-a", "127.0.0.1", "-p", "{port}", "-js", "-sd", "/data"], NO_ENV),
                local: ContainerImage::local("nats"),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }),
        // Kafka's protocol, served by tansu (no JVM Kafka can be had here): built from
        // crates.io by scripts/install.sh.
        "kafka" => Some(BrokerSpec {
            name: "tansu",
            program: "tansu",
            source: Source::Built(
                "build tansu, the Kafka-protocol broker (scripts/install.sh --broker kafka; about 15 minutes once, then cached)",
            ),
            // In memory: tansu 0.6.0's SQLite storage stalls under load (README,
            // "Kafka"); the fault cases' broker keeps its data (durable_args).
            args: tansu_args!("memory://tansu/"),
            env: &[("NO_COLOR", "1")],
            files: NO_FILES,
            init: NO_COMMANDS,
            after_start: NO_COMMANDS,
            run_as: None,
            ready_within: quick,
            prefer_external: false,
            container: ContainerSpec {
                upstream: ContainerImage::new(
                    "ghcr.io/tansu-io/tansu",
                    "0.6.0",
                    tansu_args!("memory://tansu/"),
                    NO_ENV,
                ),
                local: ContainerImage::local("tansu"),
            },
            proxy_wire: Wire::Kafka,
            version_args: &["--version"],
            // SQLite storage keeps what tansu acknowledged across a kill; it stalls
            // under load (hence memory for every other case), and with in-memory
            // storage a restarted tansu hands librdkafka Fetch replies that crash it
            // (leader-change tags with a zero topic id: a NULL topic name
            // dereferenced in rd_kafka_metadata_update_op).
            // The data directory is the working directory: tansu takes an absolute
            // path as relative too.
            durable_args: Some(tansu_args!("sqlite://tansu.db")),
        }),
        "mqtt5" => Some(BrokerSpec {
            name: "mosquitto",
            program: "mosquitto",
            source: Source::Debian("mosquitto"),
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
            container: ContainerSpec {
                upstream: ContainerImage::new("eclipse-mosquitto", "2.0.18", &[
                    "sh",
                    "-c",
                    "printf 'listener {port} 127.0.0.1\\nallow_anonymous true\\npersistence true\\npersistence_location /mosquitto/data/\\n' > /tmp/m.conf && exec mosquitto -c /tmp/m.conf",
                ], NO_ENV),
                local: ContainerImage::local("mosquitto"),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }),
        "rabbitmq" => Some(BrokerSpec {
            name: "rabbitmq",
            // The Debian wrapper in /usr/sbin switches user and ignores the environment.
            program: "/usr/lib/rabbitmq/bin/rabbitmq-server",
            source: Source::Debian("rabbitmq-server"),
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
            container: ContainerSpec {
                upstream: ContainerImage::new("rabbitmq", "3.13.7-alpine", &[], &[
                    ("RABBITMQ_NODENAME", "pcs-c{port}@localhost"),
                    ("RABBITMQ_NODE_PORT", "{port}"),
                    ("RABBITMQ_DIST_PORT", "{aux_port}"),
                ]),
                local: ContainerImage::local("rabbitmq"),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }),
        "postgres" => Some(BrokerSpec {
            name: "postgres",
            program: POSTGRES_BIN,
            source: Source::Debian("postgresql"),
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
            container: ContainerSpec {
                upstream: ContainerImage::new("postgres", "16.4-alpine", &["postgres", "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"], &[
                    ("POSTGRES_HOST_AUTH_METHOD", "trust"),
                    ("POSTGRES_DB", "test"),
                    ("PGPORT", "{port}"),
                ]),
                local: ContainerImage::local("postgres"),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }),
        _ => None,
    }
}

/// The images a broker can run from, for the container kind.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    /// The upstream image a user with a registry would pull (pinned tag), run with the
    /// host's network on `{port}`.
    pub upstream: ContainerImage,
    /// The image `scripts/images.sh` builds from Debian's packages.
    pub local: ContainerImage,
}

/// One container image and how to run it. `{port}` and `{aux_port}` in the command
/// and environment are the broker's free loopback ports; every image also gets them
/// as `PCS_PORT` and `PCS_AUX_PORT` (what the local images' entrypoints read).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerImage {
    pub name: String,
    pub tag: String,
    /// The command (empty: the image's own).
    pub cmd: &'static [&'static str],
    pub env: &'static [(&'static str, &'static str)],
}

/// The tag of the images `scripts/images.sh` builds.
pub const LOCAL_TAG: &str = "bookworm";

impl ContainerImage {
    /// An image with its command and environment.
    pub fn new(
        name: &str,
        tag: &str,
        cmd: &'static [&'static str],
        env: &'static [(&'static str, &'static str)],
    ) -> Self {
        ContainerImage {
            name: name.into(),
            tag: tag.into(),
            cmd,
            env,
        }
    }

    /// The image `scripts/images.sh` builds for `broker` (`pcs/<broker>:bookworm`).
    pub fn local(broker: &str) -> Self {
        ContainerImage::new(&format!("pcs/{broker}"), LOCAL_TAG, &[], NO_ENV)
    }

    /// `name:tag`, run the way `like` is run.
    pub fn parse(reference: &str, like: &ContainerImage) -> Self {
        let (name, tag) = match reference.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name, tag),
            _ => (reference, "latest"),
        };
        ContainerImage {
            name: name.into(),
            tag: tag.into(),
            ..like.clone()
        }
    }

    /// `name:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_the_fault_cases_kill_keeps_its_data() {
        let kafka = broker_spec("kafka").unwrap();
        assert!(kafka.args.contains(&"memory://tansu/"), "{:?}", kafka.args);
        let killed = kafka.keeping_data();
        assert!(
            killed.args.contains(&"sqlite://tansu.db"),
            "{:?}",
            killed.args
        );
        // Brokers whose arguments keep their data already are spawned the same way.
        let redis = broker_spec("redis-streams").unwrap();
        assert_eq!(redis.clone().keeping_data(), redis);
    }
}
