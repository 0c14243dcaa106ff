//! A scripted stand-in for `instanceha-api`, for what a real API cannot be
//! made to do yet in a test:
//!
//! * `SegmentService` answers only in bad weather: every method fails in its
//!   own way (unauthenticated without the right token, permission denied,
//!   too slow, internal, unavailable), and the `authorization` headers it
//!   received are recorded;
//! * `NotificationService.WatchNotification` streams a scripted recovery of
//!   two instances (vmove changes, progress events, a fresh snapshot as
//!   after a lag, and the final failure), or a stream that ends early.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use instanceha_proto::v1 as pb;
use pb::notification_service_server::{NotificationService, NotificationServiceServer};
use pb::notification_update::Update;
use pb::segment_service_server::{SegmentService, SegmentServiceServer};
use prost_types::Timestamp;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

pub const GOOD_TOKEN: &str = "good-token";
/// Watching this notification shows a recovery that ends `failed`.
pub const FAILING_RECOVERY: &str = "11111111-1111-4111-8111-111111111111";
/// Watching this notification ends while it is still `running`.
pub const CUT_SHORT: &str = "22222222-2222-4222-8222-222222222222";

#[derive(Clone, Default)]
struct Script {
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
}

#[tonic::async_trait]
impl SegmentService for Script {
    /// Succeeds (with no segments) only for `Bearer good-token`.
    async fn list_segments(
        &self,
        request: Request<pb::ListSegmentsRequest>,
    ) -> Result<Response<pb::ListSegmentsResponse>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.authorizations.lock().unwrap().push(header.clone());
        if header.as_deref() == Some(&format!("Bearer {GOOD_TOKEN}")) {
            Ok(Response::new(pb::ListSegmentsResponse::default()))
        } else {
            Err(Status::unauthenticated("missing or invalid bearer token"))
        }
    }

    async fn create_segment(
        &self,
        _: Request<pb::CreateSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        Err(Status::permission_denied(
            "this token may read but not change segments",
        ))
    }

    /// Answers far later than any test's `--timeout`.
    async fn get_segment(
        &self,
        _: Request<pb::GetSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        // sleep: later than any test's `--timeout`.
        tokio::time::sleep(Duration::from_secs(30)).await;
        Err(Status::cancelled("too late"))
    }

    async fn update_segment(
        &self,
        _: Request<pb::UpdateSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        Err(Status::internal("internal error (reference 1a2b3c4d5e6f)"))
    }

    async fn delete_segment(
        &self,
        _: Request<pb::DeleteSegmentRequest>,
    ) -> Result<Response<pb::DeleteSegmentResponse>, Status> {
        Err(Status::unavailable(
            "the database is not answering; retry later",
        ))
    }
}

const T0: i64 = 1_750_000_000;

fn at(secs: i64) -> Option<Timestamp> {
    Some(Timestamp {
        seconds: T0 + secs,
        nanos: 0,
    })
}

fn notification(id: &str, status: pb::NotificationStatus, updated: i64) -> pb::Notification {
    pb::Notification {
        id: id.to_owned(),
        r#type: pb::NotificationType::ComputeHost as i32,
        hostname: "compute-1".to_owned(),
        generated_time: at(0),
        status: status as i32,
        attempts: 1,
        updated_at: at(updated),
        ..Default::default()
    }
}

fn vmove(name: &str, status: pb::VmoveStatus, step: &str, updated: i64) -> pb::Vmove {
    pb::Vmove {
        id: format!("vmove-{name}"),
        notification_id: FAILING_RECOVERY.to_owned(),
        instance_id: format!("instance-{name}"),
        instance_name: name.to_owned(),
        source_host: "compute-1".to_owned(),
        r#type: pb::VmoveType::Evacuation as i32,
        status: status as i32,
        step: step.to_owned(),
        attempts: 1,
        start_time: at(10),
        updated_at: at(updated),
        ..Default::default()
    }
}

fn progress(
    sequence: u64,
    task: &str,
    state: pb::ProgressState,
    instance: &str,
) -> pb::ProgressEvent {
    pb::ProgressEvent {
        sequence,
        task: task.to_owned(),
        state: state as i32,
        time: at(sequence as i64),
        instance_id: instance.to_owned(),
        ..Default::default()
    }
}

/// The recovery `FAILING_RECOVERY` goes through, message by message.
fn failing_recovery() -> Vec<Update> {
    use pb::NotificationStatus as N;
    use pb::VmoveStatus as V;
    let id = FAILING_RECOVERY;
    let mut vm_a_done = vmove("vm-a", V::Succeeded, "done", 5);
    vm_a_done.dest_host = "compute-2".to_owned();
    vm_a_done.end_time = at(75);
    let mut vm_b_failed = vmove("vm-b", V::Failed, "evacuate", 9);
    vm_b_failed.end_time = at(40);
    vm_b_failed.message = "nova returned 503".to_owned();
    let mut resync = notification(id, N::Running, 2);
    resync.progress_events = vec![
        progress(
            1,
            "disable_compute_service",
            pb::ProgressState::Succeeded,
            "",
        ),
        progress(2, "evacuate", pb::ProgressState::Started, "instance-vm-a"),
        progress(3, "evacuate", pb::ProgressState::Started, "instance-vm-b"),
    ];
    let mut failed = notification(id, N::Failed, 10);
    failed.message = "1 of 2 instances could not be recovered: vm-b (nova returned 503)".to_owned();
    vec![
        Update::Snapshot(pb::NotificationSnapshot {
            notification: Some(notification(id, N::Running, 1)),
            vmoves: vec![
                vmove("vm-a", V::Pending, "", 1),
                vmove("vm-b", V::Pending, "", 1),
            ],
        }),
        Update::ProgressEvent(progress(
            1,
            "disable_compute_service",
            pb::ProgressState::Succeeded,
            "",
        )),
        Update::Vmove(vmove("vm-a", V::Ongoing, "evacuate", 2)),
        Update::ProgressEvent(progress(
            2,
            "evacuate",
            pb::ProgressState::Started,
            "instance-vm-a",
        )),
        // As after a lag: the whole state again.
        Update::Snapshot(pb::NotificationSnapshot {
            notification: Some(resync),
            vmoves: vec![
                vmove("vm-a", V::Ongoing, "evacuate", 2),
                vmove("vm-b", V::Ongoing, "evacuate", 3),
            ],
        }),
        // Stale: older than what the snapshot said.
        Update::Vmove(vmove("vm-b", V::Pending, "", 1)),
        Update::Vmove(vm_a_done),
        Update::Vmove(vm_b_failed),
        Update::Notification(failed),
    ]
}

#[derive(Clone, Default)]
struct Recoveries;

type UpdateStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::NotificationUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl NotificationService for Recoveries {
    type WatchNotificationStream = UpdateStream;

    async fn watch_notification(
        &self,
        request: Request<pb::WatchNotificationRequest>,
    ) -> Result<Response<UpdateStream>, Status> {
        let updates = match request.into_inner().id.as_str() {
            FAILING_RECOVERY => failing_recovery(),
            CUT_SHORT => vec![Update::Snapshot(pb::NotificationSnapshot {
                notification: Some(notification(CUT_SHORT, pb::NotificationStatus::Running, 1)),
                vmoves: vec![],
            })],
            other => return Err(Status::not_found(format!("notification {other} not found"))),
        };
        // A pause between messages, as a real recovery has (and so that the
        // live display can be looked at by hand).
        let stream = futures::stream::iter(updates).then(|update| async move {
            // sleep: the pause between two messages.
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(pb::NotificationUpdate {
                update: Some(update),
            })
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn retry_notification(
        &self,
        request: Request<pb::RetryNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        Err(Status::failed_precondition(format!(
            "notification {} is not failed",
            request.into_inner().id
        )))
    }

    async fn create_notification(
        &self,
        _: Request<pb::CreateNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn get_notification(
        &self,
        _: Request<pb::GetNotificationRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        Err(Status::unimplemented("not scripted"))
    }

    async fn list_notifications(
        &self,
        _: Request<pb::ListNotificationsRequest>,
    ) -> Result<Response<pb::ListNotificationsResponse>, Status> {
        Err(Status::unimplemented("not scripted"))
    }
}

pub struct FakeApi {
    pub endpoint: String,
    authorizations: Arc<Mutex<Vec<Option<String>>>>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeApi {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let script = Script::default();
        let authorizations = script.authorizations.clone();
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(SegmentServiceServer::new(script))
                .add_service(NotificationServiceServer::new(Recoveries))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
                .expect("the fake API serves");
        });
        Self {
            endpoint,
            authorizations,
            server,
        }
    }

    /// The `authorization` header of each `ListSegments` call, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations.lock().unwrap().clone()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}
