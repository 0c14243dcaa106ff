//! Segment operations.

use super::{Api, Error, refuse_while_unfinished};
use crate::domain::{
    NewSegment, Page, PageRequest, Segment, SegmentFilter, SegmentId, SegmentUpdate,
};

impl Api {
    #[tracing::instrument(skip_all, fields(name = %new.name))]
    pub async fn create_segment(&self, new: NewSegment) -> Result<Segment, Error> {
        new.validate()?;
        let segment = self.store.insert_segment(&new).await?;
        tracing::info!(segment_id = %segment.id, "segment created");
        Ok(segment)
    }

    #[tracing::instrument(skip(self))]
    pub async fn get_segment(&self, id: SegmentId) -> Result<Segment, Error> {
        Ok(self.store.segment(id).await?)
    }

    #[tracing::instrument(skip(self))]
    pub async fn list_segments(
        &self,
        filter: SegmentFilter,
        page: PageRequest,
    ) -> Result<Page<Segment>, Error> {
        filter.validate()?;
        Ok(self.store.list_segments(&filter, page).await?)
    }

    #[tracing::instrument(skip(self, update))]
    pub async fn update_segment(
        &self,
        id: SegmentId,
        update: SegmentUpdate,
    ) -> Result<Segment, Error> {
        update.validate()?;
        if update.is_empty() {
            return Err(Error::invalid("update", "sets no field; nothing to change"));
        }
        let segment = self
            .store
            .update_segment(id, &update, |segment, unfinished| {
                refuse_while_unfinished(&format!("segment {}", segment.id), unfinished)
            })
            .await?;
        tracing::info!(segment_id = %segment.id, "segment updated");
        Ok(segment)
    }

    /// Deletes the segment and its hosts.
    #[tracing::instrument(skip(self))]
    pub async fn delete_segment(&self, id: SegmentId) -> Result<(), Error> {
        self.store
            .delete_segment(id, |segment, unfinished| {
                refuse_while_unfinished(&format!("segment {}", segment.id), unfinished)
            })
            .await?;
        tracing::info!(segment_id = %id, "segment deleted");
        Ok(())
    }
}
