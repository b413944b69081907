//! Rows certified over Dapr's HTTP API: a component's cases run through sidecars,
//! beside its in-process row. The sidecars are `serve` in this process in front of
//! the same component, or processes started from a command line (`serve` as its own
//! program, daprd, any sidecar that speaks the API).

use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_sidecar::launch::{CommandLauncher, Launcher, ServeLauncher};
use pubsub_sidecar::target::{capabilities_over_http, WireDescription};
use pubsub_sidecar::{ServedComponent, SidecarTarget};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The suffix of a row certified through `serve` in this process.
pub const ROW_SUFFIX: &str = " via serve";
/// The suffix of a row certified through sidecars started from a command line.
pub const COMMAND_ROW_SUFFIX: &str = " via sidecar";

/// How long a sidecar may take to read its app's subscriptions, and the app to
/// answer a delivery.
const SIDECAR_WITHIN: Duration = Duration::from_secs(30);

/// The largest request body `serve` takes in these rows, as daprd's
/// `--max-body-size 64Mi` would: above daprd's default of 4 MiB, so that a bulk request
/// of entries just over a component's own message size limit (Kafka's is 1 MiB) fits,
/// and the component, not the HTTP server, refuses them.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Where a row's sidecars come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sidecars {
    /// `serve` in this process, in front of the component itself.
    Serve,
    /// A command line run by `sh -c` per sidecar, with `{app_port}`, `{http_port}`,
    /// `{app_id}` and `{components_dir}` (a directory holding the component's
    /// definition, as certified) replaced.
    Command(String),
}

impl Sidecars {
    /// The suffix of the row's name.
    pub fn row_suffix(&self) -> &'static str {
        match self {
            Sidecars::Serve => ROW_SUFFIX,
            Sidecars::Command(_) => COMMAND_ROW_SUFFIX,
        }
    }
}

/// A row's runtime over HTTP, the target to stop once the row is done, and the
/// directory the sidecars read the definition from (removed on drop).
pub struct OverHttp {
    pub runtime: Runtime,
    pub target: Arc<SidecarTarget>,
    _components_dir: Option<tempfile::TempDir>,
}

/// A runtime whose publish and subscribe go over HTTP to `serve` in front of
/// `component`, served as pub/sub `name` of type `pubsub.<component_type>`.
pub async fn runtime(
    name: &str,
    component_type: &str,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let mut components = BTreeMap::new();
    components.insert(
        name.to_string(),
        ServedComponent {
            runtime: Runtime::new(name, component.clone()),
            component_type: format!("pubsub.{component_type}"),
        },
    );
    let launcher = Arc::new(ServeLauncher {
        components,
        app_timeout: SIDECAR_WITHIN,
        max_body_bytes: MAX_BODY_BYTES,
    });
    remote(launcher, name, component, ROW_SUFFIX, broker_version).await
}

/// A row's runtime through `sidecars` for `definition`; `component` declares what
/// the row is judged against (its capabilities and bounds).
pub async fn over_http(
    sidecars: &Sidecars,
    definition: &ComponentDefinition,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<OverHttp> {
    match sidecars {
        Sidecars::Serve => {
            let (runtime, target) = runtime(
                &definition.name,
                &definition.component_type,
                component,
                broker_version,
            )
            .await?;
            Ok(OverHttp {
                runtime,
                target,
                _components_dir: None,
            })
        }
        Sidecars::Command(template) => {
            let dir = tempfile::Builder::new()
                .prefix("pcs-sidecar-components-")
                .tempdir()?;
            let file = definition
                .source
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(format!("{}.yaml", definition.name)));
            std::fs::copy(&definition.source, dir.path().join(file)).map_err(|e| {
                anyhow::anyhow!(
                    "cannot copy {} for the sidecar: {e}",
                    definition.source.display()
                )
            })?;
            let launcher = Arc::new(CommandLauncher {
                template: template.replace("{components_dir}", &dir.path().to_string_lossy()),
                ready_within: SIDECAR_WITHIN,
                log_dir: Some(dir.path().to_path_buf()),
            });
            let (runtime, target) = remote(
                launcher,
                &definition.name,
                component,
                COMMAND_ROW_SUFFIX,
                broker_version,
            )
            .await?;
            Ok(OverHttp {
                runtime,
                target,
                _components_dir: Some(dir),
            })
        }
    }
}

async fn remote(
    launcher: Arc<dyn Launcher>,
    name: &str,
    component: Arc<dyn Component>,
    suffix: &str,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let target = Arc::new(SidecarTarget::start(launcher, name, SIDECAR_WITHIN).await?);
    let description = Arc::new(WireDescription {
        kind: format!("{}{suffix}", component.kind()),
        capabilities: capabilities_over_http(&component.capabilities()),
        broker_version: broker_version.unwrap_or_default(),
    });
    Ok((Runtime::remote(name, description, target.clone()), target))
}
