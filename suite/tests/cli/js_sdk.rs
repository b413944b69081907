//! `certify --js-sdk`: rows through Dapr's JavaScript SDK, its client and its server.

use crate::support::{assert_verdict, cell_of, certified, mention, row_named, temp_dir};
use pubsub_conformance::reports::CaseResult;

/// Asserts that `cell` is marked an expected failure by the expectations file `file`.
fn assert_expected_by(cell: &CaseResult, file: &str) {
    let expected = cell.expected_failure.clone().unwrap_or_default();
    assert!(expected.contains(file), "{}: {expected}", cell.id);
}

/// `certify --js-sdk` adds a row whose publishes go through Dapr's JavaScript SDK
/// (as scripts/install.sh installs it) and a row whose subscriber is its app: what
/// the SDK gets right passes, the SDK's own defects FAIL with evidence and are
/// marked expected by `fixtures/expectations/via-dapr-dapr-client.yaml` and
/// `... server.yaml`, what its handlers cannot see is UNSUPPORTED with the reason,
/// and the in-process row is untouched by them.
#[test]
fn the_js_sdk_rows_certify_the_sdk_client_and_server() {
    let out = temp_dir("js-sdk");
    let (report, stderr) = certified(
        "memory",
        "{publish.delivery,envelope.app-cloudevent,bulk-publish.fidelity,bulk-publish.entry-ids,bulk-publish.partial-failure,publish.invalid-requests,retry.delay}",
        &["--js-sdk"],
        &out,
    );
    let client = row_named(&report, "memory via @dapr/dapr client", &stderr);
    let version = client
        .provisioning
        .broker_version
        .clone()
        .unwrap_or_default();
    assert!(version.starts_with("@dapr/dapr 3."), "{version}");
    for cell in &client.cases {
        let sdk_defect = matches!(
            cell.id.as_str(),
            "bulk-publish.partial-failure" | "publish.invalid-requests"
        );
        if sdk_defect {
            assert_verdict(cell, "FAIL", "");
            assert_expected_by(cell, "via-dapr-dapr-client.yaml");
        } else {
            // JSON the SDK serializes again is compared as JSON; an entry without an
            // id cannot be sent through it (a note, not a verdict).
            assert_verdict(cell, "PASS", "");
        }
    }
    let partial = cell_of(client, "bulk-publish.partial-failure");
    assert!(
        mention(
            &partial.evidence.findings,
            "acknowledged publishes were never delivered"
        ),
        "{:?}",
        partial.evidence
    );
    let in_process = row_named(&report, "memory", &stderr);
    assert!(in_process.cases.iter().all(|c| c.status.label() == "PASS"));
    assert!(out
        .join("evidence/memory-via-dapr-dapr-client/publish.invalid-requests.txt")
        .is_file());

    let server = row_named(&report, "memory via @dapr/dapr server", &stderr);
    for id in [
        "publish.delivery",
        "bulk-publish.entry-ids",
        "bulk-publish.partial-failure",
        "publish.invalid-requests",
    ] {
        assert_verdict(cell_of(server, id), "PASS", "");
    }
    // Its handlers get data and headers, not the CloudEvent.
    let envelope = cell_of(server, "envelope.app-cloudevent");
    assert_eq!(envelope.status.label(), "UNSUPPORTED");
    assert!(
        envelope
            .evidence
            .findings
            .iter()
            .chain(&envelope.evidence.notes)
            .any(|n| n.contains("not the CloudEvent")),
        "{:?}",
        envelope.evidence
    );
    // Its defects: binary data read as text, a duration it cannot declare.
    for (id, finding) in [
        ("bulk-publish.fidelity", "binary-ce: payload differs"),
        ("retry.delay", "is not a duration"),
    ] {
        let failed = cell_of(server, id);
        assert_verdict(failed, "FAIL", "");
        assert!(
            mention(&failed.evidence.findings, finding),
            "{id}: {:?}",
            failed.evidence
        );
        assert_expected_by(failed, "via-dapr-dapr-server.yaml");
    }
}
