//! Renderers of a [`RunReport`]: HTML, Markdown, JUnit XML and badges, and the set of
//! files `certify` writes.

mod bench_chart;
mod html;
mod junit;
mod markdown;
mod timeline;

pub use bench_chart::{bench_chart_svg, bench_chart_text, CHART_SERIES};
pub use html::html;
pub use junit::junit;
pub use markdown::markdown;
pub use timeline::timeline_svg;

use crate::levels::ComponentSummary;
use crate::{CaseResult, RunReport, Status};
use std::io;
use std::path::Path;

/// Why a row's cases did not run, as its provisioning column says it: the broker could
/// not be provisioned, or this broker version lacks what the component needs.
pub(crate) fn not_run(provisioning: &crate::Provisioning) -> Option<String> {
    if let Some(problem) = &provisioning.problem {
        return Some(format!("NOT PROVISIONED: {problem}"));
    }
    let unmet = provisioning.unsupported_broker.as_ref()?;
    Some(format!(
        "BROKER UNSUPPORTED ({}): {unmet}",
        provisioning
            .broker_version
            .as_deref()
            .unwrap_or("version unknown")
    ))
}

/// A shields.io endpoint badge for one component.
pub fn badge_json(component: &crate::ComponentReport) -> String {
    let summary = ComponentSummary::of(component);
    let colour = match (summary.failed + summary.other, summary.level) {
        (0, crate::CertificationLevel::Certified) => "brightgreen",
        (0, _) => "green",
        (_, crate::CertificationLevel::None) => "red",
        _ => "yellow",
    };
    let badge = serde_json::json!({
        "schemaVersion": 1,
        "label": format!("pubsub {}", component.name),
        "message": format!("{} · {}/{} pass", summary.level.label(), summary.passed, component.cases.len()),
        "color": colour,
    });
    serde_json::to_string_pretty(&badge).unwrap_or_default()
}

/// The evidence of one cell as plain text.
pub fn evidence_text(component: &str, case: &CaseResult) -> String {
    let mut text = format!(
        "{} {} on {component}\nMUST: {}\nlevel: {}; capability: {}; mode: {}; {} ms of {} ms bound; {} attempt(s)\n",
        case.status.label(),
        case.id,
        case.must,
        case.level,
        case.feature.as_deref().unwrap_or("-"),
        case.mode.map_or("-", |m| if m == crate::Mode::Native { "native" } else { "emulated" }),
        case.duration_ms,
        case.bound_ms,
        case.attempts
    );
    for (title, lines) in [
        ("findings", &case.evidence.findings),
        ("warnings", &case.evidence.warnings),
        ("notes", &case.evidence.notes),
        ("history", &case.evidence.history),
        ("logs", &case.evidence.logs),
    ] {
        if !lines.is_empty() {
            text.push_str(&format!("{title}:\n"));
            for line in lines {
                text.push_str(&format!("  {line}\n"));
            }
        }
    }
    text
}

/// Writes `index.html`, `report.json`, `report.md`, `junit.xml`, `badges/<name>.json`
/// and `evidence/<component>/<case>.txt` (for every cell that is not PASS) into `dir`.
pub fn write_all(report: &RunReport, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(io::Error::other)?;
    std::fs::write(dir.join("report.json"), json)?;
    std::fs::write(dir.join("index.html"), html(report))?;
    std::fs::write(dir.join("report.md"), markdown(report))?;
    std::fs::write(dir.join("junit.xml"), junit(report))?;
    let badges = dir.join("badges");
    let evidence = dir.join("evidence");
    for path in [&badges, &evidence] {
        if path.exists() {
            std::fs::remove_dir_all(path)?;
        }
        std::fs::create_dir_all(path)?;
    }
    for component in &report.components {
        std::fs::write(
            badges.join(format!("{}.json", file_stem(&component.name))),
            badge_json(component),
        )?;
        let folder = evidence.join(file_stem(&component.name));
        std::fs::create_dir_all(&folder)?;
        for case in component.cases.iter().filter(|c| c.status != Status::Pass) {
            std::fs::write(
                folder.join(format!("{}.txt", case.id)),
                evidence_text(&component.name, case),
            )?;
        }
    }
    Ok(())
}

/// A row name as one file name with no spaces: ASCII letters, digits, `.` and `_`
/// stay, every other run of characters becomes one `-`, so `memory via @dapr/dapr
/// client` is `memory-via-dapr-dapr-client`.
pub fn file_stem(row: &str) -> String {
    let mut stem = String::with_capacity(row.len());
    for c in row.chars() {
        if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
            stem.push(c);
        } else if !stem.is_empty() && !stem.ends_with('-') {
            stem.push('-');
        }
    }
    while stem.ends_with('-') {
        stem.pop();
    }
    stem
}

#[cfg(test)]
pub(crate) mod tests;
