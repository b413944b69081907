//! The plain-text summary table printed at the end of `certify`.

use crate::{RunReport, Status};
use std::fmt::Write;

const COLUMNS: [Status; 6] = [
    Status::Pass,
    Status::Fail,
    Status::Unsupported,
    Status::NotProvisioned,
    Status::Error,
    Status::Flaky,
];

/// One row per component with its count of each verdict, then one line per cell that
/// needs attention (FAIL, ERROR, FLAKY, NOT PROVISIONED) with its first finding.
pub fn summary_table(report: &RunReport) -> String {
    let width = report
        .components
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(9)
        .max(9);
    let mut out = String::new();
    let _ = write!(out, "{:<width$}", "component");
    for status in COLUMNS {
        let _ = write!(out, "  {:>6}", short(status));
    }
    let _ = writeln!(out, "  {:>9}", "emulated");
    for component in &report.components {
        let _ = write!(out, "{:<width$}", component.name);
        for status in COLUMNS {
            let _ = write!(out, "  {:>6}", component.count(status));
        }
        let emulated = component
            .cases
            .iter()
            .filter(|c| c.status == Status::Pass && c.mode == Some(crate::Mode::Emulated))
            .count();
        let _ = writeln!(out, "  {emulated:>9}");
    }
    for component in &report.components {
        for case in &component.cases {
            if case.passes_unexpectedly() {
                let _ = writeln!(
                    out,
                    "UNEXPECTED PASS {} {}: listed as an expected failure; remove its entry ({})",
                    component.name,
                    case.id,
                    case.expected_failure.as_deref().unwrap_or_default()
                );
                continue;
            }
            if matches!(case.status, Status::Pass | Status::Unsupported) {
                continue;
            }
            if case.is_expected_failure() {
                let _ = writeln!(
                    out,
                    "EXPECTED FAIL {} {}: {}",
                    component.name,
                    case.id,
                    case.expected_failure.as_deref().unwrap_or_default()
                );
                continue;
            }
            let why = case
                .evidence
                .findings
                .first()
                .or(case.evidence.notes.first())
                .map(String::as_str)
                .unwrap_or("");
            let _ = writeln!(
                out,
                "{} {} {}: {}",
                case.status.label(),
                component.name,
                case.id,
                why
            );
        }
    }
    out
}

fn short(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Fail => "fail",
        Status::Unsupported => "unsup",
        Status::NotProvisioned => "no-env",
        Status::Error => "error",
        Status::Flaky => "flaky",
    }
}
