//! Dapr's pub/sub HTTP API for this project's components: the wire format
//! ([`wire`]), the app channel a sidecar delivers through ([`app`], [`deliver`]), and
//! `serve`, a light Dapr-compatible sidecar ([`serve`]).

pub mod app;
pub mod deliver;
pub mod serve;
pub mod wire;

pub use app::AppChannel;
pub use serve::{ServeOptions, ServedComponent, Sidecar};
