//! The repository suite: store-level guarantees, on every backend.

use std::collections::BTreeMap;

use chrono::{SubsecRound, Utc};
use instanceha_api::domain::{NewNotification, NotificationType};
use instanceha_api::lifecycle::intake::Admitted;
use instanceha_api::status::{NotificationEvent, NotificationStatus};
use instanceha_api::store::{self, Intake, IntakeWindows};

use crate::backends::Backend;
use crate::helpers::{segment_with_hosts, spawn_app};
use crate::on_every_backend;

on_every_backend!(
    replicas_starting_together_migrate_once,
    status_changes_are_compare_and_set,
    timestamps_round_trip_at_microsecond_precision,
    illegal_transitions_are_refused
);

fn report(host: &str) -> NewNotification {
    NewNotification {
        notification_type: NotificationType::ComputeHost,
        hostname: host.to_owned(),
        generated_time: Utc::now().trunc_subsecs(6),
        payload: BTreeMap::from([("event".to_owned(), "STOPPED".to_owned())]),
        idempotency_key: None,
        trace_context: None,
    }
}

async fn stored(app: &crate::helpers::TestApp, host: &str) -> instanceha_api::domain::Notification {
    let stored = app
        .api
        .store()
        .create_notifications(&[report(host)], IntakeWindows::NONE, |_, _| {
            Ok::<_, store::Error>(Admitted::accept())
        })
        .await
        .unwrap();
    match stored.into_iter().next() {
        Some(Intake::Created(notification)) => notification,
        other => panic!("not created: {other:?}"),
    }
}

async fn status_changes_are_compare_and_set(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let n = stored(&app, "compute-01").await;
    // Ten writers race to start the same notification: exactly one wins.
    let mut racers = Vec::new();
    for _ in 0..10 {
        let store = app.api.store().clone();
        racers.push(tokio::spawn(async move {
            store
                .transition_notification(
                    n.id,
                    NotificationStatus::New,
                    NotificationEvent::Start,
                    None,
                )
                .await
        }));
    }
    let mut won = 0;
    for racer in racers {
        match racer.await.unwrap() {
            Ok(after) => {
                won += 1;
                assert_eq!(after.status(), NotificationStatus::Running);
            }
            Err(store::Error::Stale(message)) => {
                assert!(message.contains("running"), "{message}")
            }
            Err(other) => panic!("unexpected error: {other}"),
        }
    }
    assert_eq!(won, 1);
    app.stop().await;
}

async fn timestamps_round_trip_at_microsecond_precision(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let new = report("compute-01");
    let n = stored(&app, "compute-01").await;
    let read = app.api.store().notification(n.id).await.unwrap();
    assert_eq!(read.generated_time, n.generated_time);
    assert_eq!(read.created_at, n.created_at);
    assert_eq!(
        read.generated_time.timestamp_micros() / 1_000_000,
        new.generated_time.timestamp_micros() / 1_000_000
    );
    app.stop().await;
}

async fn illegal_transitions_are_refused(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let n = stored(&app, "compute-01").await;
    let err = app
        .api
        .store()
        .transition_notification(
            n.id,
            NotificationStatus::New,
            NotificationEvent::Finish,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, store::Error::Illegal(_)), "{err}");
    let unchanged = app.api.store().notification(n.id).await.unwrap();
    assert_eq!(unchanged.status(), NotificationStatus::New);
    app.stop().await;
}

/// Replicas starting together migrate one at a time. On SQLite the first
/// ones race to switch the new file to WAL, which answers "database is
/// locked" without waiting: every replica must still start.
async fn replicas_starting_together_migrate_once(backend: Backend) {
    let Some(database) = crate::backends::TestDatabase::create(backend).await else {
        return;
    };
    let mut starts = Vec::new();
    for _ in 0..8 {
        let options = store::DatabaseSettings::new(database.url.clone());
        starts.push(tokio::spawn(
            async move { store::Store::open(&options).await },
        ));
    }
    for start in starts {
        let store = start.await.unwrap().expect("every replica starts");
        store.ping().await.unwrap();
        store.close().await.unwrap();
    }
}
