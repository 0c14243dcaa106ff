//! The engine's end of the dispatch stream (`instanceha.engine.v1.Engine/
//! Recover`): takes `Start`, runs the recovery, sends its events numbered
//! in order, reads the API's acks, and cancels the run on `Cancel` or when
//! the API goes away. After `Done` it waits for the API to acknowledge it
//! (that is, to have persisted everything) before closing. [`LinkAuth`]
//! checks the caller first.

mod auth;
mod convert;

pub use auth::LinkAuth;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use instanceha_proto::engine::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::recovery::{Engine, Reporter, RunEvent, StartRun};

/// How long to wait for the API to acknowledge `Done`.
const FINAL_ACK_TIMEOUT: Duration = Duration::from_secs(30);

pub struct RecoverService {
    engine: Engine,
}

impl RecoverService {
    pub fn new(engine: Engine) -> Self {
        Self { engine }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::engine_server::Engine for RecoverService {
    type RecoverStream = EventStream;

    async fn recover(
        &self,
        request: Request<Streaming<pb::RecoverRequest>>,
    ) -> Result<Response<Self::RecoverStream>, Status> {
        // The run is a span of the notification's trace: its parent is the
        // API's dispatch span, carried in the stream's metadata.
        let parent = instanceha_runtime::propagation::extract(request.metadata().as_ref());
        let mut inbound = request.into_inner();
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("the stream closed before Start"))?;
        let Some(pb::recover_request::Body::StartRun(start)) = first.body else {
            return Err(Status::invalid_argument("the first message must be Start"));
        };
        let run = StartRun::try_from(start).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let run_id = run.run_id.clone();
        let span = tracing::info_span!(
            "recovery.run",
            otel.name = "recovery.run",
            otel.status_code = tracing::field::Empty,
            notification_id = %run.notification_id,
            run_id = %run.run_id,
            attempt = run.attempt,
            host = %run.hostname,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        let _ = span.set_parent(parent);
        instanceha_runtime::telemetry::record_ids(&span);
        span.in_scope(|| tracing::info!("run accepted"));

        let (reporter, events) = Reporter::new(self.engine.clock());
        let cancel = CancellationToken::new();
        let engine = self.engine.clone();
        let run_cancel = cancel.clone();
        tokio::spawn(
            async move {
                engine.run(run, reporter, run_cancel).await;
            }
            .instrument(span),
        );
        let (out, out_rx) = mpsc::channel(1024);
        tokio::spawn(session(run_id, events, inbound, out, cancel));
        Ok(Response::new(Box::pin(ReceiverStream::new(out_rx))))
    }
}

/// Numbers and forwards the run's events, and reads acks and cancels.
async fn session(
    run_id: instanceha_proto::run::RunId,
    mut events: mpsc::UnboundedReceiver<RunEvent>,
    mut inbound: Streaming<pb::RecoverRequest>,
    out: mpsc::Sender<Result<pb::RunEvent, Status>>,
    cancel: CancellationToken,
) {
    let mut sequence: u64 = 0;
    let mut acked: u64 = 0;
    let mut done_at: Option<u64> = None;
    let mut api_gone = false;
    loop {
        if done_at.is_some_and(|d| acked >= d) {
            break;
        }
        tokio::select! {
            event = events.recv(), if done_at.is_none() => {
                let Some(event) = event else {
                    // The run ended without Done: impossible by construction,
                    // but never leave the API waiting.
                    tracing::error!(run_id = %run_id, "run ended without reporting done");
                    break;
                };
                sequence += 1;
                if matches!(event, RunEvent::Done(_)) {
                    done_at = Some(sequence);
                }
                let message = convert::event_message(&run_id, sequence, event);
                if !api_gone && out.send(Ok(message)).await.is_err() {
                    tracing::warn!(run_id = %run_id, "the api left; cancelling the run");
                    api_gone = true;
                    cancel.cancel();
                }
                if api_gone && done_at.is_some() {
                    break;
                }
            }
            message = inbound.message(), if !api_gone => match message {
                Ok(Some(pb::RecoverRequest { body: Some(pb::recover_request::Body::Ack(ack)) })) => {
                    acked = acked.max(ack.sequence);
                }
                Ok(Some(pb::RecoverRequest { body: Some(pb::recover_request::Body::Cancel(c)) })) => {
                    tracing::info!(run_id = %run_id, reason = %c.reason, "run cancelled by the api");
                    cancel.cancel();
                }
                Ok(Some(_)) => {
                    tracing::warn!(run_id = %run_id, "unexpected message on a running stream; ignored");
                }
                Ok(None) | Err(_) => {
                    tracing::warn!(run_id = %run_id, "the api closed the stream; cancelling the run");
                    api_gone = true;
                    cancel.cancel();
                }
            },
            () = tokio::time::sleep(FINAL_ACK_TIMEOUT), if done_at.is_some() => {
                tracing::warn!(run_id = %run_id, "no acknowledgement of done; closing");
                break;
            }
        }
        if api_gone && done_at.is_some() {
            // Nobody is left to acknowledge Done.
            break;
        }
        if api_gone && done_at.is_none() {
            // Keep draining until the cancelled run reports done, so its
            // workers finish their clean-up (unlocking) undisturbed.
            continue;
        }
    }
    tracing::debug!(run_id = %run_id, events = sequence, "stream closed");
}
