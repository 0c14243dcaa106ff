//! The `vmoves` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "vmoves")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub uuid: String,
    pub notification_uuid: String,
    pub instance_uuid: String,
    pub instance_name: String,
    pub source_host: String,
    pub dest_host: Option<String>,
    pub r#type: String,
    pub status: String,
    pub step: Option<String>,
    /// What the engine said when it entered the step, and when.
    pub step_message: Option<String>,
    pub step_time: Option<DateTimeUtc>,
    pub start_time: Option<DateTimeUtc>,
    pub end_time: Option<DateTimeUtc>,
    pub message: Option<String>,
    pub attempts: i32,
    /// The engine reported taking the instance's lock and not yet
    /// releasing it.
    pub lock_held: bool,
    /// Failed for a passing reason (worth another run).
    pub retryable: bool,
    /// The instance's state before the failure (`active`, `stopped`,
    /// `error`), as the plan recorded it.
    pub prior_state: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
