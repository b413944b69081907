//! Certification levels and per-component summaries.
//!
//! * **Conformant**: every core case passes.
//! * **Feature-complete**: conformant, and every feature case passes or is declared
//!   unsupported (with the refusal verified).
//! * **Certified without faults**: feature-complete, and every certification case
//!   passes except those that inject faults, which could not run because the suite
//!   cannot fault the broker (in process, or an external broker).
//! * **Certified**: feature-complete, and every certification case passes, the fault
//!   cases included.
//!
//! A level is only reached when the run included cases of that level.

use crate::{ComponentReport, Mode, Status};
use serde::Serialize;

/// The highest level a component reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum CertificationLevel {
    None,
    Conformant,
    FeatureComplete,
    CertifiedWithoutFaults,
    Certified,
}

impl CertificationLevel {
    /// The name shown in reports.
    pub fn label(self) -> &'static str {
        match self {
            CertificationLevel::None => "not conformant",
            CertificationLevel::Conformant => "Conformant",
            CertificationLevel::FeatureComplete => "Feature-complete",
            CertificationLevel::CertifiedWithoutFaults => "Certified without faults",
            CertificationLevel::Certified => "Certified",
        }
    }
}

/// What each level proves, for the reports' legend and docs/faults-and-levels.md.
pub const LEVEL_LEGEND: [(&str, &str); 5] = [
    ("Conformant", "every core case passed"),
    (
        "Feature-complete",
        "Conformant, and every feature case passed or is UNSUPPORTED (declared, and the refusal verified)",
    ),
    (
        "Certified without faults",
        "Feature-complete, and every certification case passed except the fault cases, which could not run: the suite cannot fault this broker (in process, or external); nothing was proven about broker restarts, network faults or crashed members",
    ),
    (
        "Certified",
        "Feature-complete, and every certification case passed, the fault cases included: the broker was killed, restarted and paused, the network cut, black-holed and slowed, members crashed, and the component recovered within its declared bounds without losing what it acknowledged",
    ),
    (
        "not conformant",
        "a core case did not pass",
    ),
];

/// The level `component` reached.
pub fn certification_level(component: &ComponentReport) -> CertificationLevel {
    let all = |level: &str, ok: &dyn Fn(Status) -> bool| {
        let mut at = component
            .cases
            .iter()
            .filter(|c| c.level == level)
            .peekable();
        at.peek().is_some() && at.all(|c| ok(c.status))
    };
    if !all("core", &|s| s == Status::Pass) {
        return CertificationLevel::None;
    }
    if !all("feature", &|s| {
        matches!(s, Status::Pass | Status::Unsupported)
    }) {
        return CertificationLevel::Conformant;
    }
    if all("certification", &|s| s == Status::Pass) {
        return CertificationLevel::Certified;
    }
    // Fault cases that could not run (NOT PROVISIONED: no broker to fault) keep the
    // level short of Certified, and say so.
    let faults_missing = component
        .cases
        .iter()
        .any(|c| c.level == "certification" && c.status == Status::NotProvisioned);
    if faults_missing
        && all("certification", &|s| {
            matches!(s, Status::Pass | Status::NotProvisioned)
        })
    {
        return CertificationLevel::CertifiedWithoutFaults;
    }
    CertificationLevel::FeatureComplete
}

/// Counts shown in a component's summary row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentSummary {
    pub passed: usize,
    pub failed: usize,
    pub unsupported: usize,
    pub other: usize,
    pub native: usize,
    pub emulated: usize,
    pub level: CertificationLevel,
}

impl ComponentSummary {
    /// Summarises one component's cells.
    pub fn of(component: &ComponentReport) -> Self {
        let passed = component.count(Status::Pass);
        let failed = component.count(Status::Fail);
        let unsupported = component.count(Status::Unsupported);
        let mode = |m: Mode| {
            component
                .cases
                .iter()
                .filter(|c| c.status == Status::Pass && c.feature.is_some() && c.mode == Some(m))
                .count()
        };
        ComponentSummary {
            passed,
            failed,
            unsupported,
            other: component.cases.len() - passed - failed - unsupported,
            native: mode(Mode::Native),
            emulated: mode(Mode::Emulated),
            level: certification_level(component),
        }
    }

    /// The emulated share of passing feature cells, in percent.
    pub fn emulated_percent(&self) -> u32 {
        let total = self.native + self.emulated;
        (self.emulated * 100).checked_div(total).unwrap_or(0) as u32
    }
}
