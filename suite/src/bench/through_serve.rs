//! Publishing through `serve` (Dapr's HTTP API, in this process) in turn with the
//! in-process runtime (`bench --through-serve`).

use super::publish::in_turn;
use super::BenchOptions;
use anyhow::Context as _;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::Measurement;
use std::sync::Arc;

/// Publishing through `serve` (over Dapr's HTTP API, in this process) against the
/// in-process runtime on the same component: single publishes and bulk x100, each
/// message through both paths in turn, so that both meet the same machine and broker.
/// The serve path's ratio is its rate over the in-process one's.
pub(super) async fn measurements(
    name: &str,
    runtime: &Runtime,
    component: Arc<dyn Component>,
    prefix: &str,
    options: &BenchOptions,
) -> anyhow::Result<Vec<Measurement>> {
    let kind = component.kind().to_string();
    let (served, target) = crate::through_serve::runtime(name, &kind, component, None)
        .await
        .context("starting serve for the bench")?;
    let mut measurements = Vec::new();
    for batch in [1, 100] {
        let what = if batch == 1 {
            "single publish".to_string()
        } else {
            format!("bulk publish x{batch}")
        };
        measurements.extend(
            in_turn(
                (
                    runtime,
                    "in-process",
                    &format!("{what}, in process, in turn with serve"),
                ),
                (&served, "serve", &format!("{what} through serve (HTTP)")),
                prefix,
                batch,
                options,
            )
            .await?,
        );
    }
    target.stop().await;
    Ok(measurements)
}
