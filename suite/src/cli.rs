//! The `pubsub-conformance` command line: `certify`, `merge`, `bench`, `check`,
//! `serve` and `list`.
//! A library function, so that a crate with its own component types (a third-party
//! adapter that registers them) offers the same command line from its own binary.

use crate::bench::{bench_component, bench_table, BenchOptions};
use crate::catalogue::{catalogue, Level};
use crate::certify::{
    certify, load_definitions, machine, now_text, select_definitions, CertifyOptions, Progress,
    Selection,
};
use crate::progress::Board;
use crate::provision::versions::{self, AxisPoint, VersionSelection};
use crate::provision::{
    order_from_environment as provision_from_environment, own_broker_order, provision,
    ProvisionKind,
};
use crate::reports::{self, RunReport};
use crate::runner::RunOptions;
use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use pubsub_components::config::ComponentDefinition;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "pubsub-conformance",
    version,
    about = "Conformance and certification suite for pub/sub components"
)]
struct Cli {
    /// Also show the components' and client libraries' logs on the terminal (they
    /// always go to the run's log file, `<out>/run.log`).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Certify components against the catalogue and write the report.
    Certify {
        /// A component name (metadata.name of a fixture); repeatable. Default: all.
        #[arg(long = "component", value_name = "NAME")]
        components: Vec<String>,
        /// Only cases whose id matches this glob, e.g. 'bulk-*'.
        #[arg(long = "case", value_name = "GLOB")]
        case: Option<String>,
        /// Only cases up to this level.
        #[arg(long, value_parser = parse_level)]
        level: Option<Level>,
        /// Where the report goes.
        #[arg(long, default_value = "reports/latest")]
        out: PathBuf,
        /// Where component definitions are read from.
        #[arg(long, default_value = "fixtures")]
        fixtures: PathBuf,
        /// Extra runs of a failing case (a later pass is reported FLAKY).
        #[arg(long, default_value_t = 1)]
        retries: u32,
        /// Run each selected case N times and report, per cell, how many runs passed
        /// (PASS only when all did; FLAKY when some did): flake rates, measured.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
        repeat: u32,
        /// Also certify each component through `serve`, over Dapr's HTTP API (a row
        /// `<component> via serve`) and over its gRPC API (`<component> via serve over
        /// gRPC`), beside the in-process row, on the same broker.
        #[cfg(feature = "sidecar")]
        #[arg(long)]
        through_serve: bool,
        /// Also certify each component through sidecars started from this command
        /// line (a row `<component> via sidecar`), one per app: `{app_port}`,
        /// `{http_port}`, `{grpc_port}`, `{app_id}`, each `{free_port}` and
        /// `{components_dir}` (holding the component's definition) are replaced. Needs
        /// --provision external.
        #[cfg(feature = "sidecar")]
        #[arg(long, value_name = "COMMAND")]
        sidecar_command: Option<String>,
        /// How the suite talks to the sidecars of --sidecar-command and --sidecar: over
        /// Dapr's HTTP API, or over its gRPC API (rows `<component> via sidecar over
        /// gRPC`, `<component> via attached sidecar over gRPC`): the suite publishes
        /// through their gRPC API (`{grpc_port}`, --sidecar-grpc) and its apps answer
        /// Dapr's app callbacks, so the sidecars run with the gRPC app protocol.
        #[cfg(feature = "sidecar")]
        #[arg(long, value_enum, default_value_t = SidecarProtocol::Http)]
        sidecar_protocol: SidecarProtocol,
        #[cfg(feature = "sidecar")]
        #[command(flatten)]
        attach: crate::through_serve::AttachArgs,
        /// Also certify each component through `serve` with Dapr's JavaScript SDK
        /// (`@dapr/dapr`, as scripts/install.sh installs it in sdk/js) on each side:
        /// a row `<component> via @dapr/dapr client` (its DaprClient publishes), a row
        /// `<component> via @dapr/dapr server` (its DaprServer subscribes) and a row
        /// `<component> via @dapr/dapr client over gRPC` (its DaprClient publishes in
        /// its gRPC mode).
        #[cfg(feature = "sidecar")]
        #[arg(long)]
        js_sdk: bool,
        /// Also certify each component through `serve` over gRPC with Dapr's Python SDK
        /// (`dapr` from PyPI, as scripts/install.sh installs it in sdk/python/.venv) on
        /// each side: a row `<component> via dapr Python client` (its DaprClient
        /// publishes) and a row `<component> via dapr Python app` (its
        /// dapr.ext.grpc.App subscribes).
        #[cfg(feature = "sidecar")]
        #[arg(long)]
        python_sdk: bool,
        /// Also certify each component through `serve` over gRPC with Dapr's Rust SDK's
        /// client (the `dapr` crate, built in) publishing: a row `<component> via dapr
        /// Rust client` (it has no bulk publish: those cases are UNSUPPORTED).
        #[cfg(feature = "sidecar")]
        #[arg(long)]
        rust_sdk: bool,
        /// Seed for generated inputs (default: derived from each case id).
        #[arg(long)]
        seed: Option<u64>,
        /// Run the cases of per-group operations without their bystander group (by
        /// default a second group on their topics must get every message as if it
        /// were alone: docs/catalogue.md#dimensions)
        #[arg(long)]
        no_bystander: bool,
        /// Provisioning kinds to try, in order, e.g. 'container,local,external'
        /// (default: each broker's auto order; also PUBSUB_PROVISION).
        #[arg(long, value_name = "ORDER", value_parser = parse_order)]
        provision: Option<ProvisionOrder>,
        /// Certify each component once per broker version, each in its own container
        /// (a row `<component> on <broker> <version> (<Debian release>)`): 'all' (every version Debian's
        /// releases carry, and Valkey for Redis Streams), or a list of versions,
        /// Debian releases or broker@release, e.g. '3.10.8,4.0.5' or 'valkey@forky'.
        /// A missing image is built first (scripts/images.sh). Components without a
        /// versioned broker are certified once.
        #[arg(long, value_name = "VERSIONS")]
        broker_versions: Option<crate::provision::versions::VersionSelection>,
        /// When a broker dies mid-run, restart it and run the remaining cases (default:
        /// they are ERROR, naming how it died).
        #[arg(long)]
        restart_broker: bool,
        /// Exit non-zero when a component could not be provisioned (for CI, where every
        /// broker is expected); by default NOT PROVISIONED is reported, not a failure.
        #[arg(long)]
        fail_not_provisioned: bool,
        /// Components certified at once, and cases of one component run at once
        /// (timing-sensitive cases keep their own lane, fault cases run alone, and the
        /// cases that move a backlog one at a time in the whole run);
        /// 1 runs everything one after another.
        #[arg(long, default_value_t = DEFAULT_JOBS, value_parser = clap::value_parser!(u16).range(1..=64))]
        jobs: u16,
        /// A report.json of an earlier run: every cell that changed since is marked in
        /// the report, regressions first.
        #[arg(long, value_name = "REPORT_JSON")]
        baseline: Option<PathBuf>,
        /// With --baseline: the exit code says whether a cell regressed (failures
        /// already in the baseline do not fail the run).
        #[arg(long, requires = "baseline")]
        fail_on_regression: bool,
    },
    /// Merge the report.json of several runs (CI shards) into one report.
    Merge {
        /// The report.json files to merge.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Where the merged report goes.
        #[arg(long, default_value = "reports/merged")]
        out: PathBuf,
        /// A report.json of an earlier run to compare the merged report with.
        #[arg(long, value_name = "REPORT_JSON")]
        baseline: Option<PathBuf>,
        /// With --baseline: the exit code says whether a cell regressed.
        #[arg(long, requires = "baseline")]
        fail_on_regression: bool,
    },
    /// Measure throughput (single vs bulk, emulated vs native) and latency; the results
    /// are added to the report in --out.
    Bench {
        /// A component name; repeatable. Default: all.
        #[arg(long = "component", value_name = "NAME")]
        components: Vec<String>,
        /// Messages per measurement.
        #[arg(long, default_value_t = 2000)]
        messages: usize,
        /// Payload bytes per message.
        #[arg(long, default_value_t = 256)]
        payload_bytes: usize,
        /// Runs of each publish measurement; the median is reported.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=20))]
        repeats: u16,
        /// The shortest a publish measurement's run may last, in seconds: the message
        /// count is scaled up until a run takes this long (0 keeps --messages).
        #[arg(long, default_value_t = 1.0)]
        min_seconds: f64,
        /// Messages in the topic each consume measurement drains (PostgreSQL also
        /// drains a topic ten times larger).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        consume_messages: u64,
        /// Also publish through `serve` over Dapr's HTTP API, in turn with the
        /// in-process runtime (single and bulk x100, the ratio of the two).
        #[cfg(feature = "sidecar")]
        #[arg(long)]
        through_serve: bool,
        #[arg(long, default_value = "reports/latest")]
        out: PathBuf,
        #[arg(long, default_value = "fixtures")]
        fixtures: PathBuf,
    },
    /// Judge the saved histories of a report again with this suite's checker, offline:
    /// prints each cell whose verdict differs from the saved one, and exits 1 when any
    /// does.
    Check {
        /// A report directory written by certify (report.json and histories/).
        report_dir: PathBuf,
        /// Only cells whose case id matches this glob.
        #[arg(long = "case", value_name = "GLOB")]
        case: Option<String>,
    },
    /// Serve components through Dapr's pub/sub HTTP API (a light Dapr-compatible
    /// sidecar): publish, bulk publish, metadata and health endpoints, and, with
    /// --app-port, the app's subscriptions (GET /dapr/subscribe) delivered to it.
    /// Each component is built from its YAML as given (its broker must be running).
    #[cfg(feature = "sidecar")]
    Serve(crate::serve_command::ServeCommand),
    /// List the catalogue: id, level, capability and MUST statement.
    List {
        #[arg(long, value_enum, default_value_t = ListFormat::Text)]
        format: ListFormat,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ListFormat {
    Text,
    Markdown,
    Json,
}

/// `certify --sidecar-protocol`: how the suite talks to the sidecars it starts.
#[cfg(feature = "sidecar")]
#[derive(Clone, Copy, ValueEnum)]
enum SidecarProtocol {
    Http,
    Grpc,
}

#[cfg(feature = "sidecar")]
impl SidecarProtocol {
    fn is_grpc(self) -> bool {
        matches!(self, SidecarProtocol::Grpc)
    }

    /// The sidecars `template` starts, reached this way; refused when the template
    /// lacks a placeholder the protocol needs.
    fn command(self, template: String) -> anyhow::Result<crate::certify::SidecarCommand> {
        let grpc = self.is_grpc();
        pubsub_sidecar::launch::check_command_template(&template, grpc)
            .context("--sidecar-command")?;
        Ok(crate::certify::SidecarCommand { template, grpc })
    }
}

/// `certify --jobs` when not given.
const DEFAULT_JOBS: u16 = 8;

/// `--provision`: provisioning kinds in the order to try them.
#[derive(Clone)]
struct ProvisionOrder(Vec<ProvisionKind>);

fn parse_order(text: &str) -> Result<ProvisionOrder, String> {
    ProvisionKind::parse_order(text).map(ProvisionOrder)
}

fn parse_level(text: &str) -> Result<Level, String> {
    Level::parse(text)
        .ok_or_else(|| format!("'{text}' is not a level; use core, feature or certification"))
}

/// Parses the process's arguments, runs the command and gives the exit code: 0 on
/// success, 1 when a report has failures, 2 on bad input.
pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Where the run's logs go: the log file of the command's report directory, `out`
/// (warnings and errors of the components and client libraries, or what `RUST_LOG`
/// asks for), and the terminal only with `--verbose`, so that the terminal shows
/// progress and verdicts. Called once input has been checked, so that a refused
/// command leaves nothing behind.
fn init_logging(verbose: bool, out: Option<&Path>) -> anyhow::Result<()> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
    };
    let file_layer = match out {
        Some(out) => {
            std::fs::create_dir_all(out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            let path = out.join("run.log");
            let file = std::fs::File::create(&path)
                .with_context(|| format!("cannot create the log file {}", path.display()))?;
            Some(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(file))
                    .with_filter(filter()),
            )
        }
        None => None,
    };
    let terminal = verbose.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter())
    });
    let _ = tracing_subscriber::registry()
        .with(file_layer)
        .with(terminal)
        .try_init();
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let verbose = cli.verbose;
    match cli.command {
        // A server logs to the terminal.
        #[cfg(feature = "sidecar")]
        Command::Serve { .. } => init_logging(true, None)?,
        Command::Certify { .. } | Command::Bench { .. } => {}
        _ => init_logging(verbose, None)?,
    }
    match cli.command {
        #[cfg(feature = "sidecar")]
        Command::Serve(command) => {
            let tokio = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            tokio.block_on(crate::serve_command::serve(command))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { report_dir, case } => {
            let recheck = crate::replay::recheck(&report_dir, case.as_deref())?;
            for d in &recheck.differences {
                println!(
                    "DIFFERS {} {}: saved {}, judged now {}{}",
                    d.component,
                    d.case,
                    d.saved.label(),
                    d.judged.label(),
                    d.findings
                        .first()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                );
            }
            println!(
                "re-judged {} cells from their histories ({} without histories): {} differ",
                recheck.judged,
                recheck.without_history,
                recheck.differences.len()
            );
            if recheck.judged == 0 {
                anyhow::bail!(
                    "{} holds no saved histories ({}/): certify writes them",
                    report_dir.display(),
                    crate::replay::HISTORIES
                );
            }
            Ok(if recheck.differences.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::List { format } => {
            list(format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Certify {
            components,
            case,
            level,
            out,
            fixtures,
            retries,
            repeat,
            #[cfg(feature = "sidecar")]
            through_serve,
            #[cfg(feature = "sidecar")]
            sidecar_command,
            #[cfg(feature = "sidecar")]
            sidecar_protocol,
            #[cfg(feature = "sidecar")]
            attach,
            #[cfg(feature = "sidecar")]
            js_sdk,
            #[cfg(feature = "sidecar")]
            python_sdk,
            #[cfg(feature = "sidecar")]
            rust_sdk,
            seed,
            no_bystander,
            provision,
            broker_versions,
            restart_broker,
            fail_not_provisioned,
            jobs,
            baseline,
            fail_on_regression,
        } => {
            #[cfg(feature = "sidecar")]
            if sidecar_protocol.is_grpc() && sidecar_command.is_none() && attach.sidecar.is_none() {
                anyhow::bail!("--sidecar-protocol grpc is how the suite talks to the sidecars of --sidecar-command or --sidecar: give one of them");
            }
            // A bad baseline is refused before anything runs.
            let baseline = read_baseline(baseline)?;
            let selection = Selection {
                components,
                case_glob: case,
                level,
            };
            let cases = selection.cases()?;
            let definitions = select_definitions(
                load_definitions(&fixtures)?,
                &selection.components,
                &fixtures,
            )?;
            let provision = match provision {
                Some(order) => Some(order.0),
                None => provision_from_environment().map_err(anyhow::Error::msg)?,
            };
            let tokio = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let (definitions, provision) = match &broker_versions {
                None => (definitions, provision),
                Some(selection) => {
                    if provision
                        .as_ref()
                        .is_some_and(|kinds| !kinds.contains(&ProvisionKind::Container))
                    {
                        anyhow::bail!("--broker-versions runs each version in its own container: --provision (or PUBSUB_PROVISION) must allow 'container'");
                    }
                    let definitions = tokio.block_on(on_broker_versions(definitions, selection))?;
                    (definitions, Some(vec![ProvisionKind::Container]))
                }
            };
            let options = CertifyOptions {
                run: RunOptions {
                    retries,
                    seed,
                    save: None,
                    bystander: !no_bystander,
                },
                provision,
                restart_broker,
                jobs: usize::from(jobs),
                repeat,
                histories: Some(out.clone()),
                #[cfg(feature = "sidecar")]
                through_serve,
                #[cfg(not(feature = "sidecar"))]
                through_serve: false,
                #[cfg(feature = "sidecar")]
                sidecar_command: sidecar_command
                    .map(|template| sidecar_protocol.command(template))
                    .transpose()?,
                #[cfg(not(feature = "sidecar"))]
                sidecar_command: None,
                #[cfg(feature = "sidecar")]
                attach: attach.attach_to(definitions.len(), sidecar_protocol.is_grpc())?,
                #[cfg(not(feature = "sidecar"))]
                attach: None,
                #[cfg(feature = "sidecar")]
                js_sdk,
                #[cfg(not(feature = "sidecar"))]
                js_sdk: false,
                #[cfg(feature = "sidecar")]
                python_sdk,
                #[cfg(not(feature = "sidecar"))]
                python_sdk: false,
                #[cfg(feature = "sidecar")]
                rust_sdk,
                #[cfg(not(feature = "sidecar"))]
                rust_sdk: false,
            };
            init_logging(verbose, Some(&out))?;
            // Histories of an earlier run in the same directory would be judged as
            // this run's.
            let histories = out.join(crate::replay::HISTORIES);
            if histories.exists() {
                std::fs::remove_dir_all(&histories)
                    .with_context(|| format!("cannot clear {}", histories.display()))?;
            }
            let board = Arc::new(Board::new(std::io::stderr().is_terminal()));
            let progress: Progress =
                Arc::new(move |component: &str, line: &str| board.hear(component, line));
            let started = Instant::now();
            let mut report = tokio.block_on(certify(&definitions, &cases, &options, progress));
            eprintln!(
                "certified {} components in {:.1} s (--jobs {jobs})",
                report.components.len(),
                started.elapsed().as_secs_f64()
            );
            compare_with(&mut report, baseline.as_ref());
            write_report(&report, &out)?;
            print!("{}", reports::summary_table(&report));
            println!("report: {}", out.join("index.html").display());
            println!(
                "histories: {} (pubsub-conformance check {} judges them again); log: {}",
                histories.display(),
                out.display(),
                out.join("run.log").display()
            );
            let unprovisioned = not_provisioned(&report);
            for (name, problem) in &unprovisioned {
                println!("NOT PROVISIONED {name}: {problem}");
            }
            for component in &report.components {
                if let Some(unmet) = &component.provisioning.unsupported_broker {
                    println!("BROKER UNSUPPORTED {}: {unmet}", component.name);
                }
            }
            print_changes(&report);
            if fail_not_provisioned && !unprovisioned.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
            Ok(exit_code(&report, fail_on_regression))
        }
        Command::Merge {
            inputs,
            out,
            baseline,
            fail_on_regression,
        } => {
            let baseline = read_baseline(baseline)?;
            let mut runs = Vec::new();
            for input in &inputs {
                runs.push(read_report(input)?);
            }
            let mut merged = reports::merge(runs)?;
            compare_with(&mut merged, baseline.as_ref());
            write_report(&merged, &out)?;
            print!("{}", reports::summary_table(&merged));
            for conflict in &merged.conflicts {
                let statuses: Vec<&str> = conflict.statuses.iter().map(|s| s.label()).collect();
                println!(
                    "CONFLICT {} {}: {}",
                    conflict.component,
                    conflict.case,
                    statuses.join(" vs ")
                );
            }
            println!("report: {}", out.join("index.html").display());
            print_changes(&merged);
            Ok(exit_code(&merged, fail_on_regression))
        }
        Command::Bench {
            components,
            messages,
            payload_bytes,
            repeats,
            min_seconds,
            consume_messages,
            #[cfg(feature = "sidecar")]
            through_serve,
            out,
            fixtures,
        } => {
            if !(0.0..=60.0).contains(&min_seconds) {
                anyhow::bail!("--min-seconds {min_seconds} is out of range; expected 0 to 60");
            }
            let definitions =
                select_definitions(load_definitions(&fixtures)?, &components, &fixtures)?;
            let options = BenchOptions {
                messages,
                payload_bytes,
                repeats: usize::from(repeats),
                min_seconds,
                consume_messages: consume_messages as usize,
                #[cfg(feature = "sidecar")]
                through_serve,
                ..BenchOptions::default()
            };
            init_logging(verbose, Some(&out))?;
            let tokio = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let previous = out.join("report.json");
            let mut report = if previous.exists() {
                read_report(&previous)?
            } else {
                empty_report()
            };
            for definition in &definitions {
                // A broker of its own, as for certify: measurements are not disturbed by
                // what earlier runs left on a shared server, and leave nothing there.
                let order = own_broker_order(&definition.component_type);
                let provisioned = match tokio.block_on(provision(definition, &order)) {
                    Ok(provisioned) => provisioned,
                    Err(reasons) => {
                        let reasons: Vec<String> =
                            reasons.iter().map(ToString::to_string).collect();
                        eprintln!(
                            "{}: NOT PROVISIONED: {}",
                            definition.name,
                            reasons.join("; ")
                        );
                        continue;
                    }
                };
                eprintln!("{}: benchmarking", definition.name);
                let result = tokio
                    .block_on(bench_component(
                        &definition.name,
                        provisioned.component.clone(),
                        provisioned.endpoint.as_deref(),
                        &options,
                    ))
                    .with_context(|| format!("benchmarking {}", definition.name))?;
                print!("{}", bench_table(&result));
                report.bench.retain(|b| b.component != definition.name);
                report.bench.push(result);
            }
            print!("{}", reports::bench_chart_text(&report.bench));
            write_report(&report, &out)?;
            println!("report: {}", out.join("index.html").display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The components that could not be provisioned, with why and how to get them.
fn not_provisioned(report: &RunReport) -> Vec<(String, String)> {
    report
        .components
        .iter()
        .filter_map(|c| {
            c.provisioning
                .problem
                .as_ref()
                .map(|problem| (c.name.clone(), problem.clone()))
        })
        .collect()
}

/// The definitions of a `--broker-versions` run: each component with a versioned
/// broker once per selected version (its image built first when missing), the others
/// as they are. Versions on no selected component's axis are an error.
async fn on_broker_versions(
    definitions: Vec<ComponentDefinition>,
    selection: &VersionSelection,
) -> anyhow::Result<Vec<ComponentDefinition>> {
    let axes: Vec<Vec<AxisPoint>> = definitions
        .iter()
        .map(|definition| versions::axis(&definition.component_type))
        .collect();
    selection.check(&axes).map_err(anyhow::Error::msg)?;
    let mut expanded = Vec::new();
    for (definition, axis) in definitions.into_iter().zip(axes) {
        if axis.is_empty() {
            eprintln!(
                "broker versions: {} has no versioned broker image; certified once",
                definition.name
            );
            expanded.push(definition);
            continue;
        }
        for point in selection.select(&axis) {
            let progress = |line: &str| eprintln!("broker versions: {line}");
            match versions::prepare(point, &progress).await {
                Ok(prepared) => expanded.push(versions::on_version(&definition, &prepared)),
                Err(problem) => anyhow::bail!(
                    "{} on {} from Debian {}: {problem}",
                    definition.name,
                    point.broker,
                    point.release
                ),
            }
        }
    }
    Ok(expanded)
}

/// The baseline report given with `--baseline`, read and checked like any report.
fn read_baseline(path: Option<PathBuf>) -> anyhow::Result<Option<(PathBuf, RunReport)>> {
    path.map(|path| read_report(&path).map(|report| (path, report)))
        .transpose()
}

/// Records in `report` what changed since the baseline, if one was given.
fn compare_with(report: &mut RunReport, baseline: Option<&(PathBuf, RunReport)>) {
    if let Some((path, old)) = baseline {
        report.baseline = Some(reports::compare(old, report, &path.display().to_string()));
    }
}

/// One line per changed cell, regressions first.
fn print_changes(report: &RunReport) {
    let Some(baseline) = &report.baseline else {
        return;
    };
    println!(
        "since {}: {} regression(s), {} change(s)",
        baseline.source,
        baseline.regressions(),
        baseline.changes.len()
    );
    for change in &baseline.changes {
        println!(
            "{} {} {}: {}",
            change.kind.label().to_uppercase(),
            change.component,
            change.case,
            change.detail
        );
    }
}

/// 1 when a cell fails (or, with `only_regressions`, when a cell regressed since
/// the baseline), else 0.
fn exit_code(report: &RunReport, only_regressions: bool) -> ExitCode {
    let failed = if only_regressions {
        report.regressed()
    } else {
        report.has_failures()
    };
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn read_report(path: &Path) -> anyhow::Result<RunReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let report: RunReport = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a pubsub-conformance report.json", path.display()))?;
    if report.schema_version != reports::SCHEMA_VERSION {
        anyhow::bail!(
            "{} has schema version {}, this suite reads {} (re-run certify with this version)",
            path.display(),
            report.schema_version,
            reports::SCHEMA_VERSION
        );
    }
    Ok(report)
}

fn empty_report() -> RunReport {
    RunReport {
        schema_version: reports::SCHEMA_VERSION,
        suite_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at: now_text(),
        finished_at: now_text(),
        machine: machine(),
        components: Vec::new(),
        conflicts: Vec::new(),
        bench: Vec::new(),
        baseline: None,
    }
}

fn write_report(report: &RunReport, out: &Path) -> anyhow::Result<()> {
    reports::write_all(report, out)
        .with_context(|| format!("cannot write the report to {}", out.display()))
}

fn list(format: ListFormat) -> anyhow::Result<()> {
    let text = match format {
        ListFormat::Text => catalogue()
            .iter()
            .map(|case| {
                format!(
                    "{:<40} {:<13} {:<30} {}\n",
                    case.id,
                    case.level.name(),
                    case.requirement(),
                    case.must
                )
            })
            .collect(),
        ListFormat::Markdown => crate::catalogue::markdown(),
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = catalogue()
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "id": c.id, "family": c.family(), "level": c.level,
                        "capability": c.requires, "bound": c.bound.rule, "must": c.must,
                        "lane": c.lane,
                    })
                })
                .collect();
            serde_json::to_string_pretty(&rows)? + "\n"
        }
    };
    // A closed pipe (`list | head`) is not an error.
    match std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
