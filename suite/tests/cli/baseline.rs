//! `--baseline`: a run compared with an earlier one, cell by cell.

use crate::support::{certify_memory, cli, report_in, run, temp_dir};
use std::path::Path;

/// `--baseline` marks the cells that changed, regressions first; with
/// `--fail-on-regression` only a regression fails the run.
#[test]
fn baseline_marks_changed_cells_and_fails_on_regression() {
    let dir = temp_dir("baseline");
    let plain = dir.join("plain");
    assert!(certify_memory("publish.*", &plain).success());
    // A stale expectation makes publish.delivery count as a failure: a regression
    // against the plain run.
    let fixtures = dir.join("fixtures");
    std::fs::create_dir_all(fixtures.join("expectations")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/memory.yaml"),
        fixtures.join("memory.yaml"),
    )
    .unwrap();
    std::fs::write(
        fixtures.join("expectations/memory.yaml"),
        "expectations:\n  - case: publish.delivery\n    broker: in-memory\n    reason: a made-up defect\n",
    )
    .unwrap();
    let certify_against = |baseline: &Path, out: &str, extra: &[&str]| {
        run(cli()
            .args(["certify", "--component", "memory", "--case", "publish.*"])
            .arg("--fixtures")
            .arg(&fixtures)
            .arg("--baseline")
            .arg(baseline)
            .arg("--out")
            .arg(dir.join(out))
            .args(extra))
    };
    let regressed = certify_against(
        &plain.join("report.json"),
        "stale",
        &["--fail-on-regression"],
    );
    let stdout = &regressed.stdout;
    assert_eq!(regressed.code, Some(1), "{stdout}");
    assert!(stdout.contains("1 regression(s), 1 change(s)"), "{stdout}");
    assert!(
        stdout.contains("REGRESSION memory publish.delivery: PASS (native) -> PASS (native), a stale expected failure"),
        "{stdout}"
    );
    let report = report_in(&dir.join("stale"));
    let baseline = report.baseline.expect("the comparison is in report.json");
    assert_eq!(baseline.regressions(), 1);
    let markdown = std::fs::read_to_string(dir.join("stale/report.md")).unwrap();
    assert!(
        markdown.contains("## Changes since the baseline") && markdown.contains("🔴 regression"),
        "{markdown}"
    );

    // The other way round: an improvement, and no regression to fail on.
    let improved = run(cli()
        .args(["certify", "--component", "memory", "--case", "publish.*"])
        .arg("--baseline")
        .arg(dir.join("stale/report.json"))
        .arg("--fail-on-regression")
        .arg("--out")
        .arg(dir.join("improved")));
    let stdout = &improved.stdout;
    assert_eq!(improved.code, Some(0), "{stdout}");
    assert!(
        stdout.contains("IMPROVEMENT memory publish.delivery"),
        "{stdout}"
    );

    // Bad use is refused before anything runs.
    let without = run(cli().args(["certify", "--component", "memory", "--fail-on-regression"]));
    let stderr = &without.stderr;
    assert_eq!(without.code, Some(2), "{stderr}");
    assert!(stderr.contains("--baseline"), "{stderr}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"components\": [").unwrap();
    let refused = certify_against(&bad, "never", &[]);
    let stderr = &refused.stderr;
    assert_eq!(refused.code, Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.json is not a pubsub-conformance report.json"),
        "{stderr}"
    );
    assert!(!dir.join("never").exists(), "nothing ran: {stderr}");
}
