//! `certify --python-sdk` and `--rust-sdk`: rows through Dapr's SDKs over gRPC, the
//! Python SDK's client and gRPC app, the Rust SDK's client.

use crate::support::{assert_verdict, cell_of, certified, row_named, temp_dir};

/// `certify --python-sdk` adds a row whose publishes go through the Python SDK's
/// `DaprClient` (gRPC, as scripts/install.sh installs it in sdk/python/.venv) and a
/// row whose subscriber is its `dapr.ext.grpc.App`: each takes the in-process verdict
/// on what it can express (the fidelity of generated values, dead letters, retries,
/// the CloudEvent the app's handler sees), names the SDK's version, and says why a
/// bulk handler cannot run through the app.
#[test]
fn the_python_sdk_rows_certify_the_sdk_client_and_app() {
    let out = temp_dir("python-sdk");
    let cases = "{publish.delivery,publish.fidelity,bulk-publish.fidelity,bulk-publish.partial-failure,dead-letter.drop,retry.redelivery,envelope.cloudevents,bulk-subscribe.statuses,delay.receiver-delay-from-publish}";
    let (report, stderr) = certified("memory", cases, &["--python-sdk"], &out);
    let client = row_named(&report, "memory via dapr Python client", &stderr);
    let version = client
        .provisioning
        .broker_version
        .clone()
        .unwrap_or_default();
    assert!(version.starts_with("dapr (Python) 1."), "{version}");
    for cell in &client.cases {
        assert_verdict(cell, "PASS", " through the Python SDK's client");
    }
    let app = row_named(&report, "memory via dapr Python app", &stderr);
    for cell in &app.cases {
        if cell.id == "bulk-subscribe.statuses" {
            continue;
        }
        assert_verdict(cell, "PASS", " through the Python SDK's app");
    }
    let bulk = cell_of(app, "bulk-subscribe.statuses");
    assert_eq!(bulk.status.label(), "UNSUPPORTED");
    let why = bulk
        .evidence
        .findings
        .iter()
        .chain(&bulk.evidence.notes)
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ");
    assert!(
        why.contains("dapr (Python)") && why.contains("bulkSubscribe"),
        "{why}"
    );
}

/// `certify --rust-sdk` adds a row whose publishes go through the Rust SDK's `Client`
/// (the pinned `dapr` crate, in this process): single publishes take the in-process
/// verdict, a refused one is read back as refused (the SDK's status is read from its
/// error's debug text), and what needs a bulk publish is UNSUPPORTED, saying the
/// client has none.
#[test]
fn the_rust_sdk_row_certifies_the_sdk_client() {
    let out = temp_dir("rust-sdk");
    let cases = "{publish.delivery,publish.fidelity,publish.invalid-requests,retry.redelivery,bulk-publish.fidelity,ttl.expired-not-delivered}";
    let (report, stderr) = certified("memory", cases, &["--rust-sdk"], &out);
    let row = row_named(&report, "memory via dapr Rust client", &stderr);
    let version = row.provisioning.broker_version.clone().unwrap_or_default();
    assert!(version.starts_with("dapr (Rust) 0."), "{version}");
    for cell in &row.cases {
        if cell.id == "bulk-publish.fidelity" {
            continue;
        }
        assert_verdict(cell, "PASS", " through the Rust SDK's client");
    }
    let bulk = cell_of(row, "bulk-publish.fidelity");
    assert_eq!(bulk.status.label(), "UNSUPPORTED");
}
