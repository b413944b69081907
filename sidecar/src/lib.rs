//! Dapr's pub/sub HTTP API for this project's components: the wire format
//! ([`wire`]), the app channel a sidecar delivers through ([`app`], [`deliver`]), and
//! `serve`, a light Dapr-compatible sidecar ([`serve`]); and the other end: a
//! client and apps that certify any sidecar speaking the API ([`target`]).

pub mod app;
pub mod attach;
pub mod client;
pub mod deliver;
pub mod launch;
pub mod resources;
pub mod sdk;
pub mod sdk_app;
pub mod serve;
mod server;
pub mod subscriber;
pub mod target;
pub mod wire;

pub use app::AppChannel;
pub use serve::{ServeOptions, ServedComponent, Sidecar};
pub use target::SidecarTarget;
