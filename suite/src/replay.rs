//! Saved histories and verdicts judged from them.
//!
//! Every attempt of every cell is saved in the report directory as JSON lines,
//! `histories/<component>/<case>.jsonl`: a line `{"attempt": {...}}` (which run and
//! attempt, the verdict it got, the findings the case body made itself), then one line
//! per [`Record`] of its history. [`judge`] decides an attempt's verdict from exactly
//! that, live and offline alike: the checker is run again on every
//! [`Record::Check`] the case made, the body's own findings are added, and the
//! machine's load recorded in the history decides whether timing findings are
//! blamed on the component. `pubsub-conformance check REPORT_DIR` re-judges a whole
//! report this way ([`recheck`]).

use crate::checker::check;
use crate::history::{History, Record};
use crate::load::MachineLoad;
use anyhow::Context as _;
use globset::Glob;
use pubsub_reports::{RunReport, Status};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The folder of a report directory that holds the saved histories.
pub const HISTORIES: &str = "histories";

/// How many times a case runs again when the machine was too busy to judge its
/// timing, before the cell is ERROR.
pub const BUSY_RERUNS: u32 = 2;

/// What one attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// Only timing findings, made while the machine was too busy to judge timing.
    Busy,
    /// The suite could not run the case, or the broker failed (ERROR).
    Error,
    /// The case cannot provoke what it tests here (UNSUPPORTED).
    CannotProvoke,
}

/// The first line of a saved attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptHeader {
    pub component: String,
    pub case: String,
    /// Which run of the cell (`certify --repeat`), from 1.
    pub run: u32,
    /// Which attempt within the run, from 1.
    pub attempt: u32,
    /// The verdict the attempt got when it ran.
    pub verdict: Verdict,
    /// Findings the case body made itself (not the checker's), and which of them are
    /// timing findings.
    pub body_findings: Vec<String>,
    pub body_timing: Vec<String>,
    /// The delay precision the machine's load is judged against, in ms.
    pub precision_ms: u64,
    /// Why the verdict was not the checker's to make (a harness error, a broker that
    /// failed): such an attempt is kept as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
}

/// One saved attempt: its header and history.
#[derive(Debug, Clone)]
pub struct SavedAttempt {
    pub header: AttemptHeader,
    pub history: History,
}

/// An attempt judged from its history.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub verdict: Verdict,
    pub findings: Vec<String>,
    pub timing: Vec<String>,
    pub load: Option<MachineLoad>,
}

/// Judges an attempt: the checker again on each check the case made, plus the body's
/// own findings; only timing findings while the machine was too busy to judge timing
/// make it [`Verdict::Busy`]. An attempt decided by something else keeps its verdict.
pub fn judge(attempt: &SavedAttempt) -> Judged {
    let history = &attempt.history;
    let load = MachineLoad::of(history);
    let header = &attempt.header;
    if header.decided_by.is_some() {
        return Judged {
            verdict: header.verdict,
            findings: header.body_findings.clone(),
            timing: header.body_timing.clone(),
            load,
        };
    }
    let mut findings = header.body_findings.clone();
    let mut timing = header.body_timing.clone();
    for record in &history.records {
        if let Record::Check { upto, criteria, .. } = record {
            let judged = History {
                records: history.records[..(*upto).min(history.records.len())].to_vec(),
            };
            let outcome = check(&judged, criteria).outcome(criteria);
            findings.extend(outcome.findings);
            timing.extend(outcome.timing);
        }
    }
    let precision = Duration::from_millis(header.precision_ms);
    let only_timing = findings.iter().all(|f| timing.contains(f));
    let verdict = if findings.is_empty() {
        Verdict::Pass
    } else if only_timing && load.as_ref().is_some_and(|l| l.too_busy(precision)) {
        Verdict::Busy
    } else {
        Verdict::Fail
    };
    Judged {
        verdict,
        findings,
        timing,
        load,
    }
}

/// The findings among `all` that the checks recorded in `history` made (the rest are
/// the case body's own), each taken once per time it was found.
pub fn body_findings(all: &[String], history: &History) -> Vec<String> {
    let mut checked: Vec<&String> = history
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Check { findings, .. } => Some(findings),
            _ => None,
        })
        .flatten()
        .collect();
    let mut body = Vec::new();
    for finding in all {
        match checked.iter().position(|c| *c == finding) {
            Some(i) => {
                checked.swap_remove(i);
            }
            None => body.push(finding.clone()),
        }
    }
    body
}

/// A cell's status from its attempts' verdicts in one run, as the runner decides it:
/// a pass after a failure is FLAKY; a busy machine's attempt is run again and, if
/// the machine stays busy, the cell is ERROR.
pub fn cell_status(verdicts: &[Verdict]) -> Status {
    let mut failed = false;
    let mut last = Status::Error;
    for verdict in verdicts {
        last = match verdict {
            Verdict::Pass if failed => return Status::Flaky,
            Verdict::Pass => return Status::Pass,
            Verdict::Fail => {
                failed = true;
                Status::Fail
            }
            Verdict::Busy if failed => Status::Fail,
            Verdict::Busy => Status::Error,
            Verdict::Error => return Status::Error,
            Verdict::CannotProvoke => return Status::Unsupported,
        };
    }
    last
}

/// The status of a cell run `runs` times (`certify --repeat`): PASS when every run
/// passed, FAIL when none did, FLAKY in between; a run that was ERROR, UNSUPPORTED or
/// NOT PROVISIONED makes the cell so (a case that cannot run is never FLAKY).
pub fn repeated_status(runs: &[Status]) -> Status {
    if let Some(worst) = runs.iter().find(|s| {
        matches!(
            s,
            Status::Error | Status::Unsupported | Status::NotProvisioned
        )
    }) {
        return *worst;
    }
    let passes = runs.iter().filter(|s| **s == Status::Pass).count();
    if runs.len() == 1 {
        return runs[0];
    }
    match passes {
        p if p == runs.len() => Status::Pass,
        0 if runs.iter().all(|s| *s == Status::Fail) => Status::Fail,
        _ => Status::Flaky,
    }
}

/// Where a report directory keeps a cell's saved attempts.
pub fn history_path(dir: &Path, component: &str, case: &str) -> PathBuf {
    dir.join(HISTORIES)
        .join(pubsub_reports::file_stem(component))
        .join(format!("{case}.jsonl"))
}

/// Appends an attempt to its cell's file under `dir`.
pub fn save(dir: &Path, attempt: &SavedAttempt) -> anyhow::Result<()> {
    let path = history_path(dir, &attempt.header.component, &attempt.header.case);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut text = serde_json::to_string(&serde_json::json!({ "attempt": attempt.header }))?;
    text.push('\n');
    for record in &attempt.history.records {
        text.push_str(&serde_json::to_string(record)?);
        text.push('\n');
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a cell's saved attempts, in the order they ran.
pub fn load(path: &Path) -> anyhow::Result<Vec<SavedAttempt>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut attempts: Vec<SavedAttempt> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), n + 1);
        let value: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
        // Records are tagged `record`; a line without the tag heads an attempt.
        if let (None, Some(header)) = (value.get("record"), value.get("attempt")) {
            let header: AttemptHeader = serde_json::from_value(header.clone())
                .with_context(|| format!("{}: not an attempt header", at()))?;
            attempts.push(SavedAttempt {
                header,
                history: History::default(),
            });
        } else {
            let record: Record = serde_json::from_value(value)
                .with_context(|| format!("{}: not a history record", at()))?;
            attempts
                .last_mut()
                .with_context(|| format!("{}: a record before any attempt header", at()))?
                .history
                .records
                .push(record);
        }
    }
    Ok(attempts)
}

/// A cell whose verdict, judged again, differs from the saved one.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub component: String,
    pub case: String,
    pub saved: Status,
    pub judged: Status,
    /// The findings judged now (of the first attempt that differs).
    pub findings: Vec<String>,
}

/// What re-judging a report found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recheck {
    /// Cells judged again from their histories.
    pub judged: usize,
    /// Cells without histories (not run: UNSUPPORTED by declaration, NOT PROVISIONED,
    /// not selected by the glob).
    pub without_history: usize,
    pub differences: Vec<Difference>,
}

/// Re-judges every cell of the report in `dir` (whose case id matches `glob`) from
/// its saved histories with the current checker.
pub fn recheck(dir: &Path, glob: Option<&str>) -> anyhow::Result<Recheck> {
    let report_path = dir.join("report.json");
    let text = std::fs::read_to_string(&report_path)
        .with_context(|| format!("cannot read {}", report_path.display()))?;
    let report: RunReport = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a pubsub-conformance report.json",
            report_path.display()
        )
    })?;
    let matcher = glob
        .map(|g| {
            Glob::new(g)
                .with_context(|| format!("--case '{g}' is not a valid glob"))
                .map(|g| g.compile_matcher())
        })
        .transpose()?;
    let mut result = Recheck::default();
    for component in &report.components {
        for cell in &component.cases {
            if matcher.as_ref().is_some_and(|m| !m.is_match(&cell.id)) {
                continue;
            }
            let path = history_path(dir, &component.name, &cell.id);
            if !path.exists() {
                result.without_history += 1;
                continue;
            }
            let attempts = load(&path)?;
            result.judged += 1;
            let (judged, findings) = rejudge(&attempts);
            if judged != cell.status {
                result.differences.push(Difference {
                    component: component.name.clone(),
                    case: cell.id.clone(),
                    saved: cell.status,
                    judged,
                    findings,
                });
            }
        }
    }
    Ok(result)
}

/// A cell's status judged again from its saved attempts, with the findings of its
/// first attempt that did not pass.
fn rejudge(attempts: &[SavedAttempt]) -> (Status, Vec<String>) {
    let mut runs: Vec<u32> = attempts.iter().map(|a| a.header.run).collect();
    runs.dedup();
    let mut statuses = Vec::new();
    let mut findings = Vec::new();
    for run in runs {
        let verdicts: Vec<Verdict> = attempts
            .iter()
            .filter(|a| a.header.run == run)
            .map(|a| {
                let judged = judge(a);
                if judged.verdict != Verdict::Pass && findings.is_empty() {
                    findings = judged.findings;
                }
                judged.verdict
            })
            .collect();
        statuses.push(cell_status(&verdicts));
    }
    (repeated_status(&statuses), findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_status_follows_the_runner() {
        use Verdict::*;
        assert_eq!(cell_status(&[Pass]), Status::Pass);
        assert_eq!(cell_status(&[Fail, Pass]), Status::Flaky);
        assert_eq!(cell_status(&[Fail, Fail]), Status::Fail);
        assert_eq!(cell_status(&[Busy, Pass]), Status::Pass);
        assert_eq!(cell_status(&[Busy, Busy, Busy]), Status::Error);
        assert_eq!(cell_status(&[Fail, Busy]), Status::Fail);
        assert_eq!(cell_status(&[Fail, Error]), Status::Error);
        assert_eq!(repeated_status(&[Status::Pass; 3]), Status::Pass);
        assert_eq!(
            repeated_status(&[Status::Pass, Status::Fail]),
            Status::Flaky
        );
        assert_eq!(repeated_status(&[Status::Fail, Status::Fail]), Status::Fail);
        assert_eq!(
            repeated_status(&[Status::NotProvisioned; 2]),
            Status::NotProvisioned
        );
    }

    #[test]
    fn body_findings_are_what_the_checks_did_not_find() {
        let history = History {
            records: vec![Record::Check {
                upto: 0,
                criteria: crate::criteria::Criteria::delivery(
                    pubsub_components::DeliveryGuarantee::AtLeastOnce,
                ),
                findings: vec!["lost: x".into()],
            }],
        };
        let all = vec![
            "lost: x".to_string(),
            "late: y".to_string(),
            "lost: x".to_string(),
        ];
        assert_eq!(body_findings(&all, &history), vec!["late: y", "lost: x"]);
    }
}
