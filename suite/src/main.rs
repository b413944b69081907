//! The `pubsub-conformance` command line (see [`pubsub_conformance::cli`]).

fn main() -> std::process::ExitCode {
    pubsub_conformance::cli::main()
}
