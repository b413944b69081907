//! What `certify` writes, and the commands that read it back: the versioned report
//! and every other format, `--repeat`, a broker that cannot be had, `merge` of shards
//! and `check` of a saved run.

use crate::support::{certify, certify_cases, certify_memory, cli, report_in, run, temp_dir};
use pubsub_conformance::reports::{RunReport, Runs, Status, SCHEMA_VERSION};

#[test]
fn certify_writes_a_versioned_report_and_summary() {
    let out = temp_dir("report");
    let output = certify_memory("publish.*", &out);
    let stdout = &output.stdout;
    assert!(output.success(), "{stdout}\n{}", output.stderr);
    assert!(stdout.contains("memory"), "{stdout}");
    let report = report_in(&out);
    assert_eq!(report.schema_version, SCHEMA_VERSION);
    let cases = &report.components[0].cases;
    let publish_cases = pubsub_conformance::catalogue::catalogue()
        .iter()
        .filter(|c| c.id.starts_with("publish."))
        .count();
    assert_eq!(cases.len(), publish_cases);
    assert!(cases.iter().all(|c| c.status == Status::Pass));
    assert_eq!(report.components[0].provisioning.kind, "in-process");
}

#[test]
fn certify_writes_every_report_format() {
    let out = temp_dir("formats");
    let output = certify_memory("envelope.*", &out);
    assert!(output.success());
    for file in [
        "index.html",
        "report.json",
        "report.md",
        "junit.xml",
        "badges/memory.json",
    ] {
        assert!(out.join(file).exists(), "certify did not write {file}");
    }
    assert!(out.join("evidence").is_dir());
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("<testcase name=\"envelope.cloudevents\""),
        "{junit}"
    );
}

/// `--repeat N` runs each case N times; each cell says how many runs passed, in the
/// JSON and the HTML.
#[test]
fn repeat_reports_passes_out_of_n() {
    let out = temp_dir("repeat");
    let output = certify_cases("memory", "publish.delivery", &["--repeat", "3"], &out);
    assert!(output.success());
    let report = report_in(&out);
    let cell = &report.components[0].cases[0];
    assert_eq!(cell.runs, Some(Runs { runs: 3, passes: 3 }));
    assert_eq!(cell.status, Status::Pass);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("PASS native 3/3"), "the HTML cell shows 3/3");
    let saved =
        std::fs::read_to_string(out.join("histories/memory/publish.delivery.jsonl")).unwrap();
    assert_eq!(
        saved.matches("\"attempt\":{").count(),
        3,
        "one saved attempt per run"
    );
}

/// A component whose broker cannot be had is reported NOT PROVISIONED with its hint,
/// and the run still succeeds; `--fail-not-provisioned` makes it a failure (for CI).
#[test]
fn not_provisioned_is_reported_and_fails_only_on_request() {
    let fixtures = temp_dir("unprovisioned-fixtures");
    std::fs::write(
        fixtures.join("nowhere.yaml"),
        "apiVersion: dapr.io/v1alpha1\nkind: Component\nmetadata:\n  name: nowhere\nspec:\n  type: pubsub.redis-streams\n  version: v1\n  metadata:\n    - name: redisHost\n      value: \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let fixtures = fixtures.to_str().unwrap();
    let certify_nowhere = |strict: bool| {
        let out = temp_dir(if strict {
            "unprovisioned-strict"
        } else {
            "unprovisioned"
        });
        let mut args = vec![
            "--case",
            "publish.delivery",
            "--provision",
            "external",
            "--fixtures",
            fixtures,
        ];
        if strict {
            args.push("--fail-not-provisioned");
        }
        certify(&args, &out)
    };
    let lenient = certify_nowhere(false);
    let stdout = &lenient.stdout;
    assert!(lenient.success(), "{stdout}");
    assert!(
        stdout.contains("NOT PROVISIONED nowhere: external: nothing answers at 127.0.0.1:1")
            && stdout.contains("hint: start the broker"),
        "{stdout}"
    );
    let strict = certify_nowhere(true);
    assert_eq!(strict.code, Some(1), "{}", strict.stdout);
}

/// What must agree between a merged and a full run: every cell's verdict.
fn cells(report: &RunReport) -> Vec<(String, String, String, Option<String>)> {
    let mut cells: Vec<_> = report
        .components
        .iter()
        .flat_map(|c| {
            c.cases.iter().map(move |case| {
                (
                    c.name.clone(),
                    case.id.clone(),
                    case.status.label().to_string(),
                    case.mode.map(|m| format!("{m:?}")),
                )
            })
        })
        .collect();
    cells.sort();
    cells
}

#[test]
fn merging_two_shards_equals_one_full_run() {
    let dir = temp_dir("merge");
    let shard = |glob: &str, out: &str| {
        let output = certify_memory(glob, &dir.join(out));
        assert!(output.success(), "certify --case {glob} failed");
    };
    shard("publish.*", "shard-1");
    shard("envelope.*", "shard-2");
    shard("{publish,envelope}.*", "full");
    let output = run(cli()
        .arg("merge")
        .arg(dir.join("shard-1/report.json"))
        .arg(dir.join("shard-2/report.json"))
        .arg("--out")
        .arg(dir.join("merged")));
    assert!(output.success(), "{}", output.stderr);
    let merged = report_in(&dir.join("merged"));
    let full = report_in(&dir.join("full"));
    assert_eq!(cells(&merged), cells(&full));
    assert!(merged.conflicts.is_empty());
    for file in ["index.html", "report.md", "junit.xml", "badges/memory.json"] {
        assert!(
            dir.join("merged").join(file).exists(),
            "merge did not write {file}"
        );
    }
}

/// Every attempt's history is saved with the report, and `check` judges a whole saved
/// run again, offline, to identical verdicts; a history changed afterwards is a
/// verdict that differs, and `check` says which and exits 1.
#[test]
fn check_rejudges_a_saved_run_with_identical_verdicts() {
    let out = temp_dir("check");
    let output = certify(&["--component", "memory"], &out);
    assert!(output.success(), "{}\n{}", output.stdout, output.stderr);
    let report = report_in(&out);
    let ran = report.components[0]
        .cases
        .iter()
        .filter(|c| c.status != Status::NotProvisioned)
        .count();
    let output = run(cli().arg("check").arg(&out));
    let stdout = &output.stdout;
    assert!(output.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("re-judged {ran} cells")) && stdout.contains(": 0 differ"),
        "{stdout}"
    );

    // Take the deliveries out of one saved history: judged again, it is lost.
    let path = out.join("histories/memory/publish.delivery.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"record\":\"delivered\""))
        .collect();
    std::fs::write(&path, kept.join("\n")).unwrap();
    let output = run(cli().args(["check", "--case", "publish.*"]).arg(&out));
    let stdout = &output.stdout;
    assert_eq!(output.code, Some(1), "{stdout}");
    assert!(
        stdout.contains("DIFFERS memory publish.delivery: saved PASS, judged now FAIL (lost:"),
        "{stdout}"
    );
    assert!(stdout.contains(": 1 differ"), "{stdout}");

    let empty = temp_dir("check-empty");
    let output = run(cli().arg("check").arg(&empty));
    assert_eq!(output.code, Some(2));
    assert!(output.stderr.contains("report.json"));
}
