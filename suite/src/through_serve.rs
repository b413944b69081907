//! Rows certified through `serve`: a component's cases run over Dapr's HTTP API,
//! against `serve` in front of the same component and broker, beside its in-process
//! row.

use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_sidecar::launch::ServeLauncher;
use pubsub_sidecar::target::{capabilities_over_http, WireDescription};
use pubsub_sidecar::{ServedComponent, SidecarTarget};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The suffix of a row certified through `serve`.
pub const ROW_SUFFIX: &str = " via serve";

/// How long a sidecar may take to read its app's subscriptions, and the app to
/// answer a delivery.
const SIDECAR_WITHIN: Duration = Duration::from_secs(30);

/// A runtime whose publish and subscribe go over HTTP to `serve` in front of
/// `component`, and the target to stop once the row is done.
pub async fn runtime(
    definition: &ComponentDefinition,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let name = definition.name.clone();
    let mut components = BTreeMap::new();
    components.insert(
        name.clone(),
        ServedComponent {
            runtime: Runtime::new(name.clone(), component.clone()),
            component_type: format!("pubsub.{}", definition.component_type),
        },
    );
    let launcher = Arc::new(ServeLauncher {
        components,
        app_timeout: SIDECAR_WITHIN,
    });
    let target = Arc::new(SidecarTarget::start(launcher, &name, SIDECAR_WITHIN).await?);
    let description = Arc::new(WireDescription {
        kind: format!("{}{ROW_SUFFIX}", component.kind()),
        capabilities: capabilities_over_http(&component.capabilities()),
        broker_version: broker_version.unwrap_or_default(),
    });
    Ok((Runtime::remote(name, description, target.clone()), target))
}
