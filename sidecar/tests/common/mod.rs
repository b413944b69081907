//! What the sidecar's integration tests share.

use pubsub_components::memory::MemoryComponent;
use pubsub_components::runtime::{Runtime, RuntimeOptions};
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

/// A runtime named `mem` over a fresh in-memory component, its app id `app_id`.
#[allow(dead_code)] // not every test serves the default component
pub fn memory_runtime(app_id: &str) -> Runtime {
    Runtime::with_options(
        "mem",
        std::sync::Arc::new(MemoryComponent::default()),
        RuntimeOptions {
            app_id: app_id.into(),
            ..Default::default()
        },
    )
}

/// A port free on loopback now.
#[allow(dead_code)] // not every test asks for a port
pub fn free_port() -> u16 {
    pubsub_sidecar::launch::free_port().unwrap()
}
