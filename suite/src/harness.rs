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

use crate::catalogue::catalogue;
use crate::provision::ProvisionKind;
use crate::runner::{run_case_in, CaseEnvironment, RunOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use pubsub_components::config::ComponentDefinition;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use pubsub_reports::{CaseResult, Status};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

/// Runs every case against components made by `build` (one per case) and exits.
pub fn run_catalogue<F, Fut>(name: &str, build: F) -> !
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Component>, String>> + Send,
{
    let build = Arc::new(build);
    run_trials(name, move || {
        let build = build.clone();
        async move {
            build()
                .await
                .map(|component| (component, CaseEnvironment::default()))
        }
    })
}

/// What the runner knows of the broker behind a component: watched while a case
/// runs, faulted by fault cases, stopped after it.
type BrokerHandle = CaseEnvironment;

fn run_trials<F, Fut>(name: &str, build: F) -> !
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Arc<dyn Component>, BrokerHandle), String>> + Send,
{
    init_logging();
    let arguments = Arguments::from_args();
    libtest_mimic::run(&arguments, trials(name, None, build)).exit()
}

/// One trial per case, named by its id (after `prefix/` when given).
fn trials<F, Fut>(name: &str, prefix: Option<&str>, build: F) -> Vec<Trial>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Arc<dyn Component>, BrokerHandle), String>> + Send,
{
    let build = Arc::new(build);
    catalogue()
        .iter()
        .map(|case| {
            let build = build.clone();
            let name = name.to_string();
            let trial_name = match prefix {
                Some(prefix) => format!("{prefix}/{}", case.id),
                None => case.id.to_string(),
            };
            Trial::test(trial_name, move || {
                let tokio = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Failed::from(format!("cannot start tokio: {e}")))?;
                let result = tokio.block_on(async {
                    let (component, environment) = build()
                        .await
                        .map_err(|e| Failed::from(format!("cannot build the component: {e}")))?;
                    let runtime = Runtime::new(name, component);
                    let result =
                        run_case_in(case, &runtime, &RunOptions::default(), &environment).await;
                    drop(runtime);
                    if let Some(broker) = &environment.broker {
                        broker.shutdown().await;
                    }
                    Ok::<_, Failed>(result)
                })?;
                verdict(&result)
            })
            .with_kind(case.level.name())
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
    let arguments = Arguments::from_args();
    let (label, build) = fixture_builder(name, order);
    libtest_mimic::run(&arguments, trials(&label, None, build)).exit()
}

/// Runs every case against each named fixture in one test binary, trials named
/// `<fixture>/<case id>`, with the provisioning order given (`None`: as
/// `PUBSUB_PROVISION` says, else auto).
pub fn run_fixtures_with(names: &[&str], order: Option<Vec<ProvisionKind>>) -> ! {
    init_logging();
    let arguments = Arguments::from_args();
    let mut all = Vec::new();
    for name in names {
        let (label, build) = fixture_builder(name, order.clone());
        all.extend(trials(&label, Some(name), build));
    }
    libtest_mimic::run(&arguments, all).exit()
}

type Built = Result<(Arc<dyn Component>, BrokerHandle), String>;

/// The label and the per-case builder of `fixtures/<name>.yaml`; exits on a bad
/// definition or provisioning order.
fn fixture_builder(
    name: &str,
    order: Option<Vec<ProvisionKind>>,
) -> (
    String,
    impl Fn() -> futures::future::BoxFuture<'static, Built> + Send + Sync + 'static,
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
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(format!("{name}.yaml"));
    let definition = match ComponentDefinition::from_file(&path) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2)
        }
    };
    let label = definition.name.clone();
    let build = move || {
        let definition = definition.clone();
        let order = order.clone();
        Box::pin(async move {
            let order = crate::provision::order_for(&definition.component_type, order.as_deref());
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
    (label, build)
}

/// PASS and UNSUPPORTED (refusal verified) pass the test; every other verdict fails it
/// with the evidence.
fn verdict(result: &CaseResult) -> Result<(), Failed> {
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
