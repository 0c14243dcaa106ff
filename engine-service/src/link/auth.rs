//! Who may open a `Recover` stream: with `link.token_file` set, only a
//! caller presenting that token as `authorization: Bearer <token>`
//! (compared in constant time); every other call is refused
//! UNAUTHENTICATED before the stream's first message is read. Without a
//! token, mutual TLS or loopback guards the port (see
//! `config::Settings::link_token`).

use instanceha_runtime::secret::Secret;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The check in front of the `Recover` service.
#[derive(Clone, Debug, Default)]
pub struct LinkAuth {
    token: Option<Secret>,
}

impl LinkAuth {
    pub fn new(token: Option<Secret>) -> Self {
        Self { token }
    }
}

impl Interceptor for LinkAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else {
            return Ok(request);
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        let peer = request
            .remote_addr()
            .map(|addr| addr.to_string())
            .unwrap_or_default();
        match presented {
            Some(presented) if token.matches(presented.as_bytes()) => Ok(request),
            Some(_) => {
                tracing::warn!(%peer, "recover call refused: wrong link token");
                Err(Status::unauthenticated("wrong link token"))
            }
            None => {
                tracing::warn!(%peer, "recover call refused: no link token");
                Err(Status::unauthenticated(
                    "a link token is required: authorization: Bearer <token>",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(auth: &mut LinkAuth, authorization: Option<&str>) -> Result<(), tonic::Code> {
        let mut request = Request::new(());
        if let Some(value) = authorization {
            request
                .metadata_mut()
                .insert("authorization", value.parse().unwrap());
        }
        auth.call(request).map(|_| ()).map_err(|s| s.code())
    }

    #[test]
    fn only_the_shared_token_passes() {
        let mut auth = LinkAuth::new(Some(Secret::new("s3cret")));
        assert_eq!(call(&mut auth, Some("Bearer s3cret")), Ok(()));
        for refused in [None, Some("Bearer s3creT"), Some("s3cret"), Some("Bearer ")] {
            assert_eq!(
                call(&mut auth, refused),
                Err(tonic::Code::Unauthenticated),
                "{refused:?}"
            );
        }
        let mut open = LinkAuth::default();
        assert_eq!(call(&mut open, None), Ok(()));
    }
}
