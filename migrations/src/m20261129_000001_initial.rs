//! The first schema: segments, hosts, notifications, vmoves and progress
//! events.
//!
//! Every table has an integer surrogate key (`id`, for keyset paging) and
//! the UUID the API shows (`uuid`). Timestamps are UTC with microseconds:
//! `timestamptz` on PostgreSQL, `DATETIME(6)` on MySQL/MariaDB (not
//! `TIMESTAMP`, which ends in 2038 and drops fractions), text on SQLite.
//! Notifications keep their host and segment UUIDs without foreign keys, so
//! the history survives a deleted host or segment.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Segments {
    Table,
    Id,
    Uuid,
    Name,
    Description,
    ServiceType,
    RecoveryMethod,
    Enabled,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
    Uuid,
    Name,
    SegmentUuid,
    Type,
    ControlAttributes,
    Reserved,
    OnMaintenance,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Notifications {
    Table,
    Id,
    Uuid,
    Type,
    Hostname,
    SourceHostUuid,
    SegmentUuid,
    GeneratedTime,
    Payload,
    Status,
    Message,
    IdempotencyKey,
    Attempts,
    RunId,
    RunSequence,
    ClaimedBy,
    LeaseUntil,
    NextAttemptAt,
    TraceContext,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Vmoves {
    Table,
    Id,
    Uuid,
    NotificationUuid,
    InstanceUuid,
    InstanceName,
    SourceHost,
    DestHost,
    Type,
    Status,
    Step,
    StartTime,
    EndTime,
    Message,
    Attempts,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ProgressEvents {
    Table,
    Id,
    NotificationUuid,
    Sequence,
    Task,
    State,
    Message,
    InstanceUuid,
    Time,
}

/// A UTC timestamp with microseconds on every backend.
fn utc<T: IntoIden>(backend: DbBackend, col: T) -> ColumnDef {
    match backend {
        DbBackend::MySql => ColumnDef::new(col)
            .custom(Alias::new("DATETIME(6)"))
            .not_null()
            .take(),
        _ => timestamp_with_time_zone(col),
    }
}

fn utc_null<T: IntoIden>(backend: DbBackend, col: T) -> ColumnDef {
    match backend {
        DbBackend::MySql => ColumnDef::new(col)
            .custom(Alias::new("DATETIME(6)"))
            .null()
            .take(),
        _ => timestamp_with_time_zone_null(col),
    }
}

// The trait's signature elides the `SchemaManager` lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();

        manager
            .create_table(
                Table::create()
                    .table(Segments::Table)
                    .col(big_pk_auto(Segments::Id))
                    .col(string_len_uniq(Segments::Uuid, 36))
                    .col(string_len_uniq(Segments::Name, 255))
                    .col(string_len_null(Segments::Description, 255))
                    .col(string_len(Segments::ServiceType, 255))
                    .col(string_len(Segments::RecoveryMethod, 16))
                    .col(boolean(Segments::Enabled))
                    .col(utc(db, Segments::CreatedAt))
                    .col(utc(db, Segments::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Hosts::Table)
                    .col(big_pk_auto(Hosts::Id))
                    .col(string_len_uniq(Hosts::Uuid, 36))
                    .col(string_len_uniq(Hosts::Name, 255))
                    .col(string_len(Hosts::SegmentUuid, 36))
                    .col(string_len(Hosts::Type, 255))
                    .col(text(Hosts::ControlAttributes))
                    .col(boolean(Hosts::Reserved))
                    .col(boolean(Hosts::OnMaintenance))
                    .col(utc(db, Hosts::CreatedAt))
                    .col(utc(db, Hosts::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_hosts_segment")
                            .from(Hosts::Table, Hosts::SegmentUuid)
                            .to(Segments::Table, Segments::Uuid)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_hosts_segment")
                    .table(Hosts::Table)
                    .col(Hosts::SegmentUuid)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Notifications::Table)
                    .col(big_pk_auto(Notifications::Id))
                    .col(string_len_uniq(Notifications::Uuid, 36))
                    .col(string_len(Notifications::Type, 16))
                    .col(string_len(Notifications::Hostname, 255))
                    .col(string_len(Notifications::SourceHostUuid, 36))
                    .col(string_len(Notifications::SegmentUuid, 36))
                    .col(utc(db, Notifications::GeneratedTime))
                    .col(text(Notifications::Payload))
                    .col(string_len(Notifications::Status, 16))
                    .col(text_null(Notifications::Message))
                    .col(string_len_null(Notifications::IdempotencyKey, 255).unique_key())
                    .col(integer(Notifications::Attempts))
                    .col(string_len_null(Notifications::RunId, 36))
                    .col(big_integer(Notifications::RunSequence))
                    .col(string_len_null(Notifications::ClaimedBy, 255))
                    .col(utc_null(db, Notifications::LeaseUntil))
                    .col(utc_null(db, Notifications::NextAttemptAt))
                    .col(string_len_null(Notifications::TraceContext, 512))
                    .col(utc(db, Notifications::CreatedAt))
                    .col(utc(db, Notifications::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        // Duplicate detection: same host and type, generated in a window.
        manager
            .create_index(
                Index::create()
                    .name("ix_notifications_host_type_generated")
                    .table(Notifications::Table)
                    .col(Notifications::SourceHostUuid)
                    .col(Notifications::Type)
                    .col(Notifications::GeneratedTime)
                    .to_owned(),
            )
            .await?;
        // The dispatcher's scans and the unfinished-notification checks.
        manager
            .create_index(
                Index::create()
                    .name("ix_notifications_status")
                    .table(Notifications::Table)
                    .col(Notifications::Status)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_notifications_segment_status")
                    .table(Notifications::Table)
                    .col(Notifications::SegmentUuid)
                    .col(Notifications::Status)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Vmoves::Table)
                    .col(big_pk_auto(Vmoves::Id))
                    .col(string_len_uniq(Vmoves::Uuid, 36))
                    .col(string_len(Vmoves::NotificationUuid, 36))
                    .col(string_len(Vmoves::InstanceUuid, 36))
                    .col(string_len(Vmoves::InstanceName, 255))
                    .col(string_len(Vmoves::SourceHost, 255))
                    .col(string_len_null(Vmoves::DestHost, 255))
                    .col(string_len(Vmoves::Type, 16))
                    .col(string_len(Vmoves::Status, 16))
                    .col(string_len_null(Vmoves::Step, 64))
                    .col(utc_null(db, Vmoves::StartTime))
                    .col(utc_null(db, Vmoves::EndTime))
                    .col(text_null(Vmoves::Message))
                    .col(integer(Vmoves::Attempts))
                    .col(utc(db, Vmoves::CreatedAt))
                    .col(utc(db, Vmoves::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_vmoves_notification")
                            .from(Vmoves::Table, Vmoves::NotificationUuid)
                            .to(Notifications::Table, Notifications::Uuid)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_vmoves_notification_instance")
                    .table(Vmoves::Table)
                    .col(Vmoves::NotificationUuid)
                    .col(Vmoves::InstanceUuid)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(ProgressEvents::Table)
                    .col(big_pk_auto(ProgressEvents::Id))
                    .col(string_len(ProgressEvents::NotificationUuid, 36))
                    .col(big_integer(ProgressEvents::Sequence))
                    .col(string_len(ProgressEvents::Task, 64))
                    .col(string_len(ProgressEvents::State, 16))
                    .col(text(ProgressEvents::Message))
                    .col(string_len_null(ProgressEvents::InstanceUuid, 36))
                    .col(utc(db, ProgressEvents::Time))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_progress_events_notification")
                            .from(ProgressEvents::Table, ProgressEvents::NotificationUuid)
                            .to(Notifications::Table, Notifications::Uuid)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_progress_events_notification_sequence")
                    .table(ProgressEvents::Table)
                    .col(ProgressEvents::NotificationUuid)
                    .col(ProgressEvents::Sequence)
                    .unique()
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ProgressEvents::Table.into_iden(),
            Vmoves::Table.into_iden(),
            Notifications::Table.into_iden(),
            Hosts::Table.into_iden(),
            Segments::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
