//! What the command-line tests share: the program as a user runs it, a directory of
//! its own for each test, and what a run printed and wrote.

use pubsub_conformance::reports::{CaseResult, ComponentReport, RunReport};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program, run from the repository's root.
pub fn cli() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"));
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    command
}

/// A new, empty directory for one test, named after `label`.
pub fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcs-cli-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What a run of the program did: its exit code and what it printed.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Whether it exited with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `command` to its end.
pub fn run(command: &mut Command) -> Ran {
    let output = command.output().unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `certify` with `args`, writing its reports into `out`.
pub fn certify(args: &[&str], out: &Path) -> Ran {
    run(cli().arg("certify").args(args).arg("--out").arg(out))
}

/// `certify` of `component` on the cases matching `cases`, with the options `more`,
/// into `out`.
pub fn certify_cases(component: &str, cases: &str, more: &[&str], out: &Path) -> Ran {
    let args = [&["--component", component, "--case", cases], more].concat();
    certify(&args, out)
}

/// `certify` of the in-memory component on the cases matching `glob`, into `out`.
pub fn certify_memory(glob: &str, out: &Path) -> Ran {
    certify_cases("memory", glob, &[], out)
}

/// [`certify_cases`], which must succeed: the report it wrote, and what it printed on
/// stderr (what says why when a row is missing).
pub fn certified(component: &str, cases: &str, more: &[&str], out: &Path) -> (RunReport, String) {
    let output = certify_cases(component, cases, more, out);
    assert!(output.success(), "{}", output.stderr);
    (report_in(out), output.stderr)
}

/// The report.json at `path`.
pub fn read(path: &Path) -> RunReport {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The report.json a run wrote into `out`.
pub fn report_in(out: &Path) -> RunReport {
    read(&out.join("report.json"))
}

/// The row named `name`; `printed` (what the run printed) says why when it is missing.
pub fn row_named<'a>(report: &'a RunReport, name: &str, printed: &str) -> &'a ComponentReport {
    report
        .components
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no row '{name}': {printed}"))
}

/// The cell of case `id` in `row`.
pub fn cell_of<'a>(row: &'a ComponentReport, id: &str) -> &'a CaseResult {
    row.cases
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no cell {id} in the row '{}'", row.name))
}

/// The verdict of case `id` in `row`, and the cell's notes.
pub fn verdict_of(row: &ComponentReport, id: &str) -> (&'static str, String) {
    let cell = cell_of(row, id);
    (cell.status.label(), cell.evidence.notes.join(" | "))
}

/// Whether one of `lines` (a cell's findings or notes) contains `text`.
pub fn mention(lines: &[String], text: &str) -> bool {
    lines.iter().any(|line| line.contains(text))
}

/// Asserts that `cell`'s verdict is `label`, with its evidence when it is not; `path`
/// says what the cell ran through (e.g. " through the attached sidecar").
pub fn assert_verdict(cell: &CaseResult, label: &str, path: &str) {
    assert_eq!(
        cell.status.label(),
        label,
        "{}{path}: {:?}",
        cell.id,
        cell.evidence
    );
}
