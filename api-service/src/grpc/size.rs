//! What is too large for the public gRPC API, answered as gRPC's
//! conventions say: RESOURCE_EXHAUSTED. A request message over
//! `limits.max_message_bytes` (tonic's decoder says OUT_OF_RANGE, which
//! clients read as "past the end of a range", so its answer is rewritten
//! here), and request metadata over [`MAX_METADATA_BYTES`] (refused before
//! the guard asks Keystone about it). Metadata HTTP/2 itself cannot take
//! (over [`MAX_HEADER_LIST_BYTES`]) still ends the stream in h2's 431 or
//! the connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::{Code, Status};
use tower::{Layer, Service};

/// Most request metadata (header names and values, plus HTTP/2's 32 bytes
/// of accounting per header) the API answers; more is RESOURCE_EXHAUSTED.
/// Keystone's largest tokens (PKI, long gone) were about 8 KiB.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

/// The header list HTTP/2 decodes (SETTINGS_MAX_HEADER_LIST_SIZE): well
/// above [`MAX_METADATA_BYTES`], so that oversized metadata reaches
/// [`SizeLayer`] and gets a status instead of hyper's refusal (its default
/// is 16 KiB, and a block of more than a few frames over it is a
/// connection error).
pub const MAX_HEADER_LIST_BYTES: u32 = 1024 * 1024;

/// tonic's OUT_OF_RANGE for a request message over the decoding limit.
const TONIC_TOO_LARGE: &str = "decoded message length too large";

#[derive(Clone, Copy, Debug)]
pub struct SizeLayer;

impl<S> Layer<S> for SizeLayer {
    type Service = SizeService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SizeService { inner }
    }
}

#[derive(Clone, Debug)]
pub struct SizeService<S> {
    inner: S,
}

/// The metadata's size as HTTP/2 counts it (RFC 9113, 6.5.2).
pub fn metadata_bytes(headers: &http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum()
}

/// tonic's OUT_OF_RANGE for an oversized message as RESOURCE_EXHAUSTED;
/// every other response as it is.
fn resource_exhausted(
    mut response: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    if status.code() != Code::OutOfRange || !status.message().contains(TONIC_TOO_LARGE) {
        return response;
    }
    let refused = Status::resource_exhausted(format!(
        "request message too large (limits.max_message_bytes): {}",
        status.message()
    ));
    let headers = response.headers_mut();
    headers.remove("grpc-status");
    headers.remove("grpc-message");
    headers.remove("grpc-status-details-bin");
    if refused.add_header(headers).is_err() {
        return Status::resource_exhausted("request message too large").into_http();
    }
    response
}

impl<S, B> Service<http::Request<B>> for SizeService<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let metadata = metadata_bytes(request.headers());
        Box::pin(async move {
            if metadata > MAX_METADATA_BYTES {
                tracing::info!(
                    path = %request.uri().path(),
                    metadata,
                    "request metadata too large"
                );
                return Ok(Status::resource_exhausted(format!(
                    "request metadata too large: {metadata} bytes, at most {MAX_METADATA_BYTES}"
                ))
                .into_http());
            }
            inner.call(request).await.map(resource_exhausted)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tonic_s_out_of_range_for_a_large_message_becomes_resource_exhausted() {
        let tonic_says = Status::out_of_range(
            "Error, decoded message length too large: found 10050 bytes, the limit is: 4096 bytes",
        )
        .into_http::<tonic::body::Body>();
        let answered = resource_exhausted(tonic_says);
        let status = Status::from_header_map(answered.headers()).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("found 10050 bytes"), "{status:?}");

        let other = Status::out_of_range("page past the end").into_http::<tonic::body::Body>();
        let kept = Status::from_header_map(resource_exhausted(other).headers()).unwrap();
        assert_eq!(kept.code(), Code::OutOfRange);
    }
}
