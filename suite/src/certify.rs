//! `certify`: definitions -> provisioning -> runtime -> every selected case -> report.

use crate::catalogue::{catalogue, Case, Level};
use crate::expectations::Expectations;
use crate::provision::{self, Broker, NotProvisioned, ProvisionKind};
use crate::runner::{run_case_in, CaseEnvironment, RunOptions};
use anyhow::{bail, Context as _};
use globset::{Glob, GlobMatcher};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::{
    CaseResult, ComponentReport, Evidence, Machine, Provisioning, RunReport, Status, SCHEMA_VERSION,
};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Which cases and components a run covers.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Component names (`metadata.name`); empty means every definition.
    pub components: Vec<String>,
    /// A glob over case ids, e.g. `bulk-*`.
    pub case_glob: Option<String>,
    /// Cases up to and including this level.
    pub level: Option<Level>,
}

impl Selection {
    /// The cases selected, in catalogue order.
    pub fn cases(&self) -> anyhow::Result<Vec<&'static Case>> {
        let matcher: Option<GlobMatcher> = match &self.case_glob {
            Some(glob) => Some(
                Glob::new(glob)
                    .with_context(|| format!("--case '{glob}' is not a valid glob"))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let cases: Vec<&Case> = catalogue()
            .iter()
            .filter(|c| matcher.as_ref().is_none_or(|m| m.is_match(c.id)))
            .filter(|c| self.level.is_none_or(|l| c.level <= l))
            .collect();
        if cases.is_empty() {
            bail!(
                "no case matches --case {:?} and --level {:?}; see `list`",
                self.case_glob,
                self.level.map(Level::name)
            );
        }
        Ok(cases)
    }
}

/// Reads every `*.yaml` definition in `dir`, sorted by file name.
pub fn load_definitions(dir: &Path) -> anyhow::Result<Vec<ComponentDefinition>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the fixtures directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    let mut definitions = Vec::new();
    for path in paths {
        let definition = ComponentDefinition::from_file(&path)?;
        pubsub_components::registry::validate(&definition)?;
        Expectations::load(&path, &definition.name)?;
        definitions.push(definition);
    }
    Ok(definitions)
}

/// The definitions a selection names, failing on names that have none.
pub fn select_definitions(
    all: Vec<ComponentDefinition>,
    names: &[String],
    dir: &Path,
) -> anyhow::Result<Vec<ComponentDefinition>> {
    if names.is_empty() {
        return Ok(all);
    }
    let known: Vec<String> = all.iter().map(|d| d.name.clone()).collect();
    let mut chosen = Vec::new();
    for name in names {
        match all.iter().find(|d| &d.name == name) {
            Some(d) => chosen.push(d.clone()),
            None => bail!(
                "no component named '{name}' in {}; known: {}",
                dir.display(),
                known.join(", ")
            ),
        }
    }
    Ok(chosen)
}

/// How a certification run provisions brokers and runs cases.
#[derive(Debug, Clone, Default)]
pub struct CertifyOptions {
    pub run: RunOptions,
    /// The provisioning kinds to try, in order; `None`: each type's auto order.
    pub provision: Option<Vec<ProvisionKind>>,
    /// When a broker dies mid-run, restart it and run the remaining cases (off: they
    /// are ERROR, not run).
    pub restart_broker: bool,
}

/// Certifies each definition against the selected cases; `progress` hears each step.
pub async fn certify(
    definitions: &[ComponentDefinition],
    cases: &[&Case],
    options: &CertifyOptions,
    progress: &mut dyn FnMut(&str),
) -> RunReport {
    let started_at = now_text();
    let mut components = Vec::new();
    // What was started and is still running after its shutdown (a suite defect).
    let mut left: Vec<String> = Vec::new();
    for definition in definitions {
        let order = provision::order_for(&definition.component_type, options.provision.as_deref());
        progress(&format!(
            "{}: provisioning (pubsub.{})",
            definition.name, definition.component_type
        ));
        let report = match provision::provision(definition, &order).await {
            Ok(provisioned) => {
                let broker_version = provisioned.component.broker_version().await.ok();
                let provisioning = Provisioning {
                    kind: provisioned.kind.to_string(),
                    endpoint: provisioned.endpoint.clone(),
                    broker_version,
                    problem: None,
                };
                let results = run_cases(
                    definition,
                    provisioning.broker_version.as_deref(),
                    &provisioned,
                    cases,
                    options,
                    progress,
                )
                .await;
                if let Some(broker) = &provisioned.broker {
                    broker.shutdown().await;
                    if let Some(still) = broker.leftover().await {
                        left.push(still);
                    }
                }
                component_report(
                    definition,
                    provisioned.component.as_ref(),
                    provisioning,
                    results,
                )
            }
            Err(reasons) => not_provisioned(definition, cases, &reasons),
        };
        components.push(report);
    }
    if left.is_empty() {
        progress("cleanup: nothing this run started is still running");
    } else {
        progress(&format!(
            "cleanup: still running after shutdown (a suite defect): {}",
            left.join(", ")
        ));
    }
    RunReport {
        schema_version: SCHEMA_VERSION,
        suite_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        finished_at: now_text(),
        machine: machine(),
        components,
        conflicts: Vec::new(),
        bench: Vec::new(),
    }
}

async fn run_cases(
    definition: &ComponentDefinition,
    broker_version: Option<&str>,
    provisioned: &provision::Provisioned,
    cases: &[&Case],
    options: &CertifyOptions,
    progress: &mut dyn FnMut(&str),
) -> Vec<CaseResult> {
    let mut runtime = Runtime::new(definition.name.clone(), provisioned.component.clone());
    let environment = CaseEnvironment::provisioned(provisioned.broker.clone(), definition);
    let mut results = Vec::new();
    let mut restarted_after: Option<String> = None;
    let expectations = Expectations::load(&definition.source, &definition.name).unwrap_or_default();
    // Fault cases of a component whose broker the suite cannot fault (the auto order
    // chose a running server) run on a second broker the suite controls.
    let mut controlled: Option<Result<Controlled, String>> = None;
    for (index, case) in cases.iter().enumerate() {
        let wants_control = !case.injects.is_empty()
            && options.provision.is_none()
            && provisioned.broker.as_ref().is_some_and(|b| !b.can_fault());
        if wants_control {
            if controlled.is_none() {
                progress(&format!(
                    "{}: starting a broker the suite controls for the fault cases",
                    definition.name
                ));
                controlled = Some(Controlled::provision(definition).await);
            }
            if let Some(Ok(side)) = &mut controlled {
                let run =
                    run_options_for(&options.run, &expectations, case, side.version.as_deref());
                let mut result = run_case_in(case, &side.runtime, &run, &side.environment).await;
                side.refresh(definition).await;
                if let Some(version) = side.version.as_deref() {
                    expectations.apply(&mut result, version);
                }
                result.evidence.notes.push(format!(
                    "run on a broker the suite controls, {}, since the run's broker cannot be faulted",
                    side.describe()
                ));
                report_progress(progress, definition, index, cases.len(), case, &result);
                results.push(result);
                continue;
            }
        }
        if let (true, Some(broker)) = (options.restart_broker, &provisioned.broker) {
            if let Some(reason) = broker.health().down_reason() {
                progress(&format!(
                    "{}: the broker died ({reason}); restarting it",
                    definition.name
                ));
                match restart(definition, broker.as_ref()).await {
                    Ok(component) => {
                        runtime = Runtime::new(definition.name.clone(), component);
                        restarted_after = Some(reason);
                    }
                    Err(e) => progress(&format!("{}: {e}", definition.name)),
                }
            }
        }
        let run = run_options_for(&options.run, &expectations, case, broker_version);
        let mut result = run_case_in(case, &runtime, &run, &environment).await;
        if let Some(Err(reason)) = &controlled {
            if wants_control {
                result.evidence.notes.push(format!(
                    "no broker the suite controls could be started for the fault cases: {reason}"
                ));
            }
        }
        // Certification cases may fault the broker: the next case gets a fresh
        // component, so that a component that does not recover fails only there.
        if case.level == crate::catalogue::Level::Certification {
            if let (Some(broker), None) = (&provisioned.broker, environment.health().down_reason())
            {
                match pubsub_components::registry::build(definition, Some(&broker.endpoint())).await
                {
                    Ok(component) => runtime = Runtime::new(definition.name.clone(), component),
                    Err(e) => result.evidence.notes.push(format!(
                        "rebuilding the component after this case failed: {e}"
                    )),
                }
            }
        }
        if let Some(version) = broker_version {
            expectations.apply(&mut result, version);
        }
        if let Some(reason) = &restarted_after {
            result.evidence.notes.push(format!(
                "run on a restarted broker (--restart-broker) after it died: {reason}"
            ));
        }
        report_progress(progress, definition, index, cases.len(), case, &result);
        results.push(result);
    }
    if let Some(Ok(side)) = controlled {
        side.broker.shutdown().await;
        if let Some(still) = side.broker.leftover().await {
            progress(&format!(
                "cleanup: still running after shutdown (a suite defect): {still}"
            ));
        }
    }
    results
}

fn report_progress(
    progress: &mut dyn FnMut(&str),
    definition: &ComponentDefinition,
    index: usize,
    total: usize,
    case: &Case,
    result: &CaseResult,
) {
    progress(&format!(
        "{}: [{}/{total}] {} {} ({} ms)",
        definition.name,
        index + 1,
        case.id,
        result.status.label(),
        result.duration_ms
    ));
}

/// The run options for `case`: a cell the expectations file predicts to FAIL is not
/// run again (a rerun only proves the known defect twice).
fn run_options_for(
    run: &RunOptions,
    expectations: &Expectations,
    case: &Case,
    broker_version: Option<&str>,
) -> RunOptions {
    let expected = broker_version.is_some_and(|v| expectations.for_cell(case.id, v).is_some());
    RunOptions {
        retries: if expected { 0 } else { run.retries },
        seed: run.seed,
    }
}

/// A broker the suite controls (a local process, else a container), with the
/// component built on it, for the fault cases.
struct Controlled {
    runtime: Runtime,
    environment: CaseEnvironment,
    broker: std::sync::Arc<dyn Broker>,
    version: Option<String>,
}

impl Controlled {
    async fn provision(definition: &ComponentDefinition) -> Result<Self, String> {
        let order = provision::order_for(
            &definition.component_type,
            Some(&[ProvisionKind::LocalProcess, ProvisionKind::Container]),
        );
        let provisioned = provision::provision(definition, &order)
            .await
            .map_err(|reasons| {
                reasons
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        let broker = provisioned
            .broker
            .clone()
            .ok_or_else(|| "the component needs no broker".to_string())?;
        let version = provisioned.component.broker_version().await.ok();
        Ok(Controlled {
            runtime: Runtime::new(definition.name.clone(), provisioned.component.clone()),
            environment: CaseEnvironment::provisioned(provisioned.broker.clone(), definition),
            broker,
            version,
        })
    }

    fn describe(&self) -> String {
        self.broker.describe()
    }

    /// A fresh component after a fault case, as for the run's own broker.
    async fn refresh(&mut self, definition: &ComponentDefinition) {
        if self.broker.health().down_reason().is_none() {
            if let Ok(component) =
                pubsub_components::registry::build(definition, Some(&self.broker.endpoint())).await
            {
                self.runtime = Runtime::new(definition.name.clone(), component);
            }
        }
    }
}

/// Starts a dead broker again and builds a fresh component on it.
async fn restart(
    definition: &ComponentDefinition,
    broker: &dyn Broker,
) -> Result<std::sync::Arc<dyn Component>, String> {
    broker
        .restart()
        .await
        .map_err(|e| format!("restarting {} failed: {e}", broker.describe()))?;
    pubsub_components::registry::build(definition, Some(&broker.endpoint()))
        .await
        .map_err(|e| format!("rebuilding the component after a restart failed: {e}"))
}

fn component_report(
    definition: &ComponentDefinition,
    component: &dyn Component,
    provisioning: Provisioning,
    cases: Vec<CaseResult>,
) -> ComponentReport {
    ComponentReport {
        name: definition.name.clone(),
        component_type: definition.component_type.clone(),
        definition: definition.source.display().to_string(),
        provisioning,
        capabilities: serde_json::to_value(component.capabilities()).unwrap_or_default(),
        cases,
        third_party: third_party(definition),
    }
}

/// The published crate a registered (third-party) type adapts.
fn third_party(definition: &ComponentDefinition) -> Option<String> {
    pubsub_components::registry::third_party(&definition.component_type).map(str::to_string)
}

fn not_provisioned(
    definition: &ComponentDefinition,
    cases: &[&Case],
    reasons: &[NotProvisioned],
) -> ComponentReport {
    let notes: Vec<String> = reasons.iter().map(ToString::to_string).collect();
    ComponentReport {
        third_party: third_party(definition),
        name: definition.name.clone(),
        component_type: definition.component_type.clone(),
        definition: definition.source.display().to_string(),
        provisioning: Provisioning {
            kind: "none".into(),
            endpoint: None,
            broker_version: None,
            problem: Some(notes.join("; ")),
        },
        capabilities: serde_json::Value::Null,
        cases: cases
            .iter()
            .map(|case| CaseResult {
                id: case.id.to_string(),
                family: case.family().to_string(),
                level: case.level.name().to_string(),
                feature: (!case.requires.is_empty() || !case.injects.is_empty())
                    .then(|| case.requirement()),
                must: case.must.to_string(),
                status: Status::NotProvisioned,
                mode: None,
                duration_ms: 0,
                bound_ms: 0,
                attempts: 0,
                expected_failure: None,
                evidence: Evidence {
                    notes: notes.clone(),
                    ..Evidence::default()
                },
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
