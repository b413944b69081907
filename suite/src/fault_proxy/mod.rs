//! The TCP fault proxy between a component and its broker: it relays bytes (or Kafka
//! frames, rewriting the broker's advertised address) and cuts, black-holes, slows or
//! resets the network on demand.

pub mod proxy;
pub mod wire;

pub use proxy::{FaultProxy, NetworkFault};
pub use wire::Wire;
