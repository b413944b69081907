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

/// `certify` of the in-memory component on the cases matching `glob`, into `out`.
fn certify_memory(glob: &str, out: &std::path::Path) -> std::process::Output {
    cli()
        .args(["certify", "--component", "memory", "--case", glob, "--out"])
        .arg(out)
        .output()
        .unwrap()
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
    let output = certify_memory("publish.*", &out);
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
    let publish_cases = pubsub_conformance::catalogue::catalogue()
        .iter()
        .filter(|c| c.id.starts_with("publish."))
        .count();
    assert_eq!(cases.len(), publish_cases);
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
    let output = cli()
        .args(args)
        .env("PUBSUB_PROVISION", "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(named), "{args:?}: {stderr}");
}

#[test]
fn a_bad_provision_environment_is_refused_naming_it() {
    let output = cli()
        .args(["certify", "--component", "memory"])
        .env("PUBSUB_PROVISION", "local,moon")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("moon") && stderr.contains("PUBSUB_PROVISION"),
        "{stderr}"
    );
}

fn read(path: &std::path::Path) -> pubsub_conformance::reports::RunReport {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// What must agree between a merged and a full run: every cell's verdict.
fn cells(
    report: &pubsub_conformance::reports::RunReport,
) -> Vec<(String, String, String, Option<String>)> {
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
    let run = |glob: &str, out: &str| {
        let status = certify_memory(glob, &dir.join(out)).status;
        assert!(status.success(), "certify --case {glob} failed");
    };
    run("publish.*", "shard-1");
    run("envelope.*", "shard-2");
    run("{publish,envelope}.*", "full");
    let output = cli()
        .arg("merge")
        .arg(dir.join("shard-1/report.json"))
        .arg(dir.join("shard-2/report.json"))
        .arg("--out")
        .arg(dir.join("merged"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let merged = read(&dir.join("merged/report.json"));
    let full = read(&dir.join("full/report.json"));
    assert_eq!(cells(&merged), cells(&full));
    assert!(merged.conflicts.is_empty());
    for file in ["index.html", "report.md", "junit.xml", "badges/memory.json"] {
        assert!(
            dir.join("merged").join(file).exists(),
            "merge did not write {file}"
        );
    }
}

#[test]
fn certify_writes_every_report_format() {
    let out = temp_dir("formats");
    let output = certify_memory("envelope.*", &out);
    assert!(output.status.success());
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

/// A short `bench` run (300 messages, runs of at least 0.05 s) with `args`, into a
/// new directory named after `name`: the directory and what it printed; it must succeed.
fn bench(name: &str, args: &[&str]) -> (std::path::PathBuf, String) {
    let out = temp_dir(name);
    let output = cli()
        .args(["bench", "--messages", "300", "--min-seconds", "0.05"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (out, stdout)
}

#[test]
fn bench_prints_ratios_and_stores_them_in_the_report() {
    let (out, stdout) = bench("bench", &["--component", "memory", "--repeats", "3"]);
    for line in [
        "single publish",
        "bulk publish x100",
        "x vs single publish",
        "runtime emulation",
        "bulk subscribe x100",
        "component consumer x100, no runtime",
        "p99",
        "spread (min..max)",
        "publish throughput, msg/s, log scale",
        "memory  single",
    ] {
        assert!(
            stdout.contains(line),
            "bench output lacks '{line}':\n{stdout}"
        );
    }
    let report = read(&out.join("report.json"));
    let bench = &report.bench[0];
    assert_eq!(bench.component, "memory");
    // Publish runs are sized by time (a probe run sets the count), never below
    // --messages, and each keeps its 3 repeats for the spread.
    for m in &bench.measurements {
        assert!(m.rate > 0.0 && m.messages >= 300, "{m:?}");
        if m.label.contains("publish") {
            assert_eq!(m.runs.len(), 3, "{m:?}");
        }
    }
    assert!(bench
        .latency
        .as_ref()
        .is_some_and(|l| l.samples == 300 && l.p50_us <= l.p99_us && l.p99_us <= l.max_us));
    assert!(std::fs::read_to_string(out.join("index.html"))
        .unwrap()
        .contains("<svg class=\"chart compare\""));
}

/// On a broker with a raw client, the component's bulk paths and the raw client run in
/// turn on the same messages, and the native bulk path in turn with its emulation:
/// each pair shares its message count and carries a ratio.
#[test]
fn bench_runs_the_raw_client_and_the_emulation_in_turn_with_the_component() {
    let (out, _) = bench(
        "bench-redis",
        &[
            "--component",
            "redis",
            "--repeats",
            "2",
            "--consume-messages",
            "200",
        ],
    );
    let report = read(&out.join("report.json"));
    let rows = &report.bench[0].measurements;
    let row = |label: &str| {
        rows.iter()
            .find(|m| m.label == label)
            .unwrap_or_else(|| panic!("no row '{label}' in {rows:#?}"))
    };
    let pairs = [
        (
            "bulk publish x100, in turn with the raw client",
            "raw client: pipelined XADD x100",
        ),
        (
            "bulk publish x100, rawPayload (no envelope)",
            "raw client: pipelined XADD x100",
        ),
        (
            "bulk publish x100, runtime emulation",
            "bulk publish x100, in turn with the runtime emulation",
        ),
        (
            "bulk publish x100, in turn with the raw client",
            "raw client: pipelined XADD x100, the component's enveloped bytes",
        ),
    ];
    for (component, beside) in pairs {
        let (component, beside) = (row(component), row(beside));
        assert_eq!(
            component.messages, beside.messages,
            "{component:?} {beside:?}"
        );
        assert_eq!(component.runs.len(), 2, "{component:?}");
        assert!(component.rate > 0.0 && beside.rate > 0.0);
    }
    // A ratio is the component's time over the raw client's: raw rate / component rate.
    let assert_ratio = |carrier: &str, raw: &str, component: &str| {
        let ratio = row(carrier)
            .ratio
            .unwrap_or_else(|| panic!("no ratio on '{carrier}'"));
        let expected = row(raw).rate / row(component).rate;
        assert!(
            (ratio - expected).abs() < 1e-9,
            "{carrier}: {ratio} != {expected}"
        );
    };
    let enveloped = "bulk publish x100, in turn with the raw client";
    // The envelope's cost against the raw client.
    assert_ratio(enveloped, "raw client: pipelined XADD x100", enveloped);
    // The component against the raw client sending the component's enveloped bytes.
    let same_bytes = "raw client: pipelined XADD x100, the component's enveloped bytes";
    assert_ratio(same_bytes, same_bytes, enveloped);
    assert!(row("bulk publish x100, runtime emulation").ratio.is_some());
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
    let run = |strict: bool| {
        let out = temp_dir(if strict {
            "unprovisioned-strict"
        } else {
            "unprovisioned"
        });
        let mut command = cli();
        command
            .args([
                "certify",
                "--case",
                "publish.delivery",
                "--provision",
                "external",
            ])
            .arg("--fixtures")
            .arg(&fixtures)
            .arg("--out")
            .arg(&out);
        if strict {
            command.arg("--fail-not-provisioned");
        }
        command.output().unwrap()
    };
    let lenient = run(false);
    let stdout = String::from_utf8_lossy(&lenient.stdout);
    assert!(lenient.status.success(), "{stdout}");
    assert!(
        stdout.contains("NOT PROVISIONED nowhere: external: nothing answers at 127.0.0.1:1")
            && stdout.contains("hint: start the broker"),
        "{stdout}"
    );
    let strict = run(true);
    assert_eq!(
        strict.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&strict.stdout)
    );
}

/// `merge` refuses what is not a report of this suite, naming the file and what was
/// expected, and writes nothing.
#[test]
fn merge_refuses_truncated_foreign_and_missing_reports() {
    let dir = temp_dir("bad-merge");
    let good = temp_dir("bad-merge-good");
    let output = certify_memory("publish.delivery", &good);
    assert!(output.status.success());
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
        let output = cli()
            .arg("merge")
            .arg(good.join("report.json"))
            .arg(&path)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        if expected != "schema version 999" {
            assert!(
                stderr.contains(name),
                "{name}: the error names the file: {stderr}"
            );
        }
        assert!(!out.exists(), "{name}: nothing is written");
    }
    let missing = cli()
        .args(["merge", "no/such/report.json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr.contains("cannot read no/such/report.json"),
        "{stderr}"
    );
}

/// `--baseline` marks the cells that changed, regressions first; with
/// `--fail-on-regression` only a regression fails the run.
#[test]
fn baseline_marks_changed_cells_and_fails_on_regression() {
    let dir = temp_dir("baseline");
    let plain = dir.join("plain");
    assert!(certify_memory("publish.*", &plain).status.success());
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
    let certify_against = |baseline: &std::path::Path, out: &str, extra: &[&str]| {
        cli()
            .args(["certify", "--component", "memory", "--case", "publish.*"])
            .arg("--fixtures")
            .arg(&fixtures)
            .arg("--baseline")
            .arg(baseline)
            .arg("--out")
            .arg(dir.join(out))
            .args(extra)
            .output()
            .unwrap()
    };
    let regressed = certify_against(
        &plain.join("report.json"),
        "stale",
        &["--fail-on-regression"],
    );
    let stdout = String::from_utf8_lossy(&regressed.stdout);
    assert_eq!(regressed.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("1 regression(s), 1 change(s)"), "{stdout}");
    assert!(
        stdout.contains("REGRESSION memory publish.delivery: PASS (native) -> PASS (native), a stale expected failure"),
        "{stdout}"
    );
    let report = read(&dir.join("stale/report.json"));
    let baseline = report.baseline.expect("the comparison is in report.json");
    assert_eq!(baseline.regressions(), 1);
    let markdown = std::fs::read_to_string(dir.join("stale/report.md")).unwrap();
    assert!(
        markdown.contains("## Changes since the baseline") && markdown.contains("🔴 regression"),
        "{markdown}"
    );

    // The other way round: an improvement, and no regression to fail on.
    let improved = cli()
        .args(["certify", "--component", "memory", "--case", "publish.*"])
        .arg("--baseline")
        .arg(dir.join("stale/report.json"))
        .arg("--fail-on-regression")
        .arg("--out")
        .arg(dir.join("improved"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&improved.stdout);
    assert_eq!(improved.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("IMPROVEMENT memory publish.delivery"),
        "{stdout}"
    );

    // Bad use is refused before anything runs.
    let without = cli()
        .args(["certify", "--component", "memory", "--fail-on-regression"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert_eq!(without.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--baseline"), "{stderr}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"components\": [").unwrap();
    let refused = certify_against(&bad, "never", &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.json is not a pubsub-conformance report.json"),
        "{stderr}"
    );
    assert!(!dir.join("never").exists(), "nothing ran: {stderr}");
}

/// Every attempt's history is saved with the report, and `check` judges a whole saved
/// run again, offline, to identical verdicts; a history changed afterwards is a
/// verdict that differs, and `check` says which and exits 1.
#[test]
fn check_rejudges_a_saved_run_with_identical_verdicts() {
    let out = temp_dir("check");
    let output = cli()
        .args(["certify", "--component", "memory", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = read(&out.join("report.json"));
    let ran = report.components[0]
        .cases
        .iter()
        .filter(|c| c.status != pubsub_conformance::reports::Status::NotProvisioned)
        .count();
    let output = cli().arg("check").arg(&out).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
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
    let output = cli()
        .args(["check", "--case", "publish.*"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("DIFFERS memory publish.delivery: saved PASS, judged now FAIL (lost:"),
        "{stdout}"
    );
    assert!(stdout.contains(": 1 differ"), "{stdout}");

    let empty = temp_dir("check-empty");
    let output = cli().arg("check").arg(&empty).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("report.json"));
}

/// `--repeat N` runs each case N times; each cell says how many runs passed, in the
/// JSON and the HTML.
#[test]
fn repeat_reports_passes_out_of_n() {
    let out = temp_dir("repeat");
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--case",
            "publish.delivery",
            "--repeat",
            "3",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success());
    let report = read(&out.join("report.json"));
    let cell = &report.components[0].cases[0];
    assert_eq!(
        cell.runs,
        Some(pubsub_conformance::reports::Runs { runs: 3, passes: 3 })
    );
    assert_eq!(cell.status, pubsub_conformance::reports::Status::Pass);
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

/// `--through-serve`: the component's cases again over Dapr's HTTP API, through
/// `serve` on the same broker, as a row of its own beside the in-process one; what
/// the API cannot express is UNSUPPORTED with the reason, a certification case that
/// only loads the broker runs like any other, and a case that faults the broker
/// cannot run in process, saying why (it runs on a broker: the next test).
#[test]
fn through_serve_certifies_a_second_row_over_http() {
    let out = temp_dir("through-serve");
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--case",
            "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses,multi-topic.seek,certification.backlog,certification.broker-restart}",
            "--through-serve",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report = read(&out.join("report.json"));
    let names: Vec<&str> = report.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["memory", "memory via serve"], "{stderr}");
    let row = &report.components[1];
    let status = |id: &str| {
        let cell = row.cases.iter().find(|c| c.id == id).unwrap();
        (cell.status.label(), cell.evidence.notes.join(" | "))
    };
    for id in [
        "publish.delivery",
        "retry.redelivery",
        "dead-letter.drop",
        "bulk-subscribe.statuses",
        "certification.backlog",
    ] {
        assert_eq!(status(id).0, "PASS", "{id} through serve: {:?}", status(id));
    }
    let (seek, why) = status("multi-topic.seek");
    assert_eq!(seek, "UNSUPPORTED", "{why}");
    let (restart, why) = status("certification.broker-restart");
    assert_eq!(restart, "NOT PROVISIONED");
    assert!(why.contains("no broker to fault"), "{why}");
    assert!(
        out.join("histories/memory via serve/publish.delivery.jsonl")
            .exists(),
        "the row keeps its own histories"
    );
    assert!(output.status.success(), "{stderr}");
}

/// `--through-serve` on a broker the suite spawns: the cases that kill the broker or
/// cut the network run over HTTP too, the component behind the fault proxy served
/// by `serve` like the row's own; and the row's later cases run over HTTP as well (a
/// component built again after a fault case is served again, not run in process).
#[test]
fn fault_cases_run_through_serve() {
    let out = temp_dir("faults-through-serve");
    let output = cli()
        .args([
            "certify",
            "--component",
            "redis",
            "--provision",
            "local",
            "--case",
            "{certification.network-cut,certification.broker-restart,certification.close-stops-delivery}",
            "--through-serve",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = read(&out.join("report.json"));
    let row = report
        .components
        .iter()
        .find(|c| c.name == "redis via serve")
        .unwrap_or_else(|| panic!("no serve row: {stderr}"));
    let status = |id: &str| {
        let cell = row.cases.iter().find(|c| c.id == id).unwrap();
        (cell.status.label(), cell.evidence.notes.join(" | "))
    };
    for id in ["certification.broker-restart", "certification.network-cut"] {
        assert_eq!(status(id).0, "PASS", "{id} through serve: {:?}", status(id));
    }
    let cut = std::fs::read_to_string(
        out.join("histories/redis via serve/certification.network-cut.jsonl"),
    )
    .unwrap();
    assert!(
        cut.contains("run behind the row's sidecars"),
        "the component behind the fault proxy is served over HTTP"
    );
    // The exclusive cases run one by one in id order: this one runs on the runtime
    // built again after the broker restart. In process it would pass; over HTTP no
    // consumer can be closed, so it is UNSUPPORTED.
    let (close, why) = status("certification.close-stops-delivery");
    assert_eq!(
        close, "UNSUPPORTED",
        "still over HTTP after a fault case: {why}"
    );
}

/// `--sidecar-command`: sidecars started from a command line, one process per app
/// (here this program's own `serve`, as a user would start daprd), certified over
/// HTTP against the Redis server scripts/services.sh runs; a component the command's
/// sidecars cannot reach is refused with the reason.
#[test]
fn sidecar_command_certifies_sidecar_processes() {
    let bin = env!("CARGO_BIN_EXE_pubsub-conformance");
    let command = format!(
        "{bin} serve --components {{components_dir}} --http-port {{http_port}} --app-port {{app_port}} --app-id {{app_id}}"
    );
    let out = temp_dir("sidecar-command");
    let output = cli()
        .args([
            "certify",
            "--component",
            "redis",
            "--provision",
            "external",
            "--case",
            "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses}",
            "--sidecar-command",
            &command,
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = read(&out.join("report.json"));
    let row = report
        .components
        .iter()
        .find(|c| c.name == "redis via sidecar")
        .unwrap_or_else(|| panic!("no sidecar row: {stderr}"));
    for cell in &row.cases {
        assert_eq!(
            cell.status,
            pubsub_conformance::reports::Status::Pass,
            "{} through sidecar processes: {:?}",
            cell.id,
            cell.evidence
        );
    }
    assert_eq!(row.cases.len(), 4);

    // The in-memory component lives in this process: no other process can serve it.
    let out = temp_dir("sidecar-command-memory");
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--case",
            "publish.delivery",
            "--sidecar-command",
            &command,
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let report = read(&out.join("report.json"));
    let cell = &report.components[1].cases[0];
    assert_eq!(cell.status, pubsub_conformance::reports::Status::Error);
    assert!(
        cell.evidence.notes[0].contains("runs in process"),
        "{:?}",
        cell.evidence
    );
}

/// A port free on loopback now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the process when dropped (a test that fails leaves no sidecar behind).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--sidecar`: a sidecar already running (this program's `serve` with hot reload,
/// started before the suite, as a user runs daprd) is attached to: the suite's app
/// listens on the sidecar's app port and each subscription is a resource the
/// suite writes to the sidecar's directory. What one app id cannot do (two groups
/// or two members on a topic) is UNSUPPORTED with the reason.
#[test]
fn sidecar_attaches_to_a_running_sidecar() {
    let resources = temp_dir("attached-resources");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/memory.yaml"),
        resources.join("memory.yaml"),
    )
    .unwrap();
    let (http_port, app_port) = (free_port(), free_port());
    let _sidecar = Running(
        Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"))
            .args(["serve", "--hot-reload", "--app-id", "attached"])
            .args(["--app-start-within", "10m", "--components"])
            .arg(&resources)
            .args([
                "--http-port",
                &http_port.to_string(),
                "--app-port",
                &app_port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = temp_dir("attached");
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--case",
            "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses,subscribe.fan-out,subscribe.competing-consumers,groups.distinct-names,topics.distinct-names}",
            "--sidecar",
            &format!("http://127.0.0.1:{http_port}"),
            "--sidecar-app-port",
            &app_port.to_string(),
            "--sidecar-resources",
        ])
        .arg(&resources)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = read(&out.join("report.json"));
    let row = report
        .components
        .iter()
        .find(|c| c.name == "memory via attached sidecar")
        .unwrap_or_else(|| panic!("no attached row: {stderr}"));
    for cell in &row.cases {
        // Two groups on one topic are beyond one app id: not a refusal of the name
        // (each name case subscribes a second group to a topic).
        let expected = if cell.id.starts_with("subscribe.") || cell.id.ends_with(".distinct-names")
        {
            "UNSUPPORTED"
        } else {
            "PASS"
        };
        assert_eq!(
            cell.status.label(),
            expected,
            "{} through the attached sidecar: {:?}",
            cell.id,
            cell.evidence
        );
        if expected == "UNSUPPORTED" {
            let notes = cell.evidence.notes.join(" | ");
            assert!(notes.contains("--sidecar-command"), "{notes}");
        }
    }
    assert_eq!(row.cases.len(), 8);
    let left: Vec<_> = std::fs::read_dir(&resources)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from("memory.yaml")],
        "every subscription the suite declared is removed"
    );

    // Half a description of the sidecar is refused before anything runs.
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--sidecar",
            "http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--sidecar-app-port"), "{stderr}");
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
    let output = cli()
        .args([
            "certify",
            "--component",
            "memory",
            "--js-sdk",
            "--case",
            "{publish.delivery,envelope.app-cloudevent,bulk-publish.fidelity,bulk-publish.entry-ids,bulk-publish.partial-failure,publish.invalid-requests,retry.delay}",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report = read(&out.join("report.json"));
    let row = report
        .components
        .iter()
        .find(|c| c.name == "memory via @dapr/dapr client")
        .unwrap_or_else(|| panic!("no SDK row: {stderr}"));
    let version = row.provisioning.broker_version.clone().unwrap_or_default();
    assert!(version.starts_with("@dapr/dapr 3."), "{version}");
    for cell in &row.cases {
        let sdk_defect = matches!(
            cell.id.as_str(),
            "bulk-publish.partial-failure" | "publish.invalid-requests"
        );
        if sdk_defect {
            assert_eq!(
                cell.status.label(),
                "FAIL",
                "{}: {:?}",
                cell.id,
                cell.evidence
            );
            let expected = cell.expected_failure.clone().unwrap_or_default();
            assert!(
                expected.contains("via-dapr-dapr-client.yaml"),
                "{}: {expected}",
                cell.id
            );
        } else {
            // JSON the SDK serializes again is compared as JSON; an entry without an
            // id cannot be sent through it (a note, not a verdict).
            assert_eq!(
                cell.status.label(),
                "PASS",
                "{}: {:?}",
                cell.id,
                cell.evidence
            );
        }
    }
    let partial = row
        .cases
        .iter()
        .find(|c| c.id == "bulk-publish.partial-failure")
        .unwrap();
    assert!(
        partial
            .evidence
            .findings
            .iter()
            .any(|f| f.contains("acknowledged publishes were never delivered")),
        "{:?}",
        partial.evidence
    );
    let in_process = report
        .components
        .iter()
        .find(|c| c.name == "memory")
        .unwrap();
    assert!(in_process.cases.iter().all(|c| c.status.label() == "PASS"));
    assert!(out
        .join("evidence/memory-via-dapr-dapr-client/publish.invalid-requests.txt")
        .is_file());

    let server = report
        .components
        .iter()
        .find(|c| c.name == "memory via @dapr/dapr server")
        .unwrap_or_else(|| panic!("no SDK server row: {stderr}"));
    let cell = |id: &str| server.cases.iter().find(|c| c.id == id).unwrap();
    for id in [
        "publish.delivery",
        "bulk-publish.entry-ids",
        "bulk-publish.partial-failure",
        "publish.invalid-requests",
    ] {
        assert_eq!(
            cell(id).status.label(),
            "PASS",
            "{id}: {:?}",
            cell(id).evidence
        );
    }
    // Its handlers get data and headers, not the CloudEvent.
    let envelope = cell("envelope.app-cloudevent");
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
        let failed = cell(id);
        assert_eq!(failed.status.label(), "FAIL", "{id}: {:?}", failed.evidence);
        assert!(
            failed.evidence.findings.iter().any(|f| f.contains(finding)),
            "{id}: {:?}",
            failed.evidence
        );
        let expected = failed.expected_failure.clone().unwrap_or_default();
        assert!(
            expected.contains("via-dapr-dapr-server.yaml"),
            "{id}: {expected}"
        );
    }
}
