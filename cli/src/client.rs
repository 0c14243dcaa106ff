//! The gRPC client of `instanceha-api`: one channel, the bearer token on
//! every call, the `--timeout` on every unary call, and every failure turned
//! into a message that says what was wrong and what to do.

use std::future::Future;
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use instanceha_proto::v1 as pb;
use pb::host_service_client::HostServiceClient;
use pb::notification_service_client::NotificationServiceClient;
use pb::segment_service_client::SegmentServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Response, Status};

use crate::config::Settings;

mod token;

use crate::convert;
use crate::resources::{
    Host, HostChanges, HostFilter, NewHost, NewNotification, NewSegment, Notification,
    NotificationFilter, Page, Segment, SegmentChanges, SegmentFilter, Vmove, VmoveFilter,
    WatchUpdate,
};
pub use token::BearerToken;

/// The kind of resource a call was about, for the hints in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Segment,
    Host,
    Notification,
    Vmove,
}

impl Resource {
    pub fn name(self) -> &'static str {
        match self {
            Self::Segment => "segment",
            Self::Host => "host",
            Self::Notification => "notification",
            Self::Vmove => "vmove",
        }
    }

    fn list_command(self) -> &'static str {
        match self {
            Self::Segment => "instanceha segment list",
            Self::Host => "instanceha host list",
            Self::Notification => "instanceha notification list",
            Self::Vmove => "instanceha vmove list NOTIFICATION_ID",
        }
    }
}

/// A call that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API (or the transport on its behalf) answered with a status.
    #[error("{}", describe(*code, message, endpoint, *resource, *answered))]
    Status {
        code: Code,
        /// The server's message, or the transport's root cause.
        message: String,
        endpoint: String,
        resource: Resource,
        /// The API itself answered (false: the connection failed).
        answered: bool,
    },
    /// No answer within `--timeout`.
    #[error(
        "instanceha-api at {endpoint} did not answer within {} — is it overloaded or \
         unreachable? check --endpoint, or raise --timeout",
        humantime::format_duration(*after)
    )]
    Timeout { endpoint: String, after: Duration },
    /// The watch stream stopped before the notification reached a final
    /// status.
    #[error(
        "the watch of notification {id} ended before it reached a final status (the API \
         closed the stream) — run `instanceha notification watch {id}` again"
    )]
    WatchEnded { id: String },
}

impl Error {
    /// The gRPC code, `DeadlineExceeded` for a local timeout, `Unavailable`
    /// for a stream that ended early.
    pub fn code(&self) -> Code {
        match self {
            Self::Status { code, .. } => *code,
            Self::Timeout { .. } => Code::DeadlineExceeded,
            Self::WatchEnded { .. } => Code::Unavailable,
        }
    }
}

fn describe(
    code: Code,
    message: &str,
    endpoint: &str,
    resource: Resource,
    answered: bool,
) -> String {
    let what = resource.name();
    match code {
        Code::Unavailable if answered => format!(
            "instanceha-api at {endpoint} is unavailable: {message} — retry later; if it \
             persists, check the API's log and its database"
        ),
        Code::NotFound => format!(
            "not found: {message} — check the ID or name (`{}` shows what exists)",
            resource.list_command()
        ),
        Code::InvalidArgument | Code::OutOfRange => {
            format!("invalid request: {message} — fix the named field and retry")
        }
        Code::AlreadyExists => match resource {
            Resource::Notification => format!(
                "already reported: {message} — follow the existing notification with \
                 `instanceha notification watch ID`"
            ),
            _ => format!(
                "already exists: {message} — choose another name, or use the existing {what} \
                 (`{}`)",
                resource.list_command()
            ),
        },
        Code::FailedPrecondition | Code::Aborted => {
            // The API's refusals say what to wait for; add advice only when
            // this one does not.
            let advice = if ["retry", "until", "when"]
                .iter()
                .any(|word| message.contains(word))
            {
                ""
            } else {
                " — change what blocks it first, then retry"
            };
            format!("refused in the current state: {message}{advice}")
        }
        Code::Unavailable => format!(
            "cannot reach instanceha-api at {endpoint}: {message} — is it running? check \
             --endpoint or INSTANCEHA_CLI_ENDPOINT"
        ),
        Code::DeadlineExceeded => format!(
            "instanceha-api at {endpoint} ran out of time: {message} — retry, or raise --timeout"
        ),
        Code::Unauthenticated => format!(
            "instanceha-api at {endpoint} did not accept the credentials: {message} — set \
             --token or INSTANCEHA_CLI_TOKEN to a valid token, or log in with --os-cloud or \
             the OS_* variables"
        ),
        Code::PermissionDenied => {
            format!("permission denied: {message} — use a token that is allowed to change {what}s")
        }
        Code::Unimplemented => format!(
            "instanceha-api at {endpoint} does not offer this call: {message} — is --endpoint \
             an instanceha-api of a matching version?"
        ),
        Code::Internal | Code::DataLoss | Code::Unknown => format!(
            "instanceha-api at {endpoint} failed: {message} — its log has the details; report \
             the reference if there is one"
        ),
        Code::Ok | Code::Cancelled | Code::ResourceExhausted => {
            format!("instanceha-api at {endpoint} answered {code:?}: {message}")
        }
    }
}

type Transport = InterceptedService<Channel, BearerToken>;

/// The clients of the four services over one lazily connected channel.
#[derive(Clone)]
pub struct Client {
    endpoint: String,
    timeout: Duration,
    segments: SegmentServiceClient<Transport>,
    hosts: HostServiceClient<Transport>,
    notifications: NotificationServiceClient<Transport>,
    vmoves: VmoveServiceClient<Transport>,
}

/// The stream of a watch, already converted.
pub type WatchStream = std::pin::Pin<Box<dyn Stream<Item = Result<WatchUpdate, Error>> + Send>>;

impl Client {
    /// Prepares the channel; the connection is made by the first call.
    pub fn new(settings: &Settings) -> Result<Self, Error> {
        let invalid = |message: String| Error::Status {
            code: Code::InvalidArgument,
            message,
            endpoint: settings.endpoint.clone(),
            resource: Resource::Segment,
            answered: false,
        };
        let mut endpoint = Endpoint::from_shared(settings.endpoint.clone())
            .map_err(|e| invalid(format!("--endpoint: {e}")))?
            .connect_timeout(settings.timeout)
            .tcp_nodelay(true);
        if settings.endpoint.starts_with("https://") {
            let mut tls = ClientTlsConfig::new().with_native_roots();
            if let Some(path) = &settings.ca_file {
                let pem = std::fs::read(path).map_err(|e| {
                    invalid(format!("--os-cacert: cannot read {}: {e}", path.display()))
                })?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| invalid(format!("--endpoint: {e}")))?;
        }
        let channel = endpoint.connect_lazy();
        let token = BearerToken::new(settings.token.as_ref())
            .ok_or_else(|| invalid("--token: not a valid header value".to_owned()))?;
        Ok(Self {
            endpoint: settings.endpoint.clone(),
            timeout: settings.timeout,
            segments: SegmentServiceClient::with_interceptor(channel.clone(), token.clone()),
            hosts: HostServiceClient::with_interceptor(channel.clone(), token.clone()),
            notifications: NotificationServiceClient::with_interceptor(
                channel.clone(),
                token.clone(),
            ),
            vmoves: VmoveServiceClient::with_interceptor(channel, token),
        })
    }

    /// Runs one call under the timeout and describes its failure.
    async fn call<T>(
        &self,
        resource: Resource,
        call: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(self.status_error(resource, &status)),
            Err(_) => Err(Error::Timeout {
                endpoint: self.endpoint.clone(),
                after: self.timeout,
            }),
        }
    }

    fn status_error(&self, resource: Resource, status: &Status) -> Error {
        Error::Status {
            code: status.code(),
            message: status_message(status),
            endpoint: self.endpoint.clone(),
            resource,
            answered: std::error::Error::source(status).is_none(),
        }
    }

    // ---- segments ---------------------------------------------------------------

    pub async fn create_segment(&self, new: NewSegment) -> Result<Segment, Error> {
        let mut client = self.segments.clone();
        let request = convert::create_segment(new);
        self.call(Resource::Segment, client.create_segment(request))
            .await
            .map(Into::into)
    }

    pub async fn get_segment(&self, id: &str) -> Result<Segment, Error> {
        let mut client = self.segments.clone();
        let request = pb::GetSegmentRequest { id: id.to_owned() };
        self.call(Resource::Segment, client.get_segment(request))
            .await
            .map(Into::into)
    }

    pub async fn list_segments(
        &self,
        filter: &SegmentFilter,
        page_size: u32,
        page_token: String,
    ) -> Result<Page<Segment>, Error> {
        let mut client = self.segments.clone();
        let request = convert::list_segments(filter, page_size, page_token);
        let response = self
            .call(Resource::Segment, client.list_segments(request))
            .await?;
        Ok(Page {
            items: response.segments.into_iter().map(Into::into).collect(),
            next_page_token: convert::next_page_token(response.next_page_token),
        })
    }

    pub async fn update_segment(
        &self,
        id: &str,
        changes: SegmentChanges,
    ) -> Result<Segment, Error> {
        let mut client = self.segments.clone();
        let request = convert::update_segment(id.to_owned(), changes);
        self.call(Resource::Segment, client.update_segment(request))
            .await
            .map(Into::into)
    }

    pub async fn delete_segment(&self, id: &str) -> Result<(), Error> {
        let mut client = self.segments.clone();
        let request = pb::DeleteSegmentRequest { id: id.to_owned() };
        self.call(Resource::Segment, client.delete_segment(request))
            .await
            .map(|_| ())
    }

    // ---- hosts ------------------------------------------------------------------

    pub async fn create_host(&self, new: NewHost) -> Result<Host, Error> {
        let mut client = self.hosts.clone();
        let request = convert::create_host(new);
        self.call(Resource::Host, client.create_host(request))
            .await
            .map(Into::into)
    }

    pub async fn get_host(&self, id: &str, segment_id: Option<&str>) -> Result<Host, Error> {
        let mut client = self.hosts.clone();
        let request = pb::GetHostRequest {
            id: id.to_owned(),
            segment_id: segment_id.unwrap_or_default().to_owned(),
        };
        self.call(Resource::Host, client.get_host(request))
            .await
            .map(Into::into)
    }

    pub async fn list_hosts(
        &self,
        filter: &HostFilter,
        page_size: u32,
        page_token: String,
    ) -> Result<Page<Host>, Error> {
        let mut client = self.hosts.clone();
        let request = convert::list_hosts(filter, page_size, page_token);
        let response = self
            .call(Resource::Host, client.list_hosts(request))
            .await?;
        Ok(Page {
            items: response.hosts.into_iter().map(Into::into).collect(),
            next_page_token: convert::next_page_token(response.next_page_token),
        })
    }

    pub async fn update_host(
        &self,
        id: &str,
        segment_id: Option<&str>,
        changes: HostChanges,
    ) -> Result<Host, Error> {
        let mut client = self.hosts.clone();
        let request = convert::update_host(
            id.to_owned(),
            segment_id.unwrap_or_default().to_owned(),
            changes,
        );
        self.call(Resource::Host, client.update_host(request))
            .await
            .map(Into::into)
    }

    pub async fn delete_host(&self, id: &str, segment_id: Option<&str>) -> Result<(), Error> {
        let mut client = self.hosts.clone();
        let request = pb::DeleteHostRequest {
            id: id.to_owned(),
            segment_id: segment_id.unwrap_or_default().to_owned(),
        };
        self.call(Resource::Host, client.delete_host(request))
            .await
            .map(|_| ())
    }

    /// An operator's restore of a host: the notification that brings it
    /// back.
    pub async fn restore_host(
        &self,
        id: &str,
        segment_id: Option<&str>,
    ) -> Result<Notification, Error> {
        let mut client = self.hosts.clone();
        let request = pb::RestoreHostRequest {
            id: id.to_owned(),
            segment_id: segment_id.unwrap_or_default().to_owned(),
        };
        self.call(Resource::Host, client.restore_host(request))
            .await
            .map(Into::into)
    }

    // ---- notifications ----------------------------------------------------------

    pub async fn create_notification(&self, new: NewNotification) -> Result<Notification, Error> {
        let mut client = self.notifications.clone();
        let request = convert::create_notification(new);
        self.call(Resource::Notification, client.create_notification(request))
            .await
            .map(Into::into)
    }

    pub async fn get_notification(&self, id: &str) -> Result<Notification, Error> {
        let mut client = self.notifications.clone();
        let request = pb::GetNotificationRequest { id: id.to_owned() };
        self.call(Resource::Notification, client.get_notification(request))
            .await
            .map(Into::into)
    }

    /// Recovers a failed notification again.
    pub async fn retry_notification(&self, id: &str) -> Result<Notification, Error> {
        let mut client = self.notifications.clone();
        let request = pb::RetryNotificationRequest { id: id.to_owned() };
        self.call(Resource::Notification, client.retry_notification(request))
            .await
            .map(Into::into)
    }

    pub async fn list_notifications(
        &self,
        filter: &NotificationFilter,
        page_size: u32,
        page_token: String,
    ) -> Result<Page<Notification>, Error> {
        let mut client = self.notifications.clone();
        let request = convert::list_notifications(filter, page_size, page_token);
        let response = self
            .call(Resource::Notification, client.list_notifications(request))
            .await?;
        Ok(Page {
            items: response.notifications.into_iter().map(Into::into).collect(),
            next_page_token: convert::next_page_token(response.next_page_token),
        })
    }

    /// Opens the watch; `--timeout` bounds the opening only, not the
    /// recovery that follows.
    pub async fn watch_notification(&self, id: &str) -> Result<WatchStream, Error> {
        let mut client = self.notifications.clone();
        let request = pb::WatchNotificationRequest { id: id.to_owned() };
        let stream = self
            .call(Resource::Notification, client.watch_notification(request))
            .await?;
        let this = self.clone();
        let updates = stream.filter_map(move |item| {
            let converted = match item {
                Ok(update) => convert::watch_update(update).map(Ok),
                Err(status) => Some(Err(this.status_error(Resource::Notification, &status))),
            };
            futures::future::ready(converted)
        });
        Ok(Box::pin(updates))
    }

    // ---- vmoves -----------------------------------------------------------------

    pub async fn get_vmove(&self, notification_id: &str, id: &str) -> Result<Vmove, Error> {
        let mut client = self.vmoves.clone();
        let request = pb::GetVmoveRequest {
            notification_id: notification_id.to_owned(),
            id: id.to_owned(),
        };
        self.call(Resource::Vmove, client.get_vmove(request))
            .await
            .map(Into::into)
    }

    pub async fn list_vmoves(
        &self,
        notification_id: &str,
        filter: &VmoveFilter,
        page_size: u32,
        page_token: String,
    ) -> Result<Page<Vmove>, Error> {
        let mut client = self.vmoves.clone();
        let request =
            convert::list_vmoves(notification_id.to_owned(), filter, page_size, page_token);
        let response = self
            .call(Resource::Vmove, client.list_vmoves(request))
            .await?;
        Ok(Page {
            items: response.vmoves.into_iter().map(Into::into).collect(),
            next_page_token: convert::next_page_token(response.next_page_token),
        })
    }
}

/// The server's message; for a transport failure (empty or generic
/// message) the root cause, such as "Connection refused (os error 111)".
fn status_message(status: &Status) -> String {
    let mut causes = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    let message = status.message().trim();
    match causes.last() {
        Some(root) if message.is_empty() || causes.len() > 1 => {
            if message.is_empty() || message == root {
                root.clone()
            } else {
                format!("{message}: {root}")
            }
        }
        _ if message.is_empty() => format!("{:?} with no message", status.code()),
        _ => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message_of(code: Code, resource: Resource) -> String {
        Error::Status {
            code,
            message: "name: must not be empty".into(),
            endpoint: "http://127.0.0.1:1".into(),
            resource,
            answered: false,
        }
        .to_string()
    }

    #[test]
    fn every_code_says_what_was_wrong_and_what_to_do() {
        let codes = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        for code in codes {
            let message = message_of(code, Resource::Segment);
            assert!(
                message.contains("name: must not be empty"),
                "{code:?}: {message}"
            );
        }
        assert!(message_of(Code::Unavailable, Resource::Host).contains("--endpoint"));
        let answered = Error::Status {
            code: Code::Unavailable,
            message: "the database is not answering; retry later".into(),
            endpoint: "http://127.0.0.1:1".into(),
            resource: Resource::Segment,
            answered: true,
        }
        .to_string();
        assert!(answered.contains("is unavailable"), "{answered}");
        assert!(!answered.contains("is it running"), "{answered}");
        assert!(message_of(Code::Unavailable, Resource::Host).contains("http://127.0.0.1:1"));
        assert!(message_of(Code::Unauthenticated, Resource::Host).contains("INSTANCEHA_CLI_TOKEN"));
        assert!(message_of(Code::NotFound, Resource::Host).contains("instanceha host list"));
        assert!(
            message_of(Code::AlreadyExists, Resource::Notification).contains("notification watch")
        );
        assert!(message_of(Code::DeadlineExceeded, Resource::Host).contains("--timeout"));
    }

    #[test]
    fn a_timeout_names_the_endpoint_and_the_limit() {
        let err = Error::Timeout {
            endpoint: "http://10.1.1.1:15869".into(),
            after: Duration::from_secs(30),
        };
        let message = err.to_string();
        assert!(message.contains("http://10.1.1.1:15869"), "{message}");
        assert!(message.contains("30s"), "{message}");
        assert_eq!(err.code(), Code::DeadlineExceeded);
    }

    #[test]
    fn a_plain_status_keeps_the_server_message() {
        let status = Status::invalid_argument("name: must not be empty");
        assert_eq!(status_message(&status), "name: must not be empty");
        assert_eq!(
            status_message(&Status::unavailable("")),
            "Unavailable with no message"
        );
    }
}
