//! Opens the generated HTML report in headless Chromium: the matrix renders, a filter
//! works, a FAIL cell's evidence opens. Keeps a screenshot in reports/artifacts/.

#[allow(dead_code)]
mod faulty {
    pub mod defects;
}

use faulty::defects::{Defect, Faulty};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions};
use pubsub_conformance::catalogue::find;
use pubsub_conformance::components::memory::MemoryComponent;
use pubsub_conformance::components::runtime::Runtime;
use pubsub_conformance::components::Component;
use pubsub_conformance::reports::{self, ComponentReport, Provisioning, RunReport, Status};
use pubsub_conformance::runner::{run_case, RunOptions};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const CASES: [&str; 3] = [
    "publish.delivery",
    "envelope.raw-payload",
    "ttl.live-delivered",
];

async fn component_report(name: &str, component: Arc<dyn Component>) -> ComponentReport {
    let runtime = Runtime::new(name, component.clone());
    let mut cases = Vec::new();
    for id in CASES {
        cases.push(run_case(find(id).unwrap(), &runtime, &RunOptions::once()).await);
    }
    ComponentReport {
        name: name.into(),
        component_type: component.kind().into(),
        definition: format!("fixtures/{name}.yaml"),
        provisioning: Provisioning {
            kind: "in-process".into(),
            endpoint: None,
            broker_version: component.broker_version().await.ok(),
            problem: None,
            unsupported_broker: None,
        },
        capabilities: serde_json::to_value(component.capabilities()).unwrap(),
        cases,
        third_party: None,
        broker_axis: None,
    }
}

fn chromium() -> PathBuf {
    let path = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/install.sh (it installs Debian's chromium)",
        path.display()
    );
    path
}

fn evaluate(tab: &headless_chrome::Tab, script: &str) -> serde_json::Value {
    tab.evaluate(script, false)
        .unwrap_or_else(|e| panic!("evaluating {script}: {e}"))
        .value
        .unwrap_or(serde_json::Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_renders_filters_and_opens_evidence() {
    let memory = component_report("memory", Arc::new(MemoryComponent::default())).await;
    let faulty = component_report(
        "faulty-drops",
        Faulty::shared(MemoryComponent::default(), Defect::Drops),
    )
    .await;
    assert!(
        faulty.cases.iter().any(|c| c.status == Status::Fail),
        "the faulty component must fail a case"
    );
    let report = RunReport {
        schema_version: reports::SCHEMA_VERSION,
        suite_version: env!("CARGO_PKG_VERSION").into(),
        started_at: pubsub_conformance::certify::now_text(),
        finished_at: pubsub_conformance::certify::now_text(),
        machine: pubsub_conformance::certify::machine(),
        components: vec![memory, faulty],
        conflicts: Vec::new(),
        bench: Vec::new(),
        baseline: None,
    };
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/artifacts/browser");
    reports::write_all(&report, &artifacts).unwrap();
    let page = artifacts.canonicalize().unwrap().join("index.html");

    let failing_rows = CASES
        .iter()
        .filter(|id| {
            report.components.iter().any(|c| {
                c.cases
                    .iter()
                    .any(|x| x.id == **id && x.status == Status::Fail)
            })
        })
        .count();
    let screenshot = tokio::task::spawn_blocking(move || {
        let options = LaunchOptions::default_builder()
            .path(Some(chromium()))
            .headless(true)
            .sandbox(false)
            .window_size(Some((1400, 1000)))
            .idle_browser_timeout(Duration::from_secs(60))
            .args(
                ["--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic"]
                    .iter()
                    .map(OsStr::new)
                    .collect(),
            )
            .build()
            .unwrap();
        let browser = Browser::new(options).expect("chromium starts");
        let tab = browser.new_tab().unwrap();
        tab.navigate_to(&format!("file://{}", page.display())).unwrap().wait_until_navigated().unwrap();

        // The matrix renders: one row per case, one cell per component and case.
        assert_eq!(evaluate(&tab, "document.querySelectorAll('tr.case-row').length"), CASES.len());
        assert_eq!(evaluate(&tab, "document.querySelectorAll('td.cell button').length"), CASES.len() * 2);
        assert_eq!(evaluate(&tab, "document.querySelectorAll('tr.component-summary').length"), 2);

        // The status filter keeps only rows with a FAIL cell.
        tab.find_element("#filter-status").unwrap().click().unwrap();
        evaluate(&tab, "(() => { const s = document.querySelector('#filter-status'); s.value = 'FAIL'; s.dispatchEvent(new Event('change')); return s.value; })()");
        assert_eq!(evaluate(&tab, "document.querySelectorAll('tr.case-row:not([hidden])').length"), failing_rows);
        assert_eq!(evaluate(&tab, "document.querySelector('#visible-count').textContent"), failing_rows.to_string());

        // A FAIL cell opens its evidence.
        assert_eq!(evaluate(&tab, "document.querySelector('#evidence-panel').hidden"), true);
        tab.find_element("td.s-fail button").unwrap().click().unwrap();
        tab.wait_for_element("#evidence-panel:not([hidden])").expect("the evidence panel opens");
        let evidence = evaluate(&tab, "document.querySelector('#evidence-body').innerText");
        let text = evidence.as_str().unwrap_or_default().to_string();
        assert!(text.contains("MUST") && text.contains("lost"), "evidence: {text}");
        tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).unwrap()
    })
    .await
    .unwrap();
    assert!(
        screenshot.starts_with(b"\x89PNG"),
        "the screenshot is a PNG"
    );
    std::fs::write(artifacts.join("screenshot.png"), screenshot).unwrap();
}
