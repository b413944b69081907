//! pubsub-conformance: the conformance and certification suite for pub/sub components.
//!
//! The flow: [`provision`] a broker, build the component from its YAML
//! ([`pubsub_components::registry`]), run each [`catalogue`] case ([`runner`]) which
//! records a [`history`], [`checker`] judges it, and the verdict with its evidence goes
//! into a [`pubsub_reports::RunReport`].
//!
//! Third-party component authors run the whole catalogue from a test file with
//! [`harness::run_catalogue`].

pub mod bench;
mod brokers;
pub mod bystander;
pub mod cases;
pub mod catalogue;
pub mod certify;
pub mod checker;
pub mod cli;
pub mod context;
pub mod criteria;
pub mod expectations;
pub mod fault_injection;
pub mod fault_proxy;
pub mod harness;
pub mod history;
pub mod load;
pub mod outcome;
pub mod progress;
pub mod provision;
pub mod replay;
pub mod row_paths;
pub mod row_runtime;
pub mod runner;
#[cfg(feature = "sidecar")]
pub mod serve_command;
pub mod spans;
#[cfg(feature = "sidecar")]
pub mod through_serve;

pub use pubsub_components as components;
pub use pubsub_reports as reports;
