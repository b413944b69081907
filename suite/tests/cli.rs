//! The command line as a user runs it: `list`, `certify` and what it writes, `merge`,
//! `check`, `--baseline`, `bench`, the paths over Dapr's HTTP API (`serve`, sidecars,
//! Dapr's SDKs), and bad input. One test binary: its tests are in cli/, a
//! module for each command or topic, sharing cli/support.rs.

#[path = "cli/support.rs"]
mod support;

#[path = "cli/bad_input.rs"]
mod bad_input;
#[path = "cli/baseline.rs"]
mod baseline;
#[path = "cli/bench.rs"]
mod bench;
#[path = "cli/grpc_sdks.rs"]
mod grpc_sdks;
#[path = "cli/js_sdk.rs"]
mod js_sdk;
#[path = "cli/list.rs"]
mod list;
#[path = "cli/reports.rs"]
mod reports;
#[path = "cli/serve_and_sidecars.rs"]
mod serve_and_sidecars;
