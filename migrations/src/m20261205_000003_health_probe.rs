//! One row the API writes to learn whether the database can write (a full
//! disk, a read-only database): its health is NOT_SERVING until it can.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum HealthProbe {
    Table,
    Id,
    At,
}

// The trait's signature elides the `SchemaManager` lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let at = match manager.get_database_backend() {
            DbBackend::MySql => ColumnDef::new(HealthProbe::At)
                .custom(Alias::new("DATETIME(6)"))
                .null()
                .take(),
            _ => timestamp_with_time_zone_null(HealthProbe::At),
        };
        manager
            .create_table(
                Table::create()
                    .table(HealthProbe::Table)
                    .col(integer(HealthProbe::Id).primary_key())
                    .col(at)
                    .to_owned(),
            )
            .await?;
        manager
            .exec_stmt(
                Query::insert()
                    .into_table(HealthProbe::Table)
                    .columns([HealthProbe::Id])
                    .values_panic([1.into()])
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(HealthProbe::Table).to_owned())
            .await
    }
}
