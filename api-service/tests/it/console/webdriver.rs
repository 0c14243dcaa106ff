//! A headless Chromium driven over W3C WebDriver (Debian's `chromium` and
//! `chromium-driver`): the dozen commands the console's tests use, over
//! reqwest. (fantoccini would bring Mozilla's MPL-2.0 `webdriver` crate,
//! which the dependency policy does not allow, with a second ICU.)
//!
//! Without Chromium the browser tests say so and pass, except under CI
//! (`CI` set), where they fail: CI installs it (`.ci/run`).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The key of an element reference in W3C WebDriver.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long a test waits for the page by default.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A WebDriver failure: the command and what the driver said.
#[derive(Debug, thiserror::Error)]
#[error("webdriver {command}: {error}: {message}")]
pub struct DriverError {
    pub command: String,
    pub error: String,
    pub message: String,
}

/// Finds an executable: the variable's value, else the first of `names`
/// on `PATH` or at the given absolute paths.
fn executable(variable: &str, names: &[&str]) -> Option<PathBuf> {
    if let Ok(path) = std::env::var(variable) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|name| {
        if name.starts_with('/') {
            return Path::new(name).is_file().then(|| PathBuf::from(name));
        }
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// Where a test's screenshots go: `target/console-screenshots/<test>/`.
pub fn screenshot_dir(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("console-screenshots")
        .join(test)
}

/// Starts chromedriver on a free port and waits for it: the process, a
/// client and its URL.
async fn start_driver(driver: &Path) -> (Child, reqwest::Client, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready = http
            .get(format!("{base}/status"))
            .send()
            .await
            .ok()
            .and_then(|r| r.error_for_status().ok())
            .is_some();
        if ready {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "chromedriver did not answer"
        );
        // sleep: chromedriver is asked again every 50 ms until it answers.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, http, base)
}

/// The session's capabilities: headless Chromium with a fresh profile
/// and no background connections (the closed network refuses them).
fn capabilities(chromium: &Path, profile: &Path) -> Value {
    let args = [
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--window-size=1400,1000".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    json!({
        "capabilities": {
        "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
            "binary": chromium.display().to_string(),
            "args": args,
            }
        }
        }
    })
}

/// One browser, its driver and its profile, and the screenshots of a test.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
    step: usize,
}

impl Browser {
    /// A fresh headless Chromium for `test`; `None` when Chromium or its
    /// driver is not installed (a failure under CI).
    pub async fn start(test: &str) -> Option<Browser> {
        let driver = executable("INSTANCEHA_TEST_CHROMEDRIVER", &["chromedriver"]);
        let chromium = executable(
            "INSTANCEHA_TEST_CHROMIUM",
            &["/usr/lib/chromium/chromium", "chromium", "chromium-browser"],
        );
        let (Some(driver), Some(chromium)) = (driver, chromium) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs chromium and chromedriver for the console's browser tests (apt-get install chromium chromium-driver)"
            );
            instanceha_test_env::say_skipped(
                test,
                "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
            );
            return None;
        };
        let (child, http, base) = start_driver(&driver).await;
        let profile = tempfile::tempdir().expect("a profile directory");
        let capabilities = capabilities(&chromium, profile.path());
        let reply: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .expect("a JSON answer");
        let session = reply["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {reply:#}"))
            .to_owned();
        let shots = screenshot_dir(test);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).expect("the screenshot directory");
        Some(Browser {
            http,
            session: format!("{base}/session/{session}"),
            driver: child,
            _profile: profile,
            shots,
            step: 0,
        })
    }

    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, DriverError> {
        let url = format!("{}{path}", self.session);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let fail = |error: String, message: String| DriverError {
            command: format!("{method} {path}"),
            error,
            message,
        };
        let reply: Value = request
            .send()
            .await
            .map_err(|e| fail("transport".into(), e.to_string()))?
            .json()
            .await
            .map_err(|e| fail("answer".into(), e.to_string()))?;
        let value = reply["value"].clone();
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            return Err(fail(
                error.to_owned(),
                value["message"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        Ok(value)
    }

    pub async fn goto(&self, url: &str) {
        self.command(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    pub async fn url(&self) -> String {
        self.command(reqwest::Method::GET, "/url", None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The first element matching `css`.
    pub async fn find(&self, css: &str) -> Result<Element<'_>, DriverError> {
        let value = self
            .command(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await?;
        Ok(Element {
            browser: self,
            id: value[ELEMENT].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.command(
            reqwest::Method::POST,
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        )
        .await
        .map(|v| v.as_array().map_or(0, Vec::len))
        .unwrap_or(0)
    }

    /// The text of the first element matching `css` (empty when none).
    pub async fn text(&self, css: &str) -> String {
        match self.find(css).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `script`, which calls its last argument with the result.
    pub async fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.command(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Keeps a screenshot of the page as `NN-name.png`; returns its path.
    pub async fn screenshot(&mut self, name: &str) -> PathBuf {
        self.step += 1;
        let png = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .expect("a base64 screenshot");
        let path = self.shots.join(format!("{:02}-{name}.png", self.step));
        std::fs::write(&path, bytes).expect("the screenshot is written");
        path
    }

    /// Waits until `check` holds, at most `within`; `what` names it.
    pub async fn wait_for<F, Fut>(&self, what: &str, within: Duration, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + within;
        while !check().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {within:?} (page {})",
                self.url().await
            );
            // sleep: the page is read again every 50 ms.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Ends the session and the driver.
    pub async fn quit(mut self) {
        let _ = self.command(reqwest::Method::DELETE, "", None).await;
        let _ = self.driver.kill().await;
    }
}

/// An element of the page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl Element<'_> {
    pub async fn text(&self) -> Result<String, DriverError> {
        let value = self
            .browser
            .command(
                reqwest::Method::GET,
                &format!("/element/{}/text", self.id),
                None,
            )
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    pub async fn click(&self) -> Result<(), DriverError> {
        self.browser
            .command(
                reqwest::Method::POST,
                &format!("/element/{}/click", self.id),
                Some(json!({})),
            )
            .await
            .map(drop)
    }

    pub async fn send_keys(&self, text: &str) -> Result<(), DriverError> {
        self.browser
            .command(
                reqwest::Method::POST,
                &format!("/element/{}/value", self.id),
                Some(json!({ "text": text })),
            )
            .await
            .map(drop)
    }
}
