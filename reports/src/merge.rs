//! Combines the results of several runs (CI shards) into one report.

use crate::{CaseResult, ComponentReport, Conflict, RunReport, SCHEMA_VERSION};
use std::collections::BTreeMap;

/// A result that cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    #[error("result {index} has schema version {found}, this suite reads {SCHEMA_VERSION}")]
    Schema { index: usize, found: u32 },
}

/// Merges runs: components by name, cells by case id. Where runs disagree on a cell,
/// the worse status is kept, a note says so, and the conflict is listed.
pub fn merge(reports: Vec<RunReport>) -> Result<RunReport, MergeError> {
    for (index, report) in reports.iter().enumerate() {
        if report.schema_version != SCHEMA_VERSION {
            return Err(MergeError::Schema {
                index,
                found: report.schema_version,
            });
        }
    }
    let mut iter = reports.into_iter();
    let mut merged = iter.next().ok_or(MergeError::Empty)?;
    for report in iter {
        merged.started_at = merged.started_at.min(report.started_at);
        merged.finished_at = merged.finished_at.max(report.finished_at);
        merged.conflicts.extend(report.conflicts);
        merged.bench.extend(report.bench);
        for component in report.components {
            match merged
                .components
                .iter_mut()
                .find(|c| c.name == component.name)
            {
                Some(existing) => merge_component(existing, component, &mut merged.conflicts),
                None => merged.components.push(component),
            }
        }
    }
    merged.components.sort_by(|a, b| a.name.cmp(&b.name));
    for component in &mut merged.components {
        component.cases.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(merged)
}

fn merge_component(
    into: &mut ComponentReport,
    from: ComponentReport,
    conflicts: &mut Vec<Conflict>,
) {
    if into.provisioning.problem.is_some() && from.provisioning.problem.is_none() {
        into.provisioning = from.provisioning.clone();
        into.capabilities = from.capabilities.clone();
    }
    let mut by_id: BTreeMap<String, CaseResult> = std::mem::take(&mut into.cases)
        .into_iter()
        .map(|c| (c.id.clone(), c))
        .collect();
    for case in from.cases {
        match by_id.get_mut(&case.id) {
            None => {
                by_id.insert(case.id.clone(), case);
            }
            Some(existing) if existing.status == case.status => {}
            Some(existing) => {
                conflicts.push(Conflict {
                    component: into.name.clone(),
                    case: case.id.clone(),
                    statuses: vec![existing.status, case.status],
                });
                let note = format!(
                    "runs disagree on this cell: {} and {}; the worse is shown",
                    existing.status.label(),
                    case.status.label()
                );
                if case.status.severity() > existing.status.severity() {
                    *existing = case;
                }
                existing.evidence.notes.push(note);
            }
        }
    }
    into.cases = by_id.into_values().collect();
}
