//! The console in a real browser (headless Chromium over WebDriver), as
//! an operator uses it: sign in, watch a host failure on the overview and
//! on the recovery's page without reloading, read why a recovery failed,
//! see only what the role allows, and keep a page open across a restart
//! of the API. Each step leaves a screenshot under
//! `target/console-screenshots/<test>/`.

use std::time::Duration;

use serde_json::{Value, json};

use super::ONE_BROWSER;
use super::system::{ADMIN, READER, System, scenario};
use super::webdriver::{Browser, PATIENCE};

/// Signs in with `token` through the login page.
async fn sign_in(browser: &Browser, system: &System, token: &str) {
    browser.goto(&system.url("/login")).await;
    let field = browser.find("#token").await.expect("the token field");
    field.send_keys(token).await.unwrap();
    browser
        .find("form.login button[type=submit]")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait_for("signed in", PATIENCE, || async {
            !browser.url().await.contains("/login")
        })
        .await;
}

/// Marks the page: the mark is gone if it reloads.
async fn mark(browser: &Browser) {
    browser
        .execute("window.__notReloaded = true; return true;", vec![])
        .await;
}

async fn still_marked(browser: &Browser) -> bool {
    browser
        .execute("return window.__notReloaded === true;", vec![])
        .await
        == Value::Bool(true)
}

async fn live(browser: &Browser) {
    browser
        .wait_for("the page is live", PATIENCE, || async {
            browser.text("#live-status").await == "Live"
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_once_with_a_token() {
    let _one = ONE_BROWSER.lock().await;
    let Some(mut browser) = Browser::start("an_operator_signs_in_once_with_a_token").await else {
        return;
    };
    let mut system = System::start(scenario(2, 10, 100.0), |_| {}).await;
    system.segment().await;

    browser.goto(&system.url("/")).await;
    assert!(browser.url().await.contains("/console/login?next="));
    browser.screenshot("login").await;
    browser
        .find("#token")
        .await
        .unwrap()
        .send_keys("a-wrong-token")
        .await
        .unwrap();
    browser
        .find("form.login button")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait_for("a wrong token is refused", PATIENCE, || async {
            browser.text("#login-error").await.contains("not valid")
        })
        .await;
    browser.screenshot("refused").await;

    sign_in(&browser, &system, ADMIN).await;
    assert_eq!(browser.text("h1").await, "Overview");
    assert!(browser.text(".who").await.contains("ops (admin)"));
    assert!(browser.text("#live").await.contains("rack-a"));
    live(&browser).await;
    browser.screenshot("overview").await;
    // Signed in once: another page needs no token.
    browser.goto(&system.url("/history")).await;
    assert_eq!(browser.text("h1").await, "History");
    browser.screenshot("history").await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_a_recovery_appear_and_move_without_a_reload() {
    let _one = ONE_BROWSER.lock().await;
    let test = "the_overview_shows_a_recovery_appear_and_move_without_a_reload";
    let Some(mut browser) = Browser::start(test).await else {
        return;
    };
    let mut system = System::start(scenario(12, 2, 10.0), |_| {}).await;
    system.segment().await;
    sign_in(&browser, &system, ADMIN).await;
    live(&browser).await;
    mark(&browser).await;
    browser.screenshot("quiet").await;

    let id = system.host_fails("compute-01").await;
    let row = format!("#r-{id}");
    browser
        .wait_for("the recovery appears", PATIENCE, || async {
            browser.count(&row).await == 1
        })
        .await;
    browser.screenshot("appeared").await;
    // The count, read again and again until it is 12 of 12.
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let count = browser.text(&format!("{row} .count")).await;
        if seen.last() != Some(&count) {
            if seen.is_empty() || seen.len() == 2 {
                browser.screenshot("progress").await;
            }
            seen.push(count.clone());
        }
        if count == "12 of 12 done" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the recovery is not done: {seen:?}"
        );
        // sleep: the count is read again every 20 ms, to see each value it takes.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    browser.screenshot("done").await;
    let partial: Vec<&String> = seen
        .iter()
        .filter(|c| c.contains(" of 12") && *c != "12 of 12 done")
        .collect();
    assert!(
        !partial.is_empty(),
        "the progress moved through partial counts: {seen:?}"
    );
    browser
        .wait_for("the verdict", PATIENCE, || async {
            browser.count(&format!("{row}[data-status=finished]")).await == 1
        })
        .await;
    assert!(still_marked(&browser).await, "the page was never reloaded");
    browser
        .wait_for("the host shows failed and fenced", PATIENCE, || async {
            let hosts = browser.text("section.segment").await;
            hosts.contains("failed") && hosts.contains("fenced")
        })
        .await;
    browser.screenshot("finished").await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovery_page_shows_every_timeline_reach_its_end() {
    let _one = ONE_BROWSER.lock().await;
    let Some(mut browser) =
        Browser::start("the_recovery_page_shows_every_timeline_reach_its_end").await
    else {
        return;
    };
    let mut system = System::start(scenario(12, 2, 10.0), |_| {}).await;
    system.segment().await;
    sign_in(&browser, &system, ADMIN).await;
    let id = system.host_fails("compute-01").await;
    browser
        .goto(&system.url(&format!("/notifications/{id}")))
        .await;
    live(&browser).await;
    mark(&browser).await;
    browser
        .wait_for("the instances are planned", PATIENCE, || async {
            browser.count("#instances-body tr[data-status]").await == 12
        })
        .await;
    browser.screenshot("running").await;
    browser
        .wait_for("the verdict finished", PATIENCE, || async {
            browser.count("#verdict[data-status=finished]").await == 1
        })
        .await;
    browser
        .wait_for("every timeline ended", PATIENCE, || async {
            browser.count("ol.timeline.ended").await == 12
        })
        .await;
    assert_eq!(
        browser
            .count("#instances-body tr[data-status=succeeded]")
            .await,
        12
    );
    let ends = browser
        .execute(
            "return Array.from(document.querySelectorAll('ol.timeline')).map(function (t) { return t.lastElementChild.textContent; });",
            vec![],
        )
        .await;
    for end in ends.as_array().expect("a list") {
        let end = end.as_str().unwrap_or_default();
        assert!(
            end.starts_with("settled") && end.contains("on compute-02"),
            "{end}"
        );
    }
    assert!(still_marked(&browser).await, "the page was never reloaded");
    assert_eq!(
        browser.text("#live-status").await,
        "Ended: nothing more will change on this page."
    );
    let shot = browser.screenshot("finished").await;
    if std::env::var_os("INSTANCEHA_UPDATE_DOCS").is_some() {
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/console-recovery.png");
        std::fs::copy(&shot, docs).expect("the README's screenshot is updated");
    }
    browser.quit().await;
}

/// A recovery where Nova refuses to evacuate `web-2`: it fails, naming it.
async fn failed_recovery(system: &mut System) -> String {
    system.segment().await;
    system.refuse_evacuations_of("web-2");
    let id = system.host_fails("compute-01").await;
    let status = system.terminal(&id, Duration::from_secs(120)).await;
    assert_eq!(status, instanceha_proto::v1::NotificationStatus::Failed);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_notification_shows_the_failing_instance_and_its_cause() {
    let _one = ONE_BROWSER.lock().await;
    let test = "a_failed_notification_shows_the_failing_instance_and_its_cause";
    let Some(mut browser) = Browser::start(test).await else {
        return;
    };
    let mut system = System::start(scenario(3, 10, 100.0), |_| {}).await;
    let id = failed_recovery(&mut system).await;
    sign_in(&browser, &system, ADMIN).await;
    browser
        .goto(&system.url(&format!("/notifications/{id}")))
        .await;
    assert_eq!(
        browser.count("#verdict[data-status=failed]").await,
        1,
        "the verdict"
    );
    let failures = browser.text("#failures").await;
    assert!(failures.contains("web-2"), "{failures}");
    assert!(
        !failures.contains("web-1") && !failures.contains("web-3"),
        "{failures}"
    );
    let cause = browser.text("#failures .cause").await;
    assert!(
        cause.contains("503"),
        "the cause names Nova's answer: {cause}"
    );
    let row = browser
        .execute(
            "var row = Array.from(document.querySelectorAll('#instances-body tr')).find(function (r) { return r.textContent.indexOf('web-2') >= 0; }); return [row.dataset.status, row.querySelector('ol.timeline').lastElementChild.className];",
            vec![],
        )
        .await;
    assert_eq!(row, json!(["failed", "t-failed"]));
    assert_eq!(browser.count("#retry").await, 1, "an admin may retry");
    browser.screenshot("failed").await;

    let runs: u32 = browser.text("#runs").await.parse().unwrap();
    browser.find("#retry").await.unwrap().click().await.unwrap();
    assert!(browser.url().await.ends_with("/retry"));
    browser.screenshot("confirm-retry").await;
    browser
        .find("#confirm")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait_for("the retry runs", PATIENCE, || async {
            browser.text("#runs").await.parse::<u32>().unwrap_or(0) > runs
        })
        .await;
    browser.screenshot("retried").await;
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_sees_no_retry_and_a_forged_retry_is_refused() {
    let _one = ONE_BROWSER.lock().await;
    let test = "a_reader_sees_no_retry_and_a_forged_retry_is_refused";
    let Some(mut browser) = Browser::start(test).await else {
        return;
    };
    let mut system = System::start(scenario(3, 10, 100.0), |_| {}).await;
    let id = failed_recovery(&mut system).await;
    sign_in(&browser, &system, READER).await;
    assert_eq!(browser.count("a.action").await, 0, "no maintenance action");
    browser.screenshot("overview").await;
    browser
        .goto(&system.url(&format!("/notifications/{id}")))
        .await;
    assert_eq!(browser.count("#verdict[data-status=failed]").await, 1);
    assert_eq!(browser.count("#retry").await, 0, "no retry for a reader");
    browser.screenshot("no-retry").await;

    // The reader forges the retry the page does not offer, with the
    // page's own CSRF token: the role is what refuses it.
    let status = browser
        .execute_async(
            "var done = arguments[arguments.length - 1];\
             var csrf = document.querySelector('meta[name=csrf-token]').content;\
             fetch('/console/notifications/' + arguments[0] + '/retry', {method: 'POST',\
               headers: {'content-type': 'application/x-www-form-urlencoded'},\
               body: 'csrf=' + encodeURIComponent(csrf)}).then(function (r) { done(r.status); }, function (e) { done(String(e)); });",
            vec![json!(id)],
        )
        .await;
    assert_eq!(status, json!(403));
    browser
        .goto(&system.url(&format!("/notifications/{id}/retry")))
        .await;
    assert!(browser.text("main").await.contains("may not"));
    browser.screenshot("refused").await;
    assert_eq!(
        system.terminal(&id, Duration::from_secs(1)).await,
        instanceha_proto::v1::NotificationStatus::Failed,
        "still failed: nothing was retried"
    );
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_left_open_across_an_api_restart_comes_back_by_itself() {
    let _one = ONE_BROWSER.lock().await;
    let test = "a_page_left_open_across_an_api_restart_comes_back_by_itself";
    let Some(mut browser) = Browser::start(test).await else {
        return;
    };
    let mut system = System::start(scenario(4, 10, 100.0), |_| {}).await;
    system.segment().await;
    sign_in(&browser, &system, ADMIN).await;
    live(&browser).await;
    mark(&browser).await;
    browser.screenshot("live").await;

    system.stop_api().await;
    browser
        .wait_for("the page notices", PATIENCE, || async {
            browser
                .text("#live-status")
                .await
                .starts_with("Reconnecting")
        })
        .await;
    browser.screenshot("api-down").await;
    // sleep: the API stays down a while, as a restart does.
    tokio::time::sleep(Duration::from_secs(2)).await;

    system.start_api().await;
    live(&browser).await;
    let id = system.host_fails("compute-01").await;
    browser
        .wait_for("a recovery after the restart shows", PATIENCE, || async {
            browser
                .count(&format!("#r-{id}[data-status=finished]"))
                .await
                == 1
        })
        .await;
    assert!(still_marked(&browser).await, "the page was never reloaded");
    browser.screenshot("back").await;
    browser.quit().await;
}
