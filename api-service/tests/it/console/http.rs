//! The console over plain HTTP: what needs no browser to check.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION, SET_COOKIE};

use instanceha_api::console::html::url_component;

use super::system::{ADMIN, READER, System, scenario};

/// A client that does not follow redirects, as a test reads them.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A form's body, as a browser posts it.
fn form(request: reqwest::RequestBuilder, fields: &[(&str, &str)]) -> reqwest::RequestBuilder {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", url_component(v)))
        .collect();
    request
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
}

/// Signs in with `token`; the session cookie (`name=value`).
async fn sign_in(system: &System, token: &str) -> String {
    let reply = form(
        client().post(system.url("/login")),
        &[("token", token), ("next", "/console/")],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(reply.status(), StatusCode::SEE_OTHER);
    let cookie = reply
        .headers()
        .get(SET_COOKIE)
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("; Path=/console; HttpOnly; SameSite=Strict"),
        "{cookie}"
    );
    cookie.split(';').next().unwrap().to_owned()
}

async fn get(system: &System, path: &str, cookie: Option<&str>) -> reqwest::Response {
    let mut request = client().get(system.url(path));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap()
}

/// The page's CSRF token (its `<meta name="csrf-token">`).
fn csrf(page: &str) -> String {
    let (_, rest) = page
        .split_once("<meta name=\"csrf-token\" content=\"")
        .expect("a csrf token");
    rest.split('"').next().unwrap().to_owned()
}

/// The first event of a stream: its name and data.
async fn first_event(stream: &mut reqwest::Response) -> (String, String) {
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.chunk())
            .await
            .expect("an event within 20 s")
            .unwrap()
            .expect("the stream is open");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    (field("event:"), field("data:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_session_and_carry_a_strict_policy() {
    let mut system = System::start(scenario(1, 10, 100.0), |_| {}).await;
    system.segment().await;

    let anonymous = get(&system, "/", None).await;
    assert_eq!(anonymous.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        anonymous.headers()[LOCATION],
        "/console/login?next=%2Fconsole%2F"
    );
    let login = get(&system, "/login", None).await;
    assert_eq!(login.status(), StatusCode::OK);
    let policy = login.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(policy.contains("default-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert_eq!(login.headers()["x-frame-options"], "DENY");
    let body = login.text().await.unwrap();
    assert!(!body.contains("<script>") && !body.contains(" style="));
    assert!(body.contains("<label for=\"token\">"), "labelled");

    let refused = form(
        client().post(system.url("/login")),
        &[("token", "not-a-token")],
    )
    .send()
    .await
    .unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.text().await.unwrap().contains("not valid"));

    let cookie = sign_in(&system, ADMIN).await;
    let overview = get(&system, "/", Some(&cookie)).await;
    assert_eq!(overview.status(), StatusCode::OK);
    let page = overview.text().await.unwrap();
    assert!(
        page.contains("rack-a") && page.contains("compute-02"),
        "{page}"
    );
    assert!(page.contains("<main id=\"main\""), "a main landmark");
    assert!(page.contains("Put on maintenance"), "the admin may");

    let reader = sign_in(&system, READER).await;
    let page = get(&system, "/", Some(&reader)).await.text().await.unwrap();
    assert!(page.contains("compute-02") && !page.contains("Put on maintenance"));

    let asset = get(&system, "/assets/console.js", None).await;
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(
        asset.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_role_the_csrf_token_and_this_origin() {
    let mut system = System::start(scenario(2, 10, 100.0), |_| {}).await;
    system.segment().await;
    let id = system.host_fails("compute-01").await;
    system.terminal(&id, Duration::from_secs(60)).await;
    let path = format!("/notifications/{id}/retry");
    let admin = sign_in(&system, ADMIN).await;
    let reader = sign_in(&system, READER).await;
    let reader_csrf = csrf(
        &get(&system, &format!("/notifications/{id}"), Some(&reader))
            .await
            .text()
            .await
            .unwrap(),
    );
    let admin_csrf = csrf(
        &get(&system, &format!("/notifications/{id}"), Some(&admin))
            .await
            .text()
            .await
            .unwrap(),
    );
    let post = |cookie: Option<String>, csrf: String, origin: Option<&'static str>| {
        let mut request = form(client().post(system.url(&path)), &[("csrf", &csrf)]);
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    // A reader with a good form: the role is missing.
    let reply = post(Some(reader.clone()), reader_csrf.clone(), None)
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    assert!(reply.text().await.unwrap().contains("may not"));
    assert_eq!(
        get(&system, &path, Some(&reader)).await.status(),
        StatusCode::FORBIDDEN,
        "nor may a reader see the confirmation"
    );
    // An admin without the token, with another session's, or from
    // another site.
    for (csrf, origin) in [
        (String::new(), None),
        (reader_csrf, None),
        (admin_csrf.clone(), Some("http://evil.example")),
    ] {
        let reply = post(Some(admin.clone()), csrf, origin).await.unwrap();
        assert_eq!(reply.status(), StatusCode::FORBIDDEN);
    }
    // No session at all.
    let reply = post(None, admin_csrf.clone(), None).await.unwrap();
    assert_eq!(reply.status(), StatusCode::UNAUTHORIZED);
    // Everything right, but the notification finished: the service says
    // why.
    let reply = post(Some(admin), admin_csrf, None).await.unwrap();
    assert_eq!(reply.status(), StatusCode::CONFLICT);
    assert!(
        reply
            .text()
            .await
            .unwrap()
            .contains("only a failed notification can be retried")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_fresh_for_a_current_page_and_bounded_per_caller() {
    let mut system = System::start(scenario(1, 10, 100.0), |s| {
        s.limits.max_watches_per_caller = 1;
    })
    .await;
    system.segment().await;
    let cookie = sign_in(&system, ADMIN).await;
    let page = get(&system, "/", Some(&cookie)).await.text().await.unwrap();
    let (_, rest) = page.split_once("data-live=\"").expect("a live part");
    let live = rest.split('"').next().unwrap().replace("&amp;", "&");
    let stream = |path: String| {
        client()
            .get(format!("http://{}{path}", system.rest))
            .header("cookie", cookie.clone())
            .send()
    };
    let mut current = stream(live.clone()).await.unwrap();
    assert_eq!(current.status(), StatusCode::OK);
    assert_eq!(
        current.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    assert_eq!(first_event(&mut current).await.0, "fresh");
    drop(current);
    // The first stream's slot comes back once it is gone.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut second = loop {
        let reply = stream("/console/live/overview?stamp=old".to_owned())
            .await
            .unwrap();
        if reply.status() == StatusCode::OK {
            break reply;
        }
        assert_eq!(reply.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(tokio::time::Instant::now() < deadline, "the slot came back");
        // sleep: the first stream's slot comes back when its task sees it closed.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (event, data) = first_event(&mut second).await;
    assert_eq!(event, "snapshot", "the page is not current: {data}");
    assert!(data.contains("compute-01"));
    // While it is open, a second stream of the same caller is refused.
    let refused = stream("/console/live/overview?stamp=old".to_owned())
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("limits.max_watches_per_caller")
    );
    drop(second);
    // Without a session, no stream.
    let anonymous = client()
        .get(format!("http://{}{live}", system.rest))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}
