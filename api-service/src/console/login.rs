//! Signing in and out: the token is entered once, checked with the APIs'
//! guard, and kept in the session cookie (`session`). Without
//! authentication there is nothing to sign in to.

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Console;
use super::error::ConsoleError;
use super::html::Html;
use super::layout;
use super::overview::OPERATIONS;
use super::session::{
    self, ClientAddr, cleared_cookie, csrf_matches, safe_next, same_origin, session_cookie,
    token_from_cookie,
};
use crate::auth::{AuthError, Refusal};

fn login_page(status: StatusCode, next: &str, problem: Option<&str>) -> Response {
    let mut body = Html::new();
    body.raw("<h1>Sign in to instance-ha</h1>");
    if let Some(problem) = problem {
        body.raw("<p class=\"error\" role=\"alert\" id=\"login-error\">")
            .text(problem)
            .raw("</p>");
    }
    body.raw("<form method=\"post\" action=\"/console/login\" class=\"login\">")
        .raw("<input type=\"hidden\" name=\"next\" value=\"")
        .text(next)
        .raw("\"><p><label for=\"token\">Token</label> ")
        .raw("<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"off\" required autofocus ")
        .raw("aria-describedby=\"token-help\"></p><p id=\"token-help\" class=\"help\">")
        .raw("A Keystone token (<code>openstack token issue</code>) or a static token of this API. ")
        .raw("It is kept in a cookie of this site until you sign out.</p>")
        .raw("<p><button type=\"submit\">Sign in</button></p></form>");
    (status, layout::bare_page("Sign in", &body)).into_response()
}

/// `GET /console/login`.
pub async fn page(
    State(console): State<Console>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let next = safe_next(query.get("next").map(String::as_str));
    if session::open(console.guard()).await {
        return see_other(&next, None);
    }
    login_page(StatusCode::OK, &next, None)
}

/// `POST /console/login` with `token` and `next`.
pub async fn sign_in(
    State(console): State<Console>,
    headers: HeaderMap,
    client: ClientAddr,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    same_origin(&headers)?;
    let next = safe_next(form.get("next").map(String::as_str));
    let token = form
        .get("token")
        .map(|t| t.trim())
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Ok(login_page(
            StatusCode::BAD_REQUEST,
            &next,
            Some("token: enter a token"),
        ));
    };
    match session::admit(console.guard(), Some(token), OPERATIONS[0], client.0).await {
        Ok(principal) => {
            tracing::info!(caller = %principal.name, transport = "console", "signed in");
            Ok(see_other(
                &next,
                Some(session_cookie(token, console.secure())),
            ))
        }
        Err(Refusal::Auth(AuthError::Missing | AuthError::Invalid)) => Ok(login_page(
            StatusCode::UNAUTHORIZED,
            &next,
            Some("This token is not valid (expired, revoked or unknown)."),
        )),
        Err(refused) => Err(ConsoleError::refused(refused, None)),
    }
}

/// `POST /console/logout` with the CSRF token.
pub async fn sign_out(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    same_origin(&headers)?;
    let token = token_from_cookie(&headers);
    if !csrf_matches(
        token.as_deref(),
        form.get("csrf").map_or("", String::as_str),
    ) {
        return Err(ConsoleError::Forbidden(
            "the form's csrf token is missing or not this session's: reload the page".to_owned(),
        ));
    }
    Ok(see_other(
        "/console/login",
        Some(cleared_cookie(console.secure())),
    ))
}

fn see_other(location: &str, cookie: Option<String>) -> Response {
    let mut response = (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_owned())],
    )
        .into_response();
    if let Some(cookie) = cookie
        && let Ok(value) = cookie.parse()
    {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
