//! `pubsub-conformance serve`: the components of a directory of YAML definitions
//! behind Dapr's pub/sub API over HTTP, and over gRPC when asked
//! ([`pubsub_sidecar`]), until interrupted.

use crate::certify::load_definitions;
use anyhow::Context as _;
use pubsub_components::registry;
use pubsub_components::runtime::{Runtime, RuntimeOptions};
use pubsub_sidecar::grpc::app::GrpcAppChannel;
use pubsub_sidecar::{AppChannel, ServeOptions, ServedComponent, Sidecar};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What `serve` was asked for on the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeCommand {
    /// A directory of component YAML files (each metadata.name is a pubsub name),
    /// and of declarative subscriptions (`kind: Subscription`), delivered to the
    /// app as daprd delivers those of its `--resources-path`.
    #[arg(long = "components", value_name = "DIR", default_value = "fixtures")]
    pub components: PathBuf,
    /// Take up declarative subscriptions added to, changed in or removed from the
    /// components directory while running (daprd's `HotReload` feature).
    #[arg(long)]
    pub hot_reload: bool,
    /// The port of the HTTP API.
    #[arg(long, default_value_t = 3500)]
    pub http_port: u16,
    /// The port of the gRPC API (daprd's is 50001), if it is served; 0 takes a free
    /// one. The HTTP API is served beside it (SDKs probe its health endpoint).
    #[arg(long)]
    pub grpc_port: Option<u16>,
    /// The app's port on 127.0.0.1 (its subscriptions are read at start).
    #[arg(long)]
    pub app_port: Option<u16>,
    /// How the app is reached: `http` (`GET /dapr/subscribe`, POSTs) or `grpc`
    /// (Dapr's app callbacks: ListTopicSubscriptions, OnTopicEvent, OnBulkTopicEvent).
    #[arg(long, default_value = "http", value_parser = ["http", "grpc"])]
    pub app_protocol: String,
    /// The app id: the consumer group of every subscription, the CloudEvent source.
    #[arg(long, default_value = "pcs-app")]
    pub app_id: String,
    /// Requests must carry this token in `dapr-api-token` (also DAPR_API_TOKEN).
    #[arg(long, env = "DAPR_API_TOKEN")]
    pub api_token: Option<String>,
    /// How long the app may take to answer `GET /dapr/subscribe` at start.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub app_start_within: Duration,
    /// How long the app may take to answer a delivery.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub app_timeout: Duration,
    /// The largest request body taken, as daprd's `--max-body-size` (bytes, or
    /// with Ki, Mi or Gi, e.g. 64Mi); a larger one is 413 ERR_BODY_TOO_LARGE.
    #[arg(long, default_value = "4Mi", value_parser = parse_size)]
    pub max_body_size: usize,
}

/// A size as daprd's `--max-body-size` takes it: bytes, or a number with Ki, Mi or Gi.
fn parse_size(text: &str) -> Result<usize, String> {
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let multiplier: usize = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "'{text}': unknown unit '{other}' (bytes, or a number with Ki, Mi or Gi, e.g. 4Mi)"
            ))
        }
    };
    let number: usize = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size such as 4Mi or 1048576"))?;
    number
        .checked_mul(multiplier)
        .filter(|bytes| *bytes > 0)
        .ok_or_else(|| format!("'{text}': a body size must be above zero and fit in memory"))
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("'{text}' is not a duration such as 30s or 500ms: {e}"))
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
    let base = command
        .app_port
        .map(|port| format!("http://127.0.0.1:{port}"));
    let (app, grpc_app) = match (base, command.app_protocol.as_str()) {
        (None, _) => (None, None),
        (Some(base), "grpc") => (None, Some(GrpcAppChannel::new(base, command.app_timeout)?)),
        (Some(base), _) => (Some(AppChannel::new(base, command.app_timeout)?), None),
    };
    let options = ServeOptions {
        listen: SocketAddr::from(([127, 0, 0, 1], command.http_port)),
        grpc_listen: command
            .grpc_port
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port))),
        app,
        grpc_app,
        app_id: command.app_id.clone(),
        api_token: command.api_token.clone(),
        resources: Some(command.components.clone()),
        app_start_within: command.app_start_within,
        hot_reload: command.hot_reload,
        max_body_bytes: command.max_body_size,
    };
    let names: Vec<String> = components.keys().cloned().collect();
    let sidecar = Sidecar::start(components, options).await?;
    let grpc = sidecar
        .grpc_address()
        .map(|at| format!(" and grpc://{at}"))
        .unwrap_or_default();
    eprintln!(
        "serving {} on http://{}{grpc} (app id {}; {} subscriptions)",
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

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn body_sizes_read_as_daprd_reads_them() {
        assert_eq!(parse_size("4Mi"), Ok(4 << 20));
        assert_eq!(parse_size("64Ki"), Ok(64 << 10));
        assert_eq!(parse_size("1Gi"), Ok(1 << 30));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        for bad in ["", "0", "4MB", "Mi", "-1", "4.5Mi"] {
            let error = parse_size(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }
}
