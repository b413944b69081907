//! `list`.

use crate::support::{cli, run};

#[test]
fn list_prints_every_case() {
    let output = run(cli().arg("list"));
    assert!(output.success());
    for case in pubsub_conformance::catalogue::catalogue() {
        assert!(output.stdout.contains(case.id), "list misses {}", case.id);
    }
}
