//! What a case returns: findings (FAIL when any), warnings, notes and a history excerpt.

use crate::history::History;
use pubsub_components::runtime::BulkPublishResponse;
use pubsub_components::PubSubError;

/// The result of one run of a case body.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub findings: Vec<String>,
    /// The findings (also in `findings`) that a busy machine can cause: lateness,
    /// and what did not arrive within a bound. Only these may be set aside when the
    /// machine was too busy to judge timing.
    pub timing: Vec<String>,
    pub warnings: Vec<String>,
    pub notes: Vec<String>,
    pub history: Vec<String>,
    /// Warnings and errors the runtime and component logged during the run.
    pub logs: Vec<String>,
    /// Faults, publishes and deliveries over time, when the case injected faults.
    pub timeline: Option<pubsub_reports::Timeline>,
}

impl Outcome {
    /// An outcome with nothing found yet.
    pub fn new() -> Self {
        Outcome::default()
    }

    /// Records `finding` unless `ok`.
    pub fn expect(&mut self, ok: bool, finding: impl FnOnce() -> String) -> &mut Self {
        if !ok {
            self.findings.push(finding());
        }
        self
    }

    /// Expects a bulk publish to have reported no failed entry.
    pub fn expect_no_failed_entries(&mut self, response: &BulkPublishResponse) -> &mut Self {
        self.expect(response.failed_entries.is_empty(), || {
            format!("entries failed: {:?}", response.failed_entries)
        })
    }

    /// Records a finding.
    pub fn fail(&mut self, finding: impl Into<String>) -> &mut Self {
        self.findings.push(finding.into());
        self
    }

    /// Records a timing finding: one a busy machine could cause (see `timing`).
    pub fn fail_timing(&mut self, finding: impl Into<String>) -> &mut Self {
        let finding = finding.into();
        self.timing.push(finding.clone());
        self.findings.push(finding);
        self
    }

    /// Records a timing finding unless `ok`.
    pub fn expect_timely(&mut self, ok: bool, finding: impl FnOnce() -> String) -> &mut Self {
        if !ok {
            self.fail_timing(finding());
        }
        self
    }

    /// True when there are findings and each is a timing finding.
    pub fn only_timing(&self) -> bool {
        !self.findings.is_empty() && self.findings.iter().all(|f| self.timing.contains(f))
    }

    /// Records a warning (does not fail the case).
    pub fn warn(&mut self, warning: impl Into<String>) -> &mut Self {
        self.warnings.push(warning.into());
        self
    }

    /// Records a note.
    pub fn note(&mut self, note: impl Into<String>) -> &mut Self {
        self.notes.push(note.into());
        self
    }

    /// Attaches an excerpt of `history` (most relevant lines first).
    pub fn with_history(mut self, history: &History) -> Self {
        self.history = history.excerpt(40);
        self.timeline = history.timeline();
        self
    }

    /// Adds the findings of a delivery check.
    pub fn merge(mut self, other: Outcome) -> Self {
        self.findings.extend(other.findings);
        self.timing.extend(other.timing);
        self.warnings.extend(other.warnings);
        self.notes.extend(other.notes);
        if self.history.is_empty() {
            self.history = other.history;
        }
        if self.timeline.is_none() {
            self.timeline = other.timeline;
        }
        self
    }

    /// True when nothing was found.
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }
}

/// A case that stopped early.
#[derive(Debug, Clone)]
pub enum CaseError {
    /// The component did something the contract forbids (a FAIL).
    Component(String),
    /// The suite itself could not run the case (an ERROR), with the reason.
    Harness(String),
    /// What the case needs to provoke cannot be provoked on this component as it
    /// declares itself (e.g. a failing entry without a size limit): UNSUPPORTED,
    /// with the reason and what declaration would let the case run.
    CannotProvoke(String),
}

impl std::fmt::Display for CaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaseError::Component(m) | CaseError::Harness(m) | CaseError::CannotProvoke(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Adds what the case was doing to a component error.
pub trait Context<T> {
    /// Turns an error into a component failure described by `doing`.
    fn doing(self, doing: &str) -> Result<T, CaseError>;
}

/// Whether `error` says a remote runtime's API cannot express what was asked (a
/// limit of the path, not the component's answer).
pub fn is_beyond_remote_api(error: &PubSubError) -> bool {
    matches!(error, PubSubError::Unsupported { component, .. }
        if component == pubsub_components::runtime::BEYOND_REMOTE_API)
}

impl<T> Context<T> for Result<T, PubSubError> {
    fn doing(self, doing: &str) -> Result<T, CaseError> {
        self.map_err(|e| {
            // A remote runtime's API cannot express what the case asks: not applicable.
            if is_beyond_remote_api(&e) {
                CaseError::CannotProvoke(format!("{doing}: {e}"))
            } else {
                CaseError::Component(format!("{doing}: {e}"))
            }
        })
    }
}

/// The result type of case bodies.
pub type CaseRun = Result<Outcome, CaseError>;
