//! VM move operations (read-only: vmoves are written by recoveries).

use super::{Api, Error};
use crate::domain::{InstanceStep, NotificationId, Page, PageRequest, VMove, VMoveFilter, VMoveId};

impl Api {
    #[tracing::instrument(skip(self))]
    pub async fn get_vmove(
        &self,
        notification: NotificationId,
        id: VMoveId,
    ) -> Result<VMove, Error> {
        Ok(self.store.vmove(notification, id).await?)
    }

    #[tracing::instrument(skip(self))]
    pub async fn list_vmoves(
        &self,
        notification: NotificationId,
        filter: VMoveFilter,
        page: PageRequest,
    ) -> Result<Page<VMove>, Error> {
        // An unknown notification is an error, not an empty list.
        self.store.notification(notification).await?;
        Ok(self.store.list_vmoves(notification, &filter, page).await?)
    }

    /// Every instance's timeline: the steps the engine reported for the
    /// notification's instances, in order.
    #[tracing::instrument(skip(self))]
    pub async fn instance_steps(
        &self,
        notification: NotificationId,
    ) -> Result<Vec<InstanceStep>, Error> {
        self.store.notification(notification).await?;
        Ok(self.store.instance_steps(notification).await?)
    }
}
