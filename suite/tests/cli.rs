//! The command line as a user runs it: `list`, `certify`, and bad input.

use std::process::Command;

fn cli() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"));
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    command
}

fn temp_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pcs-cli-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn list_prints_every_case() {
    let output = cli().arg("list").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for case in pubsub_conformance::catalogue::catalogue() {
        assert!(text.contains(case.id), "list misses {}", case.id);
    }
}

#[test]
fn certify_writes_a_versioned_report_and_summary() {
    let out = temp_dir("report");
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--case",
            "publish.*",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("memory"), "{stdout}");
    let report: pubsub_conformance::reports::RunReport =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        report.schema_version,
        pubsub_conformance::reports::SCHEMA_VERSION
    );
    let cases = &report.components[0].cases;
    assert_eq!(cases.len(), 3);
    assert!(cases
        .iter()
        .all(|c| c.status == pubsub_conformance::reports::Status::Pass));
    assert_eq!(report.components[0].provisioning.kind, "in-process");
}

#[test]
fn a_bad_definition_names_its_file_and_field() {
    let fixtures = temp_dir("fixtures");
    let file = fixtures.join("broken.yaml");
    std::fs::write(
        &file,
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: broken\nspec:\n  type: pubsub.in-memory\n  metadata:\n    - name: maxMessageBytes\n      value: lots\n",
    )
    .unwrap();
    let output = cli()
        .args(["certify", "--fixtures"])
        .arg(&fixtures)
        .args(["--out"])
        .arg(temp_dir("unused"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: spec.metadata (maxMessageBytes): expected a number of bytes, got 'lots'",
            file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn unknown_names_and_globs_are_refused() {
    let output = cli()
        .args(["certify", "--component", "nope"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no component named 'nope'"));
    let output = cli()
        .args(["certify", "--case", "no-such-case.*"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no case matches"));
}
