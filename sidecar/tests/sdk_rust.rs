//! The findings about Dapr's Rust SDK (crate `dapr`, pinned in sdk/rust/repro): each
//! standalone reproduction still shows its defect, exiting 1. One that exits 0 means
//! the SDK was fixed there: its finding (docs/sdks.md) is to be updated.

use std::time::Duration;

/// Runs the reproduction `bin` of sdk/rust/repro (`cargo run`, which builds it where
/// the workspace's build has not); gives its exit code and output.
async fn run_repro(bin: &str) -> (Option<i32>, String) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(cargo)
            .args([
                "run",
                "--quiet",
                "--locked",
                "-p",
                "dapr-rust-sdk-repro",
                "--bin",
                bin,
            ])
            .env("RUST_BACKTRACE", "0")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the reproduction was built and finished within 600 s")
    .expect("cargo runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

/// The SDK's gRPC app panics on a bulk delivery (`todo!()` in `OnBulkTopicEvent`, which
/// `OnBulkTopicEventAlpha1` calls): the sidecar gets neither statuses nor
/// `Unimplemented`, while its single deliveries work.
#[tokio::test]
async fn the_rust_sdk_app_cannot_take_a_bulk_delivery() {
    let (code, output) = run_repro("bulk-callback").await;
    assert_eq!(
        code,
        Some(1),
        "bulk-callback no longer shows its finding: update docs/sdks.md\n{output}"
    );
    for finding in [
        "OnTopicEvent: Ok(0)",
        "DEFECT: OnBulkTopicEvent failed with",
        "DEFECT: OnBulkTopicEventAlpha1 failed with",
        "on_bulk_topic_event is not implemented yet",
    ] {
        assert!(
            output.contains(finding),
            "bulk-callback failed otherwise than by its finding ({finding}):\n{output}"
        );
    }
}
