//! The `notifications` table, with the columns the dispatcher uses to claim
//! and run a notification (`run_id`, `run_sequence`, `claimed_by`,
//! `lease_until`, `next_attempt_at`).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notifications")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub uuid: String,
    pub r#type: String,
    pub hostname: String,
    pub source_host_uuid: String,
    pub segment_uuid: String,
    pub generated_time: DateTimeUtc,
    pub payload: String,
    pub status: String,
    pub message: Option<String>,
    pub idempotency_key: Option<String>,
    pub attempts: i32,
    pub run_id: Option<String>,
    /// What the current run does (`recover`, `reconcile`, `release_locks`).
    pub run_kind: Option<String>,
    pub run_sequence: i64,
    pub claimed_by: Option<String>,
    pub lease_until: Option<DateTimeUtc>,
    pub next_attempt_at: Option<DateTimeUtc>,
    /// Runs are retried until then (the retry window from the first run).
    pub retry_until: Option<DateTimeUtc>,
    /// A finished notification's locks left held are released again then.
    pub lock_release_at: Option<DateTimeUtc>,
    /// When it reached a terminal status.
    pub ended_at: Option<DateTimeUtc>,
    /// What the intake noted (a flapping host, a clock ahead), said in
    /// every message after.
    pub note: Option<String>,
    /// W3C `traceparent` of the request that created it.
    pub trace_context: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
