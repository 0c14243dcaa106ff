//! Segments in the database.

use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, ModelTrait, QueryFilter,
    QueryOrder, QuerySelect,
};

use super::entity::segment;
use super::notifications::{Unfinished, unfinished_in_segment};
use super::{Error, Result, Store, parse_enum, parse_uuid};
use crate::domain::{
    NewSegment, Page, PageRequest, PageToken, RecoveryMethod, ReturnToService, Segment,
    SegmentFilter, SegmentId, SegmentUpdate,
};

pub(super) fn to_segment(row: segment::Model) -> Result<Segment> {
    Ok(Segment {
        id: parse_uuid("segments", "uuid", &row.uuid)?,
        row_id: row.id,
        recovery_method: parse_enum(
            "segments",
            "recovery_method",
            &row.recovery_method,
            RecoveryMethod::parse,
        )?,
        name: row.name,
        description: row.description,
        service_type: row.service_type,
        enabled: row.enabled,
        return_to_service: parse_enum(
            "segments",
            "return_to_service",
            &row.return_to_service,
            ReturnToService::parse,
        )?,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

fn name_taken(name: &str) -> impl FnOnce() -> String + '_ {
    move || format!("a segment named {name:?} already exists")
}

impl Store {
    pub async fn insert_segment(&self, new: &NewSegment) -> Result<Segment> {
        let at = self.now();
        let row = segment::ActiveModel {
            uuid: Set(SegmentId::new().to_string()),
            name: Set(new.name.clone()),
            description: Set(new.description.clone().filter(|d| !d.is_empty())),
            service_type: Set(new.service_type.clone()),
            recovery_method: Set(new.recovery_method.as_str().to_owned()),
            enabled: Set(new.enabled),
            return_to_service: Set(new.return_to_service.as_str().to_owned()),
            created_at: Set(at),
            updated_at: Set(at),
            ..Default::default()
        }
        .insert(&self.db())
        .await
        .map_err(|e| Error::unique(e, name_taken(&new.name)))?;
        to_segment(row)
    }

    pub async fn segment(&self, id: SegmentId) -> Result<Segment> {
        let row = segment::Entity::find()
            .filter(segment::Column::Uuid.eq(id.to_string()))
            .one(&self.db())
            .await?
            .ok_or_else(|| Error::not_found("segment", id))?;
        to_segment(row)
    }

    pub async fn list_segments(
        &self,
        filter: &SegmentFilter,
        page: PageRequest,
    ) -> Result<Page<Segment>> {
        let mut query = segment::Entity::find().order_by_asc(segment::Column::Id);
        if let Some(after) = page.after {
            query = query.filter(segment::Column::Id.gt(after.after));
        }
        if let Some(method) = filter.recovery_method {
            query = query.filter(segment::Column::RecoveryMethod.eq(method.as_str()));
        }
        if let Some(service_type) = &filter.service_type {
            query = query.filter(segment::Column::ServiceType.eq(service_type.as_str()));
        }
        if let Some(enabled) = filter.enabled {
            query = query.filter(segment::Column::Enabled.eq(enabled));
        }
        if let Some(name) = &filter.name {
            query = query.filter(segment::Column::Name.eq(name.as_str()));
        }
        let rows = query
            .limit(u64::from(page.size) + 1)
            .all(&self.db())
            .await?;
        page_of(rows, page.size, |r| r.id, to_segment)
    }

    /// Applies `update` if `guard` allows it, given the segment's unfinished
    /// notifications, in one transaction.
    pub async fn update_segment<E: From<Error>>(
        &self,
        id: SegmentId,
        update: &SegmentUpdate,
        guard: impl FnOnce(&Segment, &Unfinished) -> Result<(), E>,
    ) -> Result<Segment, E> {
        let txn = self.begin_write().await?;
        let row = segment::Entity::find()
            .filter(segment::Column::Uuid.eq(id.to_string()))
            .lock_exclusive()
            .one(&*txn)
            .await
            .map_err(Error::from)?
            .ok_or_else(|| Error::not_found("segment", id))?;
        let current = to_segment(row.clone())?;
        let unfinished = unfinished_in_segment(&*txn, id).await?;
        guard(&current, &unfinished)?;

        let mut active: segment::ActiveModel = row.into();
        if let Some(name) = &update.name {
            active.name = Set(name.clone());
        }
        if let Some(description) = &update.description {
            active.description = Set(Some(description.clone()).filter(|d| !d.is_empty()));
        }
        if let Some(service_type) = &update.service_type {
            active.service_type = Set(service_type.clone());
        }
        if let Some(method) = update.recovery_method {
            active.recovery_method = Set(method.as_str().to_owned());
        }
        if let Some(enabled) = update.enabled {
            active.enabled = Set(enabled);
        }
        if let Some(returns) = update.return_to_service {
            active.return_to_service = Set(returns.as_str().to_owned());
        }
        active.updated_at = Set(self.now());
        let name = update.name.clone().unwrap_or_default();
        let row = active
            .update(&*txn)
            .await
            .map_err(|e| Error::unique(e, name_taken(&name)))?;
        txn.commit().await?;
        Ok(to_segment(row)?)
    }

    /// Deletes the segment and its hosts if `guard` allows it.
    pub async fn delete_segment<E: From<Error>>(
        &self,
        id: SegmentId,
        guard: impl FnOnce(&Segment, &Unfinished) -> Result<(), E>,
    ) -> Result<(), E> {
        let txn = self.begin_write().await?;
        let row = segment::Entity::find()
            .filter(segment::Column::Uuid.eq(id.to_string()))
            .lock_exclusive()
            .one(&*txn)
            .await
            .map_err(Error::from)?
            .ok_or_else(|| Error::not_found("segment", id))?;
        let current = to_segment(row.clone())?;
        let unfinished = unfinished_in_segment(&*txn, id).await?;
        guard(&current, &unfinished)?;
        super::entity::host::Entity::delete_many()
            .filter(super::entity::host::Column::SegmentUuid.eq(id.to_string()))
            .exec(&*txn)
            .await
            .map_err(Error::from)?;
        row.delete(&*txn).await.map_err(Error::from)?;
        txn.commit().await?;
        Ok(())
    }
}

/// Cuts `rows` (fetched with one extra) to a page and its next token.
pub(super) fn page_of<R, T>(
    mut rows: Vec<R>,
    size: u32,
    key: impl Fn(&R) -> i64,
    convert: impl Fn(R) -> Result<T>,
) -> Result<Page<T>> {
    let next = if rows.len() > size as usize {
        rows.truncate(size as usize);
        rows.last().map(|r| PageToken { after: key(r) })
    } else {
        None
    };
    let items = rows.into_iter().map(convert).collect::<Result<Vec<_>>>()?;
    Ok(Page { items, next })
}
