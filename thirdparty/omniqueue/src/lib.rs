//! omniqueue 0.3 certified by pubsub-conformance.
//!
//! A thin adapter, written as a component author would write one, from omniqueue's
//! Redis Streams, RabbitMQ and in-memory backends to the suite's
//! [`Component`](pubsub_components::Component) and
//! [`Consumer`](pubsub_components::Consumer) traits. [`register`] adds the three
//! component types (`pubsub.omniqueue-redis`, `pubsub.omniqueue-rabbitmq`,
//! `pubsub.omniqueue-memory`) to the suite's registry, so that the definitions in
//! `fixtures/` are provisioned, run and reported like the suite's own components, on
//! the brokers the suite spawns and faults, with their rows marked third-party.
//!
//! What omniqueue leaves to its user, the adapter does with the same client versions:
//! it creates the stream's consumer groups (Redis) and declares the exchanges and
//! queues (RabbitMQ). Everything else goes through omniqueue's public API.

mod backend;
mod component;
mod settings;

pub use component::OmniqueueComponent;
pub use settings::{Backend, RabbitSettings, RedisSettings};

use pubsub_components::config::ComponentDefinition;
use pubsub_components::registry::{self, BuildError, ExternalType};
use pubsub_components::Component;
use std::sync::Arc;

/// The crate and version these adapters certify, as the report shows it.
pub const ADAPTS: &str = "omniqueue 0.3.0";

/// Registers the three component types for this process.
pub fn register() {
    for external in [
        ExternalType {
            name: "omniqueue-redis",
            broker_of: Some("redis-streams"),
            endpoint_field: Some("redisHost"),
            adapts: ADAPTS,
            validate: |d| settings::redis(d).map(|_| ()),
            build: |definition, endpoint| Box::pin(build(definition, endpoint)),
        },
        ExternalType {
            name: "omniqueue-rabbitmq",
            broker_of: Some("rabbitmq"),
            endpoint_field: Some("host"),
            adapts: ADAPTS,
            validate: |d| settings::rabbit(d).map(|_| ()),
            build: |definition, endpoint| Box::pin(build(definition, endpoint)),
        },
        ExternalType {
            name: "omniqueue-memory",
            broker_of: None,
            endpoint_field: None,
            adapts: ADAPTS,
            validate: |d| settings::memory(d).map(|_| ()),
            build: |definition, endpoint| Box::pin(build(definition, endpoint)),
        },
    ] {
        registry::register(external).expect("the omniqueue types are valid registrations");
    }
}

/// Builds the component a definition describes, at `endpoint` when given.
async fn build(
    definition: ComponentDefinition,
    endpoint: Option<String>,
) -> Result<Arc<dyn Component>, BuildError> {
    let backend = settings::backend(&definition, endpoint.as_deref())?;
    let component = OmniqueueComponent::connect(backend).await?;
    Ok(Arc::new(component))
}
