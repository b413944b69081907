//! The plain-text summary table printed at the end of `certify`.

use crate::{RunReport, Status};
use std::fmt::Write;

/// One row per component with its count of each verdict, then one line per cell that
/// needs attention (FAIL, ERROR, FLAKY) with its first finding, and one line per
/// reason a component's cells were NOT PROVISIONED (a broker that is not installed
/// says so once, not once per case).
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
    for status in Status::ALL {
        let _ = write!(out, "  {:>6}", short(status));
    }
    let _ = writeln!(out, "  {:>9}", "emulated");
    for component in &report.components {
        let _ = write!(out, "{:<width$}", component.name);
        for status in Status::ALL {
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
        // Reason -> the cases it kept from running, in report order.
        let mut not_provisioned: Vec<(&str, Vec<&str>)> = Vec::new();
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
            let why = case.evidence.first_reason().unwrap_or("");
            if case.status == Status::NotProvisioned {
                match not_provisioned
                    .iter_mut()
                    .find(|(reason, _)| *reason == why)
                {
                    Some((_, cases)) => cases.push(&case.id),
                    None => not_provisioned.push((why, vec![&case.id])),
                }
                continue;
            }
            let _ = writeln!(
                out,
                "{} {} {}: {}",
                case.status.label(),
                component.name,
                case.id,
                why
            );
        }
        for (why, cases) in not_provisioned {
            let label = Status::NotProvisioned.label();
            match cases.as_slice() {
                [case] => {
                    let _ = writeln!(out, "{label} {} {case}: {why}", component.name);
                }
                _ if cases.len() == component.cases.len() => {
                    let _ = writeln!(out, "{label} {} (every case): {why}", component.name);
                }
                _ => {
                    let shown = cases.iter().take(3).copied().collect::<Vec<_>>().join(", ");
                    let more = if cases.len() > 3 { ", ..." } else { "" };
                    let _ = writeln!(
                        out,
                        "{label} {} ({} cases: {shown}{more}): {why}",
                        component.name,
                        cases.len()
                    );
                }
            }
        }
    }
    for comparison in crate::path_comparison(report) {
        for path in &comparison.paths {
            let unexplained: Vec<&str> = path.unexplained().map(|d| d.case.as_str()).collect();
            let _ = writeln!(
                out,
                "PATH {}: {} same verdict as in process, {} differ, {} unexplained{}",
                path.row.name,
                path.same,
                path.differences.len(),
                unexplained.len(),
                if unexplained.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", unexplained.join(", "))
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A component whose broker is missing gets one line for all its cells; cells
    /// held back for different reasons get one line per reason, naming their cases.
    #[test]
    fn not_provisioned_cells_are_told_once_per_reason() {
        let mut report = crate::render::tests::sample();
        let template = report.components[1].cases[2].clone();
        let not_provisioned = |id: &str, why: &str| {
            let mut case = template.clone();
            case.id = id.into();
            case.evidence.findings = vec![why.into()];
            case
        };
        let mut absent = report.components[1].clone();
        absent.name = "absent".into();
        absent.cases = (0..40)
            .map(|i| not_provisioned(&format!("case.n{i}"), "redis-server is not installed"))
            .collect();
        report.components.push(absent);
        report.components[1].cases = vec![
            not_provisioned("faults.a", "in process: no broker to fault"),
            not_provisioned("faults.b", "in process: no broker to fault"),
            not_provisioned("faults.c", "in process: no broker to fault"),
            not_provisioned("faults.d", "in process: no broker to fault"),
            not_provisioned("seek.x", "the endpoint went away"),
            not_provisioned("seek.y", "the endpoint went away"),
            report.components[1].cases[0].clone(),
        ];
        let text = summary_table(&report);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("NOT PROVISIONED"))
            .collect();
        assert_eq!(
            lines,
            [
                "NOT PROVISIONED broken (4 cases: faults.a, faults.b, faults.c, ...): in process: no broker to fault",
                "NOT PROVISIONED broken (2 cases: seek.x, seek.y): the endpoint went away",
                "NOT PROVISIONED absent (every case): redis-server is not installed",
            ],
            "{text}"
        );
        assert!(
            text.contains("FAIL broken publish.delivery: lost"),
            "{text}"
        );
    }
}
