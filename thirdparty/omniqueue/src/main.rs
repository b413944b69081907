//! The suite's command line with the omniqueue types registered: `certify`, `merge`,
//! `bench` and `list`, e.g.
//! `cargo run --release -- certify --fixtures fixtures --out ../../reports/omniqueue`.

fn main() -> std::process::ExitCode {
    certify_omniqueue::register();
    pubsub_conformance::cli::main()
}
