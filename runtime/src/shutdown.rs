//! Stopping a gRPC service in order: the signals that ask for it and the
//! drain delay during which a replica reports not ready but still serves,
//! so that load balancers and Kubernetes endpoints stop sending it new
//! calls before its listener closes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[shutdown]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownSettings {
    /// After SIGTERM or SIGINT, report NOT_SERVING but keep accepting calls
    /// for this long before closing the listener and draining (0: close at
    /// once). A second signal ends the delay early.
    #[serde(with = "humantime_serde")]
    pub drain_delay: Duration,
}

/// Completes on SIGTERM or SIGINT.
pub async fn signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received SIGINT"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}

/// The drain delay: waits `delay` while the caller goes on serving, or
/// until a second SIGTERM/SIGINT asks to stop now. Returns at once for a
/// zero delay.
pub async fn drain(delay: Duration) {
    if delay.is_zero() {
        return;
    }
    tracing::info!(
        drain_delay_ms = delay.as_millis() as u64,
        "not ready: still serving until the drain delay ends"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = signal() => tracing::info!("second signal: drain delay cut short"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_closes_at_once() {
        assert_eq!(ShutdownSettings::default().drain_delay, Duration::ZERO);
    }

    #[tokio::test]
    async fn the_drain_lasts_at_least_its_delay() {
        let start = std::time::Instant::now();
        drain(Duration::from_millis(200)).await;
        assert!(start.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn no_delay_returns_at_once() {
        let mut drain = std::pin::pin!(drain(Duration::ZERO));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(drain.as_mut().poll(&mut cx).is_ready());
    }
}
