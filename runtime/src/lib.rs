//! What both services run on besides their own logic: the one backoff
//! used wherever something is tried again, the one clock every "now" is
//! read from, telemetry set-up
//! (logs, traces, metrics) and W3C trace-context propagation, settings from
//! environment variables, TLS for the gRPC links, accepting connections,
//! and orderly shutdown. The CLI's embedded demo and the test kit start the
//! services with it too.

pub mod backoff;
pub mod clock;
pub mod environment;
pub mod listen;
pub mod panic;
pub mod propagation;
pub mod secret;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
