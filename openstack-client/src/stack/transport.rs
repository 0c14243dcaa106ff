//! The bottom of the stack: one HTTP exchange with reqwest. It sends the
//! try with its tokens, a fresh request id, the microversion headers and
//! the current trace context (`traceparent`), reads the whole answer, and
//! says what came of it in the client's terms: an answer, an error status
//! with the service's message, a refused connection, or a connection lost
//! after sending.

use std::task::{Context, Poll};

use bytes::Bytes;
use reqwest::RequestBuilder;

use super::{BoxFuture, Try};
use crate::catalog::ServiceKind;
use crate::error::{Call, Error};
use crate::request::{Response, describe, error_message, request_id};
use crate::retry::parse_retry_after;

/// Sends tries with one shared reqwest client (its connection pool).
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    http: reqwest::Client,
}

impl Transport {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }

    /// The HTTP request of `attempt`.
    fn request(&self, attempt: &Try) -> RequestBuilder {
        let request = &attempt.outgoing.request;
        let endpoint = &attempt.outgoing.endpoint;
        let mut builder = self
            .http
            .request(
                request.method.clone(),
                format!("{}{}", endpoint.url, request.path),
            )
            .header("Accept", "application/json")
            .header("X-OpenStack-Request-ID", request_id());
        if let Some(token) = &attempt.token {
            builder = builder.header("X-Auth-Token", token.value.expose());
        }
        builder = match request.kind {
            ServiceKind::Compute => builder
                .header(
                    "OpenStack-API-Version",
                    format!("compute {}", endpoint.microversion),
                )
                .header(
                    "X-OpenStack-Nova-API-Version",
                    endpoint.microversion.to_string(),
                ),
            ServiceKind::BlockStorage => builder.header(
                "OpenStack-API-Version",
                format!("volume {}", endpoint.microversion),
            ),
        };
        let mut trace_headers = http::HeaderMap::new();
        instanceha_runtime::propagation::inject_current(&mut trace_headers);
        builder = builder.headers(trace_headers);
        if let Some(service) = &attempt.service_token {
            builder = builder.header("X-Service-Token", service.value.expose());
        }
        if !request.query.is_empty() {
            builder = builder.query(&request.query);
        }
        if let Some(body) = &request.body {
            builder = builder.json(body);
        }
        builder
    }
}

impl tower::Service<Try> for Transport {
    type Response = Response;
    type Error = Error;
    type Future = BoxFuture<Result<Response, Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Try) -> Self::Future {
        let builder = self.request(&attempt);
        let call = attempt.outgoing.call.clone();
        let attempts = attempt.number;
        Box::pin(async move {
            let response = builder
                .send()
                .await
                .map_err(|e| not_answered(&e, &call, attempts))?;
            let status = response.status().as_u16();
            tracing::Span::current().record("http.response.status_code", status);
            tracing::Span::current().record("attempts", attempts);
            let headers = response.headers();
            let request_id = headers
                .get("x-openstack-request-id")
                .or_else(|| headers.get("x-compute-request-id"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let retry_after = headers
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let body = response.bytes().await.map_err(|e| Error::Lost {
                call: Box::new(call.clone()),
                reason: describe(&e),
                attempts,
            })?;
            answered(
                call,
                attempts,
                Answer {
                    status,
                    request_id,
                    retry_after,
                    body,
                },
            )
        })
    }
}

/// What a service answered.
struct Answer {
    status: u16,
    request_id: Option<String>,
    retry_after: Option<std::time::Duration>,
    body: Bytes,
}

/// An answer in the client's terms: a 2xx is the response, anything else
/// an error with the service's own message.
fn answered(call: Call, attempts: u32, answer: Answer) -> Result<Response, Error> {
    let Answer {
        status,
        request_id,
        retry_after,
        body,
    } = answer;
    if (200..300).contains(&status) {
        return Ok(Response {
            body,
            request_id,
            call,
        });
    }
    Err(Error::Status {
        call: Box::new(call),
        status,
        message: error_message(&String::from_utf8_lossy(&body), status),
        request_id,
        attempts,
        retry_after,
    })
}

/// A request that got no answer: refused (nothing was sent, any request
/// may go again) or lost after sending (the outcome unknown).
fn not_answered(err: &reqwest::Error, call: &Call, attempts: u32) -> Error {
    if err.is_connect() {
        Error::Connect {
            call: Box::new(call.clone()),
            reason: describe(err),
            attempts,
        }
    } else {
        Error::Lost {
            call: Box::new(call.clone()),
            reason: describe(err),
            attempts,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fake;
    use super::*;

    fn answer(status: u16, body: &'static str) -> Answer {
        Answer {
            status,
            request_id: Some("req-9".to_owned()),
            retry_after: (status == 503).then_some(Duration::from_secs(5)),
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    #[test]
    fn a_2xx_is_the_response_and_anything_else_an_error_with_the_services_message() {
        let call = fake::outgoing(true).call.clone();
        let ok = answered(call.clone(), 1, answer(202, "")).unwrap();
        assert_eq!(ok.request_id.as_deref(), Some("req-9"));

        let body =
            r#"{"itemNotFound": {"code": 404, "message": "Instance 1 could not be found."}}"#;
        let error = answered(call.clone(), 2, answer(404, body)).unwrap_err();
        assert!(error.is_not_found());
        assert_eq!(
            error.service_message(),
            Some("Instance 1 could not be found.")
        );
        assert!(error.to_string().contains("after 2 attempts"), "{error}");
        assert!(error.to_string().contains("[req-9]"), "{error}");

        let unavailable = answered(call, 1, answer(503, "<html>busy</html>")).unwrap_err();
        assert_eq!(unavailable.retry_after(), Some(Duration::from_secs(5)));
        assert!(unavailable.refused());
    }

    #[tokio::test]
    async fn a_refused_connection_is_refused_not_lost() {
        // A port just let go of: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let err = reqwest::Client::new().get(url).send().await.unwrap_err();
        let call = fake::outgoing(false).call.clone();
        let error = not_answered(&err, &call, 1);
        assert!(error.refused(), "{error}");
    }
}
