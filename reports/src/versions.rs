//! Compatibility across broker versions: the rows of the broker-version axis
//! (`certify --broker-versions`) gathered per component, each version with its
//! verdict, and the cases whose verdict differs between versions.

use crate::{ComponentReport, RunReport, Status};

/// How one component fared on one broker version.
#[derive(Debug, Clone, PartialEq)]
pub enum VersionVerdict {
    /// Every cell that ran passed (UNSUPPORTED features aside).
    Certified { passed: usize },
    /// At least one cell failed (FAIL, ERROR or FLAKY): the first one and why.
    Fails {
        failed: usize,
        first_case: String,
        why: String,
    },
    /// The broker version lacks what the component needs (nothing ran).
    NotSupported { reason: String },
    /// The broker could not be provisioned.
    NotProvisioned { reason: String },
}

impl VersionVerdict {
    /// A short label for a matrix cell.
    pub fn label(&self) -> String {
        match self {
            VersionVerdict::Certified { passed } => format!("certified ({passed} PASS)"),
            VersionVerdict::Fails {
                failed, first_case, ..
            } => format!("fails {failed} (first: {first_case})"),
            VersionVerdict::NotSupported { .. } => "not supported".into(),
            VersionVerdict::NotProvisioned { .. } => "not provisioned".into(),
        }
    }
}

/// One version of a component's axis.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionColumn<'a> {
    /// `<broker> <version>`, e.g. `valkey 9.1.2`.
    pub version: String,
    pub row: &'a ComponentReport,
    pub verdict: VersionVerdict,
}

/// A component certified on several broker versions.
#[derive(Debug, Clone, PartialEq)]
pub struct Compatibility<'a> {
    pub component: String,
    /// The versions as their rows came, each with its verdict.
    pub versions: Vec<VersionColumn<'a>>,
    /// The cases whose status differs between versions that ran them, in catalogue
    /// order: (case id, the status per version).
    pub differing: Vec<(String, Vec<Option<Status>>)>,
}

impl Compatibility<'_> {
    /// The versions with the given kind of verdict, as text (`redis 7.0.15, redis 8.0.2`).
    pub fn listed(&self, matches: impl Fn(&VersionVerdict) -> bool) -> Vec<String> {
        self.versions
            .iter()
            .filter(|v| matches(&v.verdict))
            .map(|v| match &v.verdict {
                VersionVerdict::Fails { first_case, .. } => {
                    format!("{} (first failing case {first_case})", v.version)
                }
                VersionVerdict::NotSupported { reason } => format!("{} ({reason})", v.version),
                _ => v.version.clone(),
            })
            .collect()
    }

    /// The versions it is certified on, fails on and is not supported on, each list
    /// as one text (`none` when empty), in that order.
    pub fn verdict_lists(&self) -> [String; 3] {
        [
            self.listed(|v| matches!(v, VersionVerdict::Certified { .. })),
            self.listed(|v| matches!(v, VersionVerdict::Fails { .. })),
            self.listed(|v| matches!(v, VersionVerdict::NotSupported { .. })),
        ]
        .map(|list| {
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join("; ")
            }
        })
    }
}

fn verdict(row: &ComponentReport) -> VersionVerdict {
    if let Some(reason) = &row.provisioning.problem {
        return VersionVerdict::NotProvisioned {
            reason: reason.clone(),
        };
    }
    if let Some(reason) = &row.provisioning.unsupported_broker {
        return VersionVerdict::NotSupported {
            reason: reason.clone(),
        };
    }
    let failing: Vec<_> = row.cases.iter().filter(|c| c.counts_as_failure()).collect();
    match failing.first() {
        None => VersionVerdict::Certified {
            passed: row.count(Status::Pass),
        },
        Some(first) => VersionVerdict::Fails {
            failed: failing.len(),
            first_case: first.id.clone(),
            why: first
                .evidence
                .first_reason()
                .unwrap_or_default()
                .to_string(),
        },
    }
}

/// The components of the report that ran on broker versions, in report order.
pub fn compatibility(report: &RunReport) -> Vec<Compatibility<'_>> {
    let mut out: Vec<Compatibility> = Vec::new();
    for row in &report.components {
        let Some(axis) = &row.broker_axis else {
            continue;
        };
        // Rows through sidecars keep their suffix (` via serve`): a component of its own.
        let component = row.name.replacen(
            &format!(" on {} {} ({})", axis.broker, axis.version, axis.release),
            "",
            1,
        );
        let column = VersionColumn {
            version: format!("{} {}", axis.broker, axis.version),
            row,
            verdict: verdict(row),
        };
        match out.iter_mut().find(|c| c.component == component) {
            Some(existing) => existing.versions.push(column),
            None => out.push(Compatibility {
                component,
                versions: vec![column],
                differing: Vec::new(),
            }),
        }
    }
    for compatibility in &mut out {
        // One upstream version from two Debian releases: the columns say which.
        let labels: Vec<String> = compatibility
            .versions
            .iter()
            .map(|c| c.version.clone())
            .collect();
        for column in &mut compatibility.versions {
            if labels.iter().filter(|l| **l == column.version).count() > 1 {
                if let Some(axis) = &column.row.broker_axis {
                    column.version = format!("{} ({})", column.version, axis.release);
                }
            }
        }
        let mut ids: Vec<&str> = Vec::new();
        for column in &compatibility.versions {
            for case in &column.row.cases {
                if !ids.contains(&case.id.as_str()) {
                    ids.push(&case.id);
                }
            }
        }
        for id in ids {
            let statuses: Vec<Option<Status>> = compatibility
                .versions
                .iter()
                .map(|column| {
                    column
                        .row
                        .cases
                        .iter()
                        .find(|c| c.id == id)
                        .map(|c| c.status)
                })
                .collect();
            let ran: Vec<Status> = compatibility
                .versions
                .iter()
                .zip(&statuses)
                .filter(|(column, _)| column.row.provisioning.unsupported_broker.is_none())
                .filter_map(|(_, status)| *status)
                .collect();
            if ran.windows(2).any(|pair| pair[0] != pair[1]) {
                compatibility.differing.push((id.to_string(), statuses));
            }
        }
    }
    out
}
