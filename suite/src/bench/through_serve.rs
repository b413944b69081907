//! Publishing through `serve` (Dapr's HTTP and gRPC APIs, in this process) in turn
//! with the in-process runtime (`bench --through-serve`).

use super::publish::in_turn;
use super::BenchOptions;
use anyhow::Context as _;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::Measurement;
use std::sync::Arc;

/// Publishing through `serve` over HTTP and over gRPC (in this process) against the
/// in-process runtime on the same component: single publishes and bulk x100, each
/// message through the three paths in turn, so that all meet the same machine and
/// broker. Each wire path's ratio is its rate over the in-process one's.
pub(super) async fn measurements(
    name: &str,
    runtime: &Runtime,
    component: Arc<dyn Component>,
    prefix: &str,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Measurement>> {
    let kind = component.kind().to_string();
    let (http, http_target) = crate::through_serve::runtime(name, &kind, component.clone(), None)
        .await
        .context("starting serve (HTTP) for the bench")?;
    let (grpc, grpc_target) = crate::through_serve::runtime_over_grpc(name, &kind, component, None)
        .await
        .context("starting serve (gRPC) for the bench")?;
    let measured = async {
        let mut measurements = Vec::new();
        for batch in [1, 100] {
            let what = if batch == 1 {
                "single publish".to_string()
            } else {
                format!("bulk publish x{batch}")
            };
            let paths = [
                (
                    runtime,
                    "in-process",
                    format!("{what}, in process, in turn with serve"),
                ),
                (&http, "http", format!("{what} through serve (HTTP)")),
                (&grpc, "grpc", format!("{what} through serve (gRPC)")),
            ];
            let paths: Vec<_> = paths
                .iter()
                .map(|(runtime, word, label)| (*runtime, *word, label.as_str()))
                .collect();
            measurements.extend(in_turn(&paths, prefix, batch, options).await?);
        }
        anyhow::Ok(measurements)
    }
    .await;
    http_target.stop().await;
    grpc_target.stop().await;
    measured
}
