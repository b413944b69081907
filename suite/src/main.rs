//! The `pubsub-conformance` command line: `certify` and `list`.

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use pubsub_conformance::catalogue::{catalogue, Level};
use pubsub_conformance::certify::{certify, load_definitions, select_definitions, Selection};
use pubsub_conformance::runner::RunOptions;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "pubsub-conformance",
    version,
    about = "Conformance and certification suite for pub/sub components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

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
        /// Seed for generated inputs (default: derived from each case id).
        #[arg(long)]
        seed: Option<u64>,
    },
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

fn parse_level(text: &str) -> Result<Level, String> {
    Level::parse(text)
        .ok_or_else(|| format!("'{text}' is not a level; use core, feature or certification"))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
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
            seed,
        } => {
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
            let options = RunOptions { retries, seed };
            let tokio = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            let started = Instant::now();
            let interactive = std::io::stderr().is_terminal();
            let mut progress = |line: &str| {
                if interactive {
                    eprint!(
                        "\r\x1b[2K[{:>5.1}s] {line}",
                        started.elapsed().as_secs_f64()
                    );
                } else {
                    eprintln!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
                }
            };
            let report = tokio.block_on(certify(&definitions, &cases, &options, &mut progress));
            if interactive {
                eprintln!();
            }
            std::fs::create_dir_all(&out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            let path = out.join("report.json");
            let json = serde_json::to_string_pretty(&report).context("cannot encode the report")?;
            std::fs::write(&path, json)
                .with_context(|| format!("cannot write {}", path.display()))?;
            print!("{}", pubsub_conformance::reports::summary_table(&report));
            println!("report: {}", path.display());
            Ok(if report.has_failures() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

fn list(format: ListFormat) -> anyhow::Result<()> {
    let feature = |c: &pubsub_conformance::catalogue::Case| c.requirement();
    match format {
        ListFormat::Text => {
            for case in catalogue() {
                println!(
                    "{:<40} {:<13} {:<17} {}",
                    case.id,
                    case.level.name(),
                    feature(case),
                    case.must
                );
            }
        }
        ListFormat::Markdown => print!("{}", pubsub_conformance::catalogue::markdown()),
        ListFormat::Json => {
            let rows: Vec<serde_json::Value> = catalogue()
                .iter()
                .map(|c| serde_json::json!({
                    "id": c.id, "family": c.family(), "level": c.level, "capability": c.requires,
                    "bound": c.bound.rule, "must": c.must,
                }))
                .collect();
            println!("{}", serde_json::to_string_pretty(&rows)?);
        }
    }
    Ok(())
}
