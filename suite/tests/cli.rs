//! The command line as a user runs it: `list`, `certify` and what it writes, `merge`,
//! `check`, `--baseline`, `bench`, the paths over Dapr's HTTP API (`serve`, sidecars,
//! the JavaScript and Python SDKs), and bad input. One test binary: its tests are in cli/, a
//! module for each command or topic, sharing cli/support.rs.

#[path = "cli/support.rs"]
mod support;

#[path = "cli/bad_input.rs"]
mod bad_input;
#[path = "cli/baseline.rs"]
mod baseline;
#[path = "cli/bench.rs"]
mod bench;
#[path = "cli/js_sdk.rs"]
mod js_sdk;
#[path = "cli/list.rs"]
mod list;
#[path = "cli/python_sdk.rs"]
mod python_sdk;
#[path = "cli/reports.rs"]
mod reports;
#[path = "cli/serve_and_sidecars.rs"]
mod serve_and_sidecars;
