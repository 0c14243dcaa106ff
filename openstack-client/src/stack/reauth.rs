//! The re-authentication layer: each try goes with a valid token (and a
//! service token when the request asks for one); when a service refuses
//! the token (401, it expired or was revoked), the layer logs in again and
//! sends the try once more — once per call, and the resend is not counted
//! as a try.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt as _};

use super::{BoxFuture, Try};
use crate::error::Error;
use crate::keystone::{Keystone, Token};
use crate::request::Response;

/// Where the tokens of a try come from.
pub(crate) trait Tokens: Clone + Send + Sync + 'static {
    /// A valid token of the engine's identity.
    fn token(&self) -> impl Future<Output = Result<Arc<Token>, Error>> + Send;

    /// Forgets `token` after a service refused it.
    fn invalidate(&self, token: &Token) -> impl Future<Output = ()> + Send;

    /// The token to send as `X-Service-Token` beside `own`, if there is
    /// one.
    fn service_token(
        &self,
        own: &Arc<Token>,
    ) -> impl Future<Output = Result<Option<Arc<Token>>, Error>> + Send;
}

/// The engine's Keystone identity, and the service identity whose token
/// goes in `X-Service-Token` (Cinder lets only service callers detach an
/// attachment Nova uses).
#[derive(Clone, Debug)]
pub(crate) struct Identities {
    pub keystone: Arc<Keystone>,
    pub service: Option<Arc<Keystone>>,
}

impl Tokens for Identities {
    async fn token(&self) -> Result<Arc<Token>, Error> {
        self.keystone.token().await
    }

    async fn invalidate(&self, token: &Token) {
        self.keystone.invalidate(token).await;
    }

    /// The service identity's token, or the engine's own if it holds the
    /// `service` role.
    async fn service_token(&self, own: &Arc<Token>) -> Result<Option<Arc<Token>>, Error> {
        if let Some(service) = &self.service {
            return service.token().await.map(Some);
        }
        Ok(own.has_role("service").then(|| own.clone()))
    }
}

/// Gives each try its tokens (see [`Reauth`]).
#[derive(Clone, Debug)]
pub(crate) struct ReauthLayer<T> {
    tokens: T,
}

impl<T> ReauthLayer<T> {
    pub fn new(tokens: T) -> Self {
        Self { tokens }
    }
}

impl<S, T: Clone> Layer<S> for ReauthLayer<T> {
    type Service = Reauth<S, T>;

    fn layer(&self, inner: S) -> Reauth<S, T> {
        Reauth {
            tokens: self.tokens.clone(),
            inner,
        }
    }
}

/// Sends each try with the current tokens; on a 401, the call's one login
/// and resend.
#[derive(Clone, Debug)]
pub(crate) struct Reauth<S, T> {
    tokens: T,
    inner: S,
}

impl<S, T> Service<Try> for Reauth<S, T>
where
    S: Service<Try, Response = Response, Error = Error> + Clone + Send + 'static,
    S::Future: Send,
    T: Tokens,
{
    type Response = Response;
    type Error = Error;
    type Future = BoxFuture<Result<Response, Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // Each send waits for the inner service to be ready itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, attempt: Try) -> Self::Future {
        let mut inner = self.inner.clone();
        let tokens = self.tokens.clone();
        Box::pin(async move {
            loop {
                let token = tokens.token().await?;
                let service_token = if attempt.outgoing.request.service_token {
                    tokens.service_token(&token).await?
                } else {
                    None
                };
                let send = Try {
                    token: Some(token.clone()),
                    service_token,
                    ..attempt.clone()
                };
                match inner.ready().await?.call(send).await {
                    Err(Error::Status { status: 401, .. })
                        if !attempt
                            .outgoing
                            .reauthenticated
                            .swap(true, Ordering::AcqRel) =>
                    {
                        tracing::info!(call = %attempt.outgoing.call, "token refused; logging in again");
                        tokens.invalidate(&token).await;
                    }
                    result => return result,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use instanceha_runtime::secret::Secret;

    use super::super::fake;
    use super::*;
    use crate::catalog::ServiceKind;
    use crate::credentials::{Credentials, Domain, Project};
    use crate::request::Request;
    use crate::retry::RetryPolicy;

    /// A token source that logs in as `t1`, `t2`... and forgets a token
    /// when told.
    #[derive(Clone, Debug, Default)]
    struct Logins {
        state: Arc<Mutex<LoginState>>,
    }

    #[derive(Debug, Default)]
    struct LoginState {
        logins: u32,
        current: Option<Arc<Token>>,
        invalidated: Vec<String>,
        keystone_down: bool,
    }

    impl Tokens for Logins {
        async fn token(&self) -> Result<Arc<Token>, Error> {
            let mut state = self.state.lock().unwrap();
            if state.keystone_down {
                return Err(fake::login_failed());
            }
            if state.current.is_none() {
                state.logins += 1;
                state.current = Some(fake::token(&format!("t{}", state.logins), &[]));
            }
            Ok(state.current.clone().unwrap())
        }

        async fn invalidate(&self, token: &Token) {
            let mut state = self.state.lock().unwrap();
            state.invalidated.push(token.value.expose().to_owned());
            if state
                .current
                .as_ref()
                .is_some_and(|c| c.value.expose() == token.value.expose())
            {
                state.current = None;
            }
        }

        async fn service_token(&self, _own: &Arc<Token>) -> Result<Option<Arc<Token>>, Error> {
            Ok(Some(fake::token("service", &["service"])))
        }
    }

    /// The token and the service token of each send.
    type Sent = Arc<Mutex<Vec<(String, Option<String>)>>>;

    /// A service refusing the tokens in `refused`, recording what each
    /// send carried.
    fn service(
        refused: &'static [&'static str],
    ) -> (
        impl Service<Try, Response = Response, Error = Error, Future: Send> + Clone + Send + 'static,
        Sent,
    ) {
        let sent: Sent = Arc::default();
        let service = {
            let sent = sent.clone();
            tower::service_fn(move |attempt: Try| {
                let token = attempt.token.as_ref().expect("a token").value.expose();
                sent.lock().unwrap().push((
                    token.to_owned(),
                    attempt
                        .service_token
                        .as_ref()
                        .map(|t| t.value.expose().to_owned()),
                ));
                let refused = refused.contains(&token);
                let call = attempt.outgoing.call.clone();
                async move {
                    if refused {
                        Err(fake::status(&call, 401, None))
                    } else {
                        Ok(fake::answer(&call))
                    }
                }
            })
        };
        (service, sent)
    }

    fn tokens_sent(sent: &Mutex<Vec<(String, Option<String>)>>) -> Vec<String> {
        sent.lock()
            .unwrap()
            .iter()
            .map(|(t, _)| t.clone())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_token_is_replaced_and_the_try_sent_once_more() {
        let logins = Logins::default();
        let (service, sent) = service(&["t1"]);
        let reauth = ReauthLayer::new(logins.clone()).layer(service);
        reauth
            .oneshot(fake::first_try(false))
            .await
            .expect("answered");
        assert_eq!(tokens_sent(&sent), ["t1", "t2"]);
        let state = logins.state.lock().unwrap();
        assert_eq!(state.logins, 2);
        assert_eq!(state.invalidated, ["t1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn one_login_per_call_whatever_its_tries() {
        let logins = Logins::default();
        let (service, sent) = service(&["t1", "t2", "t3"]);
        let reauth = ReauthLayer::new(logins.clone()).layer(service);
        let first = fake::first_try(true);
        let error = reauth.clone().oneshot(first.clone()).await.unwrap_err();
        assert_eq!(error.status(), Some(401), "refused again: final");
        assert_eq!(tokens_sent(&sent), ["t1", "t2"]);
        // A later try of the same call is not given another login...
        let second = Try::new(first.outgoing.clone(), 2, None);
        let error = reauth.clone().oneshot(second).await.unwrap_err();
        assert_eq!(error.status(), Some(401));
        assert_eq!(tokens_sent(&sent), ["t1", "t2", "t2"]);
        // ...but another call is.
        let error = reauth.oneshot(fake::first_try(true)).await.unwrap_err();
        assert_eq!(error.status(), Some(401));
        assert_eq!(tokens_sent(&sent), ["t1", "t2", "t2", "t2", "t3"]);
        assert_eq!(logins.state.lock().unwrap().logins, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_login_ends_the_try_unsent() {
        let logins = Logins::default();
        logins.state.lock().unwrap().keystone_down = true;
        let (service, sent) = service(&[]);
        let reauth = ReauthLayer::new(logins).layer(service);
        let error = reauth.oneshot(fake::first_try(true)).await.unwrap_err();
        assert!(matches!(error, Error::Auth { .. }), "{error}");
        assert!(sent.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_service_token_goes_only_where_asked() {
        let (service, sent) = service(&[]);
        let reauth = ReauthLayer::new(Logins::default()).layer(service);
        let asking = Request::get(ServiceKind::BlockStorage, "/attachments/1").service_token();
        let asking = Try::new(fake::outgoing_for(asking), 1, None);
        reauth.clone().oneshot(asking).await.expect("answered");
        reauth
            .oneshot(fake::first_try(true))
            .await
            .expect("answered");
        let sent = sent.lock().unwrap();
        assert_eq!(sent[0], ("t1".to_owned(), Some("service".to_owned())));
        assert_eq!(sent[1], ("t1".to_owned(), None));
    }

    #[tokio::test(start_paused = true)]
    async fn the_engine_token_serves_as_service_token_only_with_the_service_role() {
        let plain = fake::token("own", &["admin"]);
        let service_role = fake::token("own", &["admin", "service"]);
        // No separate service identity: the own token, if it may.
        let credentials = Credentials::Password {
            auth_url: "http://keystone.invalid/v3".into(),
            username: "ha-engine".into(),
            user_domain: Domain::Name("Default".into()),
            password: Secret::new("secret"),
            project: Project::Id("p1".into()),
        };
        let keystone = Keystone::standalone(
            credentials,
            RetryPolicy::default(),
            Duration::from_secs(1),
            &Default::default(),
        )
        .unwrap();
        let without = Identities {
            keystone: Arc::new(keystone),
            service: None,
        };
        assert!(without.service_token(&plain).await.unwrap().is_none());
        let token = without.service_token(&service_role).await.unwrap();
        assert_eq!(token.unwrap().value.expose(), "own");
    }
}
