//! What the run lifecycle and the console need to remember: when a
//! notification ended (a report generated after that is a new incident,
//! never its duplicate), what the intake noted of it (a flapping host, a
//! monitor's clock ahead) for every message after, why a host is held out of service (a flapping
//! host stays on maintenance until an operator clears it), and each
//! instance's steps as the engine reported them (its timeline).
//!
//! One column per statement: SQLite alters a table one column at a time.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Notifications {
    Table,
    Uuid,
    EndedAt,
    Note,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    HeldReason,
}

#[derive(DeriveIden)]
enum InstanceSteps {
    Table,
    Id,
    NotificationUuid,
    InstanceUuid,
    Attempt,
    Step,
    Message,
    Time,
}

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
            .alter_table(
                Table::alter()
                    .table(Notifications::Table)
                    .add_column(utc_null(db, Notifications::EndedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Notifications::Table)
                    .add_column(text_null(Notifications::Note))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Hosts::Table)
                    .add_column(text_null(Hosts::HeldReason))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(InstanceSteps::Table)
                    .col(big_pk_auto(InstanceSteps::Id))
                    .col(string_len(InstanceSteps::NotificationUuid, 36))
                    .col(string_len(InstanceSteps::InstanceUuid, 255))
                    .col(integer(InstanceSteps::Attempt))
                    .col(string_len(InstanceSteps::Step, 64))
                    .col(text(InstanceSteps::Message))
                    .col(utc(db, InstanceSteps::Time))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_instance_steps_notification")
                            .from(InstanceSteps::Table, InstanceSteps::NotificationUuid)
                            .to(Notifications::Table, Notifications::Uuid)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_instance_steps_notification")
                    .table(InstanceSteps::Table)
                    .col(InstanceSteps::NotificationUuid)
                    .col(InstanceSteps::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(InstanceSteps::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Hosts::Table)
                    .drop_column(Hosts::HeldReason)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Notifications::Table)
                    .drop_column(Notifications::Note)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Notifications::Table)
                    .drop_column(Notifications::EndedAt)
                    .to_owned(),
            )
            .await
    }
}
