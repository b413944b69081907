//! The self-contained HTML report: one file, inline CSS and JS, no network.

use crate::levels::ComponentSummary;
use crate::{CaseResult, Mode, RunReport, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Escapes text for HTML content and attribute values.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn class(status: Status) -> &'static str {
    match status {
        Status::Pass => "s-pass",
        Status::Fail => "s-fail",
        Status::Unsupported => "s-unsupported",
        Status::NotProvisioned => "s-not-provisioned",
        Status::Error => "s-error",
        Status::Flaky => "s-flaky",
    }
}

fn cell_label(case: &CaseResult) -> String {
    let label = status_label(case);
    match case.runs {
        Some(runs) => format!("{label} {}/{}", runs.passes, runs.runs),
        None => label,
    }
}

fn status_label(case: &CaseResult) -> String {
    if case.is_expected_failure() {
        return format!("{} FAIL expected", Status::Fail.symbol());
    }
    if case.passes_unexpectedly() {
        return format!("{} PASS, expected FAIL", Status::Pass.symbol());
    }
    match (case.status, case.mode) {
        (Status::Pass, Some(Mode::Emulated)) => format!("{} PASS emulated", Status::Pass.symbol()),
        (Status::Pass, _) => format!("{} PASS native", Status::Pass.symbol()),
        (status, _) => format!("{} {}", status.symbol(), status.label()),
    }
}

const STYLE: &str = r#"
:root { font-family: system-ui, sans-serif; color: #1b1f24; }
body { margin: 1.5rem; }
h1 { margin: 0 0 .25rem; font-size: 1.5rem; }
.meta { color: #57606a; margin: 0 0 1rem; }
table { border-collapse: collapse; margin-bottom: 1.5rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
tr.family-row th { background: #eef1f4; text-transform: uppercase; font-size: .8rem; letter-spacing: .05em; }
td.case-id { font-family: ui-monospace, monospace; white-space: nowrap; }
.cell button { border: 0; border-radius: 4px; padding: .2rem .45rem; font: inherit; font-size: .85rem; cursor: pointer; white-space: nowrap; width: 100%; text-align: left; }
.s-pass button { background: #dafbe1; color: #116329; }
.s-pass.emulated button { background: #ddf4ff; color: #0a3069; }
.s-fail button { background: #ffebe9; color: #a40e26; font-weight: 600; }
.s-unsupported button { background: #eaeef2; color: #57606a; }
.s-not-provisioned button { background: #fbefff; color: #6e40c9; }
.s-error button { background: #fff1e5; color: #953800; font-weight: 600; }
.s-flaky button { background: #fff8c5; color: #7d4e00; font-weight: 600; }
.cell.not-run { color: #8c959f; }
.chart.compare .series-0 { fill: #8c959f; }
.chart.compare .series-1 { fill: #54aeff; }
.chart.compare .series-2 { fill: #0969da; }
.cell.change-regression button { outline: 3px solid #cf222e; }
.cell.change-improvement button { outline: 3px solid #1a7f37; }
.cell.change-changed button, .cell.change-added button { outline: 2px dashed #6e7781; }
#changes .regression th { color: #cf222e; }
#changes .improvement th { color: #1a7f37; }
#filters { display: flex; gap: 1rem; align-items: center; margin-bottom: .75rem; flex-wrap: wrap; }
#evidence-panel { position: fixed; top: 0; right: 0; bottom: 0; width: min(46rem, 95vw); overflow: auto; background: #fff; border-left: 2px solid #8c959f; padding: 1rem 1.25rem; box-shadow: -4px 0 12px rgba(0,0,0,.15); }
#evidence-panel pre { background: #f6f8fa; padding: .5rem; overflow-x: auto; font-size: .8rem; }
.must { font-style: italic; }
.legend span { margin-right: 1rem; }
.bar { fill: #0969da; }
.bar.baseline { fill: #8c959f; }
"#;

const SCRIPT: &str = r#"
const q = (s) => document.querySelector(s);
function applyFilters() {
  const family = q('#filter-family').value, level = q('#filter-level').value, status = q('#filter-status').value;
  document.querySelectorAll('tr.case-row').forEach((row) => {
    const show = (!family || row.dataset.family === family) && (!level || row.dataset.level === level)
      && (!status || row.dataset.statuses.split(' ').includes(status));
    row.hidden = !show;
  });
  document.querySelectorAll('tr.family-row').forEach((header) => {
    header.hidden = !document.querySelector('tr.case-row[data-family="' + header.dataset.family + '"]:not([hidden])');
  });
  q('#visible-count').textContent = document.querySelectorAll('tr.case-row:not([hidden])').length;
}
document.querySelectorAll('select.filter').forEach((s) => s.addEventListener('change', applyFilters));
document.querySelectorAll('.cell button').forEach((button) => button.addEventListener('click', () => {
  q('#evidence-body').innerHTML = document.getElementById(button.dataset.evidence).innerHTML;
  q('#evidence-panel').hidden = false;
}));
q('#close-evidence').addEventListener('click', () => { q('#evidence-panel').hidden = true; });
document.addEventListener('keydown', (e) => { if (e.key === 'Escape') q('#evidence-panel').hidden = true; });
applyFilters();
"#;

fn list(out: &mut String, title: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    let _ = write!(out, "<h4>{}</h4><ul>", esc(title));
    for line in lines {
        let _ = write!(out, "<li>{}</li>", esc(line));
    }
    out.push_str("</ul>");
}

fn select(out: &mut String, id: &str, label: &str, options: &[String]) {
    let _ = write!(
        out,
        "<label>{label} <select class=\"filter\" id=\"{id}\"><option value=\"\">all</option>"
    );
    for option in options {
        let _ = write!(out, "<option value=\"{0}\">{0}</option>", esc(option));
    }
    out.push_str("</select></label>");
}

/// Renders the whole report as one HTML page.
pub fn html(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>pub/sub conformance matrix</title><style>{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(
        out,
        "<header><h1>pub/sub conformance matrix</h1><p class=\"meta\">suite {} · schema {} · {} → {} · {} ({} {}, {} cpus)</p></header>",
        esc(&report.suite_version),
        report.schema_version,
        esc(&report.started_at),
        esc(&report.finished_at),
        esc(&report.machine.hostname),
        esc(&report.machine.os),
        esc(&report.machine.arch),
        report.machine.cpus
    );

    // Summary per component.
    out.push_str("<section id=\"summary\"><h2>Components</h2><table><thead><tr><th>component</th><th>level</th><th>pass</th><th>fail</th><th>unsupported</th><th>other</th><th>native / emulated</th><th>provisioning</th></tr></thead><tbody>\n");
    for component in &report.components {
        let s = ComponentSummary::of(component);
        let provisioning = match super::not_run(&component.provisioning) {
            Some(not_run) => not_run,
            None => format!(
                "{}{}{}",
                component.provisioning.kind,
                component
                    .provisioning
                    .endpoint
                    .as_ref()
                    .map(|e| format!(" at {e}"))
                    .unwrap_or_default(),
                component
                    .provisioning
                    .broker_version
                    .as_ref()
                    .map(|v| format!(", {v}"))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            out,
            "<tr class=\"component-summary\" data-component=\"{0}\"><th>{0} <small>(pubsub.{1}){11}</small></th><td class=\"level\">{2}</td><td>{3}</td><td>{4}</td><td>{5}</td><td>{6}</td><td>{7} / {8} ({9}% emulated)</td><td>{10}</td></tr>",
            esc(&component.name), esc(&component.component_type), s.level.label(), s.passed, s.failed, s.unsupported, s.other, s.native, s.emulated, s.emulated_percent(), esc(&provisioning),
            component.third_party.as_ref().map(|adapts| format!(" <span class=\"third-party\">third-party: {}</span>", esc(adapts))).unwrap_or_default()
        );
    }
    out.push_str("</tbody></table>");
    out.push_str("<details class=\"legend\"><summary>What the levels prove</summary><dl>");
    for (level, proves) in crate::LEVEL_LEGEND {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(level), esc(proves));
    }
    out.push_str("</dl></details></section>\n");

    if let Some(baseline) = &report.baseline {
        changes_section(&mut out, baseline);
    }

    // The matrix: case rows grouped by family, one column per component.
    let mut cases: BTreeMap<&str, BTreeMap<&str, &CaseResult>> = BTreeMap::new();
    for component in &report.components {
        for case in &component.cases {
            cases
                .entry(case.family.as_str())
                .or_default()
                .entry(case.id.as_str())
                .or_insert(case);
        }
    }
    let families: Vec<String> = cases.keys().map(|f| f.to_string()).collect();
    let levels: BTreeSet<String> = cases
        .values()
        .flat_map(|c| c.values().map(|c| c.level.clone()))
        .collect();
    let statuses: Vec<String> = Status::ALL.iter().map(|s| s.label().to_string()).collect();
    versions_section(&mut out, report);
    paths_section(&mut out, report);
    out.push_str("<section id=\"matrix-section\"><h2>Matrix</h2><div id=\"filters\">");
    select(&mut out, "filter-family", "Family", &families);
    select(
        &mut out,
        "filter-level",
        "Level",
        &levels.into_iter().collect::<Vec<_>>(),
    );
    select(&mut out, "filter-status", "Status", &statuses);
    out.push_str("<span><span id=\"visible-count\"></span> cases shown</span></div>\n");
    out.push_str("<p class=\"legend\"><span>✔ PASS (native or emulated)</span><span>✘ FAIL</span><span>– UNSUPPORTED</span><span>∅ NOT PROVISIONED</span><span>! ERROR</span><span>≈ FLAKY</span> · click a cell for its evidence</p>\n");
    let _ = write!(
        out,
        "<table id=\"matrix\"><thead><tr><th>case</th><th>level</th><th>capability</th>"
    );
    for component in &report.components {
        let _ = write!(out, "<th>{}</th>", esc(&component.name));
    }
    out.push_str("</tr></thead><tbody>\n");
    let mut store = String::new();
    let mut next_id = 0;
    let columns = report.components.len() + 3;
    for (family, family_cases) in &cases {
        let _ = writeln!(
            out,
            "<tr class=\"family-row\" data-family=\"{0}\"><th colspan=\"{columns}\">{0}</th></tr>",
            esc(family)
        );
        for (id, any) in family_cases {
            let row_statuses: BTreeSet<&str> = report
                .components
                .iter()
                .filter_map(|c| c.cases.iter().find(|x| x.id == *id))
                .map(|c| c.status.label())
                .collect();
            let _ = write!(
                out,
                "<tr class=\"case-row\" data-family=\"{}\" data-level=\"{}\" data-statuses=\"{}\"><td class=\"case-id\" title=\"{}\">{}</td><td>{}</td><td>{}</td>",
                esc(family),
                esc(&any.level),
                esc(&row_statuses.into_iter().collect::<Vec<_>>().join(" ")),
                esc(&any.must),
                esc(id),
                esc(&any.level),
                esc(any.feature.as_deref().unwrap_or("-"))
            );
            for component in &report.components {
                let Some(case) = component.cases.iter().find(|c| c.id == *id) else {
                    out.push_str("<td class=\"cell not-run\">not run</td>");
                    continue;
                };
                next_id += 1;
                let evidence_id = format!("ev-{next_id}");
                let emulated = if case.mode == Some(Mode::Emulated) {
                    " emulated"
                } else {
                    ""
                };
                let change = report
                    .baseline
                    .as_ref()
                    .and_then(|b| b.change_of(&component.name, &case.id));
                let (change_class, change_title) = match change {
                    Some(c) => (
                        format!(" change-{}", c.kind.label()),
                        format!(" title=\"{}: {}\"", c.kind.label(), esc(&c.detail)),
                    ),
                    None => (String::new(), String::new()),
                };
                let _ = write!(
                    out,
                    "<td class=\"cell {}{emulated}{change_class}\" data-status=\"{}\" data-component=\"{}\"{change_title}><button type=\"button\" data-evidence=\"{evidence_id}\">{}</button></td>",
                    class(case.status),
                    case.status.label(),
                    esc(&component.name),
                    esc(&cell_label(case))
                );
                let _ = write!(
                    store,
                    "<div id=\"{evidence_id}\"><h3>{} {} on {}</h3><p class=\"must\">{}</p><p>level {} · capability {} · {} ms of a {} ms bound · {} attempt(s){} · provisioning {}{}</p>",
                    esc(&cell_label(case)),
                    esc(&case.id),
                    esc(&component.name),
                    esc(&case.must),
                    esc(&case.level),
                    esc(case.feature.as_deref().unwrap_or("-")),
                    case.duration_ms,
                    case.bound_ms,
                    case.attempts,
                    case.runs.map(|r| format!(" · passed {} of {} runs", r.passes, r.runs)).unwrap_or_default(),
                    esc(&component.provisioning.kind),
                    esc(&component.provisioning.broker_version.as_ref().map(|v| format!(", {v}")).unwrap_or_default())
                );
                if let Some(c) = change {
                    list(
                        &mut store,
                        "Since the baseline",
                        &[format!("{}: {}", c.kind.label(), c.detail)],
                    );
                }
                list(&mut store, "Findings", &case.evidence.findings);
                list(&mut store, "Warnings", &case.evidence.warnings);
                if let Some(reason) = &case.expected_failure {
                    list(&mut store, "Expected failure", std::slice::from_ref(reason));
                }
                list(&mut store, "Notes", &case.evidence.notes);
                if let Some(timeline) = &case.evidence.timeline {
                    let _ = write!(store, "<h4>Timeline</h4>{}", super::timeline_svg(timeline));
                }
                if !case.evidence.history.is_empty() {
                    let _ = write!(
                        store,
                        "<h4>History excerpt</h4><pre>{}</pre>",
                        esc(&case.evidence.history.join("\n"))
                    );
                }
                if !case.evidence.logs.is_empty() {
                    let _ = write!(
                        store,
                        "<h4>Logs</h4><pre>{}</pre>",
                        esc(&case.evidence.logs.join("\n"))
                    );
                }
                store.push_str("</div>\n");
            }
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</tbody></table></section>\n");

    if !report.conflicts.is_empty() {
        out.push_str("<section id=\"conflicts\"><h2>Conflicting results</h2><ul>");
        for c in &report.conflicts {
            let statuses: Vec<&str> = c.statuses.iter().map(|s| s.label()).collect();
            let _ = write!(
                out,
                "<li>{} <code>{}</code>: {}</li>",
                esc(&c.component),
                esc(&c.case),
                statuses.join(" vs ")
            );
        }
        out.push_str("</ul></section>\n");
    }
    bench_section(&mut out, report);
    let _ = write!(
        out,
        "<aside id=\"evidence-panel\" hidden><button type=\"button\" id=\"close-evidence\">close ✕</button><div id=\"evidence-body\"></div></aside>\n<div id=\"evidence-store\" hidden>\n{store}</div>\n<script>{SCRIPT}</script></body></html>\n"
    );
    out
}

/// The cells that changed since the baseline, regressions first.
fn changes_section(out: &mut String, baseline: &crate::Baseline) {
    let _ = write!(
        out,
        "<section id=\"changes\"><h2>Changes since the baseline</h2><p>{} regression(s) · {} change(s) in all · baseline {} (started {})</p>",
        baseline.regressions(),
        baseline.changes.len(),
        esc(&baseline.source),
        esc(&baseline.started_at)
    );
    if !baseline.changes.is_empty() {
        out.push_str("<table><thead><tr><th>change</th><th>component</th><th>case</th><th>what</th></tr></thead><tbody>");
        for c in &baseline.changes {
            let _ = write!(
                out,
                "<tr class=\"{0}\"><th>{0}</th><td>{1}</td><td><code>{2}</code></td><td>{3}</td></tr>",
                c.kind.label(),
                esc(&c.component),
                esc(&c.case),
                esc(&c.detail)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>\n");
}

fn bench_section(out: &mut String, report: &RunReport) {
    if report.bench.is_empty() {
        return;
    }
    out.push_str("<section id=\"bench\"><h2>Bench</h2><h3>Publish throughput, every component</h3><p>Messages per second on a log scale: single publish, bulk x10 and bulk x100, each the median of its repeats (hover a bar for the spread).</p>");
    out.push_str(&super::bench_chart_svg(&report.bench));
    for bench in &report.bench {
        let _ = write!(out, "<h3>{}</h3><p>{}</p><table><thead><tr><th>measurement</th><th>messages</th><th>seconds</th><th>msg/s (median)</th><th>spread over the repeats</th><th>ratio</th></tr></thead><tbody>", esc(&bench.component), esc(&bench.settings));
        for m in &bench.measurements {
            let ratio = m
                .ratio
                .map(|r| format!("{r:.2}x vs {}", m.baseline.as_deref().unwrap_or("?")))
                .unwrap_or_default();
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.0}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.label),
                m.messages,
                m.seconds,
                m.rate,
                m.spread()
                    .map(|(min, max)| format!("{min:.0}..{max:.0}"))
                    .unwrap_or_default(),
                esc(&ratio)
            );
        }
        out.push_str("</tbody></table>");
        // A bar chart of rates, as inline SVG.
        let max = bench
            .measurements
            .iter()
            .map(|m| m.rate)
            .fold(1.0, f64::max);
        let height = bench.measurements.len() * 26 + 10;
        let _ = write!(out, "<svg class=\"chart\" width=\"640\" height=\"{height}\" role=\"img\" aria-label=\"messages per second\">");
        for (i, m) in bench.measurements.iter().enumerate() {
            let y = i * 26 + 5;
            let width = (m.rate / max * 400.0).max(1.0);
            let baseline = if m.ratio.is_none() { " baseline" } else { "" };
            let _ = write!(
                out,
                "<text x=\"0\" y=\"{}\" font-size=\"12\">{}</text><rect class=\"bar{baseline}\" x=\"180\" y=\"{y}\" width=\"{width:.1}\" height=\"18\"></rect><text x=\"{:.1}\" y=\"{}\" font-size=\"12\">{:.0}/s</text>",
                y + 14,
                esc(&m.label),
                185.0 + width,
                y + 14,
                m.rate
            );
        }
        out.push_str("</svg>");
        if let Some(l) = &bench.latency {
            let _ = write!(
                out,
                "<p>End-to-end latency over {} messages: p50 {} µs, p99 {} µs, max {} µs</p>",
                l.samples, l.p50_us, l.p99_us, l.max_us
            );
        }
    }
    out.push_str("</section>\n");
}

/// The broker-version axis: per component, the versions it is certified on, fails on
/// and does not support, and a matrix with the versions as columns (the verdict, and
/// each case whose verdict differs between versions).
fn versions_section(out: &mut String, report: &RunReport) {
    let axes = crate::compatibility(report);
    if axes.is_empty() {
        return;
    }
    out.push_str("<section id=\"versions\"><h2>Broker versions</h2>");
    for axis in &axes {
        let _ = write!(out, "<h3>{}</h3><ul>", esc(&axis.component));
        let [certified, fails, unsupported] = axis.verdict_lists();
        for (title, text) in [
            ("certified on", certified),
            ("fails on", fails),
            ("not supported on", unsupported),
        ] {
            let _ = write!(out, "<li><strong>{title}</strong>: {}</li>", esc(&text));
        }
        out.push_str("</ul><table class=\"versions\"><thead><tr><th></th>");
        for column in &axis.versions {
            let _ = write!(out, "<th>{}</th>", esc(&column.version));
        }
        out.push_str("</tr></thead><tbody><tr><th>verdict</th>");
        for column in &axis.versions {
            let status = match &column.verdict {
                crate::VersionVerdict::Certified { .. } => Status::Pass,
                crate::VersionVerdict::Fails { .. } => Status::Fail,
                crate::VersionVerdict::NotSupported { .. } => Status::Unsupported,
                crate::VersionVerdict::NotProvisioned { .. } => Status::NotProvisioned,
            };
            let title = match &column.verdict {
                crate::VersionVerdict::Fails { why, .. } => why.clone(),
                crate::VersionVerdict::NotSupported { reason }
                | crate::VersionVerdict::NotProvisioned { reason } => reason.clone(),
                crate::VersionVerdict::Certified { .. } => String::new(),
            };
            let _ = write!(
                out,
                "<td class=\"{}\" title=\"{}\">{}</td>",
                class(status),
                esc(&title),
                esc(&column.verdict.label())
            );
        }
        out.push_str("</tr>");
        for (case, statuses) in &axis.differing {
            let _ = write!(out, "<tr><th><code>{}</code></th>", esc(case));
            for status in statuses {
                match status {
                    Some(status) => {
                        let _ = write!(
                            out,
                            "<td class=\"{}\">{} {}</td>",
                            class(*status),
                            status.symbol(),
                            status.label()
                        );
                    }
                    None => out.push_str("<td>-</td>"),
                }
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>\n");
}

/// Each component in process beside its rows over other paths: per path, how many
/// cases agree, and every case that differs with its explanation (unexplained first).
fn paths_section(out: &mut String, report: &RunReport) {
    let comparisons = crate::path_comparison(report);
    if comparisons.is_empty() {
        return;
    }
    out.push_str("<section id=\"paths\"><h2>In process and over the wire</h2><p>Every difference is a defect of the path until explained: by what the path cannot express or run, or by an expected failure.</p>");
    for comparison in &comparisons {
        let _ = write!(
            out,
            "<h3>{}</h3><table class=\"paths\"><thead><tr><th>path</th><th>same verdict</th><th>differs</th><th>unexplained</th></tr></thead><tbody>",
            esc(&comparison.component)
        );
        for path in &comparison.paths {
            let unexplained = path.unexplained().count();
            let _ = write!(
                out,
                "<tr><th>{}</th><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                esc(&path.path),
                path.same,
                path.differences.len(),
                class(if unexplained == 0 {
                    Status::Pass
                } else {
                    Status::Fail
                }),
                unexplained
            );
        }
        out.push_str("</tbody></table>");
        for path in &comparison.paths {
            if path.differences.is_empty() {
                continue;
            }
            let _ = write!(
                out,
                "<details><summary>{} via {}: {} difference(s)</summary><ul>",
                esc(&comparison.component),
                esc(&path.path),
                path.differences.len()
            );
            for difference in path.unexplained_first() {
                let _ = write!(
                    out,
                    "<li><code>{}</code>: {} in process, <span class=\"{}\">{}</span> over the path (<strong>{}</strong>){}</li>",
                    esc(&difference.case),
                    difference.in_process.map_or("not run", |s| s.label()),
                    class(difference.over_path),
                    difference.over_path.label(),
                    difference.explanation.label(),
                    if difference.why.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", esc(&difference.why))
                    }
                );
            }
            out.push_str("</ul></details>");
        }
    }
    out.push_str("</section>\n");
}
