//! The versioned result model of a certification run, and its renderers.
//!
//! `report.json` is a [`RunReport`] serialised with serde; [`SCHEMA_VERSION`] changes
//! whenever a field changes meaning, so that older results can be refused or merged
//! knowingly.

mod baseline;
mod bench;
mod levels;
mod merge;
mod paths;
mod render;
mod summary;
mod versions;

pub use baseline::{compare, Baseline, CellChange, ChangeKind};
pub use bench::{BenchReport, LatencySummary, Measurement};
pub use levels::{certification_level, CertificationLevel, ComponentSummary, LEVEL_LEGEND};
pub use merge::{merge, MergeError};
pub use paths::{path_comparison, Explanation, PathComparison, PathDifference, PathRow};
pub use render::{
    badge_json, bench_chart_svg, bench_chart_text, file_stem, html, junit, markdown, write_all,
    CHART_SERIES,
};
pub use summary::summary_table;
pub use versions::{compatibility, Compatibility, VersionColumn, VersionVerdict};

use serde::{Deserialize, Serialize};

/// The version of the JSON result format.
pub const SCHEMA_VERSION: u32 = 1;

/// One certification run over one or more components.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub suite_version: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339.
    pub finished_at: String,
    pub machine: Machine,
    pub components: Vec<ComponentReport>,
    /// Cells that merged runs disagree on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Conflict>,
    /// Benchmark results, when `bench` ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bench: Vec<BenchReport>,
    /// What changed since a baseline run (`certify --baseline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// Two runs disagreeing on one cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conflict {
    pub component: String,
    pub case: String,
    /// Each run's status, in merge order.
    pub statuses: Vec<Status>,
}

impl RunReport {
    /// True when any cell is FAIL, ERROR or FLAKY (the CLI exits non-zero).
    pub fn has_failures(&self) -> bool {
        self.components
            .iter()
            .flat_map(|c| &c.cases)
            .any(CaseResult::counts_as_failure)
    }

    /// True when a cell regressed since the baseline the report was compared with.
    pub fn regressed(&self) -> bool {
        self.baseline.as_ref().is_some_and(|b| b.regressions() > 0)
    }
}

/// Where the run happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub os: String,
    pub arch: String,
    pub cpus: usize,
}

/// The results of one component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentReport {
    /// The definition's `metadata.name`.
    pub name: String,
    /// `spec.type` without `pubsub.`.
    pub component_type: String,
    /// The definition file.
    pub definition: String,
    pub provisioning: Provisioning,
    /// The capability declaration, as declared.
    pub capabilities: serde_json::Value,
    pub cases: Vec<CaseResult>,
    /// For a component written elsewhere (an adapter for a published crate): the crate
    /// and its version, e.g. `omniqueue 0.3.0`. Reports mark the row third-party.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub third_party: Option<String>,
    /// For a row of the broker-version axis (`certify --broker-versions`): the
    /// component and the broker version it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_axis: Option<BrokerAxis>,
}

/// Where a row sits on the broker-version axis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerAxis {
    /// The component's name (the row's name without the version).
    pub component: String,
    /// The broker software, e.g. `redis` or `valkey`.
    pub broker: String,
    /// The broker version the image recorded, e.g. `8.0.2`.
    pub version: String,
    /// The Debian release it came from.
    pub release: String,
}

impl ComponentReport {
    /// The row's label: the name, with the crate when third-party.
    pub fn label(&self) -> String {
        match &self.third_party {
            Some(adapts) => format!("{} (third-party: {adapts})", self.name),
            None => self.name.clone(),
        }
    }
}

impl ComponentReport {
    /// How many cells have the given status.
    pub fn count(&self, status: Status) -> usize {
        self.cases.iter().filter(|c| c.status == status).count()
    }
}

/// How the broker behind a component was obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provisioning {
    /// `in-process`, `local-process`, `external` or `container`.
    pub kind: String,
    /// Where it was reached, when it has an address.
    pub endpoint: Option<String>,
    /// The broker and its version as the component reported it.
    pub broker_version: Option<String>,
    /// Why it could not be provisioned, and how to get one.
    pub problem: Option<String>,
    /// What this broker (version) lacks that the component needs, with the broker's
    /// own refusal: the row's cases were not run (each UNSUPPORTED, saying so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_broker: Option<String>,
}

/// The verdict of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pass,
    Fail,
    Unsupported,
    NotProvisioned,
    Error,
    Flaky,
}

impl Status {
    /// Every status, in the order tables show them as columns.
    pub const ALL: [Status; 6] = [
        Status::Pass,
        Status::Fail,
        Status::Unsupported,
        Status::NotProvisioned,
        Status::Error,
        Status::Flaky,
    ];

    /// The symbol shown next to the label, readable without colour.
    pub fn symbol(self) -> &'static str {
        match self {
            Status::Pass => "✔",
            Status::Fail => "✘",
            Status::Unsupported => "–",
            Status::NotProvisioned => "∅",
            Status::Error => "!",
            Status::Flaky => "≈",
        }
    }

    /// How bad a status is, for picking the worse of two (higher is worse).
    pub fn severity(self) -> u8 {
        match self {
            Status::Pass => 0,
            Status::Unsupported => 1,
            Status::NotProvisioned => 2,
            Status::Flaky => 3,
            Status::Error => 4,
            Status::Fail => 5,
        }
    }

    /// The label shown in tables.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Unsupported => "UNSUPPORTED",
            Status::NotProvisioned => "NOT PROVISIONED",
            Status::Error => "ERROR",
            Status::Flaky => "FLAKY",
        }
    }
}

/// How a passing feature was provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Native,
    Emulated,
}

/// One cell: a case run against a component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub id: String,
    pub family: String,
    /// `core`, `feature` or `certification`.
    pub level: String,
    /// The capability the case needs, if any.
    pub feature: Option<String>,
    pub must: String,
    pub status: Status,
    /// For PASS and FLAKY: native or emulated.
    pub mode: Option<Mode>,
    pub duration_ms: u64,
    /// The time bound the case ran under.
    pub bound_ms: u64,
    /// How many times it ran (more than one only after a failure).
    pub attempts: u32,
    pub evidence: Evidence,
    /// Set when the component's expectations file records this cell as a known
    /// defect of a broker or client library: the reason. A FAIL with it is expected;
    /// a PASS with it means the expectation is stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_failure: Option<String>,
    /// With `certify --repeat N`: how many of the N runs passed (the status is PASS
    /// only when all did, FLAKY when some did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Runs>,
}

/// How many runs of a repeated cell passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runs {
    pub runs: u32,
    pub passes: u32,
}

impl CaseResult {
    /// FAIL, ERROR or FLAKY that no expectation explains, or a stale expectation:
    /// what makes a run fail.
    pub fn counts_as_failure(&self) -> bool {
        (matches!(self.status, Status::Fail | Status::Error | Status::Flaky)
            && !self.is_expected_failure())
            || self.passes_unexpectedly()
    }

    /// A FAIL the expectations file predicts (or a FLAKY one an intermittent entry
    /// predicts: the expectations mark only those).
    pub fn is_expected_failure(&self) -> bool {
        matches!(self.status, Status::Fail | Status::Flaky) && self.expected_failure.is_some()
    }

    /// A PASS where the expectations file predicts a FAIL (the entry is stale).
    pub fn passes_unexpectedly(&self) -> bool {
        self.status == Status::Pass && self.expected_failure.is_some()
    }
}

/// Why a cell has its verdict.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Evidence {
    /// What the checker found wrong (empty for PASS).
    pub findings: Vec<String>,
    /// Allowed but noteworthy (e.g. over-reported bulk failures).
    pub warnings: Vec<String>,
    /// Facts worth reading: the unsupported error seen, the reason a case could not run.
    pub notes: Vec<String>,
    /// An excerpt of the recorded history.
    pub history: Vec<String>,
    /// Warnings and errors logged by the runtime and the component during the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<String>,
    /// Faults, publishes and deliveries over time, for cases that inject faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

impl Evidence {
    /// The first finding, else the first note: the one line that says why a cell has
    /// its verdict.
    pub fn first_reason(&self) -> Option<&str> {
        self.findings
            .first()
            .or(self.notes.first())
            .map(String::as_str)
    }
}

/// What happened during a fault case, over time (drawn as a small SVG in the HTML).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// From the first to the last event.
    pub span_ms: u64,
    pub events: Vec<TimelineEvent>,
}

/// One event on a timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEvent {
    /// Since the first event.
    pub at_ms: u64,
    pub lane: Lane,
    /// Shown for faults; the key for publishes and deliveries.
    pub label: String,
}

/// The lanes of a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lane {
    Fault,
    Publish,
    PublishFailed,
    Delivery,
}
