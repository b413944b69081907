//! `certify`: definitions -> provisioning -> runtime -> every selected case -> report.

mod controlled;
mod lanes;
mod row_report;

use crate::catalogue::{catalogue, Case, Level};
use crate::expectations::Expectations;
use crate::provision::{self, ProvisionKind};
use crate::runner::RunOptions;
use anyhow::{bail, Context as _};
use futures::StreamExt as _;
use globset::{Glob, GlobMatcher};
use lanes::{run_cases, tally, RowRuntimes};
use pubsub_components::config::ComponentDefinition;
#[cfg(feature = "sidecar")]
use pubsub_components::registry::Resolved;
use pubsub_components::runtime::Runtime;
use pubsub_reports::{ComponentReport, Provisioning, RunReport, Status, SCHEMA_VERSION};
pub use row_report::machine;
pub use row_report::now_text;
use row_report::{component_report, not_provisioned, uniform_report};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::row_paths::{AttachTo, SidecarCommand};

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
        // A directory a sidecar loads may hold declarative subscriptions too.
        #[cfg(feature = "sidecar")]
        if pubsub_sidecar::resources::is_subscription_file(&path) {
            continue;
        }
        let definition = ComponentDefinition::from_file(&path)?;
        // A type this build leaves out is kept: its row says NOT PROVISIONED, naming
        // the cargo feature that compiles it in.
        if pubsub_components::registry::compiled_out(&definition.component_type).is_none() {
            pubsub_components::registry::validate(&definition)?;
        }
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
    /// How many components are certified at once, and how many cases of one
    /// component's shared lane run at once (twice as many of its timed lane); 0 and 1
    /// run everything one after another.
    pub jobs: usize,
    /// How many times each selected case runs (`--repeat`); 0 and 1 run it once. A
    /// cell run more than once says how many runs passed.
    pub repeat: u32,
    /// The report directory whose `histories/` keep every attempt's history; `None`
    /// keeps none.
    pub histories: Option<PathBuf>,
    /// Also certify each component through `serve`, over Dapr's HTTP API, as a row
    /// of its own beside the in-process one (`--through-serve`).
    pub through_serve: bool,
    /// Also certify each component through sidecars started from this command line
    /// (`--sidecar-command`), as a row `<component> via sidecar` (over HTTP) or
    /// `<component> via sidecar over gRPC`.
    pub sidecar_command: Option<SidecarCommand>,
    /// Also certify each component through a running sidecar (`--sidecar`), as a
    /// row `<component> via attached sidecar`.
    pub attach: Option<AttachTo>,
    /// Also certify each component with Dapr's JavaScript SDK on the app's side of
    /// `serve` (`--js-sdk`): a row `<component> via @dapr/dapr client`.
    pub js_sdk: bool,
    /// Also certify each component with Dapr's Python SDK on each side of `serve` over
    /// gRPC (`--python-sdk`): rows `<component> via dapr Python client` and `<component>
    /// via dapr Python app`.
    pub python_sdk: bool,
    /// Also certify each component with Dapr's Rust SDK's client publishing through
    /// `serve` over gRPC (`--rust-sdk`): a row `<component> via dapr Rust client`.
    pub rust_sdk: bool,
}

impl CertifyOptions {
    fn jobs(&self) -> usize {
        self.jobs.max(1)
    }
}

/// Hears a run's steps: the component a line is about (empty for the run as a
/// whole) and the line. Called from several tasks at once when `jobs` > 1.
pub type Progress = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Certifies each definition against the selected cases, up to `options.jobs`
/// components at once, each on its own broker; the report lists the components in
/// the order given.
pub async fn certify(
    definitions: &[ComponentDefinition],
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: Progress,
) -> RunReport {
    let started_at = now_text();
    let runs = definitions.iter().cloned().map(|definition| {
        let cases = cases.to_vec();
        let options = options.clone();
        let progress = progress.clone();
        async move {
            let name = definition.name.clone();
            let task = tokio::spawn({
                let definition = definition.clone();
                let cases = cases.clone();
                async move { certify_component(&definition, &cases, &options, &progress).await }
            });
            match task.await {
                Ok(done) => done,
                Err(e) => (
                    vec![uniform_report(
                        &definition,
                        &cases,
                        Status::Error,
                        Provisioning {
                            kind: "none".into(),
                            endpoint: None,
                            broker_version: None,
                            problem: None,
                            unsupported_broker: None,
                        },
                        format!("certifying {name} stopped: {e} (a suite defect)"),
                    )],
                    Vec::new(),
                ),
            }
        }
    });
    let done: Vec<(Vec<ComponentReport>, Vec<String>)> = futures::stream::iter(runs)
        .buffered(options.jobs())
        .collect()
        .await;
    // What was started and is still running after its shutdown (a suite defect).
    let left: Vec<String> = done.iter().flat_map(|(_, left)| left.clone()).collect();
    if left.is_empty() {
        progress("", "cleanup: nothing this run started is still running");
    } else {
        progress(
            "",
            &format!(
                "cleanup: still running after shutdown (a suite defect): {}",
                left.join(", ")
            ),
        );
    }
    RunReport {
        schema_version: SCHEMA_VERSION,
        suite_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        finished_at: now_text(),
        machine: machine(),
        components: done.into_iter().flat_map(|(reports, _)| reports).collect(),
        conflicts: Vec::new(),
        bench: Vec::new(),
        baseline: None,
    }
}

/// Provisions one component's broker, runs the cases (in process, and through
/// `serve` when asked) and shuts the broker down; also gives what is still running
/// after the shutdown.
async fn certify_component(
    definition: &ComponentDefinition,
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: &Progress,
) -> (Vec<ComponentReport>, Vec<String>) {
    let name = definition.name.as_str();
    let order = match &options.provision {
        Some(kinds) => provision::order_for(&definition.component_type, Some(kinds)),
        None => provision::own_broker_order(&definition.component_type),
    };
    progress(
        name,
        &format!(
            "{name}: provisioning (pubsub.{})",
            definition.component_type
        ),
    );
    let provisioned = match provision::provision(definition, &order).await {
        Ok(provisioned) => provisioned,
        Err(reasons) => {
            let report = not_provisioned(definition, cases, &reasons);
            progress(name, &format!("{name}: NOT PROVISIONED"));
            return (vec![report], Vec::new());
        }
    };
    // Provisioning built the component, so its type is known: looked up once here and
    // passed along to build it again (after a fault, behind a proxy, for a row over
    // the wire) and to name its crate.
    let component = match pubsub_components::registry::resolve(definition) {
        Ok(component) => component,
        Err(e) => {
            progress(name, &format!("{name}: {e}"));
            let report = uniform_report(
                definition,
                cases,
                Status::Error,
                Provisioning {
                    kind: provisioned.kind.to_string(),
                    endpoint: provisioned.endpoint.clone(),
                    broker_version: None,
                    problem: None,
                    unsupported_broker: None,
                },
                format!("not run: the component's type could not be looked up again: {e}"),
            );
            return (vec![report], shut_down(&provisioned).await);
        }
    };
    let broker_version = provisioned.component.version_text().await.ok();
    // Where the protocol does not name the broker's software, provisioning does.
    let software = provisioned.broker.as_ref().and_then(|b| b.software());
    let broker_version = match (software, broker_version) {
        (Some(software), Some(version)) => Some(format!("{software}; {version}")),
        (software, version) => software.or(version),
    };
    let provisioning = Provisioning {
        kind: provisioned.kind.to_string(),
        endpoint: provisioned.endpoint.clone(),
        broker_version,
        problem: None,
        unsupported_broker: None,
    };
    // A broker version that lacks what the component needs: said once for the row,
    // with the broker's own refusal, instead of a wall of failures.
    if let Ok(Some(unmet)) = provisioned.component.unmet_broker_requirement().await {
        progress(name, &format!("{name}: UNSUPPORTED broker: {unmet}"));
        let mut provisioning = provisioning;
        provisioning.unsupported_broker = Some(unmet.clone());
        let report = uniform_report(
            definition,
            cases,
            Status::Unsupported,
            provisioning,
            format!("not run: this broker version cannot serve the component: {unmet}"),
        );
        return (vec![report], shut_down(&provisioned).await);
    }
    let results = run_cases(
        &component,
        provisioning.broker_version.clone(),
        &provisioned,
        RowRuntimes {
            first: Runtime::new(definition.name.clone(), provisioned.component.clone()),
            wrap: None,
        },
        cases,
        options,
        progress,
    )
    .await;
    progress(name, &format!("{name}: done: {}", tally(&results)));
    #[cfg_attr(not(feature = "sidecar"), allow(unused_mut))]
    let mut reports = vec![component_report(
        &component,
        provisioned.component.as_ref(),
        provisioning.clone(),
        results,
    )];
    #[cfg(feature = "sidecar")]
    {
        use crate::through_serve::Sidecars;
        let mut rows = Vec::new();
        if options.through_serve {
            rows.push(Sidecars::Serve);
            rows.push(Sidecars::ServeGrpc);
        }
        if options.js_sdk {
            rows.push(Sidecars::JsSdkClient);
            rows.push(Sidecars::JsSdkServer);
            rows.push(Sidecars::JsSdkGrpcClient);
        }
        if options.python_sdk {
            rows.push(Sidecars::PythonSdkClient);
            rows.push(Sidecars::PythonSdkApp);
        }
        if options.rust_sdk {
            rows.push(Sidecars::RustSdkClient);
        }
        if let Some(attach) = &options.attach {
            rows.push(Sidecars::Attached(attach.clone()));
        }
        if let Some(command) = &options.sidecar_command {
            rows.push(Sidecars::Command(command.clone()));
        }
        for sidecars in rows {
            reports.push(
                certify_over_the_wire(
                    &sidecars,
                    &component,
                    &provisioned,
                    provisioning.clone(),
                    cases,
                    options,
                    progress,
                )
                .await,
            );
        }
    }
    (reports, shut_down(&provisioned).await)
}

/// Shuts the provisioned broker down; what is still running after it (a suite defect).
async fn shut_down(provisioned: &provision::Provisioned) -> Vec<String> {
    let Some(broker) = &provisioned.broker else {
        return Vec::new();
    };
    broker.shutdown().await;
    broker.leftover().await.into_iter().collect()
}

/// The component's row over Dapr's API (HTTP or gRPC): the same cases through
/// `sidecars`, on the same broker, named `<component> via <path>`.
#[cfg(feature = "sidecar")]
async fn certify_over_the_wire(
    sidecars: &crate::through_serve::Sidecars,
    component: &Resolved,
    provisioned: &provision::Provisioned,
    provisioning: Provisioning,
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: &Progress,
) -> ComponentReport {
    use crate::through_serve::Sidecars;
    let definition = component.definition();
    let row = component.renamed(format!("{}{}", definition.name, sidecars.row_suffix()));
    let name = row.definition().name.clone();
    let refuse = |note: String| {
        uniform_report(
            row.definition(),
            cases,
            Status::Error,
            provisioning.clone(),
            note,
        )
    };
    if let Sidecars::Command(_) = sidecars {
        // A sidecar process reads the definition as it is: the broker it names.
        if provisioned.broker.is_none() {
            return refuse(format!(
                "{} runs in process: a sidecar started from a command line cannot share it",
                definition.name
            ));
        }
        if provisioned.kind != ProvisionKind::External {
            return refuse(format!(
                "a sidecar started from a command line reaches the broker named in {}, not the one this run provisioned ({}): run with --provision external",
                definition.source.display(),
                provisioned.kind
            ));
        }
    }
    progress(&name, &format!("{name}: starting its sidecars"));
    // A fresh component: the in-process row's fault cases may have broken the first
    // one's connections.
    let component = match &provisioned.broker {
        Some(broker) => match component.build(Some(&broker.endpoint())).await {
            Ok(component) => component,
            Err(e) => {
                return refuse(format!(
                    "the component could not be built again for its row over HTTP: {e}"
                ))
            }
        },
        None => provisioned.component.clone(),
    };
    let over = match crate::through_serve::over_the_wire(
        sidecars,
        definition,
        component,
        provisioning.broker_version.clone(),
    )
    .await
    {
        Ok(over) => over,
        Err(e) => {
            return refuse(format!(
                "the sidecars for {} could not be started: {e:#}",
                definition.name
            ))
        }
    };
    let description = over.runtime.component().clone();
    // A row through another client certifies that client too: its version leads
    // the row's, so its expected failures name the client version they were seen on.
    let mut provisioning = provisioning;
    if let Some(client) = &over.client {
        provisioning.broker_version = Some(match &provisioning.broker_version {
            Some(broker) => format!("{client} on {broker}"),
            None => client.clone(),
        });
    }
    // The row's own name: its progress lines, histories and expectations are its own.
    let results = run_cases(
        &row,
        provisioning.broker_version.clone(),
        provisioned,
        RowRuntimes {
            first: over.runtime.clone(),
            wrap: crate::through_serve::rewrapper(
                sidecars,
                definition,
                provisioning.broker_version.clone(),
            ),
        },
        cases,
        options,
        progress,
    )
    .await;
    over.target.stop().await;
    progress(&name, &format!("{name}: done: {}", tally(&results)));
    component_report(&row, description.as_ref(), provisioning, results)
}
