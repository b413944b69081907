//! `pubsub-conformance serve`: the components of a directory of YAML definitions
//! behind Dapr's pub/sub HTTP API ([`pubsub_sidecar`]), until interrupted.

use crate::certify::load_definitions;
use anyhow::Context as _;
use pubsub_components::registry;
use pubsub_components::runtime::{Runtime, RuntimeOptions};
use pubsub_sidecar::{AppChannel, ServeOptions, ServedComponent, Sidecar};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What `serve` was asked for on the command line.
pub struct ServeCommand {
    pub components: PathBuf,
    pub http_port: u16,
    pub app_port: Option<u16>,
    pub app_id: String,
    pub api_token: Option<String>,
    pub app_timeout: Duration,
}

/// Builds every component of the directory, serves them until Ctrl-C, then stops
/// delivery (unsettled messages go back to their brokers).
pub async fn serve(command: ServeCommand) -> anyhow::Result<()> {
    let definitions = load_definitions(&command.components)?;
    if definitions.is_empty() {
        anyhow::bail!(
            "{} holds no component definitions (*.yaml)",
            command.components.display()
        );
    }
    let mut components = BTreeMap::new();
    for definition in &definitions {
        let component = registry::build(definition, None).await.with_context(|| {
            format!(
                "building component '{}' from {}",
                definition.name,
                definition.source.display()
            )
        })?;
        let runtime = Runtime::with_options(
            definition.name.clone(),
            component,
            RuntimeOptions {
                app_id: command.app_id.clone(),
                ..Default::default()
            },
        );
        components.insert(
            definition.name.clone(),
            ServedComponent {
                runtime,
                component_type: format!("pubsub.{}", definition.component_type),
            },
        );
    }
    let app = command
        .app_port
        .map(|port| AppChannel::new(format!("http://127.0.0.1:{port}"), command.app_timeout))
        .transpose()?;
    let options = ServeOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], command.http_port)),
        app,
        app_id: command.app_id.clone(),
        api_token: command.api_token.clone(),
        ..Default::default()
    };
    let names: Vec<String> = components.keys().cloned().collect();
    let sidecar = Sidecar::start(components, options).await?;
    eprintln!(
        "serving {} on http://{} (app id {}; {} subscriptions)",
        names.join(", "),
        sidecar.address(),
        command.app_id,
        sidecar.subscriptions().len()
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    eprintln!("stopping");
    sidecar.stop().await;
    Ok(())
}
