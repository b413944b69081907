//! What a conformance case is: its id, MUST statement, capabilities, level, lane,
//! faults and time bound, as data that the runner, `list`, the docs and the reports
//! read alike.

use super::bound::Bound;
use crate::context::CaseContext;
use crate::outcome::CaseRun;
use futures::future::BoxFuture;
use pubsub_components::Feature;
use serde::{Deserialize, Serialize};

/// How demanding a case is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Every component must pass it.
    Core,
    /// Required when the component declares the feature.
    Feature,
    /// Behaviour under faults and load.
    Certification,
}

impl Level {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Core => "core",
            Level::Feature => "feature",
            Level::Certification => "certification",
        }
    }

    /// Parses `core`, `feature` or `certification`.
    pub fn parse(text: &str) -> Option<Level> {
        [Level::Core, Level::Feature, Level::Certification]
            .into_iter()
            .find(|l| l.name() == text)
    }
}

/// A fault a case injects; its broker must be able to take it, or the cell is NOT
/// PROVISIONED with the reason (an in-process or external broker cannot be faulted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Injects {
    /// Kills the broker (SIGKILL) and starts it again on the same data.
    BrokerRestart,
    /// Freezes the broker (SIGSTOP, `docker pause`) and thaws it.
    BrokerPause,
    /// Cuts, black-holes, slows or resets the network through the fault proxy.
    Network,
}

impl Injects {
    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Injects::BrokerRestart => "broker-restart",
            Injects::BrokerPause => "broker-pause",
            Injects::Network => "network",
        }
    }
}

/// The body of a case.
pub type CaseFn = fn(CaseContext) -> BoxFuture<'static, CaseRun>;

/// One conformance case.
#[derive(Clone)]
pub struct Case {
    /// Stable id, `family.name`.
    pub id: &'static str,
    /// What a conformant component MUST do.
    pub must: &'static str,
    /// The capabilities it needs; when one is declared unsupported the case checks
    /// that using it is refused clearly instead.
    pub requires: &'static [Feature],
    pub level: Level,
    /// The faults it injects.
    pub injects: &'static [Injects],
    /// Where `certify` runs it among the other cases of its component.
    pub lane: Lane,
    /// Whether it runs with a bystander group (see [`crate::bystander`]) where the
    /// component has several groups on a topic.
    pub bystander: bool,
    /// The partition count of every topic the case makes, for a partitioned twin
    /// (the topology dimension); `None`: topics as a publish creates them.
    pub partitions: Option<u32>,
    pub bound: Bound,
    pub run: CaseFn,
}

/// Where `certify` runs a case among the others of its component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// With other cases of the component, on their own topics and groups.
    Shared,
    /// Its verdict depends on when things happen (a delay's precision, a TTL's
    /// edge, a batch's await): together with the other timed cases, which mostly
    /// wait, after the shared lane, so that its load cannot make them late.
    Timed,
    /// Faults or loads the broker, or rebuilds the component: alone, after the rest.
    Exclusive,
    /// Exclusive, and moves a backlog of tens of thousands of messages through the
    /// broker and the harness: one such case at a time in the whole run, after the
    /// component's other exclusive cases (several at once, one per row of a matrix,
    /// starve the harness, whose verdicts would then judge the machine).
    Backlog,
}

impl Lane {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Shared => "shared",
            Lane::Timed => "timed",
            Lane::Exclusive => "exclusive",
            Lane::Backlog => "backlog",
        }
    }

    /// Whether its cases run alone, after the shared and timed lanes.
    pub fn is_exclusive(self) -> bool {
        matches!(self, Lane::Exclusive | Lane::Backlog)
    }
}

impl Case {
    /// Whether it moves a backlog of tens of thousands of messages (see
    /// [`Lane::Backlog`]).
    pub fn moves_a_backlog(&self) -> bool {
        self.lane == Lane::Backlog
    }

    /// The family: the id up to the first dot.
    pub fn family(&self) -> &'static str {
        self.id.split('.').next().unwrap_or(self.id)
    }

    /// The capabilities it needs and the faults it injects, as text (`-` for none),
    /// e.g. `bulk-publish` or `bulk-publish; faults: network`.
    pub fn requirement(&self) -> String {
        let features = self
            .requires
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join("+");
        let faults = self
            .injects
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join("+");
        match (features.is_empty(), faults.is_empty()) {
            (true, true) => "-".into(),
            (false, true) => features,
            (true, false) => format!("faults: {faults}"),
            (false, false) => format!("{features}; faults: {faults}"),
        }
    }
}
