//! The W3C trace context a notification was created under, for the
//! console's link to the operator's tracing UI.

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect};

use super::entity::notification;
use super::{Error, Result, Store};
use crate::domain::NotificationId;

impl Store {
    /// The `traceparent` of the request that created notification `id`,
    /// if it came with one.
    pub async fn trace_context(&self, id: NotificationId) -> Result<Option<String>> {
        let row: Option<Option<String>> = notification::Entity::find()
            .select_only()
            .column(notification::Column::TraceContext)
            .filter(notification::Column::Uuid.eq(id.to_string()))
            .into_tuple()
            .one(&self.db())
            .await?;
        row.ok_or_else(|| Error::not_found("notification", id))
    }
}
