//! Marks the tests whose environment is missing as ignored
//! (instanceha-test-env).

use instanceha_test_env::{Environment, declare};

fn main() {
    declare(&[Environment::RealOpenstack]);
}
