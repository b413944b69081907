//! Mosquitto, for the MQTT 5 component: a `mosquitto` broker with persistence on,
//! Mosquitto from Debian's releases for the versions axis, and QoS 1 publishes
//! awaiting their PUBACKs for the bench's raw comparison.

#[cfg(feature = "mqtt")]
pub(super) mod raw;

use crate::provision::spec::{BrokerSpec, ContainerImage, Source, NO_ENV};

/// How to run Mosquitto.
pub(super) fn spec() -> BrokerSpec {
    let upstream = &[
        "sh",
        "-c",
        "printf 'listener {port} 127.0.0.1\\nallow_anonymous true\\npersistence true\\npersistence_location /mosquitto/data/\\n' > /tmp/m.conf && exec mosquitto -c /tmp/m.conf",
    ];
    BrokerSpec {
        args: &["-c", "{dir}/mosquitto.conf"],
        files: &[(
            "mosquitto.conf",
            "listener {port} 127.0.0.1\nallow_anonymous true\n\
             max_queued_messages 0\nset_tcp_nodelay true\npersistence true\npersistence_location {dir}/\n",
        )],
        ..BrokerSpec::new(
            "mosquitto",
            "mosquitto",
            Source::Debian("mosquitto"),
            ContainerImage::new("eclipse-mosquitto", "2.0.18", upstream, NO_ENV),
        )
    }
}
