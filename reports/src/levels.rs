//! Certification levels and per-component summaries.
//!
//! * **Conformant**: every core case passes.
//! * **Feature-complete**: conformant, and every feature case passes or is declared
//!   unsupported (with the refusal verified).
//! * **Certified**: feature-complete, and every certification case passes.
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
    Certified,
}

impl CertificationLevel {
    /// The name shown in reports.
    pub fn label(self) -> &'static str {
        match self {
            CertificationLevel::None => "not conformant",
            CertificationLevel::Conformant => "Conformant",
            CertificationLevel::FeatureComplete => "Feature-complete",
            CertificationLevel::Certified => "Certified",
        }
    }
}

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
    if !all("certification", &|s| s == Status::Pass) {
        return CertificationLevel::FeatureComplete;
    }
    CertificationLevel::Certified
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
