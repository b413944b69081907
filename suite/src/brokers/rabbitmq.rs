//! RabbitMQ, for the RabbitMQ component: a `rabbitmq-server` node of its own (its
//! configuration, data and logs in the data directory), RabbitMQ from Debian's
//! releases for the versions axis, and confirmed publishes for the bench's raw
//! comparison.

#[cfg(feature = "rabbitmq")]
pub(super) mod raw;

use crate::provision::spec::{BrokerSpec, ContainerImage, Source};
use std::time::Duration;

/// How to run RabbitMQ.
pub(super) fn spec() -> BrokerSpec {
    let upstream_env = &[
        ("RABBITMQ_NODENAME", "pcs-c{port}@localhost"),
        ("RABBITMQ_NODE_PORT", "{port}"),
        ("RABBITMQ_DIST_PORT", "{aux_port}"),
    ];
    BrokerSpec {
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
        ready_within: Duration::from_secs(60),
        prefer_external: true,
        ..BrokerSpec::new(
            "rabbitmq",
            // The Debian wrapper in /usr/sbin switches user and ignores the environment.
            "/usr/lib/rabbitmq/bin/rabbitmq-server",
            Source::Debian("rabbitmq-server"),
            ContainerImage::new("rabbitmq", "3.13.7-alpine", &[], upstream_env),
        )
    }
}
