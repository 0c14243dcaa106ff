//! The conformance tests: instance-ha against real Keystone, Placement, Nova
//! and Cinder (`conformance/real-openstack`), each scenario checked against
//! Nova's, Cinder's and Placement's own records. One stack serves every
//! test, one test at a time; each starts from a clean cloud (no servers, no
//! volumes, every process running, every compute in service).

mod failures;
mod faults;
mod lost_work;
mod sim_vs_real;

use std::sync::LazyLock;

use instanceha_conformance::records::Records;
use instanceha_conformance::stack::{Hold, Stack};
use tokio::sync::{Mutex, MutexGuard};

/// One test at a time on the one stack (in this process; [`Stack::hold`]
/// across processes).
static STACK: LazyLock<Mutex<()>> = LazyLock::new(|| Mutex::new(()));

/// The stack held for one test.
pub struct Held {
    _guard: MutexGuard<'static, ()>,
    _hold: Hold,
}

/// The stack, clean, held for the test; `None` when there is no stack (and
/// not under CI).
pub async fn clean_stack(test: &str) -> Option<(Stack, Records, Held)> {
    let stack = Stack::from_env(test)?;
    let guard = STACK.lock().await;
    let hold = stack.hold().await;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    for process in stack.stopped().await {
        stack.start(&process).await;
    }
    let records = Records::login(&stack).await;
    records.delete_everything().await;
    for host in stack.computes() {
        let s = records.compute_service(&host).await;
        if !(s.up && s.enabled && !s.forced_down) {
            records.restore_compute(&host).await;
        }
    }
    Some((
        stack,
        records,
        Held {
            _guard: guard,
            _hold: hold,
        },
    ))
}
