//! The conformance catalogue: every case as data (id, MUST statement, capability,
//! level, time bound) read alike by the runner, `list`, the test harness and reports.

use crate::cases;
use crate::context::CaseContext;
use crate::outcome::CaseRun;
use futures::future::BoxFuture;
use pubsub_components::{Capabilities, Feature};
use serde::Serialize;
use std::sync::LazyLock;
use std::time::Duration;

/// How demanding a case is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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

/// A case's time bound, derived from what the component declares.
#[derive(Clone, Copy)]
pub struct Bound {
    /// How it is derived, for `list` and the report.
    pub rule: &'static str,
    pub compute: fn(&Capabilities) -> Duration,
}

impl Bound {
    /// A bound computed from the capabilities.
    pub const fn new(rule: &'static str, compute: fn(&Capabilities) -> Duration) -> Self {
        Bound { rule, compute }
    }

    /// The bound for a component.
    pub fn for_caps(&self, caps: &Capabilities) -> Duration {
        (self.compute)(caps)
    }
}

/// A fault a case injects; its broker must be able to take it, or the cell is NOT
/// PROVISIONED with the reason (an in-process or external broker cannot be faulted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
    pub bound: Bound,
    pub run: CaseFn,
}

/// Where `certify` runs a case among the others of its component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
}

impl Lane {
    /// The lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Shared => "shared",
            Lane::Timed => "timed",
            Lane::Exclusive => "exclusive",
        }
    }
}

/// The families and ids whose verdict depends on timing (see [`Lane::Timed`]).
const TIMED: &[&str] = &[
    "delay.",
    "ttl.",
    "bulk-subscribe.max-await",
    "bulk-subscribe.expired-entries",
    "retry.delay",
];

/// The cases that move a backlog of tens of thousands of messages through the broker
/// and the harness: `certify` runs one of them at a time in the whole run (see
/// [`Case::moves_a_backlog`]).
const BACKLOG: &[&str] = &["certification.long-drain", "certification.backlog"];

impl Case {
    /// Whether it moves a backlog of tens of thousands of messages: several at once
    /// (one per row of a matrix) starve the harness, whose verdicts (a drain's rate,
    /// everything within the bound) would then judge the machine, not the component.
    pub fn moves_a_backlog(&self) -> bool {
        BACKLOG.contains(&self.id)
    }

    /// Where `certify` runs it: certification cases alone, timed ones in their lane.
    pub fn lane(&self) -> Lane {
        if self.level == Level::Certification || !self.injects.is_empty() {
            Lane::Exclusive
        } else if TIMED.iter().any(|t| {
            if t.ends_with('.') {
                self.id.starts_with(t)
            } else {
                self.id == *t
            }
        }) {
            Lane::Timed
        } else {
            Lane::Shared
        }
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

static CATALOGUE: LazyLock<Vec<Case>> = LazyLock::new(|| {
    let mut all = cases::all();
    all.sort_by_key(|c| c.id);
    all
});

/// Every case, sorted by id.
pub fn catalogue() -> &'static [Case] {
    &CATALOGUE
}

/// The case with this id.
pub fn find(id: &str) -> Option<&'static Case> {
    catalogue().iter().find(|c| c.id == id)
}

/// The catalogue as a Markdown table (what `list --format markdown` prints and
/// `docs/catalogue.md` holds).
pub fn markdown() -> String {
    let mut out =
        String::from("| id | level | capability | time bound | MUST |\n|---|---|---|---|---|\n");
    for case in catalogue() {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            case.id,
            case.level.name(),
            case.requirement(),
            case.bound.rule,
            case.must
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_documented_catalogue_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/catalogue.md");
        let documented = std::fs::read_to_string(path).unwrap_or_default();
        let table = markdown();
        assert!(
            documented.contains(&table),
            "docs/catalogue.md is out of date: regenerate its table with `cargo run -- list --format markdown`"
        );
    }

    #[test]
    fn ids_are_unique_well_formed_and_stated() {
        let mut seen = HashSet::new();
        for case in catalogue() {
            assert!(seen.insert(case.id), "duplicate id {}", case.id);
            assert!(
                case.id.contains('.')
                    && case
                        .id
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c == '.' || c == '-'),
                "malformed id {}",
                case.id
            );
            assert!(
                case.must.contains("MUST"),
                "{} has no MUST statement",
                case.id
            );
        }
    }

    #[test]
    fn every_contract_section_has_cases() {
        let families: HashSet<&str> = catalogue().iter().map(Case::family).collect();
        for family in [
            "publish",
            "envelope",
            "subscribe",
            "bulk-publish",
            "bulk-subscribe",
            "retry",
            "dead-letter",
            "ttl",
            "ordering",
            "delay",
            "multi-topic",
            "message-id",
            "partitions",
            "tracing",
            "certification",
        ] {
            assert!(families.contains(family), "no case in family {family}");
        }
    }
}
