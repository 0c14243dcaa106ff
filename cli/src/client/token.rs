//! The bearer token on every call of the CLI's client.

use std::fmt;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::config::Token;

/// Adds `authorization: Bearer <token>` to every request when a token is
/// set.
#[derive(Clone)]
pub struct BearerToken {
    header: Option<MetadataValue<Ascii>>,
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken")
            .field("set", &self.header.is_some())
            .finish()
    }
}

impl BearerToken {
    /// `None` when the token cannot be a header value (config checks that
    /// first, so this does not happen).
    pub fn new(token: Option<&Token>) -> Option<Self> {
        let header = match token {
            None => None,
            Some(token) => {
                let mut value: MetadataValue<Ascii> =
                    format!("Bearer {}", token.expose()).parse().ok()?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Some(Self { header })
    }
}

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(header) = &self.header {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_is_sent_and_redacted() {
        let mut token = BearerToken::new(Some(&Token::new("abc"))).unwrap();
        let request = token.call(Request::new(())).unwrap();
        let header = request.metadata().get("authorization").unwrap();
        assert_eq!(header.to_str().unwrap(), "Bearer abc");
        assert!(!format!("{token:?}").contains("abc"));
        assert!(!format!("{header:?}").contains("abc"));

        let mut none = BearerToken::new(None).unwrap();
        let request = none.call(Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());

        assert!(BearerToken::new(Some(&Token::new("a\nb"))).is_none());
    }
}
