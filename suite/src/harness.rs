//! Runs the catalogue as a test binary: one test per case, named by its id, listable,
//! filterable and run in parallel by nextest (through `libtest-mimic`).
//!
//! A component author adds `pubsub-conformance` as a dev-dependency, a test target
//! with `harness = false`, and one call:
//!
//! ```no_run
//! use std::sync::Arc;
//! use pubsub_conformance::components::{memory::MemoryComponent, Component};
//!
//! fn main() {
//!     pubsub_conformance::harness::run_catalogue("my-component", || async {
//!         Ok(Arc::new(MemoryComponent::default()) as Arc<dyn Component>)
//!     });
//! }
//! ```

use crate::catalogue::{catalogue, Case};
use crate::expectations::Expectations;
use crate::provision::ProvisionKind;
use crate::runner::{run_case_in, CaseEnvironment, RunOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::{CaseResult, Status};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Runs every case against components made by `build` (one per case) and exits.
pub fn run_catalogue<F, Fut>(name: &str, build: F) -> !
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Component>, String>> + Send,
{
    run_catalogue_expecting(name, None, build)
}

/// Like [`run_catalogue`], with the expected failures of the broker or library the
/// component wraps read from `expectations` (a YAML file as in
/// `fixtures/expectations/`; see [`Expectations`]).
pub fn run_catalogue_expecting<F, Fut>(name: &str, expectations: Option<&Path>, build: F) -> !
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Component>, String>> + Send,
{
    init_logging();
    let expectations = match expectations.map(Expectations::load_file).transpose() {
        Ok(loaded) => loaded.map(Arc::new),
        Err(e) => {
            eprintln!("{e:#}");
            std::process::exit(2)
        }
    };
    let build = Arc::new(build);
    run_selected(trials(
        name,
        None,
        move |_| {
            let build = build.clone();
            async move {
                build()
                    .await
                    .map(|component| (component, CaseEnvironment::default()))
            }
        },
        false,
        None,
        expectations,
    ))
}

/// What the runner knows of the broker behind a component: watched while a case
/// runs, faulted by fault cases, stopped after it.
type BrokerHandle = CaseEnvironment;

/// Runs the trials the command line selects, as `cargo test` does: any number of name
/// filters (a trial runs when its name contains one, or equals one with `--exact`)
/// besides libtest's flags. `-- delay ttl` runs both families.
fn run_selected(trials: Vec<Trial>) -> ! {
    let (arguments, filters) = parse_arguments(std::env::args());
    let selected = select(trials, &filters, arguments.exact);
    let several = selected.iter().filter(|t| !t.has_ignored_flag()).count() > 1 && !arguments.list;
    let conclusion = libtest_mimic::run(&arguments, selected);
    // One trial per process (nextest) has nothing to sum up; `cargo test` runs many.
    if several {
        summarize();
    }
    conclusion.exit()
}

/// Every cell this process judged, by component, for the summary at the end.
static CELLS: std::sync::Mutex<Vec<(String, CaseResult)>> = std::sync::Mutex::new(Vec::new());

fn keep(component: &str, result: &CaseResult) {
    CELLS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((component.to_string(), result.clone()));
}

/// Where the harness writes its report: `PUBSUB_REPORT_DIR`, else
/// `target/pubsub-conformance` under the working directory.
fn report_dir() -> PathBuf {
    std::env::var_os("PUBSUB_REPORT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/pubsub-conformance"))
}

/// Ends a run as `certify` does: the verdict counts per component and the report's
/// path (the report holds every cell this process judged, with its evidence).
fn summarize() {
    let cells = std::mem::take(&mut *CELLS.lock().unwrap_or_else(|p| p.into_inner()));
    if cells.is_empty() {
        return;
    }
    let mut components: Vec<pubsub_reports::ComponentReport> = Vec::new();
    for (name, cell) in cells {
        match components.iter_mut().find(|c| c.name == name) {
            Some(c) => c.cases.push(cell),
            None => components.push(pubsub_reports::ComponentReport {
                name: name.clone(),
                component_type: String::new(),
                definition: String::new(),
                provisioning: pubsub_reports::Provisioning {
                    kind: "harness".into(),
                    endpoint: None,
                    broker_version: None,
                    problem: None,
                    unsupported_broker: None,
                },
                capabilities: serde_json::Value::Null,
                cases: vec![cell],
                third_party: None,
                broker_axis: None,
            }),
        }
    }
    let order: Vec<&str> = catalogue().iter().map(|c| c.id).collect();
    for component in &mut components {
        component
            .cases
            .sort_by_key(|c| order.iter().position(|id| *id == c.id));
    }
    let report = pubsub_reports::RunReport {
        schema_version: pubsub_reports::SCHEMA_VERSION,
        suite_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: crate::certify::now_text(),
        finished_at: crate::certify::now_text(),
        machine: crate::certify::machine(),
        components,
        conflicts: Vec::new(),
        bench: Vec::new(),
        baseline: None,
    };
    print!("{}", pubsub_reports::summary_table(&report));
    let dir = report_dir();
    match pubsub_reports::write_all(&report, &dir) {
        Ok(()) => println!("report: {}", dir.join("index.html").display()),
        Err(e) => println!("the report could not be written to {}: {e}", dir.display()),
    }
}

/// libtest's arguments, and the name filters when there are several (libtest-mimic
/// takes one; a single filter stays with it).
fn parse_arguments(args: impl Iterator<Item = String>) -> (Arguments, Vec<String>) {
    const WITH_VALUE: [&str; 5] = [
        "--skip",
        "--format",
        "--color",
        "--logfile",
        "--test-threads",
    ];
    let mut args = args.peekable();
    let mut flags: Vec<String> = args.next().into_iter().collect();
    let mut filters = Vec::new();
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            flags.push(arg);
            flags.extend(args.next());
        } else if arg.starts_with('-') {
            flags.push(arg);
        } else {
            filters.push(arg);
        }
    }
    let mut arguments = Arguments::from_iter(flags);
    if filters.len() == 1 {
        arguments.filter = filters.pop();
    }
    (arguments, filters)
}

/// The trials whose names match one of `filters` (all when there are none).
fn select(trials: Vec<Trial>, filters: &[String], exact: bool) -> Vec<Trial> {
    if filters.is_empty() {
        return trials;
    }
    trials
        .into_iter()
        .filter(|trial| {
            filters.iter().any(|filter| {
                if exact {
                    trial.name() == filter
                } else {
                    trial.name().contains(filter.as_str())
                }
            })
        })
        .collect()
}

/// One trial per case, named by its id (after `prefix/` when given). Without a broker
/// the suite can fault (`faultable` false: in process, or built in code), the cases
/// that inject faults are left out, and a line says so (`certify` reports them NOT
/// PROVISIONED with the reason). With a broker that needs one but a provisioning order
/// that cannot fault it (`unfaultable`, the reason: an external broker only), the
/// fault cases are ignored trials, named on stderr with the reason, unless asked for
/// (`--include-ignored`). Expected failures come from the definition's file, else
/// from `expected` when given.
fn trials<F, Fut>(
    name: &str,
    prefix: Option<&str>,
    build: F,
    faultable: bool,
    unfaultable: Option<String>,
    expected: Option<Arc<Expectations>>,
) -> Vec<Trial>
where
    F: Fn(&'static Case) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Arc<dyn Component>, BrokerHandle), String>> + Send,
{
    let build = Arc::new(build);
    if let Some(why) = &unfaultable {
        let ignored: Vec<&str> = catalogue()
            .iter()
            .filter(|c| !c.injects.is_empty())
            .map(|c| c.id)
            .collect();
        eprintln!(
            "{name}: {} cases that inject broker or network faults are ignored: {why}. They are left out of the pass/fail count; `-- --include-ignored` runs them (each NOT PROVISIONED, naming why), and PUBSUB_PROVISION=local,container gives them a broker the suite controls: {}",
            ignored.len(),
            ignored.join(", ")
        );
    }
    let left_out: Vec<&str> = catalogue()
        .iter()
        .filter(|c| !faultable && !c.injects.is_empty())
        .map(|c| c.id)
        .collect();
    if !left_out.is_empty() {
        eprintln!(
            "{name}: {} cases that inject broker or network faults are not run (no broker the suite can fault): {}",
            left_out.len(),
            left_out.join(", ")
        );
    }
    catalogue()
        .iter()
        .filter(|c| faultable || c.injects.is_empty())
        .map(|case| {
            let build = build.clone();
            let name = name.to_string();
            let expected = expected.clone();
            let trial_name = match prefix {
                Some(prefix) => format!("{prefix}/{}", case.id),
                None => case.id.to_string(),
            };
            let name_for_report = name.clone();
            let ignored = !case.injects.is_empty() && unfaultable.is_some();
            Trial::test(trial_name, move || {
                let tokio = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Failed::from(format!("cannot start tokio: {e}")))?;
                let result = tokio.block_on(async {
                    let (component, environment) = build(case)
                        .await
                        .map_err(|e| Failed::from(format!("cannot build the component: {e}")))?;
                    let version = component.version_text().await.ok();
                    let runtime = Runtime::new(name, component);
                    let expectations = match &environment.definition {
                        Some(definition) => {
                            Expectations::load(&definition.source, &definition.name)
                                .map_err(|e| Failed::from(format!("{e:#}")))?
                        }
                        None => expected.as_deref().cloned().unwrap_or_default(),
                    };
                    // A listed case runs once: a rerun only proves the known defect
                    // twice, or turns an intermittent one into FLAKY.
                    let listed = version
                        .as_deref()
                        .is_some_and(|v| expectations.entry(case.id, v).is_some());
                    // This cell's attempts only: the file of an earlier run is replaced, not
                    // appended to, so that `check` judges what the report says.
                    let _ = std::fs::remove_file(crate::replay::history_path(
                        &report_dir(),
                        &name_for_report,
                        case.id,
                    ));
                    let options = RunOptions {
                        retries: if listed {
                            0
                        } else {
                            RunOptions::default().retries
                        },
                        // Kept as certify keeps them, so that `check` can judge the
                        // report's cells again.
                        save: Some(crate::runner::SaveTo {
                            dir: report_dir(),
                            component: name_for_report.clone(),
                            run: 1,
                        }),
                        ..RunOptions::default()
                    };
                    let mut result = run_case_in(case, &runtime, &options, &environment).await;
                    if let Some(version) = &version {
                        expectations.apply(&mut result, version);
                    }
                    drop(runtime);
                    if let Some(broker) = &environment.broker {
                        broker.shutdown().await;
                    }
                    Ok::<_, Failed>(result)
                })?;
                keep(&name_for_report, &result);
                verdict(&result)
            })
            .with_kind(case.level.name())
            .with_ignored_flag(ignored)
        })
        .collect()
}

/// Runs every case against the component defined in `fixtures/<name>.yaml` of this
/// repository, provisioned the way `certify` does it (in the order `PUBSUB_PROVISION`
/// names, e.g. `container,local,external`, else the auto order).
pub fn run_fixture(name: &str) -> ! {
    run_fixture_with(name, None)
}

/// Like [`run_fixture`], with the provisioning order given (`None`: as
/// `PUBSUB_PROVISION` says, else auto).
pub fn run_fixture_with(name: &str, order: Option<Vec<ProvisionKind>>) -> ! {
    init_logging();
    let (label, build, faultable, unfaultable) = fixture_builder(&fixture_path(name), order);
    run_selected(trials(&label, None, build, faultable, unfaultable, None))
}

/// Runs every case against each named fixture in one test binary, trials named
/// `<fixture>/<case id>`, with the provisioning order given (`None`: as
/// `PUBSUB_PROVISION` says, else auto).
pub fn run_fixtures_with(names: &[&str], order: Option<Vec<ProvisionKind>>) -> ! {
    init_logging();
    let mut all = Vec::new();
    for name in names {
        let (label, build, faultable, unfaultable) =
            fixture_builder(&fixture_path(name), order.clone());
        all.extend(trials(
            &label,
            Some(name),
            build,
            faultable,
            unfaultable,
            None,
        ));
    }
    run_selected(all)
}

/// Runs every case against each definition file given, in one test binary, trials
/// named `<metadata.name>/<case id>`: how a crate outside this repository certifies
/// its own component types (registered with
/// [`pubsub_components::registry::register`]) on the brokers this suite provisions,
/// with their expected failures in `expectations/<name>.yaml` beside each file.
pub fn run_definitions(files: &[PathBuf]) -> ! {
    init_logging();
    let order = match crate::provision::order_from_environment() {
        Ok(order) => order,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let mut all = Vec::new();
    for file in files {
        let (label, build, faultable, unfaultable) = fixture_builder(file, order.clone());
        let prefix = label.clone();
        all.extend(trials(
            &label,
            Some(&prefix),
            build,
            faultable,
            unfaultable,
            None,
        ));
    }
    run_selected(all)
}

/// `fixtures/<name>.yaml` of this repository.
fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(format!("{name}.yaml"))
}

type Built = Result<(Arc<dyn Component>, BrokerHandle), String>;

/// The label and the per-case builder of `fixtures/<name>.yaml`, whether its broker
/// can be faulted, and why not when the order given cannot give it a broker the suite
/// controls; exits on a bad definition or provisioning order. Cases that inject
/// faults get a broker the suite controls (a local process, else a container) unless
/// an order is given.
fn fixture_builder(
    path: &std::path::Path,
    order: Option<Vec<ProvisionKind>>,
) -> (
    String,
    impl Fn(&'static Case) -> futures::future::BoxFuture<'static, Built> + Send + Sync + 'static,
    bool,
    Option<String>,
) {
    let order = match order {
        Some(order) => Some(order),
        None => match crate::provision::order_from_environment() {
            Ok(order) => order,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2)
            }
        },
    };
    let order = Arc::new(order);
    let definition = match ComponentDefinition::from_file(path) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let label = definition.name.clone();
    let faultable = crate::provision::needs_broker(&definition.component_type);
    let unfaultable = match order.as_deref() {
        Some(kinds)
            if faultable
                && !kinds.iter().any(|k| {
                    matches!(k, ProvisionKind::LocalProcess | ProvisionKind::Container)
                }) =>
        {
            Some(format!(
                "the provisioning order ({}) has no broker the suite can kill, pause or cut off",
                kinds
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ))
        }
        _ => None,
    };
    let build = move |case: &'static Case| {
        let definition = definition.clone();
        let order = order.clone();
        Box::pin(async move {
            let order = if case.injects.is_empty() {
                crate::provision::order_for(&definition.component_type, order.as_deref())
            } else {
                crate::provision::faults_order(&definition.component_type, order.as_deref())
            };
            match crate::provision::provision(&definition, &order).await {
                Ok(provisioned) => Ok((
                    provisioned.component,
                    CaseEnvironment::provisioned(provisioned.broker, &definition),
                )),
                Err(reasons) => Err(format!(
                    "NOT PROVISIONED: {}",
                    reasons
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
            }
        }) as futures::future::BoxFuture<'static, Built>
    };
    (label, build, faultable, unfaultable)
}

/// PASS and UNSUPPORTED (refusal verified) pass the test; every other verdict fails it
/// with the evidence.
fn verdict(result: &CaseResult) -> Result<(), Failed> {
    if result.is_expected_failure() {
        println!(
            "{}: EXPECTED FAIL ({})",
            result.id,
            result.expected_failure.as_deref().unwrap_or_default()
        );
        return Ok(());
    }
    if result.passes_unexpectedly() {
        return Err(Failed::from(format!(
            "{} PASSES but is listed as an expected failure: remove its entry ({})",
            result.id,
            result.expected_failure.as_deref().unwrap_or_default()
        )));
    }
    match result.status {
        Status::Pass => Ok(()),
        Status::Unsupported => {
            println!(
                "{}: UNSUPPORTED ({})",
                result.id,
                result.evidence.notes.join("; ")
            );
            Ok(())
        }
        _ => Err(Failed::from(describe(result))),
    }
}

/// The evidence of a cell as text.
pub fn describe(result: &CaseResult) -> String {
    let mut text = format!(
        "{} {}\nMUST: {}\n",
        result.status.label(),
        result.id,
        result.must
    );
    for (title, lines) in [
        ("findings", &result.evidence.findings),
        ("warnings", &result.evidence.warnings),
        ("notes", &result.evidence.notes),
        ("history", &result.evidence.history),
        ("logs", &result.evidence.logs),
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

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_test_writer()
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> + '_ {
        std::iter::once("memory".to_string()).chain(line.split_whitespace().map(str::to_string))
    }

    fn names(trials: &[Trial]) -> Vec<&str> {
        trials.iter().map(Trial::name).collect()
    }

    fn trials() -> Vec<Trial> {
        [
            "delay.deliver-at",
            "ttl.live-delivered",
            "retry.delay",
            "publish.delivery",
        ]
        .into_iter()
        .map(|name| Trial::test(name, || Ok(())))
        .collect()
    }

    #[test]
    fn several_name_filters_select_every_match() {
        let (arguments, filters) = parse_arguments(args("delay ttl --test-threads 2 --nocapture"));
        assert_eq!(filters, ["delay", "ttl"]);
        assert_eq!(arguments.test_threads, Some(2));
        assert!(arguments.nocapture);
        let selected = select(trials(), &filters, arguments.exact);
        assert_eq!(
            names(&selected),
            ["delay.deliver-at", "ttl.live-delivered", "retry.delay"]
        );
    }

    #[test]
    fn one_filter_stays_with_libtest_and_exact_matches_whole_names() {
        let (arguments, filters) = parse_arguments(args("--exact retry.delay"));
        assert!(filters.is_empty());
        assert_eq!(arguments.filter.as_deref(), Some("retry.delay"));
        let (arguments, filters) = parse_arguments(args("--exact retry.delay publish.delivery"));
        let selected = select(trials(), &filters, arguments.exact);
        assert_eq!(names(&selected), ["retry.delay", "publish.delivery"]);
    }
}
