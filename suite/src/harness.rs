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
use crate::runner::{run_case, RunOptions};
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
        async move { build().await.map(|component| (component, None)) }
    })
}

/// Something that keeps a component's broker alive while a case runs.
type Guard = Option<Box<dyn Send + Sync>>;

fn run_trials<F, Fut>(name: &str, build: F) -> !
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(Arc<dyn Component>, Guard), String>> + Send,
{
    init_logging();
    let arguments = Arguments::from_args();
    let build = Arc::new(build);
    let trials = catalogue()
        .iter()
        .map(|case| {
            let build = build.clone();
            let name = name.to_string();
            Trial::test(case.id, move || {
                let tokio = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .map_err(|e| Failed::from(format!("cannot start tokio: {e}")))?;
                let result = tokio.block_on(async {
                    let (component, _guard) = build()
                        .await
                        .map_err(|e| Failed::from(format!("cannot build the component: {e}")))?;
                    let runtime = Runtime::new(name, component);
                    Ok::<_, Failed>(run_case(case, &runtime, &RunOptions::default()).await)
                })?;
                verdict(&result)
            })
            .with_kind(case.level.name())
        })
        .collect();
    libtest_mimic::run(&arguments, trials).exit()
}

/// Runs every case against the component defined in `fixtures/<name>.yaml` of this
/// repository, provisioned the way `certify` does it.
pub fn run_fixture(name: &str) -> ! {
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
    run_trials(&label, move || {
        let definition = definition.clone();
        async move {
            let order = crate::provision::auto_order(&definition.component_type);
            match crate::provision::provision(&definition, &order).await {
                Ok(provisioned) => Ok((provisioned.component, provisioned.guard)),
                Err(reasons) => Err(format!(
                    "NOT PROVISIONED: {}",
                    reasons
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
            }
        }
    })
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
