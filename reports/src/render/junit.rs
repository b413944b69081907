//! JUnit XML: one testcase per component x case; FLAKY as a passing rerun.

use crate::{RunReport, Status};
use std::fmt::Write;

fn xml(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One `<testsuite>` per component.
pub fn junit(report: &RunReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let total: usize = report.components.iter().map(|c| c.cases.len()).sum();
    let failures: usize = report
        .components
        .iter()
        .map(|c| c.count(Status::Fail))
        .sum();
    let errors: usize = report
        .components
        .iter()
        .map(|c| c.count(Status::Error) + c.count(Status::NotProvisioned))
        .sum();
    let _ = writeln!(out, "<testsuites name=\"pubsub-conformance\" tests=\"{total}\" failures=\"{failures}\" errors=\"{errors}\">");
    for component in &report.components {
        let skipped = component.count(Status::Unsupported);
        let seconds: f64 = component
            .cases
            .iter()
            .map(|c| c.duration_ms as f64 / 1000.0)
            .sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{skipped}\" time=\"{seconds:.3}\" timestamp=\"{}\">",
            xml(&component.name),
            component.cases.len(),
            component.count(Status::Fail),
            component.count(Status::Error) + component.count(Status::NotProvisioned),
            xml(&report.started_at)
        );
        for case in &component.cases {
            let evidence = xml(&crate::render::evidence_text(&component.name, case));
            let first = xml(case.evidence.first_reason().unwrap_or(""));
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}.{}\" time=\"{:.3}\"",
                xml(case.id.as_str()),
                xml(&component.name),
                xml(&case.family),
                case.duration_ms as f64 / 1000.0
            );
            match case.status {
                Status::Pass => out.push_str("/>\n"),
                Status::Fail => {
                    let _ = writeln!(out, ">\n      <failure message=\"{first}\" type=\"FAIL\">{evidence}</failure>\n    </testcase>");
                }
                Status::Error | Status::NotProvisioned => {
                    let _ = writeln!(out, ">\n      <error message=\"{first}\" type=\"{}\">{evidence}</error>\n    </testcase>", case.status.label());
                }
                Status::Unsupported => {
                    let _ = writeln!(
                        out,
                        ">\n      <skipped message=\"UNSUPPORTED: {first}\"/>\n    </testcase>"
                    );
                }
                Status::Flaky => {
                    let _ = writeln!(out, ">\n      <flakyFailure message=\"{first}\" type=\"FLAKY\">{evidence}</flakyFailure>\n    </testcase>");
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}
