//! The conformance catalogue: every case of [`cases`], sorted by id, as data (id,
//! MUST statement, capability, level, lane, time bound) read alike by the runner,
//! `list`, the test harness and reports.

pub use crate::cases::bound::Bound;
pub use crate::cases::case::{Case, CaseFn, Injects, Lane, Level};

use crate::cases;
use std::sync::LazyLock;

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
            // A partitioned twin is its case's id with `@partitioned`.
            let base = case
                .id
                .strip_suffix(crate::cases::TWIN_SUFFIX)
                .unwrap_or(case.id);
            assert_eq!(
                base != case.id,
                case.partitions.is_some(),
                "{}: only a partitioned twin's id ends in @partitioned",
                case.id
            );
            // A feature-pair row joins its features with `+`.
            let plus_ok = case.family() == crate::cases::pairs::FAMILY;
            assert!(
                base.contains('.')
                    && base.chars().all(|c| {
                        c.is_ascii_lowercase() || c == '.' || c == '-' || (plus_ok && c == '+')
                    }),
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
    fn cases_that_fault_or_load_the_broker_run_alone() {
        for case in catalogue() {
            if case.level == Level::Certification || !case.injects.is_empty() {
                assert!(case.lane.is_exclusive(), "{} runs beside others", case.id);
            }
        }
        let backlog: Vec<&str> = catalogue()
            .iter()
            .filter(|case| case.moves_a_backlog())
            .map(|case| case.id)
            .collect();
        assert_eq!(
            backlog,
            ["certification.backlog", "certification.long-drain"]
        );
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
