//! The integration tests of `instanceha-api`: one binary, one module per
//! area. Each test runs against a fresh database on SQLite, and on
//! PostgreSQL and MySQL/MariaDB when `INSTANCEHA_TEST_POSTGRES_URL` /
//! `INSTANCEHA_TEST_MYSQL_URL` are set; without them those are ignored
//! (build.rs; under CI, with `CI` set, they must be: an unset one fails the
//! tests instead).

mod auth;
mod backends;
mod bad_input;
mod commands;
mod connections;
mod console;
mod helpers;
mod hosts;
mod limits;
mod notifications;
mod process;
mod props;
mod rest;
mod segments;
mod server;
mod storage;
mod store;
