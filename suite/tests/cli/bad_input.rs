//! Bad input on the command line: definitions, names, globs, options, the
//! environment and report files are refused with exit code 2 and a message naming
//! what was wrong, before anything runs.

use crate::support::{certify_memory, cli, run, temp_dir};

#[test]
fn a_bad_definition_names_its_file_and_field() {
    let fixtures = temp_dir("fixtures");
    let file = fixtures.join("broken.yaml");
    std::fs::write(
        &file,
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: broken\nspec:\n  type: pubsub.in-memory\n  metadata:\n    - name: maxMessageBytes\n      value: lots\n",
    )
    .unwrap();
    let output = run(cli()
        .args(["certify", "--fixtures"])
        .arg(&fixtures)
        .args(["--out"])
        .arg(temp_dir("unused")));
    let (stdout, stderr) = (&output.stdout, &output.stderr);
    assert_eq!(output.code, Some(2), "{stdout}{stderr}");
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
    let output = run(cli().args(["certify", "--component", "nope"]));
    assert_eq!(output.code, Some(2));
    assert!(output.stderr.contains("no component named 'nope'"));
    let output = run(cli().args(["certify", "--case", "no-such-case.*"]));
    assert_eq!(output.code, Some(2));
    assert!(output.stderr.contains("no case matches"));
}

/// Bad options are refused with exit code 2 and a message naming the option and
/// what it takes, before anything runs.
#[rstest::rstest]
#[case::unknown_option(&["certify", "--colour"], "unexpected argument '--colour'")]
#[case::bad_level(&["certify", "--level", "gold"], "'gold' is not a level; use core, feature or certification")]
#[case::zero_jobs(&["certify", "--jobs", "0"], "--jobs")]
#[case::bad_provision(&["certify", "--provision", "cloud"], "cloud")]
#[case::invalid_glob(&["certify", "--case", "publish.[x"], "--case 'publish.[x' is not a valid glob")]
#[case::missing_fixtures(&["certify", "--fixtures", "no/such/dir"], "cannot read the fixtures directory no/such/dir")]
#[case::regression_without_baseline(&["merge", "x.json", "--fail-on-regression"], "--baseline")]
#[case::zero_repeats(&["bench", "--repeats", "0"], "--repeats")]
#[case::unknown_list_format(&["list", "--format", "yaml"], "'yaml'")]
#[case::unknown_broker_version(&["certify", "--component", "redis", "--broker-versions", "5.0"], "no broker version '5.0'")]
#[case::empty_broker_version(&["certify", "--broker-versions", "7.0.15,,8.0.2"], "an empty version")]
#[case::broker_versions_without_containers(&["certify", "--broker-versions", "trixie", "--provision", "local"], "must allow 'container'")]
fn bad_options_are_refused_naming_them(#[case] args: &[&str], #[case] named: &str) {
    let output = run(cli().args(args).env("PUBSUB_PROVISION", ""));
    let stderr = &output.stderr;
    assert_eq!(output.code, Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(named), "{args:?}: {stderr}");
}

#[test]
fn a_bad_provision_environment_is_refused_naming_it() {
    let output = run(cli()
        .args(["certify", "--component", "memory"])
        .env("PUBSUB_PROVISION", "local,moon"));
    let stderr = &output.stderr;
    assert_eq!(output.code, Some(2), "{stderr}");
    assert!(
        stderr.contains("moon") && stderr.contains("PUBSUB_PROVISION"),
        "{stderr}"
    );
}

/// `merge` refuses what is not a report of this suite, naming the file and what was
/// expected, and writes nothing.
#[test]
fn merge_refuses_truncated_foreign_and_missing_reports() {
    let dir = temp_dir("bad-merge");
    let good = temp_dir("bad-merge-good");
    let output = certify_memory("publish.delivery", &good);
    assert!(output.success());
    let text = std::fs::read_to_string(good.join("report.json")).unwrap();
    let mut newer: serde_json::Value = serde_json::from_str(&text).unwrap();
    newer["schema_version"] = serde_json::json!(999);
    for (name, content, expected) in [
        (
            "truncated.json",
            text[..text.len() / 2].to_string(),
            "is not a pubsub-conformance report.json",
        ),
        (
            "foreign.json",
            "{\"hello\": 1}".to_string(),
            "is not a pubsub-conformance report.json",
        ),
        (
            "empty.json",
            String::new(),
            "is not a pubsub-conformance report.json",
        ),
        ("newer.json", newer.to_string(), "schema version 999"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        let out = dir.join(format!("out-{name}"));
        let output = run(cli()
            .arg("merge")
            .arg(good.join("report.json"))
            .arg(&path)
            .arg("--out")
            .arg(&out));
        let stderr = &output.stderr;
        assert_eq!(output.code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        if expected != "schema version 999" {
            assert!(
                stderr.contains(name),
                "{name}: the error names the file: {stderr}"
            );
        }
        assert!(!out.exists(), "{name}: nothing is written");
    }
    let missing = run(cli().args(["merge", "no/such/report.json"]));
    let stderr = &missing.stderr;
    assert_eq!(missing.code, Some(2));
    assert!(
        stderr.contains("cannot read no/such/report.json"),
        "{stderr}"
    );
}
