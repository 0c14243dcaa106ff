//! Each vmove remembers the state its instance was in before the failure
//! (`active`, `stopped`, `error`), as the engine's plan recorded it at the
//! first attempt, so that every retry puts the instance back to that state
//! instead of inferring it from one the recovery itself may have caused.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Vmoves {
    Table,
    PriorState,
}

// The trait's signature elides the `SchemaManager` lifetime.
#[allow(elided_lifetimes_in_paths)]
#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Vmoves::Table)
                    .add_column(string_len_null(Vmoves::PriorState, 16))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Vmoves::Table)
                    .drop_column(Vmoves::PriorState)
                    .to_owned(),
            )
            .await
    }
}
