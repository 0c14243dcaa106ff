//! The `hosts` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "hosts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub uuid: String,
    #[sea_orm(unique)]
    pub name: String,
    pub segment_uuid: String,
    pub r#type: String,
    pub control_attributes: String,
    pub reserved: bool,
    pub on_maintenance: bool,
    /// The notification whose recovery put the host on maintenance.
    pub maintenance_by: Option<String>,
    /// Why the host is held out of service (a flapping host), until an
    /// operator clears its maintenance.
    pub held_reason: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
