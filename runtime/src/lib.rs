//! What both services run on besides their own logic: the one backoff
//! used wherever something is tried again, the one clock every "now" is
//! read from, telemetry set-up
//! (logs, traces, metrics) and W3C trace-context propagation, settings from
//! environment variables, TLS for the gRPC links, accepting connections,
//! the connection budget of every listener, private files and the state
//! directory, and orderly shutdown. The CLI's embedded demo and the test kit start the
//! services with it too.

pub mod backoff;
pub mod clock;
pub mod connections;
pub mod environment;
pub mod exit;
pub mod listen;
pub mod panic;
pub mod private;
pub mod process_metrics;
pub mod propagation;
pub mod secret;
pub mod shutdown;
pub mod state;
pub mod telemetry;
pub mod tls;
