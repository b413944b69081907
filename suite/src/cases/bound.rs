//! A case's time bound: a rule in words, such as `2 x delivery bound + 1 s cut`, that
//! is both what `list` and the reports show and what the runner computes from the
//! capabilities the component declares, so the two cannot drift apart.
//!
//! A rule is a sum of terms. A term is a declared quantity (`delivery bound`,
//! `redelivery bound`, `recovery bound`, `discovery bound`, `clock tolerance`,
//! `delay precision`, `lease`), a fixed time in seconds with an optional label
//! (`60 s restart`, `1.5 s delay`), or a parenthesised sum; any term may be multiplied
//! by a whole number (`3 x delivery bound`, `2 x (lease + 1 s)`).

use pubsub_components::Capabilities;
use std::time::Duration;

/// A case's time bound, derived from what the component declares.
#[derive(Clone)]
pub struct Bound {
    /// How it is derived, for `list` and the report.
    pub rule: &'static str,
    compute: Compute,
}

/// How a custom bound is computed from the capabilities.
pub type BoundFn = fn(&Capabilities) -> Duration;

#[derive(Clone)]
enum Compute {
    Sum(Vec<Term>),
    /// For the few bounds that depend on a declaration in a way a sum cannot say.
    Custom(BoundFn),
}

#[derive(Clone, Debug, PartialEq)]
struct Term {
    times: u32,
    part: Part,
}

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Fixed(Duration),
    Declared(Declared),
    Group(Vec<Term>),
}

/// A quantity the component declares in its capabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Declared {
    DeliveryBound,
    RedeliveryBound,
    RecoveryBound,
    DiscoveryBound,
    ClockTolerance,
    DelayPrecision,
    Lease,
}

const DECLARED: [(&str, Declared); 7] = [
    ("delivery bound", Declared::DeliveryBound),
    ("redelivery bound", Declared::RedeliveryBound),
    ("recovery bound", Declared::RecoveryBound),
    ("discovery bound", Declared::DiscoveryBound),
    ("clock tolerance", Declared::ClockTolerance),
    ("delay precision", Declared::DelayPrecision),
    ("lease", Declared::Lease),
];

impl Declared {
    fn of(self, caps: &Capabilities) -> Duration {
        match self {
            Declared::DeliveryBound => caps.delivery_bound,
            Declared::RedeliveryBound => caps.redelivery_bound,
            Declared::RecoveryBound => caps.recovery_bound,
            // Zero where the component has no partitioned topics.
            Declared::DiscoveryBound => caps
                .partitions
                .map_or(Duration::ZERO, |p| p.discovery_bound),
            Declared::ClockTolerance => caps.clock_tolerance,
            Declared::DelayPrecision => caps.delay_precision,
            Declared::Lease => caps.lease,
        }
    }
}

impl Bound {
    /// The bound a rule says; an error names what in the rule is not understood.
    pub fn parse(rule: &'static str) -> Result<Bound, String> {
        let mut parser = Parser { text: rule, at: 0 };
        let sum = parser.sum()?;
        parser.skip_spaces();
        if parser.at < rule.len() {
            return Err(parser.error("expected `+` or the end"));
        }
        Ok(Bound {
            rule,
            compute: Compute::Sum(sum),
        })
    }

    /// A bound whose rule is told in words but computed by `compute`.
    pub fn custom(rule: &'static str, compute: BoundFn) -> Bound {
        Bound {
            rule,
            compute: Compute::Custom(compute),
        }
    }

    /// The bound for a component.
    pub fn for_caps(&self, caps: &Capabilities) -> Duration {
        match &self.compute {
            Compute::Sum(terms) => total(terms, caps),
            Compute::Custom(compute) => compute(caps),
        }
    }
}

fn total(terms: &[Term], caps: &Capabilities) -> Duration {
    terms
        .iter()
        .map(|term| {
            let one = match &term.part {
                Part::Fixed(time) => *time,
                Part::Declared(declared) => declared.of(caps),
                Part::Group(inner) => total(inner, caps),
            };
            one * term.times
        })
        .sum()
}

struct Parser {
    text: &'static str,
    at: usize,
}

impl Parser {
    fn rest(&self) -> &'static str {
        &self.text[self.at..]
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: char) -> bool {
        self.skip_spaces();
        if self.rest().starts_with(token) {
            self.at += token.len_utf8();
            true
        } else {
            false
        }
    }

    fn error(&self, what: &str) -> String {
        format!("bound rule `{}`: {what} at `{}`", self.text, self.rest())
    }

    fn sum(&mut self) -> Result<Vec<Term>, String> {
        let mut terms = vec![self.term()?];
        while self.eat('+') {
            terms.push(self.term()?);
        }
        Ok(terms)
    }

    fn term(&mut self) -> Result<Term, String> {
        self.skip_spaces();
        let Some(number) = self.number() else {
            return Ok(Term {
                times: 1,
                part: self.part()?,
            });
        };
        if self.eat('x') {
            let times = number
                .parse()
                .map_err(|_| self.error("a multiplier must be a whole number"))?;
            return Ok(Term {
                times,
                part: self.part()?,
            });
        }
        if !self.eat('s') {
            return Err(self.error("a number must be followed by `x` or `s`"));
        }
        let seconds: f64 = number
            .parse()
            .map_err(|_| self.error("not a number of seconds"))?;
        // The label names what the time is for (`restart`, `cut`): words up to the
        // next `+` or `)`.
        let label = self
            .rest()
            .find(['+', ')', '('])
            .unwrap_or(self.rest().len());
        self.at += label;
        Ok(Term {
            times: 1,
            part: Part::Fixed(Duration::from_secs_f64(seconds)),
        })
    }

    fn number(&mut self) -> Option<&'static str> {
        let rest = self.rest();
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        self.at += end;
        Some(&rest[..end])
    }

    fn part(&mut self) -> Result<Part, String> {
        if self.eat('(') {
            let inner = self.sum()?;
            if !self.eat(')') {
                return Err(self.error("expected `)`"));
            }
            return Ok(Part::Group(inner));
        }
        self.skip_spaces();
        let rest = self.rest();
        let end = rest.find(['+', ')', '(']).unwrap_or(rest.len());
        let name = rest[..end].trim_end();
        let Some((_, declared)) = DECLARED.iter().find(|(known, _)| *known == name) else {
            let known: Vec<&str> = DECLARED.iter().map(|(known, _)| *known).collect();
            return Err(self.error(&format!(
                "unknown quantity `{name}` (known: {})",
                known.join(", ")
            )));
        };
        self.at += end;
        Ok(Part::Declared(*declared))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pubsub_components::capability::PartitionSupport;

    fn caps() -> Capabilities {
        Capabilities {
            delivery_bound: Duration::from_secs(5),
            redelivery_bound: Duration::from_secs(2),
            recovery_bound: Duration::from_secs(10),
            lease: Duration::from_secs(30),
            clock_tolerance: Duration::from_millis(50),
            delay_precision: Duration::from_millis(300),
            ..Capabilities::default()
        }
    }

    #[test]
    fn rules_compute_what_they_say() {
        let caps = caps();
        for (rule, expected) in [
            ("delivery bound", 5_000),
            ("2 x delivery bound + redelivery bound", 12_000),
            ("60 s restart + 2 x recovery bound", 80_000),
            ("1.5 s delay + delay precision", 1_800),
            ("1 s TTL + clock tolerance", 1_050),
            (
                "delivery bound + 2 x (lease + 1 s + redelivery bound)",
                71_000,
            ),
            ("4 x discovery bound + delivery bound", 5_000),
        ] {
            let bound = Bound::parse(rule).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                bound.for_caps(&caps),
                Duration::from_millis(expected),
                "{rule}"
            );
        }
        let partitioned = Capabilities {
            partitions: Some(PartitionSupport {
                discovery_bound: Duration::from_secs(3),
                emulated: false,
            }),
            ..caps
        };
        let bound = Bound::parse("4 x discovery bound + delivery bound").unwrap();
        assert_eq!(bound.for_caps(&partitioned), Duration::from_secs(17));
    }

    #[test]
    fn a_rule_it_does_not_understand_is_an_error_naming_the_part() {
        for (rule, names) in [
            ("2 x delivery bounds", "unknown quantity `delivery bounds`"),
            ("2 delivery bound", "followed by `x` or `s`"),
            ("2 x (lease + 1 s", "expected `)`"),
            ("1.5 x lease", "whole number"),
            ("lease )", "expected `+` or the end"),
            ("", "unknown quantity ``"),
        ] {
            let error = Bound::parse(rule)
                .err()
                .unwrap_or_else(|| panic!("{rule} parsed"));
            assert!(error.contains(names), "{rule}: {error}");
        }
    }
}
