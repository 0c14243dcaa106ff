//! The `instance_steps` table: each instance's steps as the engine
//! reported them, the timeline of its recovery.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "instance_steps")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub notification_uuid: String,
    pub instance_uuid: String,
    /// The run (1 for the first) that reported it.
    pub attempt: i32,
    pub step: String,
    pub message: String,
    pub time: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
