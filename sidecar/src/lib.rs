//! Dapr's pub/sub API for this project's components: the HTTP wire format
//! ([`wire`]), the app channel a sidecar delivers through ([`app`], [`deliver`]), and
//! `serve`, a light Dapr-compatible sidecar ([`serve`], over gRPC too: [`grpc`]); and
//! the other end: clients ([`client`], [`grpc_client`]) and apps ([`subscriber`],
//! [`grpc_subscriber`], [`shared_app`]) that certify any sidecar speaking the API
//! ([`target`]).

pub mod app;
pub mod attach;
pub mod client;
pub mod deliver;
pub mod grpc;
pub mod grpc_client;
pub mod grpc_subscriber;
pub mod launch;
pub mod publish;
pub mod resources;
pub mod rust_sdk;
pub mod sdk;
pub mod sdk_app;
pub mod serve;
mod server;
pub mod shared_app;
pub mod subscriber;
pub mod target;
pub mod wire;

pub use app::AppChannel;
pub use serve::{ServeOptions, ServedComponent, Sidecar};
pub use target::SidecarTarget;
