//! Snapshot tests of every renderer on a fixed report, timestamps redacted.

use crate::*;

fn case(
    id: &str,
    level: &str,
    feature: Option<&str>,
    status: Status,
    mode: Option<Mode>,
) -> CaseResult {
    CaseResult {
        id: id.into(),
        family: id.split('.').next().unwrap().into(),
        level: level.into(),
        feature: feature.map(String::from),
        must: format!("{id} MUST hold <always> & \"everywhere\"."),
        status,
        mode,
        duration_ms: 12,
        bound_ms: 10_000,
        attempts: if status == Status::Flaky { 2 } else { 1 },
        expected_failure: None,
        runs: None,
        evidence: Evidence {
            findings: if status == Status::Fail {
                vec!["lost: 2 acknowledged publishes were never delivered: m-1, m-7".into()]
            } else {
                vec![]
            },
            warnings: vec![],
            notes: vec!["seed 42".into()],
            history: if status == Status::Fail {
                vec![
                    "12.000 publish m-1 -> t: ok t#0@1".into(),
                    "12.001 deliver m-2 from t id=t#0@2 attempt=1 to s1".into(),
                ]
            } else {
                vec![]
            },
            logs: if status == Status::Fail {
                vec!["WARN pubsub_components::runtime::delivery: handler failed; retrying".into()]
            } else {
                vec![]
            },
            ..Evidence::default()
        },
    }
}

/// A report with every status, two components, a conflict and a bench table.
pub(crate) fn sample() -> RunReport {
    let provisioning = |kind: &str, problem: Option<&str>| Provisioning {
        kind: kind.into(),
        endpoint: None,
        broker_version: problem.is_none().then(|| "in-memory 0.1.0".into()),
        problem: problem.map(String::from),
        unsupported_broker: None,
    };
    RunReport {
        schema_version: SCHEMA_VERSION,
        suite_version: "0.1.0".into(),
        started_at: "2026-11-30T05:00:00.123456789Z".into(),
        finished_at: "2026-11-30T05:00:30.5Z".into(),
        machine: Machine {
            hostname: "ci".into(),
            os: "linux".into(),
            arch: "x86_64".into(),
            cpus: 2,
        },
        components: vec![
            ComponentReport {
                name: "memory".into(),
                component_type: "in-memory".into(),
                definition: "fixtures/memory.yaml".into(),
                third_party: None,
                broker_axis: None,
                provisioning: provisioning("in-process", None),
                capabilities: serde_json::json!({"bulk_publish": "native"}),
                cases: vec![
                    case(
                        "publish.delivery",
                        "core",
                        None,
                        Status::Pass,
                        Some(Mode::Native),
                    ),
                    case(
                        "ttl.live-delivered",
                        "feature",
                        Some("ttl"),
                        Status::Pass,
                        Some(Mode::Emulated),
                    ),
                    case(
                        "seek.reposition",
                        "feature",
                        Some("seek"),
                        Status::Unsupported,
                        None,
                    ),
                    case(
                        "certification.consumer-leaves",
                        "certification",
                        None,
                        Status::Flaky,
                        Some(Mode::Native),
                    ),
                ],
            },
            ComponentReport {
                name: "broken".into(),
                component_type: "in-memory".into(),
                definition: "fixtures/broken.yaml".into(),
                third_party: Some("somequeue 1.2.3".into()),
                broker_axis: None,
                provisioning: provisioning("in-process", None),
                capabilities: serde_json::Value::Null,
                cases: vec![
                    case("publish.delivery", "core", None, Status::Fail, None),
                    case(
                        "ttl.live-delivered",
                        "feature",
                        Some("ttl"),
                        Status::Error,
                        None,
                    ),
                    case(
                        "seek.reposition",
                        "feature",
                        Some("seek"),
                        Status::NotProvisioned,
                        None,
                    ),
                ],
            },
        ],
        conflicts: vec![Conflict {
            component: "broken".into(),
            case: "publish.delivery".into(),
            statuses: vec![Status::Pass, Status::Fail],
        }],
        bench: vec![BenchReport {
            component: "memory".into(),
            settings: "2000 messages of 256 bytes".into(),
            measurements: vec![
                Measurement {
                    label: "single publish".into(),
                    messages: 2000,
                    seconds: 0.5,
                    rate: 4000.0,
                    ratio: None,
                    baseline: None,
                    runs: vec![3800.0, 4000.0, 4100.0],
                },
                Measurement {
                    label: "bulk publish x100".into(),
                    messages: 2000,
                    seconds: 0.05,
                    rate: 40000.0,
                    ratio: Some(10.0),
                    baseline: Some("single publish".into()),
                    runs: Vec::new(),
                },
            ],
            latency: Some(LatencySummary {
                samples: 1000,
                p50_us: 40,
                p99_us: 120,
                max_us: 400,
            }),
        }],
        baseline: None,
    }
}

/// The sample compared with a baseline where `broken` delivered and one memory
/// cell was emulated.
fn sample_with_baseline() -> RunReport {
    let mut before = sample();
    before.components[1].cases[0].status = Status::Pass;
    before.components[1].cases[0].mode = Some(Mode::Native);
    before.components[0].cases[0].mode = Some(Mode::Emulated);
    let mut now = sample();
    now.baseline = Some(compare(&before, &now, "baseline/report.json"));
    now
}

fn redacting(f: impl FnOnce()) {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(
        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z",
        "[timestamp]",
    );
    settings.bind(f);
}

#[test]
fn markdown_snapshot() {
    redacting(|| insta::assert_snapshot!(markdown(&sample())));
}

#[test]
fn markdown_with_baseline_snapshot() {
    redacting(|| insta::assert_snapshot!(markdown(&sample_with_baseline())));
}

#[test]
fn html_marks_changed_cells_regressions_first() {
    let page = html(&sample_with_baseline());
    let section = page
        .split("<section id=\"changes\">")
        .nth(1)
        .expect("a changes section")
        .split("</section>")
        .next()
        .unwrap();
    assert!(
        section.contains("1 regression(s) · 2 change(s) in all"),
        "{section}"
    );
    let regression = section.find("<th>regression</th>").expect("the regression");
    let changed = section.find("<th>changed</th>").expect("the mode change");
    assert!(regression < changed, "regressions come first: {section}");
    assert!(page.contains("change-regression\" data-status=\"FAIL\" data-component=\"broken\""));
    assert!(page.contains("regression: PASS (native) -&gt; FAIL: lost: 2 acknowledged publishes"));
    assert!(!html(&sample()).contains("id=\"changes\""));
}

#[test]
fn junit_snapshot() {
    redacting(|| insta::assert_snapshot!(junit(&sample())));
}

#[test]
fn badge_snapshots() {
    let report = sample();
    insta::assert_snapshot!("badge_memory", badge_json(&report.components[0]));
    insta::assert_snapshot!("badge_broken", badge_json(&report.components[1]));
}

#[test]
fn html_snapshot() {
    redacting(|| insta::assert_snapshot!(html(&sample())));
}

#[test]
fn json_snapshot() {
    insta::assert_json_snapshot!(sample(), {
        ".started_at" => "[timestamp]",
        ".finished_at" => "[timestamp]",
    });
}

#[test]
fn html_is_self_contained() {
    let page = html(&sample());
    for forbidden in ["http://", "https://", "<link", "src="] {
        assert!(
            !page.contains(forbidden),
            "the page must not load anything: found {forbidden}"
        );
    }
    assert!(
        page.contains("&lt;always&gt; &amp; &quot;everywhere&quot;"),
        "text must be escaped"
    );
}

#[test]
fn levels_follow_the_criteria() {
    let report = sample();
    // memory: core passes, features pass or are unsupported, certification is FLAKY.
    assert_eq!(
        certification_level(&report.components[0]),
        CertificationLevel::FeatureComplete
    );
    assert_eq!(
        certification_level(&report.components[1]),
        CertificationLevel::None
    );
    let mut certified = report.components[0].clone();
    certified.cases[3].status = Status::Pass;
    assert_eq!(
        certification_level(&certified),
        CertificationLevel::Certified
    );
    // A fault case that could not run: never silently Certified.
    let mut no_faults = certified.clone();
    let mut fault_case = no_faults.cases[3].clone();
    fault_case.id = "certification.broker-restart".into();
    fault_case.status = Status::NotProvisioned;
    no_faults.cases.push(fault_case);
    assert_eq!(
        certification_level(&no_faults),
        CertificationLevel::CertifiedWithoutFaults
    );
    assert_eq!(
        CertificationLevel::CertifiedWithoutFaults.label(),
        "Certified without faults"
    );
    // An expected failure is still a failure: the level is not reached.
    let mut expected = certified.clone();
    expected.cases[3].status = Status::Fail;
    expected.cases[3].expected_failure = Some("a broker defect".into());
    assert_eq!(
        certification_level(&expected),
        CertificationLevel::FeatureComplete
    );
    certified.cases[1].status = Status::Fail;
    assert_eq!(
        certification_level(&certified),
        CertificationLevel::Conformant
    );
}

#[test]
fn merging_two_shards_equals_the_full_run() {
    let full = sample();
    let mut first = full.clone();
    let mut second = full.clone();
    first.components.truncate(1);
    second.components.remove(0);
    first.bench.clear();
    second.conflicts.clear();
    first.conflicts.clear();
    let mut merged = merge(vec![first, second]).unwrap();
    let mut expected = full;
    expected.components.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &mut expected.components {
        c.cases.sort_by(|a, b| a.id.cmp(&b.id));
    }
    expected.conflicts.clear();
    merged.conflicts.clear();
    assert_eq!(merged, expected);
}

#[test]
fn merge_reports_conflicts_and_keeps_the_worse() {
    let full = sample();
    let mut other = full.clone();
    other.components[0].cases[0].status = Status::Fail;
    let merged = merge(vec![full, other]).unwrap();
    let memory = merged
        .components
        .iter()
        .find(|c| c.name == "memory")
        .unwrap();
    let cell = memory
        .cases
        .iter()
        .find(|c| c.id == "publish.delivery")
        .unwrap();
    assert_eq!(cell.status, Status::Fail);
    assert!(cell
        .evidence
        .notes
        .iter()
        .any(|n| n.contains("runs disagree")));
    assert!(merged
        .conflicts
        .iter()
        .any(|c| c.component == "memory" && c.case == "publish.delivery"));
}

#[test]
fn a_row_name_with_a_slash_is_written_as_one_folder_and_one_badge() {
    let mut report = sample();
    report.components[1].name = "memory via @dapr/dapr client".into();
    let dir = tempfile::tempdir().unwrap();
    super::write_all(&report, dir.path()).unwrap();
    let folder = dir.path().join("evidence/memory-via-dapr-dapr-client");
    assert!(
        folder.join("publish.delivery.txt").is_file(),
        "evidence of the FAIL cell is missing from {}",
        folder.display()
    );
    assert!(dir
        .path()
        .join("badges/memory-via-dapr-dapr-client.json")
        .is_file());
}

/// Redis Streams on three broker versions: one it cannot serve, one where every case
/// passes, one where a case fails.
fn versions_sample() -> RunReport {
    let mut report = sample();
    let row = |version: &str, release: &str, unmet: Option<&str>, ttl: Status| {
        let mut row = report.components[0].clone();
        row.name = format!("redis on redis {version} ({release})");
        row.component_type = "redis-streams".into();
        row.provisioning = Provisioning {
            kind: "container".into(),
            endpoint: None,
            broker_version: Some(format!("redis {version}")),
            problem: None,
            unsupported_broker: unmet.map(String::from),
        };
        row.broker_axis = Some(BrokerAxis {
            component: "redis".into(),
            broker: "redis".into(),
            version: version.into(),
            release: release.into(),
        });
        row.cases.truncate(2);
        for case in &mut row.cases {
            case.status = if unmet.is_some() {
                Status::Unsupported
            } else if case.id == "ttl.live-delivered" {
                ttl
            } else {
                Status::Pass
            };
        }
        row.cases[1].evidence.findings = match ttl {
            Status::Fail => vec!["expired early".into()],
            _ => vec![],
        };
        row
    };
    let rows = vec![
        row(
            "6.0.16",
            "bullseye",
            Some("needs Redis >= 6.2 (XAUTOCLAIM); the broker answered: unknown command"),
            Status::Pass,
        ),
        row("7.0.15", "bookworm", None, Status::Pass),
        row("8.0.2", "trixie", None, Status::Fail),
    ];
    report.components = rows;
    report.conflicts.clear();
    report.bench.clear();
    report
}

#[test]
fn broker_versions_show_ranges_and_differing_cases() {
    let report = versions_sample();
    let axes = compatibility(&report);
    assert_eq!(axes.len(), 1);
    assert_eq!(axes[0].component, "redis");
    assert_eq!(
        axes[0].differing,
        vec![(
            "ttl.live-delivered".to_string(),
            vec![
                Some(Status::Unsupported),
                Some(Status::Pass),
                Some(Status::Fail)
            ]
        )]
    );
    let text = markdown(&report);
    let section = &text[text.find("## Broker versions").expect("a versions section")..];
    assert!(
        section.contains("- certified on: redis 7.0.15\n"),
        "{section}"
    );
    assert!(
        section.contains("- fails on: redis 8.0.2 (first failing case ttl.live-delivered)"),
        "{section}"
    );
    assert!(
        section.contains("- not supported on: redis 6.0.16 (needs Redis >= 6.2 (XAUTOCLAIM)"),
        "{section}"
    );
    assert!(
        section.contains("| | redis 6.0.16 | redis 7.0.15 | redis 8.0.2 |"),
        "{section}"
    );
    assert!(
        section.contains("| `ttl.live-delivered` | – UNSUPPORTED | ✔ PASS | ✘ FAIL |"),
        "{section}"
    );
    let page = html(&report);
    assert!(page.contains("<section id=\"versions\"><h2>Broker versions</h2>"));
    assert!(page.contains("<th>redis 8.0.2</th>"));
    // Without version rows there is no section.
    assert!(!markdown(&sample()).contains("## Broker versions"));
    assert!(!html(&sample()).contains("id=\"versions\""));
}

/// The memory row of [`sample`] with one row through serve beside it, whose cases
/// differ in every way a path can differ.
fn paths_sample() -> RunReport {
    let mut report = sample();
    report.components.truncate(1);
    let in_process = &mut report.components[0];
    in_process.cases[3].status = Status::Pass;
    in_process.cases.push(case(
        "bulk-publish.partial-failure",
        "core",
        None,
        Status::Fail,
        None,
    ));
    in_process.cases[4].expected_failure = Some("the broker drops one entry".into());
    let mut served = report.components[0].clone();
    served.name = "memory via serve".into();
    // publish.delivery: the same. ttl.live-delivered: fails only over the path.
    served.cases[1].status = Status::Fail;
    served.cases[1].evidence.findings = vec!["expired 1 of 100 early".into()];
    // seek.reposition stays UNSUPPORTED (the same); consumer-leaves cannot be said.
    served.cases[3].status = Status::Unsupported;
    served.cases[3].evidence.notes = vec!["not part of Dapr's HTTP API".into()];
    // The broker's defect passes over the path: listed with what failed in process.
    served.cases[4].status = Status::Pass;
    let mut expected = case("envelope.cloudevents", "core", None, Status::Fail, None);
    expected.expected_failure = Some("the client re-serializes JSON".into());
    served.cases.push(expected);
    report.components.push(served);
    report
}

#[test]
fn paths_list_every_difference_with_its_explanation() {
    let report = paths_sample();
    let comparisons = path_comparison(&report);
    assert_eq!(comparisons.len(), 1);
    let served = &comparisons[0].paths[0];
    assert_eq!(
        (comparisons[0].component.as_str(), served.path.as_str()),
        ("memory", "serve")
    );
    assert_eq!(served.same, 2, "publish.delivery and seek.reposition agree");
    let explained: Vec<(&str, Explanation)> = served
        .unexplained_first()
        .iter()
        .map(|d| (d.case.as_str(), d.explanation))
        .collect();
    assert_eq!(
        explained,
        vec![
            ("ttl.live-delivered", Explanation::Unexplained),
            ("bulk-publish.partial-failure", Explanation::Unexplained),
            ("envelope.cloudevents", Explanation::Expected),
            ("certification.consumer-leaves", Explanation::NotExpressible),
        ]
    );
    let text = markdown(&report);
    let section = &text[text
        .find("## In process and over the wire")
        .expect("a paths section")..];
    for line in [
        "| serve | 2 | 4 | 2 |",
        "- `ttl.live-delivered`: PASS in process, FAIL over the path (unexplained): expired 1 of 100 early",
        "- `bulk-publish.partial-failure`: FAIL in process, PASS over the path (unexplained): in process: lost: 2 acknowledged",
        "- `envelope.cloudevents`: not run in process, FAIL over the path (expected failure): the client re-serializes JSON",
        "- `certification.consumer-leaves`: PASS in process, UNSUPPORTED over the path (not expressible over this path): not part of Dapr's HTTP API",
    ] {
        assert!(section.contains(line), "{line}\nnot in\n{section}");
    }
    let page = html(&report);
    assert!(page.contains("<section id=\"paths\"><h2>In process and over the wire</h2>"));
    assert!(page.contains("memory via serve: 4 difference(s)"));
    // Without rows over other paths there is no section.
    assert!(!markdown(&sample()).contains("## In process and over the wire"));
    assert!(!html(&sample()).contains("id=\"paths\""));
}

#[test]
fn the_summary_counts_each_paths_differences() {
    let text = summary_table(&paths_sample());
    assert!(
        text.contains("PATH memory via serve: 2 same verdict as in process, 4 differ, 2 unexplained (ttl.live-delivered, bulk-publish.partial-failure)"),
        "{text}"
    );
}
