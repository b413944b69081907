//! The paths a row can take besides in process, named by the suffix of the row's name
//! (`<component> via <path>`): the sidecar rows build these names, and expected
//! failures' `via` is checked against them (so they are here, with or without the
//! `sidecar` feature).

use std::path::PathBuf;

/// The suffix of a row certified through `serve` in this process.
pub const ROW_SUFFIX: &str = " via serve";
/// The suffix of a row certified through `serve` in this process, publishing over its
/// gRPC API.
pub const GRPC_ROW_SUFFIX: &str = " via serve over gRPC";
/// The suffix of a row certified through sidecars started from a command line.
pub const COMMAND_ROW_SUFFIX: &str = " via sidecar";
/// The suffix of a row certified through sidecars started from a command line, over
/// their gRPC API.
pub const COMMAND_GRPC_ROW_SUFFIX: &str = " via sidecar over gRPC";
/// The suffix of a row certified through a running sidecar.
pub const ATTACHED_ROW_SUFFIX: &str = " via attached sidecar";
/// The suffix of a row certified through a running sidecar over its gRPC API.
pub const ATTACHED_GRPC_ROW_SUFFIX: &str = " via attached sidecar over gRPC";
/// The suffix of a row whose publishes go through Dapr's JavaScript SDK's client.
pub const JS_SDK_CLIENT_ROW_SUFFIX: &str = " via @dapr/dapr client";
/// The suffix of a row whose publishes go through Dapr's JavaScript SDK's client in
/// its gRPC mode.
pub const JS_SDK_GRPC_CLIENT_ROW_SUFFIX: &str = " via @dapr/dapr client over gRPC";
/// The suffix of a row whose subscriptions are Dapr's JavaScript SDK's server.
pub const JS_SDK_SERVER_ROW_SUFFIX: &str = " via @dapr/dapr server";
/// The suffix of a row whose publishes go through Dapr's Python SDK's client (gRPC).
pub const PYTHON_SDK_CLIENT_ROW_SUFFIX: &str = " via dapr Python client";
/// The suffix of a row whose subscriptions are Dapr's Python SDK's gRPC app.
pub const PYTHON_SDK_APP_ROW_SUFFIX: &str = " via dapr Python app";
/// The suffix of a row whose publishes go through Dapr's Rust SDK's client (gRPC).
pub const RUST_SDK_CLIENT_ROW_SUFFIX: &str = " via dapr Rust client";
/// Every path a row can take besides in process, by its row suffix: what an expected
/// failure's `via` may name (the suffix without ` via `).
pub const PATH_ROW_SUFFIXES: [&str; 12] = [
    ROW_SUFFIX,
    GRPC_ROW_SUFFIX,
    COMMAND_ROW_SUFFIX,
    COMMAND_GRPC_ROW_SUFFIX,
    ATTACHED_ROW_SUFFIX,
    ATTACHED_GRPC_ROW_SUFFIX,
    JS_SDK_CLIENT_ROW_SUFFIX,
    JS_SDK_GRPC_CLIENT_ROW_SUFFIX,
    JS_SDK_SERVER_ROW_SUFFIX,
    PYTHON_SDK_CLIENT_ROW_SUFFIX,
    PYTHON_SDK_APP_ROW_SUFFIX,
    RUST_SDK_CLIENT_ROW_SUFFIX,
];

/// Sidecars to start from a command line (`--sidecar-command`), one per app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarCommand {
    /// The command line, with its placeholders (`{app_port}`, `{http_port}`, ...).
    pub template: String,
    /// Whether the suite talks to them over Dapr's gRPC API (`--sidecar-protocol
    /// grpc`): it publishes through their gRPC API (`{grpc_port}`) and its apps
    /// answer Dapr's app callbacks; else over HTTP.
    pub grpc: bool,
}

impl SidecarCommand {
    /// The suffix of the row's name.
    pub fn row_suffix(&self) -> &'static str {
        match self.grpc {
            false => COMMAND_ROW_SUFFIX,
            true => COMMAND_GRPC_ROW_SUFFIX,
        }
    }
}

/// A running sidecar to certify through (`--sidecar`): where it is and how it was
/// started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachTo {
    /// Its HTTP API, e.g. `http://127.0.0.1:3500`.
    pub base: String,
    /// The pub/sub name there; `None`: the component's name.
    pub pubsub: Option<String>,
    /// The app port it was started with (the suite's app listens there).
    pub app_port: u16,
    /// The directory it loads resources from (the suite writes its subscriptions
    /// there).
    pub resources: PathBuf,
    /// Its `dapr-api-token`, if it wants one.
    pub api_token: Option<String>,
    /// Its gRPC API, where the suite talks to it over gRPC (`--sidecar-protocol
    /// grpc`); `None`: over HTTP.
    pub grpc: Option<String>,
}

impl AttachTo {
    /// The suffix of the row's name.
    pub fn row_suffix(&self) -> &'static str {
        match self.grpc {
            None => ATTACHED_ROW_SUFFIX,
            Some(_) => ATTACHED_GRPC_ROW_SUFFIX,
        }
    }
}
