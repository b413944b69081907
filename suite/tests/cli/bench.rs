//! `bench`: measured rates, their spread and ratios, in the output and the report.

use crate::support::{cli, report_in, run, temp_dir};
use std::path::PathBuf;

/// The measurement labelled `label` among `rows`.
fn row_of<'a>(
    rows: &'a [pubsub_conformance::reports::Measurement],
    label: &str,
) -> &'a pubsub_conformance::reports::Measurement {
    rows.iter()
        .find(|m| m.label == label)
        .unwrap_or_else(|| panic!("no row '{label}' in {rows:#?}"))
}

/// A short `bench` run (300 messages, runs of at least 0.05 s) with `args`, into a
/// new directory named after `name`: the directory and what it printed; it must succeed.
fn bench(name: &str, args: &[&str]) -> (PathBuf, String) {
    let out = temp_dir(name);
    let output = run(cli()
        .args(["bench", "--messages", "300", "--min-seconds", "0.05"])
        .args(args)
        .arg("--out")
        .arg(&out));
    assert!(output.success(), "{}{}", output.stdout, output.stderr);
    (out, output.stdout)
}

#[test]
fn bench_prints_ratios_and_stores_them_in_the_report() {
    let (out, stdout) = bench("bench", &["--component", "memory", "--repeats", "3"]);
    for line in [
        "single publish",
        "bulk publish x100",
        "x vs single publish",
        "runtime emulation",
        "bulk subscribe x100",
        "component consumer x100, no runtime",
        "p99",
        "spread (min..max)",
        "publish throughput, msg/s, log scale",
        "memory  single",
    ] {
        assert!(
            stdout.contains(line),
            "bench output lacks '{line}':\n{stdout}"
        );
    }
    let report = report_in(&out);
    let bench = &report.bench[0];
    assert_eq!(bench.component, "memory");
    // Publish runs are sized by time (a probe run sets the count), never below
    // --messages, and each keeps its 3 repeats for the spread.
    for m in &bench.measurements {
        assert!(m.rate > 0.0 && m.messages >= 300, "{m:?}");
        if m.label.contains("publish") {
            assert_eq!(m.runs.len(), 3, "{m:?}");
        }
    }
    assert!(bench
        .latency
        .as_ref()
        .is_some_and(|l| l.samples == 300 && l.p50_us <= l.p99_us && l.p99_us <= l.max_us));
    assert!(std::fs::read_to_string(out.join("index.html"))
        .unwrap()
        .contains("<svg class=\"chart compare\""));
}

/// On a broker with a raw client, the component's bulk paths and the raw client run in
/// turn on the same messages, and the native bulk path in turn with its emulation:
/// each pair shares its message count and carries a ratio.
#[test]
fn bench_runs_the_raw_client_and_the_emulation_in_turn_with_the_component() {
    let (out, _) = bench(
        "bench-redis",
        &[
            "--component",
            "redis",
            "--repeats",
            "2",
            "--consume-messages",
            "200",
        ],
    );
    let report = report_in(&out);
    let rows = &report.bench[0].measurements;
    let row = |label: &str| row_of(rows, label);
    let pairs = [
        (
            "bulk publish x100, in turn with the raw client",
            "raw client: pipelined XADD x100",
        ),
        (
            "bulk publish x100, rawPayload (no envelope)",
            "raw client: pipelined XADD x100",
        ),
        (
            "bulk publish x100, runtime emulation",
            "bulk publish x100, in turn with the runtime emulation",
        ),
        (
            "bulk publish x100, in turn with the raw client",
            "raw client: pipelined XADD x100, the component's enveloped bytes",
        ),
    ];
    for (component, beside) in pairs {
        let (component, beside) = (row(component), row(beside));
        assert_eq!(
            component.messages, beside.messages,
            "{component:?} {beside:?}"
        );
        assert_eq!(component.runs.len(), 2, "{component:?}");
        assert!(component.rate > 0.0 && beside.rate > 0.0);
    }
    // A ratio is the component's time over the raw client's: raw rate / component rate.
    let assert_ratio = |carrier: &str, raw: &str, component: &str| {
        let ratio = row(carrier)
            .ratio
            .unwrap_or_else(|| panic!("no ratio on '{carrier}'"));
        let expected = row(raw).rate / row(component).rate;
        assert!(
            (ratio - expected).abs() < 1e-9,
            "{carrier}: {ratio} != {expected}"
        );
    };
    let enveloped = "bulk publish x100, in turn with the raw client";
    // The envelope's cost against the raw client.
    assert_ratio(enveloped, "raw client: pipelined XADD x100", enveloped);
    // The component against the raw client sending the component's enveloped bytes.
    let same_bytes = "raw client: pipelined XADD x100, the component's enveloped bytes";
    assert_ratio(same_bytes, same_bytes, enveloped);
    assert!(row("bulk publish x100, runtime emulation").ratio.is_some());
}

/// `--through-serve` publishes the same messages in process, through `serve` over HTTP
/// and over gRPC, in turn: the three share their message count, and each wire path
/// carries its ratio to the in-process one.
#[test]
fn bench_through_serve_measures_http_and_grpc_in_turn_with_in_process() {
    let (out, stdout) = bench(
        "bench-through-serve",
        &["--component", "memory", "--repeats", "2", "--through-serve"],
    );
    let report = report_in(&out);
    let rows = &report.bench[0].measurements;
    let row = |label: &str| row_of(rows, label);
    for what in ["single publish", "bulk publish x100"] {
        let in_process = row(&format!("{what}, in process, in turn with serve"));
        assert_eq!(in_process.ratio, None, "{in_process:?}");
        for wire in ["HTTP", "gRPC"] {
            let label = format!("{what} through serve ({wire})");
            let over = row(&label);
            assert_eq!(over.messages, in_process.messages, "{over:?}");
            assert_eq!(over.runs.len(), 2, "{over:?}");
            let ratio = over
                .ratio
                .unwrap_or_else(|| panic!("no ratio on '{label}'"));
            let expected = over.rate / in_process.rate;
            assert!(
                (ratio - expected).abs() < 1e-9,
                "{label}: {ratio} != {expected}"
            );
            assert!(
                stdout.contains(&label),
                "bench output lacks '{label}':\n{stdout}"
            );
        }
    }
}
