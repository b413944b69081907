//! How the suite runs a broker: the installed binary and its arguments for the
//! local-process kind, and the images for the container kind. Each broker's own
//! [`BrokerSpec`] is in its module in `crate::brokers`.

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
    /// A broker run as `program` without arguments, environment or files of its own,
    /// ready within 15 s, spawned before a definition's endpoint is tried, relaying
    /// an opaque protocol through a fault proxy, telling its version to clients, and
    /// keeping its data across a kill; as a container, `upstream`, or the image
    /// `scripts/images.sh` builds for `name`. A broker's module sets what differs.
    pub fn new(
        name: &'static str,
        program: &'static str,
        source: Source,
        upstream: ContainerImage,
    ) -> BrokerSpec {
        BrokerSpec {
            name,
            program,
            source,
            args: &[],
            env: NO_ENV,
            files: &[],
            init: &[],
            after_start: &[],
            run_as: None,
            ready_within: Duration::from_secs(15),
            prefer_external: false,
            container: ContainerSpec {
                upstream,
                local: ContainerImage::local(name),
            },
            proxy_wire: Wire::Opaque,
            version_args: &[],
            durable_args: None,
        }
    }

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

/// No environment variables.
pub(crate) const NO_ENV: &[(&str, &str)] = &[];

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
    use crate::provision::broker_spec;

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
