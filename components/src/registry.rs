//! Builds components from their definitions: the one place that knows every type.

use crate::component::Component;
use crate::config::{ComponentDefinition, ConfigError};
use crate::memory::{MemoryComponent, MemoryConfig};
use std::sync::Arc;

/// The component types this build knows, as written after `pubsub.` in `spec.type`.
pub const KNOWN_TYPES: &[&str] = &["in-memory"];

/// Builds the component a definition describes.
pub fn build(definition: &ComponentDefinition) -> Result<Arc<dyn Component>, ConfigError> {
    match definition.component_type.as_str() {
        "in-memory" => Ok(Arc::new(MemoryComponent::new(memory_config(definition)?))),
        _ => Err(unknown_type(definition)),
    }
}

/// Checks a definition's type and every metadata value without connecting anywhere,
/// so a bad file is reported before any work starts.
pub fn validate(definition: &ComponentDefinition) -> Result<(), ConfigError> {
    match definition.component_type.as_str() {
        "in-memory" => memory_config(definition).map(drop),
        _ => Err(unknown_type(definition)),
    }
}

fn unknown_type(definition: &ComponentDefinition) -> ConfigError {
    definition.error(
        "spec.type",
        format!(
            "unknown type 'pubsub.{}'; known: {}",
            definition.component_type,
            KNOWN_TYPES.join(", ")
        ),
    )
}

fn memory_config(definition: &ComponentDefinition) -> Result<MemoryConfig, ConfigError> {
    definition.check_known(&["maxMessageBytes", "partitions"])?;
    let defaults = MemoryConfig::default();
    let max_message_bytes = definition
        .value::<usize>("maxMessageBytes", "a number of bytes")?
        .unwrap_or(defaults.max_message_bytes);
    let default_partitions = definition
        .value::<u32>("partitions", "a partition count")?
        .unwrap_or(defaults.default_partitions);
    if max_message_bytes == 0 || default_partitions == 0 {
        return Err(definition.error(
            "spec.metadata",
            "maxMessageBytes and partitions must be above 0",
        ));
    }
    Ok(MemoryConfig {
        max_message_bytes,
        default_partitions,
    })
}
