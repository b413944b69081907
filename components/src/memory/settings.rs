//! The in-memory component's settings: the YAML metadata it reads, checked without
//! connecting anywhere, and how they become a component.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::typed_settings::{Connecting, TypedSettings};
use std::sync::Arc;

use super::MemoryComponent;

/// Settings of the in-memory component (YAML metadata `maxMessageBytes`, `partitions`).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// Payloads larger than this are refused, like a broker's message size limit.
    pub max_message_bytes: usize,
    /// Partitions of a topic created implicitly by a publish.
    pub default_partitions: u32,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            max_message_bytes: 1024 * 1024,
            default_partitions: 1,
        }
    }
}

impl TypedSettings for MemoryConfig {
    const TYPE: &'static str = "in-memory";
    const HAS_BROKER: bool = false;

    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError> {
        definition.check_known(&["maxMessageBytes", "partitions"])?;
        let defaults = Self::default();
        let max_message_bytes = definition.max_message_bytes(defaults.max_message_bytes)?;
        let default_partitions = definition
            .value::<u32>("partitions", "a partition count")?
            .unwrap_or(defaults.default_partitions);
        if max_message_bytes == 0 || default_partitions == 0 {
            return Err(definition.error(
                "spec.metadata",
                "maxMessageBytes and partitions must be above 0",
            ));
        }
        Ok(Self {
            max_message_bytes,
            default_partitions,
        })
    }

    fn endpoint(&self) -> Option<String> {
        None
    }

    /// In process: there is no broker to aim at.
    fn aim_at(&mut self, _endpoint: &str) {}

    fn connect(self) -> Connecting {
        Box::pin(async move { Ok(Arc::new(MemoryComponent::new(self)) as Arc<dyn Component>) })
    }
}
