//! A broker the suite controls for a component's fault cases, when the run's own
//! broker cannot be faulted or keeps its data in memory.

use crate::provision::{self, Broker};
use crate::row_runtime::{RowRuntime, RuntimeWrapper};
use crate::runner::CaseEnvironment;
use pubsub_components::registry::Resolved;
use pubsub_components::Component;

/// A broker the suite controls (a local process, else a container), with the
/// component built on it, for the fault cases.
pub(super) struct Controlled {
    pub(super) runtime: RowRuntime,
    pub(super) environment: CaseEnvironment,
    pub(super) broker: std::sync::Arc<dyn Broker>,
    pub(super) version: Option<String>,
}

impl Controlled {
    pub(super) async fn provision(
        component: &Resolved,
        wrap: Option<RuntimeWrapper>,
    ) -> Result<Self, String> {
        let definition = component.definition();
        let order = provision::faults_order(&definition.component_type, None);
        let provisioned = provision::provision(definition, &order)
            .await
            .map_err(|reasons| {
                reasons
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        let broker = provisioned
            .broker
            .clone()
            .ok_or_else(|| "the component needs no broker".to_string())?;
        let version = provisioned.component.version_text().await.ok();
        let environment =
            CaseEnvironment::of_component(provisioned.broker.clone(), component).wrapped(wrap);
        let runtime = environment
            .runtime_for(definition.name.clone(), provisioned.component.clone())
            .await?;
        Ok(Controlled {
            runtime,
            environment,
            broker,
            version,
        })
    }

    pub(super) fn describe(&self) -> String {
        self.broker.describe()
    }

    /// A fresh component after a fault case, as for the run's own broker.
    pub(super) async fn refresh(&mut self, component: &Resolved) {
        if self.broker.health().down_reason().is_none() {
            if let Ok(built) = component.build(Some(&self.broker.endpoint())).await {
                if let Ok(runtime) = self
                    .environment
                    .runtime_for(component.definition().name.clone(), built)
                    .await
                {
                    std::mem::replace(&mut self.runtime, runtime).retire().await;
                }
            }
        }
    }
}

/// Starts a dead broker again and builds a fresh component on it.
pub(super) async fn restart(
    component: &Resolved,
    broker: &dyn Broker,
) -> Result<std::sync::Arc<dyn Component>, String> {
    broker
        .restart()
        .await
        .map_err(|e| format!("restarting {} failed: {e}", broker.describe()))?;
    component
        .build(Some(&broker.endpoint()))
        .await
        .map_err(|e| format!("rebuilding the component after a restart failed: {e}"))
}
