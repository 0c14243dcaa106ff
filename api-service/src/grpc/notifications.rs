//! `instanceha.v1.NotificationService`: thin handlers over the service
//! layer.

use instanceha_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::requests::{self, NOTIFICATIONS as KIND};
use super::watches::WatchSlots;
use crate::auth::Principal;
use crate::service::{Api, WatchUpdate};
use tokio_stream::StreamExt as _;

pub struct NotificationHandlers {
    pub api: Api,
    pub watches: WatchSlots,
}

type UpdateStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::NotificationUpdate, Status>> + Send>>;

fn update_message(update: WatchUpdate) -> pb::NotificationUpdate {
    use pb::notification_update::Update;
    let update = match update {
        WatchUpdate::Snapshot {
            notification,
            progress,
            vmoves,
        } => {
            let mut notification = pb::Notification::from(notification);
            notification.progress_events = progress.into_iter().map(Into::into).collect();
            Update::Snapshot(pb::NotificationSnapshot {
                notification: Some(notification),
                vmoves: vmoves.into_iter().map(Into::into).collect(),
            })
        }
        WatchUpdate::Notification(n) => Update::Notification(n.into()),
        WatchUpdate::VMove(v) => Update::Vmove(v.into()),
        WatchUpdate::Progress(p) => Update::ProgressEvent(p.into()),
    };
    pb::NotificationUpdate {
        update: Some(update),
    }
}

#[tonic::async_trait]
impl pb::notification_service_server::NotificationService for NotificationHandlers {
    type WatchNotificationStream = UpdateStream;

    async fn watch_notification(
        &self,
        request: Request<pb::WatchNotificationRequest>,
    ) -> Result<Response<Self::WatchNotificationStream>, Status> {
        // Without authentication every caller is `anonymous`: the address
        // stands for the caller then.
        let caller = match request.extensions().get::<Principal>() {
            Some(p) if p.name != "anonymous" => p.name.clone(),
            _ => request
                .remote_addr()
                .map_or_else(|| "anonymous".to_owned(), |a| a.ip().to_string()),
        };
        let slot = self.watches.take(&caller)?;
        let id = requests::watch_notification(request.into_inner())?;
        let updates = self.api.watch_notification(id).await?;
        // The slot goes with the stream: back when it ends or is dropped.
        let stream = tokio_stream::wrappers::ReceiverStream::new(updates).map(move |update| {
            let _held = &slot;
            update.map(update_message).map_err(Status::from)
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn create_notification(
        &self,
        request: Request<pb::CreateNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        // The recovery joins this call's trace.
        let trace_context = instanceha_runtime::propagation::current_traceparent();
        let new = requests::create_notification(request.into_inner(), trace_context)?;
        Ok(Response::new(
            self.api.create_notification(new).await?.into(),
        ))
    }

    async fn get_notification(
        &self,
        request: Request<pb::GetNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        let id = requests::get_notification(request.into_inner())?;
        let (notification, progress) = self.api.get_notification(id).await?;
        let mut message = pb::Notification::from(notification);
        message.progress_events = progress.into_iter().map(Into::into).collect();
        Ok(Response::new(message))
    }

    async fn retry_notification(
        &self,
        request: Request<pb::RetryNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        let id = requests::retry_notification(request.into_inner())?;
        Ok(Response::new(self.api.retry_notification(id).await?.into()))
    }

    async fn list_notifications(
        &self,
        request: Request<pb::ListNotificationsRequest>,
    ) -> Result<Response<pb::ListNotificationsResponse>, Status> {
        let (filter, page) = requests::list_notifications(request.into_inner())?;
        let page = self.api.list_notifications(filter, page).await?;
        Ok(Response::new(pb::ListNotificationsResponse {
            notifications: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next.map(|t| t.encode(KIND)).unwrap_or_default(),
        }))
    }
}
