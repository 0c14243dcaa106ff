//! The web console (`/console/` on the REST listener), against the whole
//! system (`system`): over HTTP (`http`: sessions, the security headers,
//! CSRF, roles, the stream's bounds and first event), and in a real
//! headless Chromium over WebDriver (`browser`: what an operator sees,
//! with a screenshot of each step under `target/console-screenshots/`);
//! `bench`, run by hand, measures the recovery page with 1,000 instances.

mod bench;
mod browser;
mod http;
mod system;
mod webdriver;

/// One browser at a time: a machine of two cores runs them one after the
/// other rather than all at once.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
