//! The pub/sub component contract certified by `pubsub-conformance`.
//!
//! * [`component`]: the traits a broker adapter implements ([`Component`], [`Consumer`]).
//! * [`capability`]: what a component declares it does natively.
//! * [`runtime`]: the shared runtime layer (a Dapr-sidecar equivalent) that applications
//!   use and that emulates what a component does not do natively.
//! * [`memory`]: the in-memory reference component.
//! * [`config`] and [`registry`]: Dapr-style YAML component definitions and how they
//!   become components.

pub mod capability;
pub mod component;
pub mod config;
pub mod error;
pub mod memory;
pub mod message;
pub mod mqtt;
mod mqtt_records;
pub mod nats;
pub mod partitioned;
pub mod postgres;
pub mod rabbitmq;
mod rabbitmq_records;
pub mod redis_streams;
pub mod registry;
pub mod runtime;

pub use capability::{Capabilities, DeliveryGuarantee, Feature, OrderingScope, Support};
pub use component::{
    Component, Consumer, ConsumerSpec, PartitionUpdate, PartitionWatch, PartitionsState,
    PartitionsWatch, StartPosition, TopicSelector,
};
pub use error::{ErrorKind, PubSubError, Result};
pub use message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
