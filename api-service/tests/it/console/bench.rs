//! The console's load figures (BENCHMARKS.md), measured in the test
//! browser with the Performance API; run by hand, not by `cargo test`:
//!
//! ```text
//! cargo test -p instanceha-api --test it console::bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! * the recovery page of a simulated 1,000-instance recovery: time to
//!   first render (navigation timing, first contentful paint) while it
//!   runs and once it has ended, the update latency (server send to the
//!   browser's next frame, per `patch`) and the longest task on the main
//!   thread while the updates come;
//! * the history and the overview with 5,000 notifications.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use serde_json::Value;

use super::ONE_BROWSER;
use super::system::{ADMIN, System, scenario};
use super::webdriver::Browser;

/// Instances in the benchmark's recovery.
const INSTANCES: usize = 1000;

/// The page's load, as the browser timed it (ms from navigation start).
async fn load_timing(browser: &Browser) -> Value {
    browser
        .execute(
            "var n = performance.getEntriesByType('navigation')[0];\
             var p = performance.getEntriesByName('first-contentful-paint')[0];\
             return {response_end: n.responseEnd, dom_content_loaded: n.domContentLoadedEventEnd,\
               load: n.loadEventEnd, first_contentful_paint: p ? p.startTime : null,\
               html_bytes: n.transferSize, rows: document.querySelectorAll('#instances-body tr, #history tbody tr').length};",
            vec![],
        )
        .await
}

/// Starts recording long tasks (over 50 ms) on the page.
async fn watch_long_tasks(browser: &Browser) {
    browser
        .execute(
            "window.__long = []; new PerformanceObserver(function (list) {\
               list.getEntries().forEach(function (e) { window.__long.push(e.duration); });\
             }).observe({type: 'longtask'}); return true;",
            vec![],
        )
        .await;
}

/// Percentiles of the update latencies and the longest task.
async fn update_figures(browser: &Browser) -> Value {
    browser
        .execute(
            "var marks = performance.getEntriesByName('console-update');\
             function sorted(f) { return marks.map(f).sort(function (a, b) { return a - b; }); }\
             var l = sorted(function (m) { return m.detail.latency; });\
             var a = sorted(function (m) { return m.detail.applied; });\
             var ops = marks.reduce(function (n, m) { return n + Math.max(0, m.detail.ops); }, 0);\
             function q(v, p) { return v.length ? v[Math.min(v.length - 1, Math.floor(p * v.length))] : null; }\
             return {updates: l.length, elements_changed: ops, p50_ms: q(l, 0.5), p95_ms: q(l, 0.95), p99_ms: q(l, 0.99), max_ms: q(l, 1),\
               applied_p50_ms: q(a, 0.5), applied_max_ms: q(a, 1),\
               long_tasks: (window.__long || []).length, longest_task_ms: Math.max.apply(null, [0].concat(window.__long || []))};",
            vec![],
        )
        .await
}

async fn sign_in(browser: &Browser, system: &System) {
    browser.goto(&system.url("/login")).await;
    browser
        .find("#token")
        .await
        .unwrap()
        .send_keys(ADMIN)
        .await
        .unwrap();
    browser
        .find("form.login button")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand (see the module's doc)"]
async fn the_recovery_page_with_1000_instances() {
    let _one = ONE_BROWSER.lock().await;
    let Some(mut browser) = Browser::start("bench_recovery_page_1000").await else {
        return;
    };
    let mut system = System::start(scenario(INSTANCES, 25, 20.0), |_| {}).await;
    system.segment().await;
    sign_in(&browser, &system).await;
    let started = std::time::Instant::now();
    let id = system.host_fails("compute-01").await;
    // Open the page once every instance is planned.
    loop {
        let vmoves = system
            .vmoves
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: id.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .vmoves
            .len();
        if vmoves == INSTANCES {
            break;
        }
        // sleep: the vmoves are read again every 20 ms until all are planned.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    browser
        .goto(&system.url(&format!("/notifications/{id}")))
        .await;
    let running = load_timing(&browser).await;
    watch_long_tasks(&browser).await;
    browser.screenshot("running").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    while browser.count("#verdict[data-status=finished]").await == 0 {
        assert!(tokio::time::Instant::now() < deadline, "not finished");
        // sleep: the verdict is read again every 200 ms.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered_in = started.elapsed();
    // sleep: the last patches reach the page.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let updates = update_figures(&browser).await;
    browser.screenshot("finished").await;
    browser
        .goto(&system.url(&format!("/notifications/{id}")))
        .await;
    let ended = load_timing(&browser).await;
    println!(
        "recovery page, {INSTANCES} instances (recovered in {:.1} s)\n  first render while running: {running}\n  updates while running: {updates}\n  first render once ended: {ended}",
        recovered_in.as_secs_f64()
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand (see the module's doc)"]
async fn the_history_and_overview_with_5000_notifications() {
    let _one = ONE_BROWSER.lock().await;
    let Some(mut browser) = Browser::start("bench_history_5000").await else {
        return;
    };
    // Stored, not recovered: the history's reads are what is measured.
    let mut system = System::start(scenario(1, 10, 100.0), |s| {
        s.dispatch.enabled = false;
    })
    .await;
    system.segment().await;
    let created = std::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..20 {
        let mut client = system.notifications.clone();
        tasks.spawn(async move {
            for i in (worker..5000).step_by(20) {
                client
                    .create_notification(pb::CreateNotificationRequest {
                        r#type: pb::NotificationType::Process as i32,
                        hostname: "compute-01".into(),
                        generated_time: Some(instanceha_testkit::cloud::now()),
                        payload: [
                            ("process_name".to_owned(), format!("nova-compute-{i}")),
                            ("event".to_owned(), "STOPPED".to_owned()),
                        ]
                        .into_iter()
                        .collect(),
                        idempotency_key: String::new(),
                    })
                    .await
                    .expect("the report is stored");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let stored_in = created.elapsed();
    sign_in(&browser, &system).await;
    let overview = load_timing(&browser).await;
    browser.screenshot("overview").await;
    browser.goto(&system.url("/history")).await;
    let first = load_timing(&browser).await;
    for _ in 0..20 {
        browser.find("#older").await.unwrap().click().await.unwrap();
    }
    let deep = load_timing(&browser).await;
    browser.screenshot("history-page-21").await;
    println!(
        "5,000 notifications (stored in {:.1} s)\n  overview: {overview}\n  history, first page: {first}\n  history, page 21: {deep}",
        stored_in.as_secs_f64()
    );
    browser.quit().await;
}
