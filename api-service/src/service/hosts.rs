//! Host operations.

use super::{Api, Error, refuse_while_unfinished};
use crate::domain::{
    Host, HostFilter, HostId, HostUpdate, NewHost, Notification, Page, PageRequest, SegmentId,
};
use crate::lifecycle::{self, hosts::Scope};

impl Api {
    #[tracing::instrument(skip_all, fields(name = %new.name, segment_id = %new.segment_id))]
    pub async fn create_host(&self, new: NewHost) -> Result<Host, Error> {
        new.validate()?;
        let host = self.store.insert_host(&new).await?;
        tracing::info!(host_id = %host.id, "host created");
        Ok(host)
    }

    /// The host; when `segment` is given it must belong to it.
    #[tracing::instrument(skip(self))]
    pub async fn get_host(&self, id: HostId, segment: Option<SegmentId>) -> Result<Host, Error> {
        Ok(self.store.host(id, segment).await?)
    }

    #[tracing::instrument(skip(self))]
    pub async fn list_hosts(
        &self,
        filter: HostFilter,
        page: PageRequest,
    ) -> Result<Page<Host>, Error> {
        filter.validate()?;
        if let Some(segment) = filter.segment_id {
            // An unknown segment is an error, not an empty list.
            self.store.segment(segment).await?;
        }
        Ok(self.store.list_hosts(&filter, page).await?)
    }

    #[tracing::instrument(skip(self, update))]
    pub async fn update_host(
        &self,
        id: HostId,
        segment: Option<SegmentId>,
        update: HostUpdate,
    ) -> Result<Host, Error> {
        update.validate()?;
        if update.is_empty() {
            return Err(Error::invalid("update", "sets no field; nothing to change"));
        }
        let scope = lifecycle::hosts::update_scope(&update);
        let host = self
            .store
            .update_host(id, segment, &update, scope, |host, unfinished| {
                let what = match scope {
                    Scope::Host => format!("host {}", host.name),
                    Scope::Segment => format!("host {} (segment {})", host.name, host.segment_id),
                };
                refuse_while_unfinished(&what, unfinished)
            })
            .await?;
        tracing::info!(host_id = %host.id, "host updated");
        Ok(host)
    }

    /// An operator's word that a repaired host may return to service: a
    /// COMPUTE_HOST STARTED notification whose run brings the host back
    /// once its nova-compute reports (`lifecycle::hosts::returns_to_service`).
    /// FAILED_PRECONDITION while the host's own notifications are
    /// unfinished; a hold of the flapping guard ends here.
    #[tracing::instrument(skip(self))]
    pub async fn restore_host(
        &self,
        id: HostId,
        segment: Option<SegmentId>,
    ) -> Result<Notification, Error> {
        let host = self
            .store
            .release_hold(id, segment, |host, unfinished| {
                refuse_while_unfinished(&format!("host {}", host.name), unfinished)
            })
            .await?;
        let new = lifecycle::hosts::restore_report(&host.name, self.now());
        let payload = new.validate()?;
        let mut new = new;
        new.payload.insert(
            lifecycle::hosts::RESTORED_BY.to_owned(),
            "operator".to_owned(),
        );
        tracing::info!(host_id = %host.id, hostname = %host.name, "host restore requested");
        self.intake_queue.submit(new, payload).await
    }

    #[tracing::instrument(skip(self))]
    pub async fn delete_host(&self, id: HostId, segment: Option<SegmentId>) -> Result<(), Error> {
        self.store
            .delete_host(id, segment, |host, unfinished| {
                refuse_while_unfinished(
                    &format!("host {} (segment {})", host.name, host.segment_id),
                    unfinished,
                )
            })
            .await?;
        tracing::info!(host_id = %id, "host deleted");
        Ok(())
    }
}
