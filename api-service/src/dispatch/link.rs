//! The API's end of the engine link: the tonic client, one `Recover`
//! stream per run, the generated types (converted by the run protocol's
//! one conversion, `instanceha_proto::run::wire`), acknowledgements, and
//! cancellation with its grace period. The rest of the dispatcher sees
//! domain types only.

use std::time::Duration;

use futures::FutureExt as _;
use instanceha_proto::engine::v1 as pb;
use instanceha_runtime::secret::Secret;
use pb::engine_client::EngineClient;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use super::DispatchSettings;
use crate::domain::{RunId, SequencedEvent, StartRun};
use instanceha_proto::run::wire;

/// How long the engine is given to close its side of a run cancelled for
/// a protocol error.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// The largest message the engine may send.
const MAX_DECODING: usize = 16 * 1024 * 1024;

/// The client side of the engine service. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EngineLink {
    client: EngineClient<Channel>,
    /// The engine's gRPC health service, on the same connection.
    health: HealthClient<Channel>,
    url: String,
    /// The `authorization` metadata of every stream
    /// (`dispatch.engine_token_file`).
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

/// What came from a run's stream.
#[derive(Debug)]
pub enum Received {
    /// Events, in order, as many as had arrived (at least one).
    Events(Vec<SequencedEvent>),
    /// An event the API cannot read: the run must be cancelled.
    Malformed(String),
    /// The stream failed.
    Failed(String),
    /// The engine closed the stream.
    Closed,
}

/// Whether a token sent to `engine` crosses the network in plaintext:
/// `http:` to a host beyond loopback.
fn token_in_plaintext(engine: &http::Uri) -> bool {
    let loopback = engine.host().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    engine.scheme_str() == Some("http") && !loopback
}

impl EngineLink {
    /// A lazily connecting client for `settings.engine_url`, with TLS and
    /// the link token when configured.
    pub fn new(settings: &DispatchSettings) -> Result<Self, String> {
        let authorization = match &settings.engine_token_file {
            Some(path) => {
                let token = Secret::read_file("dispatch.engine_token_file", path)
                    .map_err(|e| e.to_string())?;
                let mut value: tonic::metadata::MetadataValue<_> =
                    format!("Bearer {}", token.expose()).parse().map_err(|_| {
                        "dispatch.engine_token_file: the token must be printable ASCII".to_owned()
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut endpoint = Endpoint::from_shared(settings.engine_url.clone())
            .map_err(|e| format!("dispatch.engine_url: {e}"))?;
        if let Some(tls) = settings
            .tls
            .load("dispatch.tls")
            .map_err(|e| e.to_string())?
        {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("dispatch.tls: {e}"))?;
        } else if settings.engine_url.starts_with("https:") {
            return Err("dispatch.engine_url is https: set dispatch.tls.ca_file".to_owned());
        }
        if authorization.is_some() && token_in_plaintext(endpoint.uri()) {
            tracing::warn!(engine_url = %settings.engine_url, "the link token crosses the network in plaintext: use an https engine_url with dispatch.tls (or a mesh)");
        }
        let endpoint = endpoint
            .connect_timeout(settings.connect_timeout)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        let channel = endpoint.connect_lazy();
        Ok(Self {
            health: HealthClient::new(channel.clone()),
            client: EngineClient::new(channel).max_decoding_message_size(MAX_DECODING),
            url: settings.engine_url.clone(),
            authorization,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether an engine answers its health check (serving or not: a
    /// process is there to take a run) within `timeout`.
    pub async fn answers(&self, timeout: Duration) -> bool {
        let mut health = self.health.clone();
        let check = health.check(HealthCheckRequest {
            service: String::new(),
        });
        match tokio::time::timeout(timeout, check).await {
            Ok(Ok(_)) => true,
            // An engine that refuses the check is there all the same.
            Ok(Err(status)) => matches!(
                status.code(),
                tonic::Code::Unimplemented
                    | tonic::Code::Unauthenticated
                    | tonic::Code::PermissionDenied
            ),
            Err(_) => false,
        }
    }

    /// Opens the run's stream and sends its `StartRun`, with the current
    /// trace context in the stream's metadata. `Err` describes why the
    /// engine could not be reached.
    pub async fn open(&self, start: StartRun) -> Result<RunStream, String> {
        let run_id = start.run_id.clone();
        let (requests, outbound) = mpsc::channel::<pb::RecoverRequest>(64);
        let _ = requests.send(wire::start_request(start)).await;
        let mut headers = http::HeaderMap::new();
        instanceha_runtime::propagation::inject_current(&mut headers);
        let mut metadata = tonic::metadata::MetadataMap::from_headers(headers);
        if let Some(authorization) = &self.authorization {
            metadata.insert("authorization", authorization.clone());
        }
        let request = tonic::Request::from_parts(
            metadata,
            tonic::Extensions::default(),
            ReceiverStream::new(outbound),
        );
        let mut client = self.client.clone();
        match client.recover(request).await {
            Ok(response) => Ok(RunStream {
                run_id,
                requests,
                events: response.into_inner(),
            }),
            Err(status) => Err(describe(&status)),
        }
    }
}

/// One run's open stream.
pub struct RunStream {
    run_id: RunId,
    requests: mpsc::Sender<pb::RecoverRequest>,
    events: tonic::Streaming<pb::RunEvent>,
}

impl RunStream {
    /// Waits for the next event, then takes what else has already arrived
    /// (up to `max` in all), to be persisted in one transaction.
    pub async fn next(&mut self, max: usize) -> Received {
        let first = match self.events.next().await {
            Some(Ok(message)) => message,
            Some(Err(status)) => {
                return Received::Failed(format!(
                    "the engine stream failed: {}",
                    describe(&status)
                ));
            }
            None => return Received::Closed,
        };
        let mut batch = vec![first];
        while batch.len() < max.max(1) {
            match self.events.next().now_or_never() {
                Some(Some(Ok(message))) => batch.push(message),
                _ => break,
            }
        }
        match batch
            .into_iter()
            .map(|m| SequencedEvent::from_wire(&self.run_id, m))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(events) => Received::Events(events),
            Err(e) => Received::Malformed(format!("engine protocol error: {e}")),
        }
    }

    /// Tells the engine that every event up to `sequence` is persisted.
    pub async fn ack(&self, sequence: u64) {
        let _ = self.requests.send(wire::ack(sequence)).await;
    }

    /// Asks the engine to stop the run (it unlocks what it locked and ends
    /// with `Done`); the stream goes on until then.
    pub async fn cancel(&self, reason: &str) {
        let _ = self.requests.send(wire::cancel(reason)).await;
    }

    /// Tells the engine to stop a run whose events the API refused, then
    /// reads (and drops, unacknowledged) what it still sends until its
    /// `Done` or the end of the stream, for at most [`CANCEL_GRACE`].
    /// Dropping the call at once would reset the HTTP/2 stream, and the
    /// `Cancel` still queued behind it might never reach the engine, which
    /// would then go on touching instances nobody records.
    pub async fn abandon(&mut self, reason: &str) {
        tracing::error!(%reason, "cancelling the run");
        self.cancel(reason).await;
        let closed = tokio::time::timeout(CANCEL_GRACE, async {
            let mut dropped = 0usize;
            while let Some(Ok(event)) = self.events.next().await {
                dropped += 1;
                if matches!(event.body, Some(pb::run_event::Body::Done(_))) {
                    break;
                }
            }
            dropped
        })
        .await;
        match closed {
            Ok(dropped) => tracing::debug!(dropped, "engine closed the cancelled run"),
            Err(_) => tracing::warn!(
                grace = ?CANCEL_GRACE,
                "engine did not close the cancelled run in time; dropping the stream"
            ),
        }
    }
}

/// A gRPC status in a few words.
fn describe(status: &tonic::Status) -> String {
    let message = status.message();
    if message.is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {message}", status.code())
    }
}

#[cfg(test)]
mod tests {
    use super::token_in_plaintext;

    fn plaintext(url: &str) -> bool {
        token_in_plaintext(&url.parse().unwrap())
    }

    #[test]
    fn a_token_over_http_beyond_loopback_is_in_plaintext() {
        for url in [
            "http://instanceha-engine:15870",
            "http://10.0.0.5:15870",
            "http://[fd00::5]:15870",
            "http://engine.example.org",
        ] {
            assert!(plaintext(url), "{url}");
        }
    }

    #[test]
    fn a_token_over_https_or_on_loopback_is_not() {
        for url in [
            "https://instanceha-engine:15870",
            "https://10.0.0.5:15870",
            "http://127.0.0.1:15870",
            "http://127.3.2.1:15870",
            "http://localhost:15870",
            "http://[::1]:15870",
        ] {
            assert!(!plaintext(url), "{url}");
        }
    }
}
