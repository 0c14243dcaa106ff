//! `instanceha.v1.HostService`: thin handlers over the service layer.

use instanceha_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::requests::{self, HOSTS as KIND};
use crate::service::Api;

pub struct HostHandlers {
    pub api: Api,
}

#[tonic::async_trait]
impl pb::host_service_server::HostService for HostHandlers {
    async fn create_host(
        &self,
        request: Request<pb::CreateHostRequest>,
    ) -> Result<Response<pb::Host>, Status> {
        let new = requests::create_host(request.into_inner())?;
        Ok(Response::new(self.api.create_host(new).await?.into()))
    }

    async fn get_host(
        &self,
        request: Request<pb::GetHostRequest>,
    ) -> Result<Response<pb::Host>, Status> {
        let (id, segment) = requests::get_host(request.into_inner())?;
        Ok(Response::new(self.api.get_host(id, segment).await?.into()))
    }

    async fn list_hosts(
        &self,
        request: Request<pb::ListHostsRequest>,
    ) -> Result<Response<pb::ListHostsResponse>, Status> {
        let (filter, page) = requests::list_hosts(request.into_inner())?;
        let page = self.api.list_hosts(filter, page).await?;
        Ok(Response::new(pb::ListHostsResponse {
            hosts: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next.map(|t| t.encode(KIND)).unwrap_or_default(),
        }))
    }

    async fn update_host(
        &self,
        request: Request<pb::UpdateHostRequest>,
    ) -> Result<Response<pb::Host>, Status> {
        let (id, segment, update) = requests::update_host(request.into_inner())?;
        Ok(Response::new(
            self.api.update_host(id, segment, update).await?.into(),
        ))
    }

    async fn restore_host(
        &self,
        request: Request<pb::RestoreHostRequest>,
    ) -> Result<Response<pb::Notification>, Status> {
        let (id, segment) = requests::restore_host(request.into_inner())?;
        Ok(Response::new(
            self.api.restore_host(id, segment).await?.into(),
        ))
    }

    async fn delete_host(
        &self,
        request: Request<pb::DeleteHostRequest>,
    ) -> Result<Response<pb::DeleteHostResponse>, Status> {
        let (id, segment) = requests::delete_host(request.into_inner())?;
        self.api.delete_host(id, segment).await?;
        Ok(Response::new(pb::DeleteHostResponse {}))
    }
}
