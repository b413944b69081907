//! Expected failures: real defects of a broker version or a client library (never of
//! this suite's own code), kept as web-platform-tests keeps expectations: one file per
//! component, `expectations/<component>.yaml` beside its definition, each entry with
//! the case, the broker version it was seen on and the reason. A matching FAIL keeps
//! its verdict but is marked expected (the test target stays green); a PASS where a
//! FAIL is expected is flagged, so that a fixed defect's entry is removed.

use crate::catalogue::find;
use crate::row_paths::PATH_ROW_SUFFIXES;
use anyhow::{bail, Context as _};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One expected failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// The case id.
    pub case: String,
    /// The start of the broker version the defect was seen on, as the component
    /// reports it (e.g. `RabbitMQ 3.10.8`); empty: any broker.
    #[serde(default)]
    pub broker: String,
    /// The client library and the start of its version the defect was seen with, as
    /// the component names it (e.g. `librdkafka 2.12`): the entry holds only with it.
    /// An entry names a broker, a client, or both.
    #[serde(default)]
    pub client: Option<String>,
    /// What goes wrong, and where the evidence is.
    pub reason: String,
    /// The defect shows in some runs only (as web-platform-tests' `[FAIL, PASS]`):
    /// a PASS is then accepted, not flagged as a stale entry.
    #[serde(default)]
    pub intermittent: bool,
    /// The entry holds on rows through this path only (`attached sidecar` for
    /// `<component> via attached sidecar`): a broker defect that only that path's
    /// use of the broker meets. None: every row of the component.
    #[serde(default)]
    pub via: Option<String>,
    /// The file the entry was read from.
    #[serde(skip)]
    pub source: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    expectations: Vec<Expected>,
}

/// The expected failures of one component.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// Where they were read from (`None`: the component has no file).
    pub file: Option<PathBuf>,
    pub entries: Vec<Expected>,
}

impl Expectations {
    /// The file of the component (or row) defined in `definition`
    /// (`expectations/<name>.yaml` beside it, the name as `pubsub_reports::file_stem` spells it).
    pub fn path_for(definition: &Path, name: &str) -> PathBuf {
        definition
            .parent()
            .unwrap_or(Path::new("."))
            .join("expectations")
            .join(format!("{}.yaml", pubsub_reports::file_stem(name)))
    }

    /// Reads the component's file; none is no expectations. A row through another
    /// client or sidecar (`<component> via <what>`) takes them, and also the entries of
    /// `expectations/via-<what>.yaml`, that client's defects whatever the component
    /// (e.g. `via-dapr-dapr-client.yaml`). Unknown cases and bad YAML are errors
    /// naming the file.
    pub fn load(definition: &Path, name: &str) -> anyhow::Result<Self> {
        // A row on one broker version (`<component> on <broker> <version>`), and a row
        // through a sidecar or client (`<component> via <what>`), take the component's
        // file: its entries name the broker versions they hold for, and a broker's
        // defect shows whatever reaches the broker.
        let (row, via) = match name.split_once(" via ") {
            Some((row, via)) => (row, Some(via)),
            None => (name, None),
        };
        let component = crate::provision::versions::component_of(row);
        let mut expectations = Self::load_file(&Self::path_for(definition, component))?;
        // An entry of one path holds on that path's rows only.
        expectations
            .entries
            .retain(|entry| entry.via.is_none() || entry.via.as_deref() == via);
        if let Some(via) = via {
            let shared = Self::load_file(&Self::path_for(definition, &format!("via {via}")))?;
            expectations.file = expectations.file.or(shared.file);
            expectations.entries.extend(shared.entries);
        }
        Ok(expectations)
    }

    /// Reads an expectations file; none there is no expectations. Unknown cases and
    /// bad YAML are errors naming the file.
    pub fn load_file(path: &Path) -> anyhow::Result<Self> {
        let path = path.to_path_buf();
        if !path.exists() {
            return Ok(Expectations::default());
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file: File = serde_yaml::from_str(&text)
            .with_context(|| format!("{}: not an expectations file", path.display()))?;
        for entry in &file.expectations {
            if find(&entry.case).is_none() {
                bail!(
                    "{}: case '{}' is not in the catalogue (see `list`)",
                    path.display(),
                    entry.case
                );
            }
            let names_client = entry.client.as_ref().is_some_and(|c| !c.trim().is_empty());
            if (entry.broker.trim().is_empty() && !names_client) || entry.reason.trim().is_empty() {
                bail!(
                    "{}: the entry for '{}' needs a broker or client version and a reason",
                    path.display(),
                    entry.case
                );
            }
            if let Some(via) = &entry.via {
                let suffix = format!(" via {via}");
                if !PATH_ROW_SUFFIXES.contains(&suffix.as_str()) {
                    let paths: Vec<&str> = PATH_ROW_SUFFIXES
                        .iter()
                        .map(|suffix| suffix.trim_start_matches(" via "))
                        .collect();
                    bail!(
                        "{}: the entry for '{}' names no path in 'via: {via}' (one of: {})",
                        path.display(),
                        entry.case,
                        paths.join(", ")
                    );
                }
            }
        }
        let entries = file
            .expectations
            .into_iter()
            .map(|entry| Expected {
                source: path.clone(),
                ..entry
            })
            .collect();
        Ok(Expectations {
            file: Some(path),
            entries,
        })
    }

    /// The entry for `case` on a broker whose version text is `broker_version` (a row
    /// through a client reports `<client version> on <broker version>`: a broker's
    /// entry holds there too).
    pub fn entry(&self, case: &str, broker_version: &str) -> Option<&Expected> {
        self.entries.iter().find(|e| {
            e.case == case
                && (broker_version.starts_with(e.broker.as_str())
                    || broker_version.contains(&format!(" on {}", e.broker)))
                && e.client
                    .as_ref()
                    .is_none_or(|client| broker_version.contains(&format!("client {client}")))
        })
    }

    /// The entry for `case` on a broker whose version text is `broker_version`, as the
    /// text a cell carries.
    pub fn for_cell(&self, case: &str, broker_version: &str) -> Option<String> {
        let entry = self.entry(case, broker_version)?;
        let seen_on = match (&entry.client, entry.broker.is_empty()) {
            (Some(client), true) => format!("client {client}"),
            (Some(client), false) => format!("{}, client {client}", entry.broker),
            (None, _) => entry.broker.clone(),
        };
        Some(format!(
            "{}{} (seen on {seen_on}; {})",
            if entry.intermittent {
                "intermittent: "
            } else {
                ""
            },
            entry.reason,
            entry.source.display()
        ))
    }

    /// Marks a FAIL or PASS cell with its entry: a FAIL becomes expected (and so does
    /// a FLAKY cell, failed then passed, of an intermittent entry); a PASS is flagged
    /// (the entry is stale), unless the entry is intermittent, when the PASS stands
    /// with a note.
    pub fn apply(&self, result: &mut pubsub_reports::CaseResult, broker_version: &str) {
        use pubsub_reports::Status;
        let Some(entry) = self.entry(&result.id, broker_version) else {
            return;
        };
        match result.status {
            Status::Fail => result.expected_failure = self.for_cell(&result.id, broker_version),
            Status::Flaky if entry.intermittent => {
                result.expected_failure = self.for_cell(&result.id, broker_version)
            }
            Status::Pass if entry.intermittent => result.evidence.notes.push(format!(
                "listed as an intermittent expected failure, and passed this run: {}",
                self.for_cell(&result.id, broker_version)
                    .unwrap_or_default()
            )),
            Status::Pass => result.expected_failure = self.for_cell(&result.id, broker_version),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir.join("expectations")).unwrap();
        std::fs::write(dir.join("expectations/x.yaml"), text).unwrap();
        dir.join("x.yaml")
    }

    #[test]
    fn an_entry_applies_to_its_case_on_its_broker_version_only() {
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: certification.broker-restart\n    broker: RabbitMQ 3.10\n    reason: quorum queues stall\n",
        );
        let expectations = Expectations::load(&definition, "x").unwrap();
        let cell = expectations
            .for_cell(
                "certification.broker-restart",
                "RabbitMQ 3.10.8 at 127.0.0.1:5672",
            )
            .unwrap();
        assert!(
            cell.starts_with("quorum queues stall (seen on RabbitMQ 3.10;"),
            "{cell}"
        );
        assert!(expectations
            .for_cell("certification.broker-restart", "RabbitMQ 3.13.7 at x")
            .is_none());
        assert!(expectations
            .for_cell("certification.network-cut", "RabbitMQ 3.10.8")
            .is_none());
        assert!(Expectations::load(&definition, "absent")
            .unwrap()
            .entries
            .is_empty());
    }

    #[test]
    fn an_entry_naming_a_client_library_holds_with_that_client_only() {
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: publish.delivery\n    client: librdkafka 2.12\n    reason: the library drops it\n  - case: publish.fidelity\n    broker: tansu 0.6\n    client: librdkafka 2.12\n    reason: both\n",
        );
        let expectations = Expectations::load(&definition, "x").unwrap();
        let with = "tansu 0.6.0; Kafka protocol at x; client librdkafka 2.12.1";
        let cell = expectations.for_cell("publish.delivery", with).unwrap();
        assert!(cell.contains("(seen on client librdkafka 2.12;"), "{cell}");
        assert!(expectations
            .for_cell("publish.delivery", "tansu 0.6.0; client librdkafka 2.13.0")
            .is_none());
        assert!(expectations
            .for_cell("publish.delivery", "tansu 0.6.0")
            .is_none());
        let both = expectations.for_cell("publish.fidelity", with).unwrap();
        assert!(
            both.contains("(seen on tansu 0.6, client librdkafka 2.12;"),
            "{both}"
        );
        assert!(expectations
            .for_cell("publish.fidelity", "tansu 0.7.0; client librdkafka 2.12.1")
            .is_none());
        let neither = write(
            dir.path(),
            "expectations:\n  - case: publish.delivery\n    reason: something\n",
        );
        let error = Expectations::load(&neither, "x").unwrap_err().to_string();
        assert!(
            error.contains("needs a broker or client version"),
            "{error}"
        );
    }

    #[test]
    fn a_row_through_a_client_takes_the_clients_entries_too() {
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: certification.broker-restart\n    broker: B 1\n    reason: the broker stalls\n",
        );
        std::fs::write(
            dir.path().join("expectations/via-dapr-dapr-client.yaml"),
            "expectations:\n  - case: bulk-publish.partial-failure\n    broker: \"@dapr/dapr 3.18\"\n    reason: failedEntries lost\n",
        )
        .unwrap();
        let row = Expectations::load(&definition, "x via @dapr/dapr client").unwrap();
        let cell = row
            .for_cell("bulk-publish.partial-failure", "@dapr/dapr 3.18.0 on B 1")
            .unwrap();
        assert!(cell.contains("via-dapr-dapr-client.yaml"), "{cell}");
        assert!(row
            .for_cell("bulk-publish.partial-failure", "@dapr/dapr 3.19.0 on B 1")
            .is_none());
        // The component's entries (its broker's defects) hold through the client too.
        assert!(row
            .for_cell("certification.broker-restart", "@dapr/dapr 3.18.0 on B 1")
            .is_some());
        assert!(row
            .for_cell("certification.broker-restart", "@dapr/dapr 3.18.0 on B 2")
            .is_none());
        let through_serve = Expectations::load(&definition, "x via serve").unwrap();
        assert!(through_serve
            .for_cell("certification.broker-restart", "B 1")
            .is_some());
        let plain = Expectations::load(&definition, "x").unwrap();
        assert!(plain
            .for_cell("bulk-publish.partial-failure", "@dapr/dapr 3.18.0 on B 1")
            .is_none());
        assert!(plain
            .for_cell("certification.broker-restart", "B 1")
            .is_some());
    }

    #[test]
    fn an_entry_of_one_path_holds_on_that_paths_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: bulk-subscribe.handler-error\n    broker: B 1\n    via: attached sidecar\n    reason: one group for every subscription meets a broker defect\n",
        );
        let attached = Expectations::load(&definition, "x via attached sidecar").unwrap();
        assert!(attached
            .for_cell("bulk-subscribe.handler-error", "B 1")
            .is_some());
        for row in ["x", "x via serve", "x via sidecar", "x on B 1"] {
            let other = Expectations::load(&definition, row).unwrap();
            assert!(
                other
                    .for_cell("bulk-subscribe.handler-error", "B 1")
                    .is_none(),
                "{row}"
            );
        }
    }

    #[test]
    fn a_pass_is_flagged_unless_the_entry_is_intermittent_and_only_intermittent_entries_expect_flaky(
    ) {
        use pubsub_reports::{CaseResult, Status};
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: certification.broker-restart\n    broker: B 1\n    reason: stalls\n  - case: certification.network-cut\n    broker: B 1\n    intermittent: true\n    reason: stalls sometimes\n",
        );
        let expectations = Expectations::load(&definition, "x").unwrap();
        let cell = |id: &str, status: Status| {
            let mut result = CaseResult {
                id: id.into(),
                family: String::new(),
                level: String::new(),
                feature: None,
                must: String::new(),
                status,
                mode: None,
                duration_ms: 0,
                bound_ms: 0,
                attempts: 1,
                evidence: Default::default(),
                expected_failure: None,
                runs: None,
            };
            expectations.apply(&mut result, "B 1.2");
            result
        };
        assert!(cell("certification.broker-restart", Status::Fail).is_expected_failure());
        assert!(cell("certification.broker-restart", Status::Pass).passes_unexpectedly());
        assert!(cell("certification.network-cut", Status::Fail).is_expected_failure());
        let passed = cell("certification.network-cut", Status::Pass);
        assert!(!passed.passes_unexpectedly() && passed.expected_failure.is_none());
        assert!(passed.evidence.notes[0].contains("intermittent"));
        // Failed, then passed on retry: what an intermittent entry predicts, and only
        // an intermittent one.
        let flaky = cell("certification.network-cut", Status::Flaky);
        assert!(flaky.is_expected_failure() && !flaky.counts_as_failure());
        let flaky = cell("certification.broker-restart", Status::Flaky);
        assert!(!flaky.is_expected_failure() && flaky.counts_as_failure());
        assert!(cell("publish.delivery", Status::Fail)
            .expected_failure
            .is_none());
    }

    #[test]
    fn unknown_cases_and_fields_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let definition = write(
            dir.path(),
            "expectations:\n  - case: no.such-case\n    broker: X\n    reason: y\n",
        );
        let error = Expectations::load(&definition, "x")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("x.yaml") && error.contains("no.such-case"),
            "{error}"
        );
        let definition = write(
            dir.path(),
            "expectations:\n  - case: publish.delivery\n    broker: X\n    reason: y\n    until: never\n",
        );
        let error = format!("{:#}", Expectations::load(&definition, "x").unwrap_err());
        assert!(error.contains("until"), "{error}");
    }
}
