//! Provisioning: how the broker behind a component is obtained. Four kinds exist
//! (container, local process, external endpoint, in-process); each component type
//! lists the ones that can serve it in `auto` order, and every kind that cannot serve
//! says why and how to get one (NOT PROVISIONED), never hangs.

use async_trait::async_trait;
use pubsub_components::config::ComponentDefinition;
use pubsub_components::{registry, Component};
use std::fmt;
use std::sync::Arc;

/// The ways a broker can be obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionKind {
    /// A container through testcontainers (needs a Docker engine).
    Container,
    /// An installed broker binary spawned on a free port with its own data directory.
    LocalProcess,
    /// A broker the user names (environment or CLI).
    External,
    /// Inside this process (the in-memory component).
    InProcess,
}

impl fmt::Display for ProvisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProvisionKind::Container => "container",
            ProvisionKind::LocalProcess => "local-process",
            ProvisionKind::External => "external",
            ProvisionKind::InProcess => "in-process",
        })
    }
}

/// A component ready to certify, with whatever keeps its broker alive.
pub struct Provisioned {
    pub kind: ProvisionKind,
    pub endpoint: Option<String>,
    pub component: Arc<dyn Component>,
    /// Dropped when the run ends (stops a spawned broker, for example).
    pub guard: Option<Box<dyn Send + Sync>>,
}

/// Why a kind could not serve a component, and how to get one.
#[derive(Debug, Clone, PartialEq)]
pub struct NotProvisioned {
    pub kind: ProvisionKind,
    pub reason: String,
    pub hint: String,
}

impl fmt::Display for NotProvisioned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (hint: {})", self.kind, self.reason, self.hint)
    }
}

/// One way of obtaining brokers.
#[async_trait]
pub trait Provisioner: Send + Sync {
    /// Which kind this is.
    fn kind(&self) -> ProvisionKind;

    /// Obtains the broker for `definition` and builds the component on it.
    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned>;
}

/// Builds components that need no broker at all.
pub struct InProcess;

#[async_trait]
impl Provisioner for InProcess {
    fn kind(&self) -> ProvisionKind {
        ProvisionKind::InProcess
    }

    async fn provision(
        &self,
        definition: &ComponentDefinition,
    ) -> Result<Provisioned, NotProvisioned> {
        if definition.component_type != "in-memory" {
            return Err(NotProvisioned {
                kind: self.kind(),
                reason: format!("type pubsub.{} needs a broker", definition.component_type),
                hint: "use another provisioning kind".into(),
            });
        }
        let component = registry::build(definition).map_err(|e| NotProvisioned {
            kind: self.kind(),
            reason: e.to_string(),
            hint: format!("fix {}", definition.source.display()),
        })?;
        Ok(Provisioned {
            kind: self.kind(),
            endpoint: None,
            component,
            guard: None,
        })
    }
}

/// The provisioners that can serve a component type, in `auto` order.
pub fn auto_order(component_type: &str) -> Vec<Box<dyn Provisioner>> {
    match component_type {
        "in-memory" => vec![Box::new(InProcess)],
        _ => Vec::new(),
    }
}

/// Tries each provisioner in order; returns the first that serves, or every reason.
pub async fn provision(
    definition: &ComponentDefinition,
    order: &[Box<dyn Provisioner>],
) -> Result<Provisioned, Vec<NotProvisioned>> {
    let mut reasons = Vec::new();
    for provisioner in order {
        match provisioner.provision(definition).await {
            Ok(provisioned) => return Ok(provisioned),
            Err(reason) => reasons.push(reason),
        }
    }
    if reasons.is_empty() {
        reasons.push(NotProvisioned {
            kind: ProvisionKind::External,
            reason: format!(
                "no provisioner knows type pubsub.{}",
                definition.component_type
            ),
            hint: "see README: adding a component".into(),
        });
    }
    Err(reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn definition(component_type: &str) -> ComponentDefinition {
        let text = format!(
            "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: x\nspec:\n  type: pubsub.{component_type}\n"
        );
        ComponentDefinition::parse(&text, Path::new("x.yaml")).unwrap()
    }

    #[tokio::test]
    async fn in_process_serves_the_memory_component() {
        let provisioned = provision(&definition("in-memory"), &auto_order("in-memory"))
            .await
            .ok()
            .unwrap();
        assert_eq!(provisioned.kind, ProvisionKind::InProcess);
        assert_eq!(provisioned.component.kind(), "in-memory");
    }

    #[tokio::test]
    async fn unknown_types_are_not_provisioned_with_a_reason() {
        let reasons = provision(&definition("carrier-pigeon"), &auto_order("carrier-pigeon"))
            .await
            .err()
            .unwrap();
        assert!(
            reasons[0].reason.contains("carrier-pigeon"),
            "{:?}",
            reasons
        );
        let in_process = InProcess
            .provision(&definition("redis-streams"))
            .await
            .err()
            .unwrap();
        assert!(in_process.to_string().contains("needs a broker"));
    }
}
