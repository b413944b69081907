//! What changed since a baseline run: the cells a change made worse (regressions,
//! listed first), better, or different, as a pull-request comment wants them.

use crate::{CaseResult, RunReport, Status};
use serde::{Deserialize, Serialize};

/// How a cell differs from the baseline, in the order changes are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// It counts as a failure now (FAIL, ERROR, FLAKY, or a stale expected
    /// failure) and did not in the baseline, or it is new and failing.
    Regression,
    /// It counted as a failure in the baseline and does not now.
    Improvement,
    /// Another status or mode, neither better nor worse (e.g. PASS to NOT
    /// PROVISIONED, native to emulated).
    Changed,
    /// Not in the baseline, and not failing.
    Added,
}

impl ChangeKind {
    /// The lowercase label.
    pub fn label(self) -> &'static str {
        match self {
            ChangeKind::Regression => "regression",
            ChangeKind::Improvement => "improvement",
            ChangeKind::Changed => "changed",
            ChangeKind::Added => "added",
        }
    }
}

/// One cell that differs from the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellChange {
    pub component: String,
    pub case: String,
    pub kind: ChangeKind,
    /// The status in the baseline (`None`: the cell is new).
    pub before: Option<Status>,
    pub after: Status,
    /// What changed, in words (statuses, modes, the first finding now).
    pub detail: String,
}

/// The comparison of a run with its baseline, kept in the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Where the baseline came from (the file given to `--baseline`).
    pub source: String,
    /// When the baseline run started.
    pub started_at: String,
    /// Every changed cell, regressions first.
    pub changes: Vec<CellChange>,
}

impl Baseline {
    /// How many cells regressed.
    pub fn regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.kind == ChangeKind::Regression)
            .count()
    }

    /// The change recorded for a cell, if any.
    pub fn change_of(&self, component: &str, case: &str) -> Option<&CellChange> {
        self.changes
            .iter()
            .find(|c| c.component == component && c.case == case)
    }
}

/// Compares `current` with `baseline` cell by cell. Only the cells `current` ran
/// are compared (a run of a few cases does not report the rest as gone).
pub fn compare(baseline: &RunReport, current: &RunReport, source: &str) -> Baseline {
    let mut changes = Vec::new();
    for component in &current.components {
        let before_component = baseline
            .components
            .iter()
            .find(|c| c.name == component.name);
        for after in &component.cases {
            let before = before_component.and_then(|c| c.cases.iter().find(|b| b.id == after.id));
            if let Some(change) = compare_cell(&component.name, before, after) {
                changes.push(change);
            }
        }
    }
    changes.sort_by(|a, b| (a.kind, &a.component, &a.case).cmp(&(b.kind, &b.component, &b.case)));
    Baseline {
        source: source.to_string(),
        started_at: baseline.started_at.clone(),
        changes,
    }
}

fn compare_cell(
    component: &str,
    before: Option<&CaseResult>,
    after: &CaseResult,
) -> Option<CellChange> {
    let now_failing = after.counts_as_failure();
    let kind = match before {
        None if now_failing => ChangeKind::Regression,
        None => ChangeKind::Added,
        Some(before) => match (before.counts_as_failure(), now_failing) {
            (false, true) => ChangeKind::Regression,
            (true, false) => ChangeKind::Improvement,
            _ if before.status != after.status || before.mode != after.mode => ChangeKind::Changed,
            _ => return None,
        },
    };
    let describe = |cell: &CaseResult| {
        let mode = cell
            .mode
            .map(|m| format!(" ({})", format!("{m:?}").to_lowercase()))
            .unwrap_or_default();
        format!("{}{mode}", cell.status.label())
    };
    let mut detail = match before {
        Some(before) => format!("{} -> {}", describe(before), describe(after)),
        None => format!("new: {}", describe(after)),
    };
    if after.passes_unexpectedly() {
        detail.push_str(", a stale expected failure");
    } else if now_failing {
        if let Some(why) = after.evidence.first_reason() {
            detail.push_str(": ");
            detail.push_str(why);
        }
    }
    Some(CellChange {
        component: component.to_string(),
        case: after.id.clone(),
        kind,
        before: before.map(|b| b.status),
        after: after.status,
        detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ComponentReport, Evidence, Machine, Mode, Provisioning, SCHEMA_VERSION};

    fn cell(id: &str, status: Status) -> CaseResult {
        CaseResult {
            id: id.into(),
            family: id.split('.').next().unwrap().into(),
            level: "core".into(),
            feature: None,
            must: "It MUST work.".into(),
            status,
            mode: (status == Status::Pass).then_some(Mode::Native),
            duration_ms: 1,
            bound_ms: 10,
            attempts: 1,
            expected_failure: None,
            runs: None,
            evidence: Evidence {
                findings: if status == Status::Fail {
                    vec![format!("{id} lost a message")]
                } else {
                    Vec::new()
                },
                ..Evidence::default()
            },
        }
    }

    fn run(cells: Vec<CaseResult>) -> RunReport {
        RunReport {
            schema_version: SCHEMA_VERSION,
            suite_version: "0".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:01:00Z".into(),
            machine: Machine {
                hostname: "h".into(),
                os: "linux".into(),
                arch: "x86_64".into(),
                cpus: 2,
            },
            components: vec![ComponentReport {
                name: "redis".into(),
                component_type: "redis-streams".into(),
                definition: "fixtures/redis.yaml".into(),
                provisioning: Provisioning {
                    kind: "local-process".into(),
                    endpoint: None,
                    broker_version: None,
                    problem: None,
                    unsupported_broker: None,
                },
                capabilities: serde_json::Value::Null,
                cases: cells,
                third_party: None,
                broker_axis: None,
            }],
            conflicts: Vec::new(),
            bench: Vec::new(),
            baseline: None,
        }
    }

    #[test]
    fn regressions_come_first_then_improvements_then_other_changes() {
        let before = run(vec![
            cell("a.same", Status::Pass),
            cell("b.broke", Status::Pass),
            cell("c.fixed", Status::Fail),
            cell("d.unprovisioned", Status::Pass),
        ]);
        let mut now = run(vec![
            cell("a.same", Status::Pass),
            cell("b.broke", Status::Fail),
            cell("c.fixed", Status::Pass),
            cell("d.unprovisioned", Status::NotProvisioned),
            cell("e.new-failing", Status::Error),
            cell("f.new-passing", Status::Pass),
        ]);
        let baseline = compare(&before, &now, "old/report.json");
        let listed: Vec<(&str, ChangeKind)> = baseline
            .changes
            .iter()
            .map(|c| (c.case.as_str(), c.kind))
            .collect();
        assert_eq!(
            listed,
            [
                ("b.broke", ChangeKind::Regression),
                ("e.new-failing", ChangeKind::Regression),
                ("c.fixed", ChangeKind::Improvement),
                ("d.unprovisioned", ChangeKind::Changed),
                ("f.new-passing", ChangeKind::Added),
            ]
        );
        assert_eq!(baseline.regressions(), 2);
        let broke = baseline.change_of("redis", "b.broke").unwrap();
        assert_eq!(
            broke.detail,
            "PASS (native) -> FAIL: b.broke lost a message"
        );
        now.baseline = Some(baseline);
        assert!(now.regressed());
    }

    #[test]
    fn a_known_failure_that_stays_is_no_change_and_a_mode_change_is() {
        let mut known = cell("a.known", Status::Fail);
        known.expected_failure = Some("redis 7 drops it".into());
        let mut emulated = cell("b.mode", Status::Pass);
        let before = run(vec![known.clone(), emulated.clone()]);
        emulated.mode = Some(Mode::Emulated);
        let baseline = compare(&before, &run(vec![known, emulated]), "x");
        assert_eq!(baseline.changes.len(), 1, "{:?}", baseline.changes);
        assert_eq!(baseline.changes[0].kind, ChangeKind::Changed);
        assert_eq!(
            baseline.changes[0].detail,
            "PASS (native) -> PASS (emulated)"
        );
    }

    #[test]
    fn cells_the_run_did_not_cover_are_not_reported() {
        let before = run(vec![
            cell("a.one", Status::Pass),
            cell("b.two", Status::Fail),
        ]);
        let baseline = compare(&before, &run(vec![cell("a.one", Status::Pass)]), "x");
        assert!(baseline.changes.is_empty(), "{:?}", baseline.changes);
    }
}
