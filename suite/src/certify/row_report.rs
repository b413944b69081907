//! A component's row of the report: its cells, provisioning and level, or one
//! status for every cell when it could not run.

use super::lanes::errored;
use crate::catalogue::Case;
use crate::provision::{versions, NotProvisioned};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::registry::Resolved;
use pubsub_components::Component;
use pubsub_reports::{CaseResult, ComponentReport, Machine, Provisioning, Status};
use std::time::SystemTime;

pub(super) fn component_report(
    row: &Resolved,
    component: &dyn Component,
    provisioning: Provisioning,
    cases: Vec<CaseResult>,
) -> ComponentReport {
    let definition = row.definition();
    ComponentReport {
        name: definition.name.clone(),
        component_type: definition.component_type.clone(),
        definition: definition.source.display().to_string(),
        provisioning,
        capabilities: serde_json::to_value(component.capabilities()).unwrap_or_default(),
        cases,
        third_party: row.third_party().map(str::to_string),
        broker_axis: versions::axis_of(definition),
    }
}

/// The published crate a registered (third-party) type adapts.
pub(super) fn third_party(definition: &ComponentDefinition) -> Option<String> {
    pubsub_components::registry::third_party(&definition.component_type).map(str::to_string)
}

pub(super) fn not_provisioned(
    definition: &ComponentDefinition,
    cases: &[&'static Case],
    reasons: &[NotProvisioned],
) -> ComponentReport {
    let notes: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    let problem = notes.join("; ");
    let provisioning = Provisioning {
        kind: "none".into(),
        endpoint: None,
        broker_version: None,
        problem: Some(problem.clone()),
        unsupported_broker: None,
    };
    uniform_report(
        definition,
        cases,
        Status::NotProvisioned,
        provisioning,
        problem,
    )
}

/// A component whose every cell has the same status and note.
pub(super) fn uniform_report(
    definition: &ComponentDefinition,
    cases: &[&'static Case],
    status: Status,
    provisioning: Provisioning,
    note: String,
) -> ComponentReport {
    ComponentReport {
        third_party: third_party(definition),
        broker_axis: versions::axis_of(definition),
        name: definition.name.clone(),
        component_type: definition.component_type.clone(),
        definition: definition.source.display().to_string(),
        provisioning,
        capabilities: serde_json::Value::Null,
        cases: cases
            .iter()
            .map(|case| {
                let mut cell = errored(case, note.clone());
                cell.status = status;
                cell
            })
            .collect(),
    }
}

/// Now, as RFC 3339.
pub fn now_text() -> String {
    pubsub_components::runtime::controls::format_time(SystemTime::now())
}

/// The machine this process runs on.
pub fn machine() -> Machine {
    Machine {
        hostname: std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        os: std::env::consts::OS.to_string(),
        arch: std::env::consts::ARCH.to_string(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}
