//! VM moves in the database.

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use super::entity::vmove;
use super::segments::page_of;
use super::{Error, Result, Store, parse_enum, parse_uuid};
use crate::domain::{NotificationId, Page, PageRequest, VMove, VMoveFilter, VMoveId, VMoveType};
use crate::status::{VMoveRecord, VMoveStatus};

pub(super) fn to_record(row: &vmove::Model) -> Result<VMoveRecord> {
    Ok(VMoveRecord::restore(
        parse_enum("vmoves", "status", &row.status, VMoveStatus::parse)?,
        row.start_time,
        row.end_time,
        row.message.clone(),
        row.dest_host.clone(),
        u32::try_from(row.attempts).unwrap_or_default(),
        row.retryable,
    ))
}

pub(super) fn to_vmove(row: vmove::Model) -> Result<VMove> {
    let record = to_record(&row)?;
    Ok(VMove {
        id: parse_uuid("vmoves", "uuid", &row.uuid)?,
        row_id: row.id,
        notification_id: parse_uuid("vmoves", "notification_uuid", &row.notification_uuid)?,
        vmove_type: parse_enum("vmoves", "type", &row.r#type, VMoveType::parse)?,
        record,
        instance_id: row.instance_uuid,
        instance_name: row.instance_name,
        source_host: row.source_host,
        step: row.step,
        step_message: row.step_message,
        step_time: row.step_time,
        locked: row.lock_held,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

impl Store {
    pub async fn vmove(&self, notification: NotificationId, id: VMoveId) -> Result<VMove> {
        let row = vmove::Entity::find()
            .filter(vmove::Column::Uuid.eq(id.to_string()))
            .filter(vmove::Column::NotificationUuid.eq(notification.to_string()))
            .one(&self.db())
            .await?
            .ok_or_else(|| Error::NotFound {
                kind: "vmove",
                id: format!("{id} of notification {notification}"),
            })?;
        to_vmove(row)
    }

    /// In the order the plan announced them.
    pub async fn list_vmoves(
        &self,
        notification: NotificationId,
        filter: &VMoveFilter,
        page: PageRequest,
    ) -> Result<Page<VMove>> {
        let mut query = vmove::Entity::find()
            .filter(vmove::Column::NotificationUuid.eq(notification.to_string()))
            .order_by_asc(vmove::Column::Id);
        if let Some(after) = page.after {
            query = query.filter(vmove::Column::Id.gt(after.after));
        }
        if let Some(status) = filter.status {
            query = query.filter(vmove::Column::Status.eq(status.as_str()));
        }
        if let Some(kind) = filter.vmove_type {
            query = query.filter(vmove::Column::Type.eq(kind.as_str()));
        }
        let rows = query
            .limit(u64::from(page.size) + 1)
            .all(&self.db())
            .await?;
        page_of(rows, page.size, |r| r.id, to_vmove)
    }
}
