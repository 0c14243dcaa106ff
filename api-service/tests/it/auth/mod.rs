//! Who may call what: every RPC with each role, with static tokens and with
//! Keystone-validated tokens (against openstack-sim's Keystone, in
//! [`keystone`]), and a Keystone that cannot be asked fails closed.

mod keystone;

use instanceha_api::auth::{AuthMode, token_sha256};
use instanceha_proto::v1 as pb;
use instanceha_runtime::secret::Secret;
use openstack_client::credentials::AuthSettings as Credentials;
use openstack_client::keystone::Keystone;
use openstack_client::retry::RetryPolicy;
use openstack_sim::Sim;
use tonic::{Code, Request};

use crate::backends::Backend;
use crate::helpers::{TestApp, host_down, host_request, segment_request, spawn_app_with};

fn with_token<T>(message: T, token: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

/// Calls every RPC as `token` and returns the codes (OK or the error).
async fn codes(app: &mut TestApp, token: Option<&str>, ids: &Ids) -> Vec<(&'static str, Code)> {
    let code = |r: Result<(), tonic::Status>| r.err().map_or(Code::Ok, |s| s.code());
    let t = token;
    let mut out = Vec::new();
    out.push((
        "CreateSegment",
        code(
            app.segments
                .create_segment(with_token(segment_request("x"), t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "GetSegment",
        code(
            app.segments
                .get_segment(with_token(
                    pb::GetSegmentRequest {
                        id: ids.segment.clone(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "ListSegments",
        code(
            app.segments
                .list_segments(with_token(pb::ListSegmentsRequest::default(), t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "UpdateSegment",
        code(
            app.segments
                .update_segment(with_token(
                    pb::UpdateSegmentRequest {
                        id: ids.spare_segment.clone(),
                        description: Some("d".into()),
                        ..Default::default()
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "DeleteSegment",
        code(
            app.segments
                .delete_segment(with_token(
                    pb::DeleteSegmentRequest {
                        id: ids.spare_segment.clone(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "CreateHost",
        code(
            app.hosts
                .create_host(with_token(host_request(&ids.segment, "compute-09"), t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "GetHost",
        code(
            app.hosts
                .get_host(with_token(
                    pb::GetHostRequest {
                        id: ids.host.clone(),
                        segment_id: String::new(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "ListHosts",
        code(
            app.hosts
                .list_hosts(with_token(pb::ListHostsRequest::default(), t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "UpdateHost",
        code(
            app.hosts
                .update_host(with_token(
                    pb::UpdateHostRequest {
                        id: ids.spare_host.clone(),
                        r#type: Some("X".into()),
                        ..Default::default()
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "DeleteHost",
        code(
            app.hosts
                .delete_host(with_token(
                    pb::DeleteHostRequest {
                        id: ids.spare_host.clone(),
                        segment_id: String::new(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    let mut report = host_down("compute-01");
    report
        .payload
        .insert("cluster_status".into(), "ONLINE".into());
    out.push((
        "CreateNotification",
        code(
            app.notifications
                .create_notification(with_token(report, t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "GetNotification",
        code(
            app.notifications
                .get_notification(with_token(
                    pb::GetNotificationRequest {
                        id: ids.notification.clone(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "ListNotifications",
        code(
            app.notifications
                .list_notifications(with_token(pb::ListNotificationsRequest::default(), t))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "WatchNotification",
        code(
            app.notifications
                .watch_notification(with_token(
                    pb::WatchNotificationRequest {
                        id: ids.notification.clone(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "ListVmoves",
        code(
            app.vmoves
                .list_vmoves(with_token(
                    pb::ListVmovesRequest {
                        notification_id: ids.notification.clone(),
                        ..Default::default()
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out.push((
        "GetVmove",
        code(
            app.vmoves
                .get_vmove(with_token(
                    pb::GetVmoveRequest {
                        notification_id: ids.notification.clone(),
                        id: ids.notification.clone(),
                    },
                    t,
                ))
                .await
                .map(drop),
        ),
    ));
    out
}

struct Ids {
    segment: String,
    spare_segment: String,
    host: String,
    spare_host: String,
    notification: String,
}

/// Creates what the calls need, as `admin`.
async fn fixtures(app: &mut TestApp, admin: &str) -> Ids {
    let segment = app
        .segments
        .create_segment(with_token(segment_request("rack-a"), Some(admin)))
        .await
        .unwrap()
        .into_inner();
    let spare_segment = app
        .segments
        .create_segment(with_token(segment_request("rack-b"), Some(admin)))
        .await
        .unwrap()
        .into_inner();
    let host = app
        .hosts
        .create_host(with_token(
            host_request(&segment.id, "compute-01"),
            Some(admin),
        ))
        .await
        .unwrap()
        .into_inner();
    let spare_host = app
        .hosts
        .create_host(with_token(
            host_request(&spare_segment.id, "compute-02"),
            Some(admin),
        ))
        .await
        .unwrap()
        .into_inner();
    let notification = app
        .notifications
        .create_notification(with_token(host_down("compute-01"), Some(admin)))
        .await
        .unwrap()
        .into_inner();
    Ids {
        segment: segment.id,
        spare_segment: spare_segment.id,
        host: host.id,
        spare_host: spare_host.id,
        notification: notification.id,
    }
}

/// The expected outcome of each RPC for a role: what it may do succeeds
/// (or fails on its own merits, never for permission); the rest is denied.
fn check(role: &str, got: &[(&'static str, Code)], allowed: &[&str]) {
    for (rpc, code) in got {
        if allowed.contains(rpc) {
            assert!(
                !matches!(code, Code::PermissionDenied | Code::Unauthenticated),
                "{role} was refused {rpc}: {code:?}"
            );
        } else {
            assert_eq!(*code, Code::PermissionDenied, "{role} was allowed {rpc}");
        }
    }
}

const READS: [&str; 8] = [
    "GetSegment",
    "ListSegments",
    "GetHost",
    "ListHosts",
    "GetNotification",
    "ListNotifications",
    "WatchNotification",
    "ListVmoves",
];

#[tokio::test]
async fn static_tokens_enforce_roles_on_every_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    let entry = |name: &str, token: &str, role: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = [\"{role}\"]\n",
            token_sha256(token)
        )
    };
    std::fs::write(
        &file,
        [
            entry("ops", "admin-token", "admin"),
            entry("hostmonitor", "agent-token", "monitoring_agent"),
            entry("dashboard", "reader-token", "reader"),
        ]
        .concat(),
    )
    .unwrap();
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Static;
        s.auth.static_tokens_file = Some(file.clone());
    })
    .await
    .unwrap();
    let ids = fixtures(&mut app, "admin-token").await;

    let reader = codes(&mut app, Some("reader-token"), &ids).await;
    let mut reads = READS.to_vec();
    reads.push("GetVmove");
    check("reader", &reader, &reads);
    let agent = codes(&mut app, Some("agent-token"), &ids).await;
    let mut agent_may = reads.clone();
    agent_may.push("CreateNotification");
    check("monitoring agent", &agent, &agent_may);
    let admin = codes(&mut app, Some("admin-token"), &ids).await;
    check(
        "admin",
        &admin,
        &admin.iter().map(|(rpc, _)| *rpc).collect::<Vec<_>>(),
    );

    for (rpc, code) in codes(&mut app, None, &ids).await {
        assert_eq!(code, Code::Unauthenticated, "{rpc} without a token");
    }
    for (rpc, code) in codes(&mut app, Some("guess"), &ids).await {
        assert_eq!(code, Code::Unauthenticated, "{rpc} with a wrong token");
    }
    // Probes need no token.
    let mut health = tonic_health::pb::health_client::HealthClient::new(app.channel.clone());
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("health is open");
    app.stop().await;
}

/// A Keystone token of the simulator's `user` (password `secret`) in
/// `project`.
pub(crate) async fn token_of(sim: &Sim, user: &str, project: &str) -> String {
    let credentials = Credentials {
        auth_url: Some(sim.auth_url()),
        username: Some(user.into()),
        password: Some(Secret::new("secret")),
        project_name: Some(project.into()),
        user_domain_name: Some("Default".into()),
        project_domain_name: Some("Default".into()),
        ..Credentials::default()
    }
    .credentials()
    .unwrap();
    let keystone = Keystone::standalone(
        credentials,
        RetryPolicy::default(),
        std::time::Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    keystone.token().await.unwrap().value.expose().to_owned()
}

/// A policy file overrides operations one by one, on gRPC and REST alike;
/// a bad one stops the API at start, naming the operation.
#[tokio::test]
async fn a_policy_file_overrides_operations_on_both_transports() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[token]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n\
             [[token]]\nname = \"hostmonitor\"\nsha256 = \"{}\"\nroles = [\"monitoring_agent\"]\n",
            token_sha256("admin-token"),
            token_sha256("agent-token")
        ),
    )
    .unwrap();
    let policy = dir.path().join("policy.toml");
    // Segments listed by admins only, by either name of the operation.
    std::fs::write(
        &policy,
        "\"os_masakari_api:segments:index\" = [\"admin\"]\n",
    )
    .unwrap();
    let mut app = spawn_app_with(Backend::Sqlite, |s| {
        s.auth.mode = AuthMode::Static;
        s.auth.static_tokens_file = Some(tokens.clone());
        s.auth.policy_file = Some(policy.clone());
    })
    .await
    .unwrap();
    let refused = app
        .segments
        .list_segments(with_token(
            pb::ListSegmentsRequest::default(),
            Some("agent-token"),
        ))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("ListSegments"), "{refused:?}");
    app.hosts
        .list_hosts(with_token(
            pb::ListHostsRequest::default(),
            Some("agent-token"),
        ))
        .await
        .map(drop)
        .or_else(|s| {
            assert_ne!(s.code(), Code::PermissionDenied, "{s:?}");
            Ok::<(), tonic::Status>(())
        })
        .unwrap();
    let rest = crate::rest::Rest::new(&app);
    rest.token("agent-token")
        .get("/v1/segments")
        .await
        .expect(403);
    rest.token("admin-token")
        .get("/v1/segments")
        .await
        .expect(200);
    app.stop().await;

    std::fs::write(&policy, "ListSegments = [\"admin\", \"auditor\"]\n").unwrap();
    let mut settings = instanceha_api::config::Settings::default();
    settings.auth.mode = AuthMode::Static;
    settings.auth.static_tokens_file = Some(tokens);
    settings.auth.policy_file = Some(policy);
    let err = instanceha_api::auth::Guard::from_settings(&settings.auth)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("auth.policy_file") && err.contains("ListSegments"),
        "{err}"
    );
}
