//! The `progress_events` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "progress_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub notification_uuid: String,
    pub sequence: i64,
    pub task: String,
    pub state: String,
    pub message: String,
    pub instance_uuid: Option<String>,
    pub time: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
