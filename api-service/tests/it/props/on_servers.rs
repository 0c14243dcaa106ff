//! The store's properties on the database servers: the same checks as on
//! SQLite ([`super::engine_stream`], [`super::requests`]), fewer cases.

use super::engine_stream::check_store;
use super::requests::check_requests;
use crate::backends::Backend;

#[test]
#[cfg_attr(no_postgres, ignore = "set INSTANCEHA_TEST_POSTGRES_URL to run")]
fn store_applies_batches_in_order_exactly_once_or_not_at_all_on_postgres() {
    check_store(Backend::Postgres, 48);
}

#[test]
#[cfg_attr(no_mysql, ignore = "set INSTANCEHA_TEST_MYSQL_URL to run")]
fn store_applies_batches_in_order_exactly_once_or_not_at_all_on_mysql() {
    check_store(Backend::Mysql, 48);
}

#[test]
#[cfg_attr(no_postgres, ignore = "set INSTANCEHA_TEST_POSTGRES_URL to run")]
fn every_public_request_gets_a_clear_answer_and_a_refusal_changes_nothing_on_postgres() {
    check_requests(Backend::Postgres, 192);
}

#[test]
#[cfg_attr(no_mysql, ignore = "set INSTANCEHA_TEST_MYSQL_URL to run")]
fn every_public_request_gets_a_clear_answer_and_a_refusal_changes_nothing_on_mysql() {
    check_requests(Backend::Mysql, 192);
}
