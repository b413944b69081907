//! `certify`: definitions -> provisioning -> runtime -> every selected case -> report.

use crate::catalogue::{catalogue, Case, Lane, Level};
use crate::expectations::Expectations;
use crate::provision::versions;
use crate::provision::{self, Broker, NotProvisioned, ProvisionKind};
pub use crate::row_paths::AttachTo;
use crate::row_runtime::{RowRuntime, RuntimeWrapper};
use crate::runner::{run_case_in, CaseEnvironment, RunOptions};
use anyhow::{bail, Context as _};
use futures::StreamExt as _;
use globset::{Glob, GlobMatcher};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::{
    CaseResult, ComponentReport, Machine, Provisioning, RunReport, Status, SCHEMA_VERSION,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
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
    /// (`--sidecar-command`), as a row `<component> via sidecar`.
    pub sidecar_command: Option<String>,
    /// Also certify each component through a running sidecar (`--sidecar`), as a
    /// row `<component> via attached sidecar`.
    pub attach: Option<AttachTo>,
    /// Also certify each component with Dapr's JavaScript SDK on the app's side of
    /// `serve` (`--js-sdk`): a row `<component> via @dapr/dapr client`.
    pub js_sdk: bool,
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
    let broker_version = provisioned.component.broker_version().await.ok();
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
        definition,
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
        definition,
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
        }
        if options.js_sdk {
            rows.push(Sidecars::JsSdkClient);
            rows.push(Sidecars::JsSdkServer);
        }
        if let Some(attach) = &options.attach {
            rows.push(Sidecars::Attached(attach.clone()));
        }
        if let Some(command) = &options.sidecar_command {
            rows.push(Sidecars::Command(command.clone()));
        }
        for sidecars in rows {
            reports.push(
                certify_over_http(
                    &sidecars,
                    definition,
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

/// The component's row over Dapr's HTTP API: the same cases through `sidecars`, on
/// the same broker, named `<component> via serve` or `<component> via sidecar`.
#[cfg(feature = "sidecar")]
async fn certify_over_http(
    sidecars: &crate::through_serve::Sidecars,
    definition: &ComponentDefinition,
    provisioned: &provision::Provisioned,
    provisioning: Provisioning,
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: &Progress,
) -> ComponentReport {
    use crate::through_serve::Sidecars;
    let mut row = definition.clone();
    row.name = format!("{}{}", definition.name, sidecars.row_suffix());
    let name = row.name.clone();
    let refuse =
        |note: String| uniform_report(&row, cases, Status::Error, provisioning.clone(), note);
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
        Some(broker) => {
            match pubsub_components::registry::build(definition, Some(&broker.endpoint())).await {
                Ok(component) => component,
                Err(e) => {
                    return refuse(format!(
                        "the component could not be built again for its row over HTTP: {e}"
                    ))
                }
            }
        }
        None => provisioned.component.clone(),
    };
    let over = match crate::through_serve::over_http(
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

impl LaneState {
    /// Runs the next cases on `runtime`, retiring the one built before it.
    async fn replace(&mut self, runtime: RowRuntime) {
        self.runtime = runtime.runtime.clone();
        if let Some(old) = self.built.replace(runtime) {
            old.retire().await;
        }
    }
}

/// The runtime the next case of a component runs on: replaced after a broker
/// restart or a certification case.
struct LaneState {
    runtime: Runtime,
    /// The runtime built in the run for `runtime` (after a fault case or a restart),
    /// retired when replaced; `None` for the one the run was given.
    built: Option<RowRuntime>,
    /// Why the broker was restarted (`--restart-broker`), for the later cells.
    restarted_after: Option<String>,
}

/// One component's run: what every case of it shares.
struct ComponentRun {
    definition: ComponentDefinition,
    broker_version: Option<String>,
    broker: Option<Arc<dyn Broker>>,
    environment: CaseEnvironment,
    expectations: Expectations,
    options: CertifyOptions,
    progress: Progress,
    state: tokio::sync::Mutex<LaneState>,
    done: AtomicUsize,
    total: usize,
    /// Why case tasks stopped without a cell (a suite defect).
    panics: tokio::sync::Mutex<Vec<String>>,
}

impl ComponentRun {
    /// The runtime for the next case; a dead broker is restarted first when the run
    /// asks for it.
    async fn next_runtime(&self) -> (Runtime, Option<String>) {
        let mut state = self.state.lock().await;
        if let (true, Some(broker)) = (self.options.restart_broker, &self.broker) {
            if let Some(reason) = broker.health().down_reason() {
                let name = &self.definition.name;
                (self.progress)(
                    name,
                    &format!("{name}: the broker died ({reason}); restarting it"),
                );
                let rebuilt = match restart(&self.definition, broker.as_ref()).await {
                    Ok(component) => self.environment.runtime_for(name.clone(), component).await,
                    Err(e) => Err(e),
                };
                match rebuilt {
                    Ok(runtime) => {
                        state.replace(runtime).await;
                        state.restarted_after = Some(reason);
                    }
                    Err(e) => (self.progress)(name, &format!("{name}: {e}")),
                }
            }
        }
        (state.runtime.clone(), state.restarted_after.clone())
    }

    /// Runs one case on the run's broker, as many times as the run repeats cases.
    async fn run(&self, case: &'static Case) -> CaseResult {
        let repeat = self.options.repeat.max(1);
        let mut results = Vec::new();
        for run in 1..=repeat {
            results.push(self.run_once(case, run).await);
        }
        combine_runs(results)
    }

    /// Runs one case once on the run's broker.
    async fn run_once(&self, case: &'static Case, run_number: u32) -> CaseResult {
        let (runtime, restarted_after) = self.next_runtime().await;
        // Over the wire, the sidecar and the app run in this process beside the case:
        // such cases share one run-wide allowance (timed ones mostly wait).
        let _wire_slot = if runtime.is_remote() && case.lane != Lane::Timed {
            Some(
                WIRE_CASES
                    .acquire()
                    .await
                    .expect("the wire semaphore is never closed"),
            )
        } else {
            None
        };
        let run = run_options_for(
            &self.options,
            &self.expectations,
            case,
            self.broker_version.as_deref(),
            &self.definition.name,
            run_number,
        );
        let mut result = run_case_in(case, &runtime, &run, &self.environment).await;
        // Certification cases may fault the broker: the next case gets a fresh
        // component, so that a component that does not recover fails only there.
        if case.lane.is_exclusive() {
            if let (Some(broker), None) = (&self.broker, self.environment.health().down_reason()) {
                let rebuilt = match pubsub_components::registry::build(
                    &self.definition,
                    Some(&broker.endpoint()),
                )
                .await
                {
                    Ok(component) => {
                        self.environment
                            .runtime_for(self.definition.name.clone(), component)
                            .await
                    }
                    Err(e) => Err(e.to_string()),
                };
                match rebuilt {
                    Ok(runtime) => self.state.lock().await.replace(runtime).await,
                    Err(e) => result.evidence.notes.push(format!(
                        "rebuilding the component after this case failed: {e}"
                    )),
                }
            }
        }
        if let Some(version) = &self.broker_version {
            self.expectations.apply(&mut result, version);
        }
        if let Some(reason) = &restarted_after {
            result.evidence.notes.push(format!(
                "run on a restarted broker (--restart-broker) after it died: {reason}"
            ));
        }
        result
    }

    /// Counts a finished cell and tells the progress.
    fn finished(&self, case: &Case, result: &CaseResult) {
        let done = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        let name = &self.definition.name;
        (self.progress)(
            name,
            &format!(
                "{name}: [{done}/{}] {} {} ({} ms)",
                self.total,
                case.id,
                result.status.label(),
                result.duration_ms
            ),
        );
    }

    /// Runs `cases` of one lane, up to `jobs` at once, each in its own task; gives
    /// each cell with its index in the run.
    async fn run_lane(
        self: &Arc<Self>,
        cases: Vec<(usize, &'static Case)>,
        jobs: usize,
    ) -> Vec<(usize, CaseResult)> {
        let mut waiting = cases.into_iter();
        let mut running = tokio::task::JoinSet::new();
        let mut results = Vec::new();
        loop {
            while running.len() < jobs {
                let Some((index, case)) = waiting.next() else {
                    break;
                };
                let run = self.clone();
                running.spawn(async move { (index, case, run.run(case).await) });
            }
            let Some(joined) = running.join_next().await else {
                break;
            };
            match joined {
                Ok((index, case, result)) => {
                    self.finished(case, &result);
                    results.push((index, result));
                }
                // A case's task that panicked: its cell stays missing, filled below.
                Err(e) => self.panics.lock().await.push(e.to_string()),
            }
        }
        results
    }
}

/// The runtime a row's cases start on, and how the runtimes built during the run
/// (after a fault case, behind a fault proxy) become the row's kind: in process, or
/// through `wrap` (sidecars in front of them).
struct RowRuntimes {
    first: Runtime,
    wrap: Option<RuntimeWrapper>,
}

/// Runs a component's cases: the shared lane `jobs` at once, then the timed lane
/// `2 x jobs` at once, then the exclusive cases one by one (fault cases on a broker the
/// suite controls when the run's cannot be faulted). Cells come back in case order.
async fn run_cases(
    definition: &ComponentDefinition,
    broker_version: Option<String>,
    provisioned: &provision::Provisioned,
    runtimes: RowRuntimes,
    cases: &[&'static Case],
    options: &CertifyOptions,
    progress: &Progress,
) -> Vec<CaseResult> {
    let RowRuntimes {
        first: runtime,
        wrap,
    } = runtimes;
    let run = Arc::new(ComponentRun {
        definition: definition.clone(),
        broker_version,
        broker: provisioned.broker.clone(),
        environment: CaseEnvironment::provisioned(provisioned.broker.clone(), definition)
            .wrapped(wrap.clone()),
        expectations: Expectations::load(&definition.source, &definition.name).unwrap_or_default(),
        options: options.clone(),
        progress: progress.clone(),
        state: tokio::sync::Mutex::new(LaneState {
            runtime: runtime.clone(),
            built: None,
            restarted_after: None,
        }),
        done: AtomicUsize::new(0),
        total: cases.len(),
        panics: Default::default(),
    });
    let jobs = options.jobs();
    let mut results = run.run_lane(in_lane(cases, Lane::Shared), jobs).await;
    // Timed cases mostly wait (for a delay, a TTL, a batch): twice as many at once.
    let timed_jobs = if jobs == 1 { 1 } else { 2 * jobs };
    results.extend(run.run_lane(in_lane(cases, Lane::Timed), timed_jobs).await);

    // Fault cases of a component whose broker the suite cannot fault (the auto order
    // chose a running server), or whose spawned broker keeps its data in memory (its
    // spec names other arguments for a broker that is killed), run on a second broker
    // the suite controls.
    let why_control = match &provisioned.broker {
        Some(broker) if !broker.can_fault() => Some("the run's broker cannot be faulted"),
        Some(_)
            if provisioned.kind == ProvisionKind::LocalProcess
                && provision::broker_spec(&definition.component_type)
                    .is_some_and(|spec| spec.durable_args.is_some()) =>
        {
            Some("the run's broker keeps its data in memory, the fault cases' keeps it across a kill")
        }
        _ => None,
    };
    let mut controlled: Option<Result<Controlled, String>> = None;
    for (index, case) in in_lane(cases, Lane::Exclusive) {
        // Over HTTP the fault cases kill, pause or cut the broker under sidecars whose
        // component the suite builds (`serve` in this process); a sidecar process
        // builds its own, which the suite cannot put behind a fault proxy or rebuild.
        if runtime.is_remote() && !case.injects.is_empty() && wrap.is_none() {
            let mut cell = errored(
                case,
                "not run over HTTP: a fault case kills, pauses or cuts the broker and builds the component again behind a fault proxy, and this row's sidecars build their component themselves (certify it through serve, --through-serve, for its fault cases over HTTP)".to_string(),
            );
            cell.status = Status::NotProvisioned;
            run.finished(case, &cell);
            results.push((index, cell));
            continue;
        }
        let wants_control =
            !case.injects.is_empty() && options.provision.is_none() && why_control.is_some();
        if wants_control {
            if controlled.is_none() {
                progress(
                    &definition.name,
                    &format!(
                        "{}: starting a broker the suite controls for the fault cases",
                        definition.name
                    ),
                );
                controlled = Some(Controlled::provision(definition, wrap.clone()).await);
            }
            if let Some(Ok(side)) = &mut controlled {
                let options = run_options_for(
                    options,
                    &run.expectations,
                    case,
                    side.version.as_deref(),
                    &definition.name,
                    1,
                );
                let mut result =
                    run_case_in(case, &side.runtime, &options, &side.environment).await;
                side.refresh(definition).await;
                if let Some(version) = side.version.as_deref() {
                    run.expectations.apply(&mut result, version);
                }
                result.evidence.notes.push(format!(
                    "run on a broker the suite controls, {}, since {}",
                    side.describe(),
                    why_control.unwrap_or_default()
                ));
                run.finished(case, &result);
                results.push((index, result));
                continue;
            }
        }
        let backlog_turn = if case.moves_a_backlog() {
            Some(backlog_turn(&definition.name, case, progress).await)
        } else {
            None
        };
        let mut result = run.run(case).await;
        drop(backlog_turn);
        if let (true, Some(Err(reason))) = (wants_control, &controlled) {
            result.evidence.notes.push(format!(
                "no broker the suite controls could be started for the fault cases: {reason}"
            ));
        }
        run.finished(case, &result);
        results.push((index, result));
    }
    if let Some(built) = run.state.lock().await.built.take() {
        built.retire().await;
    }
    if let Some(Ok(side)) = controlled {
        side.runtime.retire().await;
        side.broker.shutdown().await;
        if let Some(still) = side.broker.leftover().await {
            progress(
                &definition.name,
                &format!("cleanup: still running after shutdown (a suite defect): {still}"),
            );
        }
    }
    // A cell whose task panicked is ERROR, naming the panic.
    let panics = run.panics.lock().await.join("; ");
    for (index, case) in cases.iter().enumerate() {
        if !results.iter().any(|(i, _)| *i == index) {
            results.push((
                index,
                errored(
                    case,
                    format!("the case's task stopped: {panics} (a suite defect)"),
                ),
            ));
        }
    }
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, result)| result).collect()
}

/// One case that moves a backlog at a time in the whole run (the rows of a matrix
/// run at once): several would starve the harness they share.
static BACKLOG_TURN: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// How many cases of rows over the wire (`via serve`, sidecars, SDKs) run at once in
/// the whole run, timed ones aside: four per core. Each such case also drives the
/// sidecar and the app it delivers to, in this process, so it weighs several times an
/// in-process case: at `--jobs 8`, seven rows at once over `serve` (56 such cases on 2
/// cores) slowed deliveries fortyfold, and cases missed their bounds with nothing wrong
/// in the component or the path (2026-12-05).
static WIRE_CASES: std::sync::LazyLock<tokio::sync::Semaphore> = std::sync::LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::sync::Semaphore::new(4 * cores)
});

/// Waits for the run's turn to move a backlog, saying so when another row has it.
async fn backlog_turn(
    row: &str,
    case: &Case,
    progress: &Progress,
) -> tokio::sync::SemaphorePermit<'static> {
    if let Ok(permit) = BACKLOG_TURN.try_acquire() {
        return permit;
    }
    progress(
        row,
        &format!(
            "{row}: {} waits while another row moves its backlog (one at a time)",
            case.id
        ),
    );
    BACKLOG_TURN
        .acquire()
        .await
        .expect("the backlog semaphore is never closed")
}

/// The cases of one lane, with their indices in the run; in the exclusive lane the
/// cases that move a backlog come last, so that a row waiting for its turn to move
/// one has run everything else.
fn in_lane(cases: &[&'static Case], lane: Lane) -> Vec<(usize, &'static Case)> {
    let mut chosen = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        if case.lane == lane || (lane == Lane::Exclusive && case.lane.is_exclusive()) {
            chosen.push((index, *case));
        }
    }
    chosen.sort_by_key(|(_, case)| case.moves_a_backlog());
    chosen
}

/// How many cells have each status, worst first, e.g. `2 FAIL, 70 PASS`.
fn tally(results: &[CaseResult]) -> String {
    let mut counts: Vec<(Status, usize)> = Vec::new();
    for result in results {
        match counts.iter_mut().find(|(s, _)| *s == result.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((result.status, 1)),
        }
    }
    counts.sort_by_key(|(s, _)| std::cmp::Reverse(s.severity()));
    counts
        .iter()
        .map(|(s, n)| format!("{n} {}", s.label()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An ERROR cell for a case that could not finish.
fn errored(case: &Case, note: String) -> CaseResult {
    let mut cell = crate::runner::unfinished_cell(case, 0);
    cell.evidence.notes.push(note);
    cell
}

/// The run options for `case`: a cell the expectations file predicts to FAIL is not
/// run again (a rerun only proves the known defect twice); histories go to the run's
/// report directory as `component`'s, run `run_number`.
fn run_options_for(
    options: &CertifyOptions,
    expectations: &Expectations,
    case: &Case,
    broker_version: Option<&str>,
    component: &str,
    run_number: u32,
) -> RunOptions {
    let expected = broker_version.is_some_and(|v| expectations.for_cell(case.id, v).is_some());
    RunOptions {
        retries: if expected { 0 } else { options.run.retries },
        seed: options.run.seed,
        save: options.histories.as_ref().map(|dir| crate::runner::SaveTo {
            dir: dir.clone(),
            component: component.to_string(),
            run: run_number,
        }),
    }
}

/// One cell from the runs of a repeated case: PASS when every run passed, FLAKY
/// when some did, otherwise the runs' common status; the evidence of the first run
/// that did not pass (else the first), and how many passed.
fn combine_runs(mut results: Vec<CaseResult>) -> CaseResult {
    if results.len() == 1 {
        return results.remove(0);
    }
    let statuses: Vec<Status> = results.iter().map(|r| r.status).collect();
    let passes = statuses.iter().filter(|s| **s == Status::Pass).count() as u32;
    let shown = results
        .iter()
        .position(|r| r.status != Status::Pass)
        .unwrap_or(0);
    let duration: u64 = results.iter().map(|r| r.duration_ms).sum();
    let attempts: u32 = results.iter().map(|r| r.attempts).sum();
    let mut cell = results.swap_remove(shown);
    cell.status = crate::replay::repeated_status(&statuses);
    cell.duration_ms = duration;
    cell.attempts = attempts;
    cell.runs = Some(pubsub_reports::Runs {
        runs: statuses.len() as u32,
        passes,
    });
    if cell.status != Status::Pass {
        cell.evidence.notes.push(format!(
            "passed {passes} of {} runs; the evidence is from run {}",
            statuses.len(),
            shown + 1
        ));
    }
    cell
}

/// A broker the suite controls (a local process, else a container), with the
/// component built on it, for the fault cases.
struct Controlled {
    runtime: RowRuntime,
    environment: CaseEnvironment,
    broker: std::sync::Arc<dyn Broker>,
    version: Option<String>,
}

impl Controlled {
    async fn provision(
        definition: &ComponentDefinition,
        wrap: Option<RuntimeWrapper>,
    ) -> Result<Self, String> {
        let order = provision::faults_order(&definition.component_type, None);
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
        let environment =
            CaseEnvironment::provisioned(provisioned.broker.clone(), definition).wrapped(wrap);
        let runtime = environment
            .runtime_for(definition.name.clone(), provisioned.component.clone())
            .await?;
        Ok(Controlled {
            runtime,
            environment,
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
                if let Ok(runtime) = self
                    .environment
                    .runtime_for(definition.name.clone(), component)
                    .await
                {
                    std::mem::replace(&mut self.runtime, runtime).retire().await;
                }
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
        broker_axis: versions::axis_of(definition),
    }
}

/// The published crate a registered (third-party) type adapts.
fn third_party(definition: &ComponentDefinition) -> Option<String> {
    pubsub_components::registry::third_party(&definition.component_type).map(str::to_string)
}

fn not_provisioned(
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
fn uniform_report(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cases_that_move_a_backlog_come_last_in_the_exclusive_lane() {
        let cases: Vec<&'static Case> = catalogue().iter().collect();
        let exclusive = in_lane(&cases, Lane::Exclusive);
        let backlog: Vec<&str> = exclusive
            .iter()
            .skip_while(|(_, case)| !case.moves_a_backlog())
            .map(|(_, case)| case.id)
            .collect();
        assert_eq!(
            backlog,
            ["certification.backlog", "certification.long-drain"],
            "{:?}",
            exclusive.iter().map(|(_, c)| c.id).collect::<Vec<_>>()
        );
        // Every other exclusive case keeps the catalogue's order before them.
        let others: Vec<usize> = exclusive
            .iter()
            .filter(|(_, case)| !case.moves_a_backlog())
            .map(|(index, _)| *index)
            .collect();
        assert!(others.windows(2).all(|w| w[0] < w[1]));
        assert!(exclusive.len() > backlog.len());
    }

    #[tokio::test]
    async fn one_backlog_at_a_time_in_the_whole_run() {
        let case = catalogue()
            .iter()
            .find(|c| c.id == "certification.long-drain")
            .unwrap();
        let said = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let heard = said.clone();
        let progress: Progress = Arc::new(move |_, line| heard.lock().unwrap().push(line.into()));
        let first = backlog_turn("row a", case, &progress).await;
        let second = tokio::spawn({
            let progress = progress.clone();
            async move {
                let _turn = backlog_turn("row b", case, &progress).await;
            }
        });
        // The second row waits while the first holds the turn...
        tokio::task::yield_now().await;
        assert!(
            tokio::time::timeout(Duration::from_millis(200), async {
                while said.lock().unwrap().is_empty() {
                    tokio::task::yield_now().await;
                }
            })
            .await
            .is_ok(),
            "the waiting row says it waits"
        );
        assert!(!second.is_finished());
        assert_eq!(
            said.lock().unwrap()[0],
            "row b: certification.long-drain waits while another row moves its backlog (one at a time)"
        );
        // ... and gets it once the first is done.
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second row gets its turn")
            .unwrap();
    }
}
