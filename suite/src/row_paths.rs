//! The paths a row can take besides in process, named by the suffix of the row's name
//! (`<component> via <path>`): the sidecar rows build these names, and expected
//! failures' `via` is checked against them (so they are here, with or without the
//! `sidecar` feature).

/// The suffix of a row certified through `serve` in this process.
pub const ROW_SUFFIX: &str = " via serve";
/// The suffix of a row certified through sidecars started from a command line.
pub const COMMAND_ROW_SUFFIX: &str = " via sidecar";
/// The suffix of a row certified through a running sidecar.
pub const ATTACHED_ROW_SUFFIX: &str = " via attached sidecar";
/// The suffix of a row whose publishes go through Dapr's JavaScript SDK's client.
pub const JS_SDK_CLIENT_ROW_SUFFIX: &str = " via @dapr/dapr client";
/// The suffix of a row whose subscriptions are Dapr's JavaScript SDK's server.
pub const JS_SDK_SERVER_ROW_SUFFIX: &str = " via @dapr/dapr server";
/// Every path a row can take besides in process, by its row suffix: what an expected
/// failure's `via` may name (the suffix without ` via `).
pub const PATH_ROW_SUFFIXES: [&str; 5] = [
    ROW_SUFFIX,
    COMMAND_ROW_SUFFIX,
    ATTACHED_ROW_SUFFIX,
    JS_SDK_CLIENT_ROW_SUFFIX,
    JS_SDK_SERVER_ROW_SUFFIX,
];
