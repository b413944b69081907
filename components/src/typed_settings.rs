//! What a built-in component type's settings do: read and checked from a definition,
//! aimed at a broker, and connected. Each component module implements it for its
//! settings; the [registry](crate::registry) turns each into a row of its table.

use crate::component::Component;
use crate::config::ComponentDefinition;
use crate::config::ConfigError;
use crate::error::PubSubError;
use futures::future::BoxFuture;
use std::sync::Arc;

/// A component being connected, as [`TypedSettings::connect`] returns it.
pub type Connecting = BoxFuture<'static, Result<Arc<dyn Component>, PubSubError>>;

/// A component type's settings, owned by its module: read and checked from a
/// definition without connecting anywhere, aimed at a broker, and connected.
pub trait TypedSettings: Sized + Send + 'static {
    /// The type, as written after `pubsub.` in `spec.type`.
    const TYPE: &'static str;
    /// Whether it talks to a broker (the suite provisions one); `false`: in process.
    const HAS_BROKER: bool = true;
    /// Reads the definition's metadata, refusing unknown fields and bad values with
    /// the field named.
    fn from_definition(definition: &ComponentDefinition) -> Result<Self, ConfigError>;
    /// The broker endpoint the settings name (`host:port`).
    fn endpoint(&self) -> Option<String>;
    /// Points the settings at another broker (`host:port`).
    fn aim_at(&mut self, endpoint: &str);
    /// Connects the component.
    fn connect(self) -> Connecting;
}
