//! What a resilient recovery needs to remember: each vmove's current step
//! with its detail and time, whether the engine holds the instance's lock
//! and whether a failure was for a passing reason; each notification's run
//! kind, the end of its retry window and when its leftover locks are next
//! released; and which notification put a host on maintenance.
//!
//! One column per statement: SQLite alters a table one column at a time.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Vmoves {
    Table,
    StepMessage,
    StepTime,
    LockHeld,
    Retryable,
}

#[derive(DeriveIden)]
enum Notifications {
    Table,
    RunKind,
    RetryUntil,
    LockReleaseAt,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    MaintenanceBy,
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

async fn add(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    column: ColumnDef,
) -> Result<(), DbErr> {
    manager
        .alter_table(Table::alter().table(table).add_column(column).to_owned())
        .await
}

async fn drop(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    column: impl IntoIden,
) -> Result<(), DbErr> {
    manager
        .alter_table(Table::alter().table(table).drop_column(column).to_owned())
        .await
}

// The trait's signature elides the `SchemaManager` lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_database_backend();
        add(manager, Vmoves::Table, text_null(Vmoves::StepMessage)).await?;
        add(manager, Vmoves::Table, utc_null(db, Vmoves::StepTime)).await?;
        add(
            manager,
            Vmoves::Table,
            boolean(Vmoves::LockHeld).default(false).take(),
        )
        .await?;
        add(
            manager,
            Vmoves::Table,
            boolean(Vmoves::Retryable).default(false).take(),
        )
        .await?;
        add(
            manager,
            Notifications::Table,
            string_len_null(Notifications::RunKind, 16),
        )
        .await?;
        add(
            manager,
            Notifications::Table,
            utc_null(db, Notifications::RetryUntil),
        )
        .await?;
        add(
            manager,
            Notifications::Table,
            utc_null(db, Notifications::LockReleaseAt),
        )
        .await?;
        add(
            manager,
            Hosts::Table,
            string_len_null(Hosts::MaintenanceBy, 36),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        drop(manager, Hosts::Table, Hosts::MaintenanceBy).await?;
        drop(manager, Notifications::Table, Notifications::LockReleaseAt).await?;
        drop(manager, Notifications::Table, Notifications::RetryUntil).await?;
        drop(manager, Notifications::Table, Notifications::RunKind).await?;
        drop(manager, Vmoves::Table, Vmoves::Retryable).await?;
        drop(manager, Vmoves::Table, Vmoves::LockHeld).await?;
        drop(manager, Vmoves::Table, Vmoves::StepTime).await?;
        drop(manager, Vmoves::Table, Vmoves::StepMessage).await?;
        Ok(())
    }
}
