//! The CI certification pipeline: the GitHub Actions workflow runs one shard per
//! fixture through `scripts/certify-matrix.sh`, and the same script's shards and merge
//! run here on real brokers.

use pubsub_conformance::reports::{RunReport, Status};
use serde_yaml::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn workflow() -> Value {
    let text = std::fs::read_to_string(root().join(".github/workflows/certify.yml")).unwrap();
    serde_yaml::from_str(&text).expect("the workflow is YAML")
}

/// Every `run:` of a job's steps, joined.
fn runs(job: &Value) -> String {
    job["steps"]
        .as_sequence()
        .expect("steps")
        .iter()
        .filter_map(|step| step["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("fixtures"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn the_workflow_runs_the_readmes_first_command_in_a_fresh_clone() {
    let workflow = workflow();
    let job = &workflow["jobs"]["fresh-clone"];
    assert!(
        runs(job).contains("./scripts/fresh-machine.sh"),
        "the fresh-clone job runs scripts/fresh-machine.sh"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.contains("./scripts/fresh-machine.sh"),
        ".ci/run checks the README's first command in a fresh clone"
    );
}

#[test]
fn the_workflow_shards_every_fixture_through_the_script() {
    let workflow = workflow();
    let shard = &workflow["jobs"]["shard"];
    let mut matrix: Vec<String> = shard["strategy"]["matrix"]["component"]
        .as_sequence()
        .expect("a component matrix")
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    matrix.sort();
    assert_eq!(
        matrix,
        fixture_names(),
        "one shard per fixture (the script names each by its file)"
    );
    // A fixture's file name is its component's name, which the shard certifies.
    for name in fixture_names() {
        let text = std::fs::read_to_string(root().join(format!("fixtures/{name}.yaml"))).unwrap();
        let definition: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(definition["metadata"]["name"].as_str(), Some(name.as_str()));
    }
    let shard_runs = runs(shard);
    assert!(shard_runs.contains("./scripts/install.sh --broker ${{ matrix.component }}"));
    assert!(shard_runs.contains(
        "./scripts/certify-matrix.sh shard ${{ matrix.component }} shards/${{ matrix.component }}"
    ));
    let merge = &workflow["jobs"]["merge"];
    let needs: Vec<&str> = merge["needs"]
        .as_sequence()
        .expect("the merge needs the shards of both matrices")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(needs, ["shard", "versions"]);
    assert_eq!(
        merge["if"].as_str(),
        Some("always()"),
        "the merge runs when a shard fails"
    );
    assert!(runs(merge).contains("./scripts/certify-matrix.sh merge shards reports/merged"));
    let uploads: Vec<&Value> = merge["steps"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact@"))
        })
        .collect();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0]["with"]["path"].as_str(), Some("reports/merged"));
    // The version axis: a job per broker version of each component with one, every
    // version of its axis, each certified through the script on that version alone.
    let versions = &workflow["jobs"]["versions"];
    let mut covered: Vec<(String, String)> = versions["strategy"]["matrix"]["include"]
        .as_sequence()
        .expect("a version matrix")
        .iter()
        .map(|entry| {
            (
                entry["component"].as_str().unwrap().to_string(),
                entry["broker"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    covered.sort();
    let mut axis: Vec<(String, String)> = Vec::new();
    for name in fixture_names() {
        let text = std::fs::read_to_string(root().join(format!("fixtures/{name}.yaml"))).unwrap();
        let definition: Value = serde_yaml::from_str(&text).unwrap();
        let component_type = definition["spec"]["type"]
            .as_str()
            .unwrap()
            .trim_start_matches("pubsub.");
        for point in pubsub_conformance::provision::versions::axis(component_type) {
            axis.push((name.clone(), format!("{}@{}", point.broker, point.release)));
        }
    }
    axis.sort();
    assert_eq!(
        covered, axis,
        "one job per broker version of each component"
    );
    let version_runs = runs(versions);
    assert!(version_runs.contains("sudo ./scripts/images.sh ${{ matrix.broker }}"));
    assert!(version_runs.contains(
        "./scripts/certify-matrix.sh shard ${{ matrix.component }} shards/${{ matrix.slug }} --broker-versions ${{ matrix.broker }}"
    ));
    for job in [shard, versions, merge] {
        assert!(job["timeout-minutes"].as_u64().is_some(), "a bounded job");
        for step in job["steps"].as_sequence().unwrap() {
            if let Some(action) = step["uses"].as_str() {
                assert!(
                    action
                        .rsplit_once("@v")
                        .is_some_and(|(_, v)| v.chars().all(|c| c.is_ascii_digit())),
                    "{action}: pin each action to a major version"
                );
            }
        }
    }
}

fn matrix_script(args: &[&str], summary: &Path, baseline: Option<&Path>) -> std::process::Output {
    let mut command = Command::new(root().join("scripts/certify-matrix.sh"));
    command
        .args(args)
        .env(
            "PUBSUB_CONFORMANCE_BIN",
            env!("CARGO_BIN_EXE_pubsub-conformance"),
        )
        .env("COMPONENTS", "memory redis")
        .env("GITHUB_STEP_SUMMARY", summary)
        .env_remove("PUBSUB_PROVISION");
    match baseline {
        Some(path) => command.env("PUBSUB_BASELINE", path),
        None => command.env_remove("PUBSUB_BASELINE"),
    };
    command.output().unwrap()
}

fn read(path: &Path) -> RunReport {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The script's shards run as separate certifications (one broker each) and merge
/// into one report; the job summary gets its Markdown; a second merge against the
/// first as baseline finds nothing changed.
#[test]
fn the_script_runs_shards_and_merges_them_here() {
    let dir = std::env::temp_dir().join(format!("pcs-pipeline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("matrix");
    let summary = dir.join("summary.md");
    let output = matrix_script(
        &["all", out.to_str().unwrap(), "--level", "core"],
        &summary,
        None,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for name in ["memory", "redis"] {
        let shard = read(&out.join(format!("shards/{name}/report.json")));
        assert_eq!(shard.components.len(), 1);
        assert_eq!(shard.components[0].name, name);
    }
    let merged = read(&out.join("report.json"));
    let names: Vec<&str> = merged.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["memory", "redis"]);
    for component in &merged.components {
        assert!(component.provisioning.problem.is_none(), "{component:?}");
        for cell in &component.cases {
            assert_eq!(cell.status, Status::Pass, "{} {}", component.name, cell.id);
        }
    }
    for file in ["index.html", "report.md", "junit.xml"] {
        assert!(out.join(file).exists(), "{file}");
    }
    let summary_text = std::fs::read_to_string(&summary).unwrap();
    assert!(
        summary_text.contains("# pub/sub conformance"),
        "{summary_text}"
    );
    assert!(summary_text.contains("| redis |"), "{summary_text}");

    let again = dir.join("again");
    let output = matrix_script(
        &[
            "merge",
            out.join("shards").to_str().unwrap(),
            again.to_str().unwrap(),
        ],
        &summary,
        Some(&out.join("report.json")),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("0 regression(s), 0 change(s)"), "{stdout}");
    assert!(read(&again.join("report.json")).baseline.is_some());
}

#[test]
fn the_script_refuses_bad_use() {
    let dir = std::env::temp_dir().join(format!("pcs-pipeline-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("summary.md");
    let output = matrix_script(&["merge", dir.to_str().unwrap(), "x"], &summary, None);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no shard report"));
    let output = matrix_script(&["shrad"], &summary, None);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("certify-matrix.sh shard NAME OUT"));
}
