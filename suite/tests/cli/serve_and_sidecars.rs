//! The component's cases over Dapr's HTTP API: `--through-serve`, sidecars started
//! from a command line (`--sidecar-command`) and a sidecar already running
//! (`--sidecar`).

use crate::support::{
    assert_verdict, certified, certify_cases, cli, report_in, row_named, run, temp_dir, verdict_of,
};
use pubsub_conformance::reports::Status;
use std::process::Command;

/// `--through-serve`: the component's cases again over Dapr's HTTP API, through
/// `serve` on the same broker, as a row of its own beside the in-process one (and a
/// second row publishing over serve's gRPC API); what
/// the API cannot express is UNSUPPORTED with the reason, a certification case that
/// only loads the broker runs like any other, and a case that faults the broker
/// cannot run in process, saying why (it runs on a broker: the next test).
#[test]
fn through_serve_certifies_rows_over_http_and_grpc() {
    let out = temp_dir("through-serve");
    let output = certify_cases(
        "memory",
        "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses,multi-topic.seek,certification.backlog,certification.broker-restart}",
        &["--through-serve"],
        &out,
    );
    let stderr = &output.stderr;
    let report = report_in(&out);
    let names: Vec<&str> = report.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["memory", "memory via serve", "memory via serve over gRPC"],
        "{stderr}"
    );
    // Publishing over gRPC gives the verdicts publishing over HTTP gives.
    for row in &report.components[1..] {
        for id in [
            "publish.delivery",
            "retry.redelivery",
            "dead-letter.drop",
            "bulk-subscribe.statuses",
            "certification.backlog",
        ] {
            let verdict = verdict_of(row, id);
            assert_eq!(verdict.0, "PASS", "{id} in {}: {verdict:?}", row.name);
        }
        let (seek, why) = verdict_of(row, "multi-topic.seek");
        assert_eq!(seek, "UNSUPPORTED", "{why}");
        let (restart, why) = verdict_of(row, "certification.broker-restart");
        assert_eq!(restart, "NOT PROVISIONED");
        assert!(why.contains("no broker to fault"), "{why}");
    }
    assert!(
        out.join("histories/memory-via-serve/publish.delivery.jsonl")
            .exists(),
        "the row keeps its own histories"
    );
    assert!(output.success(), "{stderr}");
}

/// `--through-serve` on a broker the suite spawns: the cases that kill the broker or
/// cut the network run over HTTP too, the component behind the fault proxy served
/// by `serve` like the row's own; and the row's later cases run over HTTP as well (a
/// component built again after a fault case is served again, not run in process).
#[test]
fn fault_cases_run_through_serve() {
    let out = temp_dir("faults-through-serve");
    let (report, stderr) = certified(
        "redis",
        "{certification.network-cut,certification.broker-restart,certification.close-stops-delivery}",
        &["--provision", "local", "--through-serve"],
        &out,
    );
    let row = row_named(&report, "redis via serve", &stderr);
    for id in ["certification.broker-restart", "certification.network-cut"] {
        let verdict = verdict_of(row, id);
        assert_eq!(verdict.0, "PASS", "{id} through serve: {verdict:?}");
    }
    let cut = std::fs::read_to_string(
        out.join("histories/redis-via-serve/certification.network-cut.jsonl"),
    )
    .unwrap();
    assert!(
        cut.contains("run behind the row's sidecars"),
        "the component behind the fault proxy is served over HTTP"
    );
    // The exclusive cases run one by one in id order: this one runs on the runtime
    // built again after the broker restart. In process it would pass; over HTTP no
    // consumer can be closed, so it is UNSUPPORTED.
    let (close, why) = verdict_of(row, "certification.close-stops-delivery");
    assert_eq!(
        close, "UNSUPPORTED",
        "still over HTTP after a fault case: {why}"
    );
}

/// `--sidecar-command`: sidecars started from a command line, one process per app
/// (here this program's own `serve`, as a user would start daprd), certified over
/// HTTP against the Redis server scripts/services.sh runs; a component the command's
/// sidecars cannot reach is refused with the reason.
#[test]
fn sidecar_command_certifies_sidecar_processes() {
    let bin = env!("CARGO_BIN_EXE_pubsub-conformance");
    let command = format!(
        "{bin} serve --components {{components_dir}} --http-port {{http_port}} --app-port {{app_port}} --app-id {{app_id}}"
    );
    let out = temp_dir("sidecar-command");
    let (report, stderr) = certified(
        "redis",
        "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses}",
        &["--provision", "external", "--sidecar-command", &command],
        &out,
    );
    let row = row_named(&report, "redis via sidecar", &stderr);
    for cell in &row.cases {
        assert_verdict(cell, "PASS", " through sidecar processes");
    }
    assert_eq!(row.cases.len(), 4);

    // The in-memory component lives in this process: no other process can serve it.
    let out = temp_dir("sidecar-command-memory");
    let output = certify_cases(
        "memory",
        "publish.delivery",
        &["--sidecar-command", &command],
        &out,
    );
    assert!(!output.success());
    let report = report_in(&out);
    let cell = &report.components[1].cases[0];
    assert_eq!(cell.status, Status::Error);
    assert!(
        cell.evidence.notes[0].contains("runs in process"),
        "{:?}",
        cell.evidence
    );
}

/// `--sidecar-command` with `--sidecar-protocol grpc`: the same sidecar processes
/// reached over Dapr's gRPC API (the suite publishes on `{grpc_port}`, each app answers
/// the app callbacks), with the verdicts of the row over HTTP; a command line that
/// does not say where the gRPC API listens is refused before anything runs.
#[test]
fn sidecar_command_certifies_sidecar_processes_over_grpc() {
    let bin = env!("CARGO_BIN_EXE_pubsub-conformance");
    let command = format!(
        "{bin} serve --components {{components_dir}} --http-port {{http_port}} --grpc-port {{grpc_port}} --app-port {{app_port}} --app-protocol grpc --app-id {{app_id}}"
    );
    let out = temp_dir("sidecar-command-grpc");
    let (report, stderr) = certified(
        "redis",
        "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses,bulk-publish.partial-failure}",
        &[
            "--provision",
            "external",
            "--sidecar-command",
            &command,
            "--sidecar-protocol",
            "grpc",
        ],
        &out,
    );
    let row = row_named(&report, "redis via sidecar over gRPC", &stderr);
    for cell in &row.cases {
        assert_verdict(cell, "PASS", " through sidecar processes over gRPC");
    }
    assert_eq!(row.cases.len(), 5);

    let without_grpc_port = format!(
        "{bin} serve --components {{components_dir}} --http-port {{http_port}} --app-port {{app_port}} --app-protocol grpc"
    );
    let out = temp_dir("sidecar-command-grpc-refused");
    let refused = certify_cases(
        "redis",
        "publish.delivery",
        &[
            "--provision",
            "external",
            "--sidecar-command",
            &without_grpc_port,
            "--sidecar-protocol",
            "grpc",
        ],
        &out,
    );
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--sidecar-command") && refused.stderr.contains("no {grpc_port}"),
        "{}",
        refused.stderr
    );
    assert!(!out.join("report.json").exists(), "nothing ran");
}

/// A port free on loopback now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the process when dropped (a test that fails leaves no sidecar behind).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `--sidecar`: a sidecar already running (this program's `serve` with hot reload,
/// started before the suite, as a user runs daprd) is attached to: the suite's app
/// listens on the sidecar's app port and each subscription is a resource the
/// suite writes to the sidecar's directory. What one app id cannot do (two groups
/// or two members on a topic) is UNSUPPORTED with the reason.
#[test]
fn sidecar_attaches_to_a_running_sidecar() {
    let resources = temp_dir("attached-resources");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/memory.yaml"),
        resources.join("memory.yaml"),
    )
    .unwrap();
    let (http_port, app_port) = (free_port(), free_port());
    let _sidecar = Running(
        Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"))
            .args(["serve", "--hot-reload", "--app-id", "attached"])
            .args(["--app-start-within", "10m", "--components"])
            .arg(&resources)
            .args([
                "--http-port",
                &http_port.to_string(),
                "--app-port",
                &app_port.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = temp_dir("attached");
    let (report, stderr) = certified(
        "memory",
        "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses,subscribe.fan-out,subscribe.competing-consumers,groups.distinct-names,topics.distinct-names}",
        &[
            "--sidecar",
            &format!("http://127.0.0.1:{http_port}"),
            "--sidecar-app-port",
            &app_port.to_string(),
            "--sidecar-resources",
            resources.to_str().unwrap(),
        ],
        &out,
    );
    let row = row_named(&report, "memory via attached sidecar", &stderr);
    for cell in &row.cases {
        // Two groups on one topic are beyond one app id: not a refusal of the name
        // (each name case subscribes a second group to a topic).
        let expected = if cell.id.starts_with("subscribe.") || cell.id.ends_with(".distinct-names")
        {
            "UNSUPPORTED"
        } else {
            "PASS"
        };
        assert_verdict(cell, expected, " through the attached sidecar");
        if expected == "UNSUPPORTED" {
            let notes = cell.evidence.notes.join(" | ");
            assert!(notes.contains("--sidecar-command"), "{notes}");
        }
    }
    assert_eq!(row.cases.len(), 8);
    let left: Vec<_> = std::fs::read_dir(&resources)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        [std::ffi::OsString::from("memory.yaml")],
        "every subscription the suite declared is removed"
    );

    // Half a description of the sidecar is refused before anything runs.
    let output = run(cli().args([
        "certify",
        "--component",
        "memory",
        "--sidecar",
        "http://127.0.0.1:1",
    ]));
    assert!(!output.success());
    let stderr = &output.stderr;
    assert!(stderr.contains("--sidecar-app-port"), "{stderr}");
}

/// `--sidecar` with `--sidecar-protocol grpc`: a running sidecar (`serve` with hot
/// reload, the gRPC app protocol and a gRPC API) certified over gRPC, with the
/// verdicts of the row over HTTP; half a description is refused before anything runs.
#[test]
fn sidecar_attaches_to_a_running_sidecar_over_grpc() {
    let resources = temp_dir("attached-grpc-resources");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/memory.yaml"),
        resources.join("memory.yaml"),
    )
    .unwrap();
    let (http_port, app_port, grpc_port) = (free_port(), free_port(), free_port());
    let _sidecar = Running(
        Command::new(env!("CARGO_BIN_EXE_pubsub-conformance"))
            .args(["serve", "--hot-reload", "--app-id", "attached-grpc"])
            .args(["--app-protocol", "grpc", "--app-start-within", "10m"])
            .arg("--components")
            .arg(&resources)
            .args(["--http-port", &http_port.to_string()])
            .args(["--grpc-port", &grpc_port.to_string()])
            .args(["--app-port", &app_port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let attach = [
        "--sidecar".to_string(),
        format!("http://127.0.0.1:{http_port}"),
        "--sidecar-app-port".to_string(),
        app_port.to_string(),
        "--sidecar-resources".to_string(),
        resources.to_str().unwrap().to_string(),
        "--sidecar-protocol".to_string(),
        "grpc".to_string(),
    ];
    let grpc = format!("http://127.0.0.1:{grpc_port}");
    let args: Vec<&str> = attach
        .iter()
        .map(String::as_str)
        .chain(["--sidecar-grpc", grpc.as_str()])
        .collect();
    let out = temp_dir("attached-grpc");
    let (report, stderr) = certified(
        "memory",
        "{publish.delivery,retry.redelivery,dead-letter.drop,bulk-subscribe.statuses}",
        &args,
        &out,
    );
    let row = row_named(&report, "memory via attached sidecar over gRPC", &stderr);
    for cell in &row.cases {
        assert_verdict(cell, "PASS", " through the attached sidecar over gRPC");
    }
    assert_eq!(row.cases.len(), 4);

    // Over gRPC without the address of its gRPC API, or that address over HTTP, or
    // the protocol with no sidecar at all: refused, naming what is missing.
    let without_address: Vec<&str> = attach.iter().map(String::as_str).collect();
    let over_http: Vec<&str> = attach[..6]
        .iter()
        .map(String::as_str)
        .chain(["--sidecar-grpc", grpc.as_str()])
        .collect();
    for (args, says) in [
        (without_address, "needs --sidecar-grpc"),
        (over_http, "give --sidecar-protocol grpc"),
        (
            vec!["--sidecar-protocol", "grpc"],
            "of --sidecar-command or --sidecar",
        ),
    ] {
        let output = run(cli()
            .args([
                "certify",
                "--component",
                "memory",
                "--case",
                "publish.delivery",
            ])
            .args(&args)
            .arg("--out")
            .arg(temp_dir("attached-grpc-refused")));
        assert_eq!(output.code, Some(2), "{args:?}: {}", output.stderr);
        assert!(output.stderr.contains(says), "{args:?}: {}", output.stderr);
    }
}
