//! The Markdown summary, for pull-request comments and CI step summaries.

use crate::levels::ComponentSummary;
use crate::{RunReport, Status};
use std::fmt::Write;

/// A summary table per component, the cells that need attention, and the bench table.
pub fn markdown(report: &RunReport) -> String {
    let mut out = String::from("# pub/sub conformance\n\n");
    let _ = writeln!(
        out,
        "Suite {} · {} → {} · {} ({} {}, {} cpus)\n",
        report.suite_version,
        report.started_at,
        report.finished_at,
        report.machine.hostname,
        report.machine.os,
        report.machine.arch,
        report.machine.cpus
    );
    out.push_str("| component | level | pass | fail | unsupported | other | native / emulated | provisioning |\n|---|---|---|---|---|---|---|---|\n");
    for component in &report.components {
        let s = ComponentSummary::of(component);
        let provisioning = match super::not_run(&component.provisioning) {
            Some(not_run) => not_run,
            None => format!(
                "{}{}",
                component.provisioning.kind,
                component
                    .provisioning
                    .broker_version
                    .as_ref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} |",
            component.label(),
            s.level.label(),
            s.passed,
            s.failed,
            s.unsupported,
            s.other,
            s.native,
            s.emulated,
            provisioning.replace('|', "\\|")
        );
    }
    if let Some(baseline) = &report.baseline {
        let _ = writeln!(
            out,
            "\n## Changes since the baseline\n\n{} regression(s) · {} change(s) in all · baseline `{}` (started {})\n",
            baseline.regressions(),
            baseline.changes.len(),
            baseline.source,
            baseline.started_at
        );
        if !baseline.changes.is_empty() {
            out.push_str("| change | component | case | what |\n|---|---|---|---|\n");
            for c in &baseline.changes {
                let marker = match c.kind {
                    crate::ChangeKind::Regression => "🔴 regression",
                    crate::ChangeKind::Improvement => "🟢 improvement",
                    crate::ChangeKind::Changed => "changed",
                    crate::ChangeKind::Added => "added",
                };
                let _ = writeln!(
                    out,
                    "| {marker} | {} | `{}` | {} |",
                    c.component,
                    c.case,
                    c.detail.replace('|', "\\|")
                );
            }
        }
    }
    broker_versions(report, &mut out);
    paths(report, &mut out);
    out.push_str("\n<details><summary>What the levels prove</summary>\n\n");
    for (level, proves) in crate::LEVEL_LEGEND {
        out.push_str(&format!("- **{level}**: {proves}\n"));
    }
    out.push_str("\n</details>\n");
    let attention: Vec<String> = report
        .components
        .iter()
        .flat_map(|component| {
            component
                .cases
                .iter()
                .filter(|c| !matches!(c.status, Status::Pass | Status::Unsupported))
                .map(move |case| {
                    let why = case.evidence.first_reason().unwrap_or_default();
                    let runs = case
                        .runs
                        .map(|r| format!(" ({}/{} runs passed)", r.passes, r.runs))
                        .unwrap_or_default();
                    format!(
                        "| {} {}{runs} | {} | `{}` | {} |",
                        case.status.symbol(),
                        case.status.label(),
                        component.name,
                        case.id,
                        why.replace('|', "\\|")
                    )
                })
        })
        .collect();
    if !attention.is_empty() {
        out.push_str(
            "\n## Needs attention\n\n| status | component | case | why |\n|---|---|---|---|\n",
        );
        for line in attention {
            let _ = writeln!(out, "{line}");
        }
    }
    if !report.conflicts.is_empty() {
        out.push_str("\n## Conflicting results\n\n");
        for c in &report.conflicts {
            let statuses: Vec<&str> = c.statuses.iter().map(|s| s.label()).collect();
            let _ = writeln!(
                out,
                "- {} `{}`: {}",
                c.component,
                c.case,
                statuses.join(" vs ")
            );
        }
    }
    for bench in &report.bench {
        let _ = writeln!(
            out,
            "\n## Bench: {}\n\n{}\n\n| measurement | messages | msg/s | ratio |\n|---|---|---|---|",
            bench.component, bench.settings
        );
        for m in &bench.measurements {
            let ratio = m
                .ratio
                .map(|r| format!("{r:.2}x vs {}", m.baseline.as_deref().unwrap_or("?")))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {} |",
                m.label, m.messages, m.rate, ratio
            );
        }
        if let Some(l) = &bench.latency {
            let _ = writeln!(
                out,
                "\nEnd-to-end latency over {} messages: p50 {} µs, p99 {} µs, max {} µs",
                l.samples, l.p50_us, l.p99_us, l.max_us
            );
        }
    }
    out
}

/// The broker-version axis: per component, the versions it is certified on, fails on
/// and does not support, then a matrix with the versions as columns (the verdict, and
/// each case whose verdict differs between versions).
fn broker_versions(report: &RunReport, out: &mut String) {
    let axes = crate::compatibility(report);
    if axes.is_empty() {
        return;
    }
    out.push_str("\n## Broker versions\n");
    for axis in &axes {
        let _ = writeln!(out, "\n### {}\n", axis.component);
        let [certified, fails, unsupported] = axis.verdict_lists();
        let _ = writeln!(out, "- certified on: {certified}");
        let _ = writeln!(out, "- fails on: {}", fails.replace('|', "\\|"));
        let _ = writeln!(
            out,
            "- not supported on: {}\n",
            unsupported.replace('|', "\\|")
        );
        let header: Vec<&str> = axis.versions.iter().map(|v| v.version.as_str()).collect();
        let _ = writeln!(out, "| | {} |", header.join(" | "));
        let _ = writeln!(out, "|---|{}", "---|".repeat(header.len()));
        let verdicts: Vec<String> = axis.versions.iter().map(|v| v.verdict.label()).collect();
        let _ = writeln!(out, "| verdict | {} |", verdicts.join(" | "));
        for (case, statuses) in &axis.differing {
            let cells: Vec<String> = statuses
                .iter()
                .map(|s| s.map_or("-".to_string(), |s| format!("{} {}", s.symbol(), s.label())))
                .collect();
            let _ = writeln!(out, "| `{case}` | {} |", cells.join(" | "));
        }
    }
}

/// Each component in process beside its rows over other paths: per path, how many
/// cases agree, and every case that differs with its explanation (unexplained first).
fn paths(report: &RunReport, out: &mut String) {
    let comparisons = crate::path_comparison(report);
    if comparisons.is_empty() {
        return;
    }
    out.push_str("\n## In process and over the wire\n\nEvery difference is a defect of the path until explained: by what the path cannot express or run, or by an expected failure.\n");
    for comparison in &comparisons {
        let _ = writeln!(out, "\n### {}\n", comparison.component);
        out.push_str("| path | same verdict | differs | unexplained |\n|---|---|---|---|\n");
        for path in &comparison.paths {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                path.path,
                path.same,
                path.differences.len(),
                path.unexplained().count()
            );
        }
        for path in &comparison.paths {
            if path.differences.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n{} via {}:\n", comparison.component, path.path);
            for difference in path.unexplained_first() {
                let _ = writeln!(
                    out,
                    "- `{}`: {} in process, {} over the path ({}){}",
                    difference.case,
                    difference.in_process.map_or("not run", |s| s.label()),
                    difference.over_path.label(),
                    difference.explanation.label(),
                    if difference.why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", difference.why)
                    }
                );
            }
        }
    }
}
