//! The broker-version axis end to end: `certify --broker-versions` builds the images of
//! two Redis versions (scripts/images.sh, kept by the engine) and reports a row per
//! version. Redis 6.0 lacks XAUTOCLAIM, which the Redis Streams component needs: its
//! row says so once, with the broker's refusal, while 7.0 passes the same cases.
//! RabbitMQ 4.3 counts only rejected returns as failed deliveries: the component's
//! RETRY must still count attempts and end at maxDeliveries there.

use pubsub_conformance::reports::{RunReport, Status};
use std::process::Command;

/// `certify` of `component` on `versions` for the cases of `glob`; the report.
fn certify_on(
    component: &str,
    versions: &str,
    glob: &str,
) -> (RunReport, String, std::path::PathBuf) {
    let out = std::env::temp_dir().join(format!("pcs-versions-{component}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args([
            "certify",
            "--component",
            component,
            "--broker-versions",
            versions,
        ])
        .args(["--case", glob, "--out"])
        .arg(&out)
        .env_remove("PUBSUB_PROVISION")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let report = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    (report, stdout, out)
}

#[test]
fn rabbitmq_4_3_counts_retries_up_to_max_deliveries() {
    let (report, stdout, _) = certify_on(
        "rabbitmq",
        "4.3.6",
        "{retry.redelivery,dead-letter.max-deliveries,retry.exhausted-without-dead-letter}",
    );
    let row = &report.components[0];
    assert_eq!(row.name, "rabbitmq on rabbitmq 4.3.6 (forky)", "{stdout}");
    assert_eq!(row.cases.len(), 3);
    assert!(
        row.cases.iter().all(|c| c.status == Status::Pass),
        "{stdout}"
    );
}

#[test]
fn a_case_that_differs_between_versions_is_reported_per_version() {
    let (report, stdout, out) = certify_on(
        "redis",
        "bullseye,7.0.15",
        "{publish.delivery,retry.redelivery}",
    );
    let names: Vec<&str> = report.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "redis on redis 6.0.16 (bullseye)",
            "redis on redis 7.0.15 (bookworm)"
        ],
        "{stdout}"
    );

    let old = &report.components[0];
    assert_eq!(old.provisioning.kind, "container");
    assert!(
        old.provisioning
            .broker_version
            .as_deref()
            .is_some_and(|v| v.starts_with("redis 6.0.16")),
        "{:?}",
        old.provisioning
    );
    let unmet = old.provisioning.unsupported_broker.as_deref().unwrap_or("");
    assert!(
        unmet.contains("needs Redis >= 6.2 (XAUTOCLAIM") && unmet.contains("unknown command"),
        "{unmet}"
    );
    assert!(old.cases.iter().all(|c| c.status == Status::Unsupported));
    assert!(
        stdout.contains("BROKER UNSUPPORTED redis on redis 6.0.16 (bullseye)"),
        "{stdout}"
    );

    let current = &report.components[1];
    assert!(current.provisioning.unsupported_broker.is_none());
    assert!(
        current
            .provisioning
            .broker_version
            .as_deref()
            .is_some_and(|v| v.starts_with("redis 7.0.15")),
        "{:?}",
        current.provisioning
    );
    assert_eq!(current.cases.len(), 2);
    assert!(
        current.cases.iter().all(|c| c.status == Status::Pass),
        "{stdout}"
    );
    let markdown = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        markdown.contains("BROKER UNSUPPORTED (redis 6.0.16"),
        "{markdown}"
    );
}
