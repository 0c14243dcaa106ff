//! `instanceha.v1.SegmentService`: thin handlers over the service layer.

use instanceha_proto::v1 as pb;
use tonic::{Request, Response, Status};

use super::requests::{self, SEGMENTS as KIND};
use crate::service::Api;

pub struct SegmentHandlers {
    pub api: Api,
}

#[tonic::async_trait]
impl pb::segment_service_server::SegmentService for SegmentHandlers {
    async fn create_segment(
        &self,
        request: Request<pb::CreateSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        let new = requests::create_segment(request.into_inner())?;
        Ok(Response::new(self.api.create_segment(new).await?.into()))
    }

    async fn get_segment(
        &self,
        request: Request<pb::GetSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        let id = requests::get_segment(request.into_inner())?;
        Ok(Response::new(self.api.get_segment(id).await?.into()))
    }

    async fn list_segments(
        &self,
        request: Request<pb::ListSegmentsRequest>,
    ) -> Result<Response<pb::ListSegmentsResponse>, Status> {
        let (filter, page) = requests::list_segments(request.into_inner())?;
        let page = self.api.list_segments(filter, page).await?;
        Ok(Response::new(pb::ListSegmentsResponse {
            segments: page.items.into_iter().map(Into::into).collect(),
            next_page_token: page.next.map(|t| t.encode(KIND)).unwrap_or_default(),
        }))
    }

    async fn update_segment(
        &self,
        request: Request<pb::UpdateSegmentRequest>,
    ) -> Result<Response<pb::Segment>, Status> {
        let (id, update) = requests::update_segment(request.into_inner())?;
        Ok(Response::new(
            self.api.update_segment(id, update).await?.into(),
        ))
    }

    async fn delete_segment(
        &self,
        request: Request<pb::DeleteSegmentRequest>,
    ) -> Result<Response<pb::DeleteSegmentResponse>, Status> {
        let id = requests::delete_segment(request.into_inner())?;
        self.api.delete_segment(id).await?;
        Ok(Response::new(pb::DeleteSegmentResponse {}))
    }
}
