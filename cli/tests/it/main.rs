//! Integration tests of the `instanceha` binary: each test starts
//! `instanceha-api` in-process on 127.0.0.1 port 0 with a fresh SQLite
//! database (or a scripted fake API for the error paths) and runs the real
//! binary against it.

mod config;
#[cfg(feature = "demo")]
mod demo;
mod errors;
mod fake_api;
mod formats;
mod helpers;
mod hosts;
mod login;
mod manual;
mod notifications;
mod paging;
mod segments;
mod watch;
