//! Hosts in the database.

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, ModelTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::entity::{host, segment};
use super::notifications::{Unfinished, unfinished_in_segment, unfinished_of_host};
use super::segments::page_of;
use super::{Error, Result, Store, parse_uuid};
use crate::domain::{Host, HostFilter, HostId, HostUpdate, NewHost, Page, PageRequest, SegmentId};
use crate::lifecycle::hosts::Scope;

pub(super) fn to_host(row: host::Model) -> Result<Host> {
    Ok(Host {
        id: parse_uuid("hosts", "uuid", &row.uuid)?,
        row_id: row.id,
        segment_id: parse_uuid("hosts", "segment_uuid", &row.segment_uuid)?,
        name: row.name,
        host_type: row.r#type,
        control_attributes: row.control_attributes,
        reserved: row.reserved,
        on_maintenance: row.on_maintenance,
        maintenance_by: row
            .maintenance_by
            .as_deref()
            .map(|id| super::parse_uuid("hosts", "maintenance_by", id))
            .transpose()?,
        held_reason: row.held_reason,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

fn name_taken(name: &str) -> impl FnOnce() -> String + '_ {
    move || format!("a host named {name:?} already exists")
}

/// The host row with `id`, if it belongs to `segment` (when given).
async fn find_host<C: sea_orm::ConnectionTrait>(
    conn: &C,
    id: HostId,
    segment: Option<SegmentId>,
    lock: bool,
) -> Result<host::Model> {
    let mut query = host::Entity::find().filter(host::Column::Uuid.eq(id.to_string()));
    if let Some(segment) = segment {
        query = query.filter(host::Column::SegmentUuid.eq(segment.to_string()));
    }
    if lock {
        query = query.lock_exclusive();
    }
    query.one(conn).await?.ok_or_else(|| match segment {
        Some(segment) => Error::NotFound {
            kind: "host",
            id: format!("{id} in segment {segment}"),
        },
        None => Error::not_found("host", id),
    })
}

impl Store {
    pub async fn insert_host(&self, new: &NewHost) -> Result<Host> {
        let txn = self.begin_write().await?;
        // The segment must exist; share-lock it against a concurrent delete.
        segment::Entity::find()
            .filter(segment::Column::Uuid.eq(new.segment_id.to_string()))
            .lock_shared()
            .one(&*txn)
            .await?
            .ok_or_else(|| Error::not_found("segment", new.segment_id))?;
        let at = self.now();
        let row = host::ActiveModel {
            uuid: Set(HostId::new().to_string()),
            name: Set(new.name.clone()),
            segment_uuid: Set(new.segment_id.to_string()),
            r#type: Set(new.host_type.clone()),
            control_attributes: Set(new.control_attributes.clone()),
            reserved: Set(new.reserved),
            on_maintenance: Set(new.on_maintenance),
            maintenance_by: Set(None),
            created_at: Set(at),
            updated_at: Set(at),
            ..Default::default()
        }
        .insert(&*txn)
        .await
        .map_err(|e| Error::unique(e, name_taken(&new.name)))?;
        txn.commit().await?;
        to_host(row)
    }

    pub async fn host(&self, id: HostId, segment: Option<SegmentId>) -> Result<Host> {
        to_host(find_host(&self.db(), id, segment, false).await?)
    }

    pub async fn host_by_name(&self, name: &str) -> Result<Option<Host>> {
        host::Entity::find()
            .filter(host::Column::Name.eq(name))
            .one(&self.db())
            .await?
            .map(to_host)
            .transpose()
    }

    pub async fn list_hosts(&self, filter: &HostFilter, page: PageRequest) -> Result<Page<Host>> {
        let mut query = host::Entity::find().order_by_asc(host::Column::Id);
        if let Some(after) = page.after {
            query = query.filter(host::Column::Id.gt(after.after));
        }
        if let Some(segment) = filter.segment_id {
            query = query.filter(host::Column::SegmentUuid.eq(segment.to_string()));
        }
        if let Some(host_type) = &filter.host_type {
            query = query.filter(host::Column::Type.eq(host_type.as_str()));
        }
        if let Some(reserved) = filter.reserved {
            query = query.filter(host::Column::Reserved.eq(reserved));
        }
        if let Some(on_maintenance) = filter.on_maintenance {
            query = query.filter(host::Column::OnMaintenance.eq(on_maintenance));
        }
        if let Some(name) = &filter.name {
            query = query.filter(host::Column::Name.eq(name.as_str()));
        }
        let rows = query
            .limit(u64::from(page.size) + 1)
            .all(&self.db())
            .await?;
        page_of(rows, page.size, |r| r.id, to_host)
    }

    /// Applies `update` if `guard` allows it, given the unfinished
    /// notifications of the host (`Scope::Host`) or of its segment, in one
    /// transaction.
    pub async fn update_host<E: From<Error>>(
        &self,
        id: HostId,
        segment: Option<SegmentId>,
        update: &HostUpdate,
        scope: Scope,
        guard: impl FnOnce(&Host, &Unfinished) -> Result<(), E>,
    ) -> Result<Host, E> {
        let txn = self.begin_write().await?;
        let row = find_host(&*txn, id, segment, true).await?;
        let current = to_host(row.clone())?;
        let unfinished = match scope {
            Scope::Host => unfinished_of_host(&*txn, current.id).await?,
            Scope::Segment => unfinished_in_segment(&*txn, current.segment_id).await?,
        };
        guard(&current, &unfinished)?;
        let name = update.name.clone().unwrap_or_default();
        let row = apply_host_update(row, update, self.now())
            .update(&*txn)
            .await
            .map_err(|e| Error::unique(e, name_taken(&name)))?;
        txn.commit().await?;
        Ok(to_host(row)?)
    }

    /// An operator's restore of a host: its own notifications must have
    /// ended (`guard`), and the operator's word ends a hold of the flapping
    /// guard. Maintenance stays until the restore's run has brought the
    /// host back.
    pub async fn release_hold<E: From<Error>>(
        &self,
        id: HostId,
        segment: Option<SegmentId>,
        guard: impl FnOnce(&Host, &Unfinished) -> Result<(), E>,
    ) -> Result<Host, E> {
        let txn = self.begin_write().await?;
        let row = find_host(&*txn, id, segment, true).await?;
        let current = to_host(row.clone())?;
        let unfinished = unfinished_of_host(&*txn, current.id).await?;
        guard(&current, &unfinished)?;
        let mut active: host::ActiveModel = row.into();
        active.held_reason = Set(None);
        active.updated_at = Set(self.now());
        let row = active.update(&*txn).await.map_err(Error::from)?;
        txn.commit().await?;
        Ok(to_host(row)?)
    }

    /// Sets a host's flags on behalf of a recovery (no guard: the recovery
    /// itself is the unfinished notification).
    pub async fn set_host_flags(
        &self,
        name: &str,
        on_maintenance: Option<bool>,
        reserved: Option<bool>,
    ) -> Result<Option<Host>> {
        let Some(row) = host::Entity::find()
            .filter(host::Column::Name.eq(name))
            .one(&self.db())
            .await?
        else {
            return Ok(None);
        };
        let update = HostUpdate {
            on_maintenance,
            reserved,
            ..HostUpdate::default()
        };
        let row = apply_host_update(row, &update, self.now())
            .update(&self.db())
            .await?;
        Ok(Some(to_host(row)?))
    }

    pub async fn delete_host<E: From<Error>>(
        &self,
        id: HostId,
        segment: Option<SegmentId>,
        guard: impl FnOnce(&Host, &Unfinished) -> Result<(), E>,
    ) -> Result<(), E> {
        let txn = self.begin_write().await?;
        let row = find_host(&*txn, id, segment, true).await?;
        let current = to_host(row.clone())?;
        let unfinished = unfinished_in_segment(&*txn, current.segment_id).await?;
        guard(&current, &unfinished)?;
        row.delete(&*txn).await.map_err(Error::from)?;
        txn.commit().await?;
        Ok(())
    }

    /// Hosts held out of service for flapping, for the metrics.
    pub async fn hosts_held(&self) -> Result<u64> {
        use sea_orm::PaginatorTrait as _;
        Ok(host::Entity::find()
            .filter(host::Column::HeldReason.is_not_null())
            .count(&self.db())
            .await?)
    }

    /// The reserved hosts of a segment that are not on maintenance, in
    /// creation order: the targets of the `reserved_host` methods.
    pub async fn reserved_hosts(&self, segment: SegmentId) -> Result<Vec<Host>> {
        host::Entity::find()
            .filter(host::Column::SegmentUuid.eq(segment.to_string()))
            .filter(host::Column::Reserved.eq(true))
            .filter(host::Column::OnMaintenance.eq(false))
            .order_by_asc(host::Column::Id)
            .all(&self.db())
            .await?
            .into_iter()
            .map(to_host)
            .collect()
    }
}

fn apply_host_update(
    row: host::Model,
    update: &HostUpdate,
    at: chrono::DateTime<chrono::Utc>,
) -> host::ActiveModel {
    let mut active: host::ActiveModel = row.into();
    if let Some(name) = &update.name {
        active.name = Set(name.clone());
    }
    if let Some(host_type) = &update.host_type {
        active.r#type = Set(host_type.clone());
    }
    if let Some(control_attributes) = &update.control_attributes {
        active.control_attributes = Set(control_attributes.clone());
    }
    if let Some(reserved) = update.reserved {
        active.reserved = Set(reserved);
    }
    if let Some(on_maintenance) = update.on_maintenance {
        active.on_maintenance = Set(on_maintenance);
        // An operator's flag: no recovery's any more, and an operator's
        // word ends a hold.
        active.maintenance_by = Set(None);
        active.held_reason = Set(None);
    }
    active.updated_at = Set(at);
    active
}
