//! The pub/sub component contract certified by `pubsub-conformance`.
//!
//! * [`component`]: the traits a broker adapter implements ([`Component`], [`Consumer`]).
//! * [`capability`]: what a component declares it does natively.
//! * [`runtime`]: the shared runtime layer (a Dapr-sidecar equivalent) that applications
//!   use and that emulates what a component does not do natively.
//! * [`memory`]: the in-memory reference component; one module per broker beside it
//!   (`redis_streams`, `nats`, `postgres`, `rabbitmq`, `mqtt`, `kafka`), each behind
//!   the cargo feature of that name (`redis` for Redis Streams) with its client
//!   library, each owning its code, its typed settings and its capabilities.
//! * [`partitioned`]: partitioned topics emulated on brokers that have none.
//! * [`config`] and [`registry`]: Dapr-style YAML component definitions, and the table
//!   of types that turns them into components.

pub mod capability;
pub mod component;
pub mod config;
pub mod error;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod memory;
pub mod message;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "nats")]
pub mod nats;
pub mod partitioned;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "rabbitmq")]
pub mod rabbitmq;
#[cfg(feature = "redis")]
pub mod redis_streams;
pub mod registry;
pub mod runtime;
mod typed_settings;

pub use capability::{Capabilities, DeliveryGuarantee, Feature, OrderingScope, Support};
pub use component::{
    Component, Consumer, ConsumerSpec, PartitionUpdate, PartitionWatch, PartitionsState,
    PartitionsWatch, StartPosition, TopicSelector,
};
pub use error::{ErrorKind, PubSubError, Result};
pub use message::{MessageId, Metadata, OutgoingMessage, ReceivedMessage};
