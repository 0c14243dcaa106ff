//! Each segment says what becomes of a fenced host that comes back
//! healthy: `manual` (it stays out of service until an operator restores
//! it; the default, and what every existing segment keeps) or `auto` (its
//! STARTED report brings it back once its nova-compute reports).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Segments {
    Table,
    ReturnToService,
}

// The trait's signature elides the `SchemaManager` lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Segments::Table)
                    .add_column(string_len(Segments::ReturnToService, 16).default("manual"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Segments::Table)
                    .drop_column(Segments::ReturnToService)
                    .to_owned(),
            )
            .await
    }
}
