//! What the sidecar's integration tests share.

use pubsub_components::runtime::Runtime;
use pubsub_sidecar::ServedComponent;
use std::collections::BTreeMap;

/// `runtime`, over an in-memory component, as the components `serve` takes: the
/// pub/sub of its name.
pub fn served_in_memory(runtime: Runtime) -> BTreeMap<String, ServedComponent> {
    BTreeMap::from([(
        runtime.name().to_string(),
        ServedComponent {
            runtime,
            component_type: "pubsub.in-memory".into(),
        },
    )])
}

/// A port free on loopback now.
#[allow(dead_code)] // not every test asks for a port
pub fn free_port() -> u16 {
    pubsub_sidecar::launch::free_port().unwrap()
}
