//! In process and over the wire: each component's in-process row beside its rows over
//! another path (`<component> via serve`, `via sidecar`, `via attached sidecar`,
//! `via <client>`), with every case whose verdict differs and why.
//!
//! The same cases are judged by the same checker on every path, so a difference is a
//! defect of the path (the sidecar, `serve`, the client) until it is explained: by
//! what the path cannot express (UNSUPPORTED over it, saying why), by what it cannot
//! run (NOT PROVISIONED, saying why), or by a known defect recorded as an expected
//! failure. What none of these explains is listed as unexplained.

use crate::{CaseResult, ComponentReport, RunReport, Status};

/// Why a case's verdict over a path differs from its verdict in process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explanation {
    /// The path has no words for what the case needs (UNSUPPORTED over it).
    NotExpressible,
    /// The path could not run the case (NOT PROVISIONED over it).
    NotRunnable,
    /// A known defect of a broker or client on this path (an expected failure).
    Expected,
    /// Nothing above: a defect of the path until shown otherwise.
    Unexplained,
}

impl Explanation {
    /// How the reports name it.
    pub fn label(self) -> &'static str {
        match self {
            Explanation::NotExpressible => "not expressible over this path",
            Explanation::NotRunnable => "not runnable over this path",
            Explanation::Expected => "expected failure",
            Explanation::Unexplained => "unexplained",
        }
    }
}

/// One case whose verdict differs between the two paths.
#[derive(Debug, Clone, PartialEq)]
pub struct PathDifference {
    pub case: String,
    /// The verdict in process (`None` when the in-process row did not run the case).
    pub in_process: Option<Status>,
    pub over_path: Status,
    pub explanation: Explanation,
    /// The path's own words: the expectation's reason, the first finding or note.
    pub why: String,
}

/// One row over a path, compared with its in-process row.
#[derive(Debug, Clone, PartialEq)]
pub struct PathRow<'a> {
    /// What the row goes through, e.g. `serve` or `@dapr/dapr client`.
    pub path: String,
    pub row: &'a ComponentReport,
    /// Cases with the same verdict on both paths.
    pub same: usize,
    pub differences: Vec<PathDifference>,
}

impl PathRow<'_> {
    /// The differences nothing explains.
    pub fn unexplained(&self) -> impl Iterator<Item = &PathDifference> {
        self.differences
            .iter()
            .filter(|d| d.explanation == Explanation::Unexplained)
    }

    /// The differences, unexplained first, then in the order explanations are declared
    /// (expected failures, then what the path cannot run or express).
    pub fn unexplained_first(&self) -> Vec<&PathDifference> {
        let rank = |d: &&PathDifference| match d.explanation {
            Explanation::Unexplained => 0,
            Explanation::Expected => 1,
            Explanation::NotRunnable => 2,
            Explanation::NotExpressible => 3,
        };
        let mut sorted: Vec<&PathDifference> = self.differences.iter().collect();
        sorted.sort_by_key(rank);
        sorted
    }
}

/// A component certified in process and over at least one other path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathComparison<'a> {
    /// The in-process row's name.
    pub component: String,
    pub in_process: &'a ComponentReport,
    pub paths: Vec<PathRow<'a>>,
}

/// The in-process name and the path of a row named `<component> via <path>`.
fn split_path(name: &str) -> Option<(&str, &str)> {
    name.split_once(" via ")
}

fn explain(over_path: &CaseResult) -> (Explanation, String) {
    let first = |lists: [&Vec<String>; 2]| {
        lists
            .into_iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_default()
    };
    let evidence = &over_path.evidence;
    match over_path.status {
        Status::Unsupported => (
            Explanation::NotExpressible,
            first([&evidence.notes, &evidence.findings]),
        ),
        Status::NotProvisioned => (
            Explanation::NotRunnable,
            first([&evidence.notes, &evidence.findings]),
        ),
        _ if over_path.is_expected_failure() => (
            Explanation::Expected,
            over_path.expected_failure.clone().unwrap_or_default(),
        ),
        _ => (
            Explanation::Unexplained,
            first([&evidence.findings, &evidence.notes]),
        ),
    }
}

fn compare<'a>(in_process: &ComponentReport, path: &str, row: &'a ComponentReport) -> PathRow<'a> {
    let mut same = 0;
    let mut differences = Vec::new();
    for case in &row.cases {
        let in_process_case = in_process.cases.iter().find(|c| c.id == case.id);
        let there = in_process_case.map(|c| c.status);
        if there == Some(case.status) {
            same += 1;
            continue;
        }
        let (explanation, mut why) = explain(case);
        if let (Status::Pass, Some(failed)) = (case.status, in_process_case) {
            // Passing over the path is the difference: what failed in process says why.
            if let Some(finding) = failed.evidence.findings.first() {
                why = format!("in process: {finding}");
            }
        }
        differences.push(PathDifference {
            case: case.id.clone(),
            in_process: there,
            over_path: case.status,
            explanation,
            why,
        });
    }
    PathRow {
        path: path.to_string(),
        row,
        same,
        differences,
    }
}

/// The components of the report with rows over other paths, in report order. A row
/// over a path whose in-process row is not in the report is left out.
pub fn path_comparison(report: &RunReport) -> Vec<PathComparison<'_>> {
    let mut out: Vec<PathComparison> = Vec::new();
    for row in &report.components {
        let Some((component, path)) = split_path(&row.name) else {
            continue;
        };
        let Some(in_process) = report.components.iter().find(|c| c.name == component) else {
            continue;
        };
        let compared = compare(in_process, path, row);
        match out.iter_mut().find(|c| c.component == component) {
            Some(existing) => existing.paths.push(compared),
            None => out.push(PathComparison {
                component: component.to_string(),
                in_process,
                paths: vec![compared],
            }),
        }
    }
    out
}
