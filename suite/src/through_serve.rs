//! Rows certified over Dapr's API: a component's cases run through sidecars, beside
//! its in-process row. The sidecars are `serve` in this process in front of the same
//! component (over HTTP, and over gRPC), or processes started from a
//! command line (`serve` as its own program, daprd, any sidecar that speaks the API).

use crate::row_paths::{
    AttachTo, SidecarCommand, GRPC_ROW_SUFFIX, JS_SDK_CLIENT_ROW_SUFFIX,
    JS_SDK_GRPC_CLIENT_ROW_SUFFIX, JS_SDK_SERVER_ROW_SUFFIX, PYTHON_SDK_APP_ROW_SUFFIX,
    PYTHON_SDK_CLIENT_ROW_SUFFIX, ROW_SUFFIX, RUST_SDK_CLIENT_ROW_SUFFIX,
};
use crate::row_runtime::{RowRuntime, RuntimeWrapper};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_sidecar::attach::AttachOptions;
use pubsub_sidecar::launch::{CommandLauncher, Launcher, ServeLauncher};
use pubsub_sidecar::target::{GrpcPublisher, WireDescription};
use pubsub_sidecar::{ServedComponent, SidecarTarget};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// `serve` in this process over gRPC: the suite publishes through its gRPC API,
    /// and each subscription is an app of the suite's answering Dapr's app callbacks.
    ServeGrpc,
    /// A command line run by `sh -c` per sidecar, with `{app_port}`, `{http_port}`,
    /// `{grpc_port}`, `{app_id}` and `{components_dir}` (a directory holding the
    /// component's definition, as certified) replaced; reached over HTTP or gRPC.
    Command(SidecarCommand),
    /// A sidecar already running, attached to (its subscriptions declared as
    /// resources).
    Attached(AttachTo),
    /// `serve` in this process, with Dapr's JavaScript SDK's `DaprClient`
    /// publishing through it (`sdk/js/publisher.mjs`).
    JsSdkClient,
    /// `serve` in this process, delivering to Dapr's JavaScript SDK's `DaprServer`
    /// as each subscription's app (`sdk/js/app.mjs`).
    JsSdkServer,
    /// `serve` in this process over gRPC, with Dapr's JavaScript SDK's `DaprClient` in
    /// its gRPC mode publishing (`sdk/js/publisher.mjs`), and each subscription an app
    /// of the suite's answering Dapr's app callbacks.
    JsSdkGrpcClient,
    /// `serve` in this process over gRPC, with Dapr's Python SDK's `DaprClient`
    /// publishing through its gRPC API (`sdk/python/publisher.py`), and each
    /// subscription an app of the suite's answering Dapr's app callbacks.
    PythonSdkClient,
    /// `serve` in this process over gRPC, delivering to Dapr's Python SDK's
    /// `dapr.ext.grpc.App` as each subscription's app (`sdk/python/app.py`); the
    /// suite publishes with its own gRPC client.
    PythonSdkApp,
    /// `serve` in this process over gRPC, with Dapr's Rust SDK's `Client` (the `dapr`
    /// crate, in this process) publishing through its gRPC API, and each
    /// subscription an app of the suite's answering Dapr's app callbacks.
    RustSdkClient,
}

impl Sidecars {
    /// The suffix of the row's name.
    pub fn row_suffix(&self) -> &'static str {
        match self {
            Sidecars::Serve => ROW_SUFFIX,
            Sidecars::ServeGrpc => GRPC_ROW_SUFFIX,
            Sidecars::Command(command) => command.row_suffix(),
            Sidecars::Attached(to) => to.row_suffix(),
            Sidecars::JsSdkClient => JS_SDK_CLIENT_ROW_SUFFIX,
            Sidecars::JsSdkServer => JS_SDK_SERVER_ROW_SUFFIX,
            Sidecars::JsSdkGrpcClient => JS_SDK_GRPC_CLIENT_ROW_SUFFIX,
            Sidecars::PythonSdkClient => PYTHON_SDK_CLIENT_ROW_SUFFIX,
            Sidecars::PythonSdkApp => PYTHON_SDK_APP_ROW_SUFFIX,
            Sidecars::RustSdkClient => RUST_SDK_CLIENT_ROW_SUFFIX,
        }
    }
}

/// `certify --sidecar`: a running sidecar to certify through.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AttachArgs {
    /// Also certify each component through the sidecar running at this address (a
    /// row `<component> via attached sidecar`): it publishes, and delivers the
    /// subscriptions the suite writes to its resources directory (it must take
    /// them up while running: daprd with the HotReload feature, serve with
    /// --hot-reload) to the suite's app on its app port.
    #[arg(long, value_name = "URL")]
    pub sidecar: Option<String>,
    /// The app port the running sidecar was started with (`--sidecar`).
    #[arg(long, value_name = "PORT", requires = "sidecar")]
    pub sidecar_app_port: Option<u16>,
    /// The directory the running sidecar loads resources from (`--sidecar`).
    #[arg(long, value_name = "DIR", requires = "sidecar")]
    pub sidecar_resources: Option<PathBuf>,
    /// The pub/sub name on the running sidecar (default: the component's name).
    #[arg(long, value_name = "NAME", requires = "sidecar")]
    pub pubsub: Option<String>,
    /// The running sidecar's gRPC API, e.g. http://127.0.0.1:50001 (`--sidecar` with
    /// `--sidecar-protocol grpc`: the suite publishes there, and its app on the app
    /// port answers Dapr's app callbacks).
    #[arg(long, value_name = "URL", requires = "sidecar")]
    pub sidecar_grpc: Option<String>,
    /// The running sidecar's API token (`dapr-api-token`; also DAPR_API_TOKEN).
    #[arg(
        long,
        value_name = "TOKEN",
        env = "DAPR_API_TOKEN",
        requires = "sidecar"
    )]
    pub sidecar_api_token: Option<String>,
}

impl AttachArgs {
    /// The sidecar to attach to, if one is named, reached over gRPC where `grpc`;
    /// errors name what is missing.
    pub fn attach_to(self, components: usize, grpc: bool) -> anyhow::Result<Option<AttachTo>> {
        let Some(base) = self.sidecar else {
            return Ok(None);
        };
        let grpc_base = match (grpc, self.sidecar_grpc) {
            (true, Some(url)) => Some(url.trim_end_matches('/').to_string()),
            (true, None) => anyhow::bail!(
                "--sidecar with --sidecar-protocol grpc needs --sidecar-grpc: the address of the running sidecar's gRPC API"
            ),
            (false, Some(_)) => anyhow::bail!(
                "--sidecar-grpc is where the suite reaches the running sidecar over gRPC: give --sidecar-protocol grpc with it"
            ),
            (false, None) => None,
        };
        let app_port = self.sidecar_app_port.ok_or_else(|| {
            anyhow::anyhow!(
                "--sidecar needs --sidecar-app-port: the app port the sidecar was started with"
            )
        })?;
        let resources = self.sidecar_resources.ok_or_else(|| {
            anyhow::anyhow!("--sidecar needs --sidecar-resources: the directory the sidecar loads resources from")
        })?;
        if !resources.is_dir() {
            anyhow::bail!(
                "--sidecar-resources {} is not a directory",
                resources.display()
            );
        }
        if self.pubsub.is_some() && components != 1 {
            anyhow::bail!(
                "--pubsub names the pub/sub of one component: select exactly one with --component"
            );
        }
        Ok(Some(AttachTo {
            base: base.trim_end_matches('/').to_string(),
            pubsub: self.pubsub,
            app_port,
            resources,
            api_token: self.sidecar_api_token,
            grpc: grpc_base,
        }))
    }
}

/// One attached row at a time: the rows share the sidecar's app port.
static ATTACHED_ROWS: std::sync::LazyLock<Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(Arc::default);

/// A row's runtime over Dapr's API (HTTP or gRPC), the target to stop once the row is
/// done, and the directory the sidecars read the definition from (removed on drop).
pub struct OverTheWire {
    pub runtime: Runtime,
    pub target: Arc<SidecarTarget>,
    /// The client library the row publishes with, where it is not the suite's own
    /// (`@dapr/dapr 3.18.0`): part of what the row certifies, so of its version.
    pub client: Option<String>,
    _components_dir: Option<tempfile::TempDir>,
    _one_at_a_time: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// A runtime whose publish and subscribe go over HTTP to `serve` in front of
/// `component`, served as pub/sub `name` of type `pubsub.<component_type>`.
pub async fn runtime(
    name: &str,
    component_type: &str,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let launcher = serve_launcher(name, component_type, component.clone());
    remote(launcher, name, component, ROW_SUFFIX, broker_version).await
}

/// A runtime over gRPC to `serve` in front of `component`, served as pub/sub `name`:
/// publishes through its gRPC API, subscriptions delivered to gRPC apps.
pub async fn runtime_over_grpc(
    name: &str,
    component_type: &str,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let launcher = launcher_of(name, component_type, component.clone(), true);
    let target = Arc::new(
        SidecarTarget::start_publishing_over_grpc(
            launcher,
            name,
            SIDECAR_WITHIN,
            GrpcPublisher::Suite,
        )
        .await?,
    );
    let runtime = described(
        name,
        component,
        GRPC_ROW_SUFFIX,
        broker_version,
        target.clone(),
    );
    Ok((runtime, target))
}

/// `component` as pub/sub `name` through the sidecars `launcher` starts (e.g. a
/// sidecar under test, or `serve` behind a proxy), judged against what it declares.
pub async fn runtime_with(
    launcher: Arc<dyn Launcher>,
    name: &str,
    component: Arc<dyn Component>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    remote(launcher, name, component, ROW_SUFFIX, None).await
}

/// `serve` in this process in front of `component`, as pub/sub `name`.
pub fn serve_launcher(
    name: &str,
    component_type: &str,
    component: Arc<dyn Component>,
) -> Arc<ServeLauncher> {
    launcher_of(name, component_type, component, false)
}

/// `serve` in this process in front of `component`, as pub/sub `name`; where `grpc`,
/// each sidecar delivers to its app over gRPC (and the publishing one, without an
/// app, answers gRPC).
fn launcher_of(
    name: &str,
    component_type: &str,
    component: Arc<dyn Component>,
    grpc: bool,
) -> Arc<ServeLauncher> {
    let mut components = BTreeMap::new();
    components.insert(
        name.to_string(),
        ServedComponent {
            runtime: Runtime::new(name, component),
            component_type: format!("pubsub.{component_type}"),
        },
    );
    Arc::new(ServeLauncher {
        components,
        app_timeout: SIDECAR_WITHIN,
        max_body_bytes: MAX_BODY_BYTES,
        grpc_apps: grpc,
    })
}

/// Dapr's JavaScript SDK as `scripts/install.sh` installs it: `sdk/js` of the
/// directory certify runs in, else of this source tree.
pub fn js_sdk_dir() -> anyhow::Result<PathBuf> {
    let here = std::env::current_dir()?;
    pubsub_sidecar::sdk::js_sdk_dir(&here).or_else(|_| {
        pubsub_sidecar::sdk::js_sdk_dir(&PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")))
    })
}

/// Dapr's Python SDK as `scripts/install.sh` installs it: `sdk/python` of the
/// directory certify runs in, else of this source tree.
pub fn python_sdk_dir() -> anyhow::Result<PathBuf> {
    let here = std::env::current_dir()?;
    pubsub_sidecar::sdk::python_sdk_dir(&here).or_else(|_| {
        pubsub_sidecar::sdk::python_sdk_dir(&PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/.."
        )))
    })
}

/// A row's runtime through `sidecars` for `definition`; `component` declares what
/// the row is judged against (its capabilities and bounds).
pub async fn over_the_wire(
    sidecars: &Sidecars,
    definition: &ComponentDefinition,
    component: Arc<dyn Component>,
    broker_version: Option<String>,
) -> anyhow::Result<OverTheWire> {
    match sidecars {
        Sidecars::Serve | Sidecars::ServeGrpc => {
            let (name, kind) = (&definition.name, &definition.component_type);
            let (runtime, target) = match sidecars {
                Sidecars::ServeGrpc => {
                    runtime_over_grpc(name, kind, component, broker_version).await?
                }
                _ => runtime(name, kind, component, broker_version).await?,
            };
            Ok(OverTheWire {
                runtime,
                target,
                client: None,
                _components_dir: None,
                _one_at_a_time: None,
            })
        }
        Sidecars::JsSdkClient | Sidecars::JsSdkServer => {
            let sdk = js_sdk_dir()?;
            let launcher = serve_launcher(
                &definition.name,
                &definition.component_type,
                component.clone(),
            );
            // The SDK's client publishes, or its server is every subscription's app.
            let target = if *sidecars == Sidecars::JsSdkClient {
                SidecarTarget::start_publishing_with(
                    launcher,
                    &definition.name,
                    SIDECAR_WITHIN,
                    Some(&sdk),
                )
                .await?
            } else {
                SidecarTarget::start(launcher, &definition.name, SIDECAR_WITHIN)
                    .await?
                    .with_sdk_app(pubsub_sidecar::sdk::Sdk::Js, &sdk)?
            };
            let client = pubsub_sidecar::sdk::js_sdk_version(&sdk);
            Ok(in_process_row(
                definition,
                component,
                sidecars,
                broker_version,
                target,
                Some(client),
            ))
        }
        Sidecars::RustSdkClient | Sidecars::JsSdkGrpcClient => {
            let launcher = launcher_of(
                &definition.name,
                &definition.component_type,
                component.clone(),
                true,
            );
            let js = match sidecars {
                Sidecars::JsSdkGrpcClient => Some(js_sdk_dir()?),
                _ => None,
            };
            let publisher = match &js {
                Some(dir) => GrpcPublisher::JsSdk(dir),
                None => GrpcPublisher::RustSdk,
            };
            let target = SidecarTarget::start_publishing_over_grpc(
                launcher,
                &definition.name,
                SIDECAR_WITHIN,
                publisher,
            )
            .await?;
            let client = match &js {
                Some(dir) => pubsub_sidecar::sdk::js_sdk_version(dir),
                None => pubsub_sidecar::rust_sdk::RUST_SDK.to_string(),
            };
            Ok(in_process_row(
                definition,
                component,
                sidecars,
                broker_version,
                target,
                Some(client),
            ))
        }
        Sidecars::PythonSdkClient | Sidecars::PythonSdkApp => {
            let sdk = python_sdk_dir()?;
            let launcher = launcher_of(
                &definition.name,
                &definition.component_type,
                component.clone(),
                true,
            );
            // The SDK's client publishes, or its App is every subscription's app.
            let target = if *sidecars == Sidecars::PythonSdkClient {
                SidecarTarget::start_publishing_over_grpc(
                    launcher,
                    &definition.name,
                    SIDECAR_WITHIN,
                    GrpcPublisher::PythonSdk(&sdk),
                )
                .await?
            } else {
                SidecarTarget::start_publishing_over_grpc(
                    launcher,
                    &definition.name,
                    SIDECAR_WITHIN,
                    GrpcPublisher::Suite,
                )
                .await?
                .with_sdk_app(pubsub_sidecar::sdk::Sdk::Python, &sdk)?
            };
            let client = pubsub_sidecar::sdk::python_sdk_version(&sdk);
            Ok(in_process_row(
                definition,
                component,
                sidecars,
                broker_version,
                target,
                client,
            ))
        }
        Sidecars::Attached(to) => {
            let guard = ATTACHED_ROWS.clone().lock_owned().await;
            let target = Arc::new(
                SidecarTarget::attach(AttachOptions {
                    base: to.base.clone(),
                    pubsub: to.pubsub.clone().unwrap_or_else(|| definition.name.clone()),
                    api_token: to.api_token.clone(),
                    app_port: to.app_port,
                    resources: to.resources.clone(),
                    ready_within: SIDECAR_WITHIN,
                    grpc: to.grpc.clone(),
                })
                .await?,
            );
            let runtime = described(
                &definition.name,
                component,
                to.row_suffix(),
                broker_version,
                target.clone(),
            );
            Ok(OverTheWire {
                runtime,
                target,
                client: None,
                _components_dir: None,
                _one_at_a_time: Some(guard),
            })
        }
        Sidecars::Command(command) => {
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
                template: command
                    .template
                    .replace("{components_dir}", &dir.path().to_string_lossy()),
                ready_within: SIDECAR_WITHIN,
                log_dir: Some(dir.path().to_path_buf()),
                grpc: command.grpc,
            });
            let (runtime, target) = match command.grpc {
                false => {
                    remote(
                        launcher,
                        &definition.name,
                        component,
                        command.row_suffix(),
                        broker_version,
                    )
                    .await?
                }
                true => {
                    let target = Arc::new(
                        SidecarTarget::start_publishing_over_grpc(
                            launcher,
                            &definition.name,
                            SIDECAR_WITHIN,
                            GrpcPublisher::Suite,
                        )
                        .await?,
                    );
                    let runtime = described(
                        &definition.name,
                        component,
                        command.row_suffix(),
                        broker_version,
                        target.clone(),
                    );
                    (runtime, target)
                }
            };
            Ok(OverTheWire {
                runtime,
                target,
                client: None,
                _components_dir: Some(dir),
                _one_at_a_time: None,
            })
        }
    }
}

/// A row through `target`, whose sidecars run in this process: its runtime judged
/// against what `component` declares, published with `client` where it is not the
/// suite's own.
fn in_process_row(
    definition: &ComponentDefinition,
    component: Arc<dyn Component>,
    sidecars: &Sidecars,
    broker_version: Option<String>,
    target: SidecarTarget,
    client: Option<String>,
) -> OverTheWire {
    let target = Arc::new(target);
    let runtime = described(
        &definition.name,
        component,
        sidecars.row_suffix(),
        broker_version,
        target.clone(),
    );
    OverTheWire {
        runtime,
        target,
        client,
        _components_dir: None,
        _one_at_a_time: None,
    }
}

/// How a component built again during a row over HTTP (after a fault case, behind
/// a fault proxy) becomes a runtime of that row: through the same kind of sidecars,
/// where they are `serve` in this process. `None` for sidecar processes (started
/// from a command line, or attached), which build their component themselves.
pub fn rewrapper(
    sidecars: &Sidecars,
    definition: &ComponentDefinition,
    broker_version: Option<String>,
) -> Option<RuntimeWrapper> {
    match sidecars {
        Sidecars::Serve
        | Sidecars::ServeGrpc
        | Sidecars::JsSdkClient
        | Sidecars::JsSdkServer
        | Sidecars::PythonSdkClient
        | Sidecars::PythonSdkApp
        | Sidecars::RustSdkClient
        | Sidecars::JsSdkGrpcClient => {}
        Sidecars::Command(_) | Sidecars::Attached(_) => return None,
    }
    let sidecars = sidecars.clone();
    let definition = Arc::new(definition.clone());
    Some(Arc::new(
        move |_name: String, component: Arc<dyn Component>| {
            let sidecars = sidecars.clone();
            let definition = definition.clone();
            let broker_version = broker_version.clone();
            Box::pin(async move {
                let over = over_the_wire(&sidecars, &definition, component, broker_version)
                    .await
                    .map_err(|e| format!("starting its sidecars: {e:#}"))?;
                let runtime = over.runtime.clone();
                Ok(RowRuntime::ended_by(
                    runtime,
                    Box::pin(async move {
                        over.target.stop().await;
                        drop(over);
                    }),
                ))
            })
        },
    ))
}

async fn remote(
    launcher: Arc<dyn Launcher>,
    name: &str,
    component: Arc<dyn Component>,
    suffix: &str,
    broker_version: Option<String>,
) -> anyhow::Result<(Runtime, Arc<SidecarTarget>)> {
    let target = Arc::new(SidecarTarget::start(launcher, name, SIDECAR_WITHIN).await?);
    let runtime = described(name, component, suffix, broker_version, target.clone());
    Ok((runtime, target))
}

/// The runtime answered by `target`, judged against what `component` declares.
fn described(
    name: &str,
    component: Arc<dyn Component>,
    suffix: &str,
    broker_version: Option<String>,
    target: Arc<SidecarTarget>,
) -> Runtime {
    let description = Arc::new(WireDescription {
        kind: format!("{}{suffix}", component.kind()),
        capabilities: target.capabilities(&component.capabilities()),
        broker_version: broker_version.unwrap_or_default(),
    });
    Runtime::remote(name, description, target)
}
