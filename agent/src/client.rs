//! The gRPC client of `instanceha-api` (`instanceha_proto::v1`, the only
//! module that touches generated types): one lazily connected channel with
//! TLS or mutual TLS when configured, the bearer token on every call, the
//! report's `traceparent` in the call's metadata, and the follow-up of a
//! stored notification with `WatchNotification`.

use std::collections::BTreeMap;

use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use tokio_stream::StreamExt as _;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::config::ApiSettings;
use crate::credentials::{self, Secret};
use crate::report::{Report, ReportKind};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("api.url: {0}")]
    Url(String),
    #[error("api.tls: {0}")]
    Tls(#[from] instanceha_runtime::tls::TlsError),
    #[error(transparent)]
    Credentials(#[from] credentials::Error),
    #[error("api token: not a valid header value")]
    Token,
    #[error("the API answered {code:?}: {message}")]
    Status { code: tonic::Code, message: String },
    #[error("segment {0:?} is not registered in the API")]
    UnknownSegment(String),
}

impl From<tonic::Status> for Error {
    fn from(status: tonic::Status) -> Self {
        Self::Status {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// Adds `authorization: Bearer <token>` to every call, when a token is
/// configured.
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer([redacted])"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Transport = InterceptedService<Channel, Bearer>;

/// What the API made of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub notification_id: String,
    pub status: String,
}

/// How a refused call is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Try again later (the API is down, overloaded, or our token is
    /// wrong and may be fixed).
    Retry,
    /// The API will never take this report: stop (as masakari-monitors do
    /// on 400 and 409).
    Refused,
}

/// What to do after the API answered `code` to a create.
pub fn verdict(code: tonic::Code) -> Verdict {
    use tonic::Code as C;
    match code {
        C::InvalidArgument | C::FailedPrecondition | C::AlreadyExists | C::OutOfRange => {
            Verdict::Refused
        }
        C::Ok
        | C::Cancelled
        | C::Unknown
        | C::DeadlineExceeded
        | C::NotFound
        | C::PermissionDenied
        | C::ResourceExhausted
        | C::Aborted
        | C::Unimplemented
        | C::Internal
        | C::Unavailable
        | C::DataLoss
        | C::Unauthenticated => Verdict::Retry,
    }
}

/// The API's clients over one channel.
#[derive(Clone, Debug)]
pub struct ApiClient {
    notifications: NotificationServiceClient<Transport>,
    hosts: HostServiceClient<Transport>,
    segments: SegmentServiceClient<Transport>,
}

fn token(settings: &ApiSettings) -> Result<Option<Secret>, Error> {
    if let Some(path) = &settings.token_file {
        return Ok(Some(credentials::from_file("api.token_file", path)?));
    }
    if let Some(name) = &settings.token_env {
        return Ok(Some(credentials::from_env("api.token_env", name)?));
    }
    Ok(None)
}

impl ApiClient {
    /// A client that connects on first use (the agent starts while the API
    /// is down; calls fail until it is back).
    pub fn new(settings: &ApiSettings) -> Result<Self, Error> {
        let mut endpoint = Endpoint::from_shared(settings.url.clone())
            .map_err(|e| Error::Url(e.to_string()))?
            .connect_timeout(settings.timeout)
            .timeout(settings.timeout)
            .tcp_nodelay(true);
        if let Some(tls) = settings.tls.load("api.tls")? {
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| Error::Url(e.to_string()))?;
        }
        let channel = endpoint.connect_lazy();
        let bearer = match token(settings)? {
            Some(secret) => Some(
                format!("Bearer {}", secret.expose())
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| Error::Token)?,
            ),
            None => None,
        };
        let bearer = Bearer(bearer);
        Ok(Self {
            notifications: NotificationServiceClient::with_interceptor(
                channel.clone(),
                bearer.clone(),
            ),
            hosts: HostServiceClient::with_interceptor(channel.clone(), bearer.clone()),
            segments: SegmentServiceClient::with_interceptor(channel, bearer),
        })
    }

    /// Sends one report, with `traceparent` in the call's metadata.
    pub async fn create(
        &self,
        report: &Report,
        traceparent: Option<&str>,
    ) -> Result<Stored, Error> {
        let mut request = tonic::Request::new(to_request(report));
        if let Some(tp) = traceparent.and_then(|tp| tp.parse::<MetadataValue<Ascii>>().ok()) {
            request.metadata_mut().insert("traceparent", tp);
        }
        let notification = self
            .notifications
            .clone()
            .create_notification(request)
            .await?
            .into_inner();
        Ok(Stored {
            notification_id: notification.id,
            status: status_name(notification.status),
        })
    }

    /// The names of the hosts of the segment named `segment`.
    pub async fn segment_hosts(&self, segment: &str) -> Result<Vec<String>, Error> {
        let segments = self
            .segments
            .clone()
            .list_segments(pb::ListSegmentsRequest {
                page_size: 0,
                page_token: String::new(),
                recovery_method: None,
                service_type: None,
                enabled: None,
                name: Some(segment.to_owned()),
            })
            .await?
            .into_inner()
            .segments;
        let Some(found) = segments.into_iter().find(|s| s.name == segment) else {
            return Err(Error::UnknownSegment(segment.to_owned()));
        };
        let mut names = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = self
                .hosts
                .clone()
                .list_hosts(pb::ListHostsRequest {
                    page_size: 1000,
                    page_token: page_token.clone(),
                    segment_id: Some(found.id.clone()),
                    r#type: None,
                    reserved: None,
                    on_maintenance: None,
                    name: None,
                })
                .await?
                .into_inner();
            names.extend(page.hosts.into_iter().map(|h| h.name));
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        Ok(names)
    }

    /// Follows notification `id` until it reaches a terminal status,
    /// logging each change. Returns the last status seen.
    pub async fn watch(&self, id: &str) -> Result<String, Error> {
        let mut stream = self
            .notifications
            .clone()
            .watch_notification(pb::WatchNotificationRequest { id: id.to_owned() })
            .await?
            .into_inner();
        let mut last = String::from("unknown");
        while let Some(update) = stream.next().await {
            let update = update?;
            match update.update {
                Some(pb::notification_update::Update::Snapshot(snapshot)) => {
                    if let Some(n) = snapshot.notification {
                        last = status_name(n.status);
                        tracing::info!(notification_id = %id, status = %last, vmoves = snapshot.vmoves.len(), "notification watched");
                    }
                }
                Some(pb::notification_update::Update::Notification(n)) => {
                    last = status_name(n.status);
                    tracing::info!(notification_id = %id, status = %last, message = %n.message, "notification status changed");
                }
                Some(pb::notification_update::Update::Vmove(v)) => {
                    tracing::info!(
                        notification_id = %id,
                        instance = %v.instance_name,
                        status = %vmove_status_name(v.status),
                        dest_host = %v.dest_host,
                        "instance recovery changed"
                    );
                }
                Some(pb::notification_update::Update::ProgressEvent(p)) => {
                    tracing::info!(notification_id = %id, task = %p.task, state = %p.state, message = %p.message, "recovery progress");
                }
                None => {}
            }
        }
        Ok(last)
    }
}

fn to_request(report: &Report) -> pb::CreateNotificationRequest {
    let kind = match report.kind {
        ReportKind::ComputeHost => pb::NotificationType::ComputeHost,
        ReportKind::Process => pb::NotificationType::Process,
        ReportKind::Vm => pb::NotificationType::Vm,
    };
    pb::CreateNotificationRequest {
        r#type: kind as i32,
        hostname: report.hostname.clone(),
        generated_time: Some(instanceha_proto::time::timestamp(report.generated_time)),
        payload: report
            .payload
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::HashMap<_, _>>(),
        idempotency_key: report.idempotency_key.clone(),
    }
}

fn status_name(status: i32) -> String {
    use pb::NotificationStatus as S;
    match S::try_from(status) {
        Ok(S::New) => "new",
        Ok(S::Running) => "running",
        Ok(S::Error) => "error",
        Ok(S::Failed) => "failed",
        Ok(S::Ignored) => "ignored",
        Ok(S::Finished) => "finished",
        Ok(S::Unspecified) | Err(_) => "unspecified",
    }
    .to_owned()
}

fn vmove_status_name(status: i32) -> &'static str {
    use pb::VmoveStatus as S;
    match S::try_from(status) {
        Ok(S::Pending) => "pending",
        Ok(S::Ongoing) => "ongoing",
        Ok(S::Succeeded) => "succeeded",
        Ok(S::Failed) => "failed",
        Ok(S::Ignored) => "ignored",
        Ok(S::Unspecified) | Err(_) => "unspecified",
    }
}

/// Whether `status` (as [`Stored::status`] names it) is terminal.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "finished" | "failed" | "ignored")
}

/// The payload as the API sees it, for logs.
pub fn describe(payload: &BTreeMap<String, String>) -> String {
    payload
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Fenced;

    #[test]
    fn refusals_that_retrying_cannot_fix_are_final() {
        assert_eq!(verdict(tonic::Code::InvalidArgument), Verdict::Refused);
        assert_eq!(verdict(tonic::Code::AlreadyExists), Verdict::Refused);
        assert_eq!(verdict(tonic::Code::FailedPrecondition), Verdict::Refused);
        assert_eq!(verdict(tonic::Code::Unavailable), Verdict::Retry);
        assert_eq!(verdict(tonic::Code::Unauthenticated), Verdict::Retry);
        assert_eq!(verdict(tonic::Code::DeadlineExceeded), Verdict::Retry);
    }

    #[test]
    fn a_report_becomes_the_request_the_api_expects() {
        let report = Report::host_stopped("c2", "i", &Fenced::Confirmed, chrono::Utc::now());
        let request = to_request(&report);
        assert_eq!(request.r#type, pb::NotificationType::ComputeHost as i32);
        assert_eq!(request.payload["host_status"], "NORMAL");
        assert_eq!(request.idempotency_key, report.idempotency_key);
        assert_eq!(
            request.generated_time.unwrap().nanos as u32 % 1000,
            0,
            "microsecond precision, as stored"
        );
    }

    #[test]
    fn the_token_never_prints() {
        let bearer = Bearer(Some("Bearer s3cret".parse().unwrap()));
        assert!(!format!("{bearer:?}").contains("s3cret"));
    }
}
