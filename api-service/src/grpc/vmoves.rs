//! `instanceha.v1.VMoveService`: thin handlers over the service layer.

use instanceha_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::requests::{self, VMOVES as KIND};
use crate::service::Api;

pub struct VMoveHandlers {
    pub api: Api,
}

#[tonic::async_trait]
impl pb::vmove_service_server::VmoveService for VMoveHandlers {
    async fn get_vmove(
        &self,
        request: Request<pb::GetVmoveRequest>,
    ) -> Result<Response<pb::Vmove>, Status> {
        let (notification, id) = requests::get_vmove(request.into_inner())?;
        Ok(Response::new(
            self.api.get_vmove(notification, id).await?.into(),
        ))
    }

    async fn list_vmoves(
        &self,
        request: Request<pb::ListVmovesRequest>,
    ) -> Result<Response<pb::ListVmovesResponse>, Status> {
        let (notification, filter, page) = requests::list_vmoves(request.into_inner())?;
        let page = self.api.list_vmoves(notification, filter, page).await?;
        Ok(Response::new(pb::ListVmovesResponse {
            vmoves: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next.map(|t| t.encode(KIND)).unwrap_or_default(),
        }))
    }
}
