//! Signing in to the console, two ways, both ending at the account [`slipway_core::people`] names for the person:
//!
//! - **at the upstream OpenID Connect provider** (the platform's relying party, [`slipway_identity::upstream`]:
//!   authorization code with PKCE, state and nonce): `GET /sign-in/upstream` seals the pending sign-in into the
//!   cookie `__Host-slipway_flow` for ten minutes and sends the browser to the provider, which returns it to
//!   `GET /sign-in/callback`; the state must be the sealed one, and the ID token's verified `email` names the
//!   account;
//! - **by a code mailed to the account's verified address**: `POST /sign-in/email` mails an 8-character code
//!   (the alphabet of [`slipway_core::registration::codes`]) good for 15 minutes, kept only as a keyed hash, and seals the
//!   address into the cookie `__Host-slipway_code` so only this browser can type it back (`POST /sign-in/code`).
//!   The answer is the same whether or not an account has the address; five wrong codes lock it until a new one
//!   is sent; one account is sent at most one code a minute, and one address at most five an hour (the budget
//!   the API's own verification mails share).
//!
//! Either way the session starts as [`super::session`] describes, and the browser goes back where it was going
//! (`return_to`, a path on the console).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::{Duration, Utc};
use serde::{Deserialize, Serialize};

use super::html::{self, Markup, html};
use super::session::{
    self, PRE_COOKIE, PreSessionForm, SESSION_COOKIE, SESSION_LIFETIME, Session, Write,
};
use super::{Console, ConsoleRouter, html_page};
use slipway_auth::{scopes, token};
use slipway_core::people::{self, Account};
use slipway_core::registration::codes;
use slipway_identity::seal::Purpose;
use slipway_identity::upstream::Pending;
use slipway_store::db::console_codes::{self, Code};
use slipway_store::db::tokens::NewToken;

/// The cookie carrying a sign-in across the upstream provider.
pub const FLOW_COOKIE: &str = "__Host-slipway_flow";
/// The cookie naming the address a code was mailed to.
pub const CODE_COOKIE: &str = "__Host-slipway_code";
/// How long a sign-in may spend at the provider.
const FLOW_LIFETIME: std::time::Duration = std::time::Duration::from_secs(600);

/// The routes of signing in and out.
pub fn routes() -> ConsoleRouter {
    axum::Router::new()
        .route("/sign-in", get(sign_in_page))
        .route("/sign-in/upstream", get(start_upstream))
        .route("/sign-in/callback", get(finish_upstream))
        .route("/sign-in/email", post(send_code))
        .route("/sign-in/code", post(check_code))
        .route("/sign-out", post(sign_out))
}

#[derive(Debug, Deserialize)]
struct ReturnTo {
    return_to: Option<String>,
}

/// `return_to` when it is a console path, else the app list.
fn return_path(return_to: Option<&str>) -> String {
    return_to
        .and_then(slipway_identity::same_host_path)
        .filter(|p| !p.starts_with("/sign-in"))
        .unwrap_or("/apps")
        .to_owned()
}

/// The sign-in page: the provider's button (when one is configured) and the form that mails a code.
async fn sign_in_page(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<ReturnTo>,
) -> Response {
    let return_to = return_path(query.return_to.as_deref());
    let (pre, set) = pre_value(&headers);
    let body = sign_in_body(&console, &pre, &return_to, None);
    with_pre(html_page(StatusCode::OK, "Sign in", None, body), &pre, set)
}

/// The value of the pre-sign-in cookie: the browser's, or a new one to set.
fn pre_value(headers: &HeaderMap) -> (String, bool) {
    match session::read_cookie(headers, PRE_COOKIE).filter(|v| v.len() == 48) {
        Some(value) => (value, false),
        None => (session::random_value(), true),
    }
}

fn with_pre(mut response: Response, pre: &str, set: bool) -> Response {
    if set {
        response.headers_mut().append(
            header::SET_COOKIE,
            session::cookie(PRE_COOKIE, pre, SESSION_LIFETIME.as_secs()),
        );
    }
    response
}

fn sign_in_body(console: &Console, pre: &str, return_to: &str, notice: Option<Markup>) -> Markup {
    let upstream = format!(
        "/sign-in/upstream?return_to={}",
        form_urlencoded::byte_serialize(return_to.as_bytes()).collect::<String>()
    );
    html! {
        (notice.unwrap_or_default())
        @if console.upstream.is_some() {
            section {
                h2 { "With your identity provider" }
                p { a.button #sign-in-upstream href=(upstream) { "Sign in with your identity provider" } }
                p.hint { "Your provider must state the email address verified on your slipway account." }
            }
        }
        section {
            h2 { "With a code by email" }
            form method="post" action="/sign-in/email" {
                (html::csrf_field(pre))
                input type="hidden" name="return_to" value=(return_to);
                label {
                    "Your account's verified email address "
                    input type="email" name="email" required autocomplete="email";
                }
                button type="submit" { "Mail me a code" }
            }
            p.hint {
                "An account's address is verified with " code { "POST /me/email-verifications" }
                ", or set by the platform operator."
            }
        }
    }
}

fn code_form(pre: &str, notice: Markup) -> Markup {
    html! {
        (notice)
        form method="post" action="/sign-in/code" {
            (html::csrf_field(pre))
            label { "Code " input name="code" required autocomplete="one-time-code" minlength="8" maxlength="12"; }
            button type="submit" { "Sign in" }
        }
        p { a href="/sign-in" { "Start again" } }
    }
}

/// What the code cookie holds.
#[derive(Debug, Serialize, Deserialize)]
struct CodeFor {
    address: String,
    return_to: String,
}

/// `POST /sign-in/email`: mail a code to the account that has the address as its verified one.
async fn send_code(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    PreSessionForm(fields): PreSessionForm,
) -> Response {
    let (pre, _) = pre_value(&headers);
    let return_to = return_path(Some(fields.get("return_to")));
    let Some(address) = slipway_core::registration::mailer::plain_address(fields.get("email"))
    else {
        let notice = html::banner("error", "Type one plain address, like ada@example.com.");
        let body = sign_in_body(&console, &pre, &return_to, Some(notice));
        return html_page(StatusCode::BAD_REQUEST, "Sign in", None, body);
    };
    let address_text = address.email.to_string();
    match mail_code(&console, &address).await {
        Ok(()) => {
            let cookie_value = console.sealer.seal(
                Purpose::ConsoleCode,
                &CodeFor {
                    address: address_text.clone(),
                    return_to,
                },
                std::time::Duration::from_secs(codes::LIFE_MINUTES as u64 * 60),
            );
            let notice = html::banner(
                "ok",
                &format!(
                    "If an account has {address_text} as its verified address, a code is on its way there. It works for {} minutes.",
                    codes::LIFE_MINUTES
                ),
            );
            let mut response = html_page(
                StatusCode::OK,
                "Type the code",
                None,
                code_form(&pre, notice),
            );
            response.headers_mut().append(
                header::SET_COOKIE,
                session::cookie(CODE_COOKIE, &cookie_value, codes::LIFE_MINUTES as u64 * 60),
            );
            response
        }
        Err((status, message)) => {
            let notice = html::banner("error", &message);
            let body = sign_in_body(&console, &pre, &return_to, Some(notice));
            html_page(status, "Sign in", None, body)
        }
    }
}

/// The key sign-in codes are hashed under.
fn code_key(console: &Console) -> [u8; 32] {
    console.state.keyring().derived_key("console sign-in codes")
}

/// Mails a code to the account whose verified address is `to`, if any. Refusals: no relay (503), the address's
/// hourly budget spent or a code asked for it under a minute ago (429). Every refusal and the answer itself are the
/// same whether or not an account has the address, and the mail goes out in a task the request does not wait for,
/// so neither the answer nor its timing says which addresses have accounts.
async fn mail_code(
    console: &Console,
    to: &lettre::message::Mailbox,
) -> Result<(), (StatusCode, String)> {
    let state = &console.state;
    let internal = |e: &dyn std::fmt::Display| {
        tracing::error!(error = %e, "a console sign-in code could not be made");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong; try again.".to_owned(),
        )
    };
    let mailer = state.mailer().cloned().ok_or((
        StatusCode::SERVICE_UNAVAILABLE,
        "Sign-in by email is not available: this platform has no mail relay.".to_owned(),
    ))?;
    let spaced = |_| {
        (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "A code was asked for this address less than {} seconds ago; use it, or wait a moment.",
                codes::SPACING_SECONDS
            ),
        )
    };
    console
        .code_spacing
        .check(to.email.to_string().to_ascii_lowercase())
        .map_err(spaced)?;
    state
        .spend_mail_to(to.email.as_ref())
        .await
        .map_err(|e| internal(&e))?
        .map_err(|_| {
            (
                StatusCode::TOO_MANY_REQUESTS,
                "This address has been sent as many codes as it may this hour.".to_owned(),
            )
        })?;
    let Some(account) = people::account_for_address(state.db(), to.email.as_ref())
        .await
        .map_err(|e| internal(&e))?
    else {
        return Ok(());
    };
    let mut tx = state.db().begin().await.map_err(|e| internal(&e))?;
    let now = Utc::now();
    if let Some(earlier) = console_codes::lock(&mut tx, account.id)
        .await
        .map_err(|e| internal(&e))?
        && earlier.sent_at + Duration::seconds(codes::SPACING_SECONDS) > now
    {
        // Another replica sent one within the minute: the earlier code stands, and the answer is the usual one.
        return Ok(());
    }
    let code = codes::generate();
    let row = Code {
        user_id: account.id,
        code_hash: codes::hash(&code_key(console), account.id, &code).to_vec(),
        sent_at: now,
        expires_at: now + Duration::minutes(codes::LIFE_MINUTES),
        wrong_codes: 0,
    };
    console_codes::replace(&mut tx, &row)
        .await
        .map_err(|e| internal(&e))?;
    tx.commit().await.map_err(|e| internal(&e))?;
    // Sent by a task of its own that the answer does not wait for: how long the relay takes must not tell that an
    // account has the address. A code the relay refused is cleared, so the next request within the minute's
    // spacing on another replica sends a new one.
    let (to, username, db) = (to.clone(), account.username.clone(), state.db().clone());
    tokio::spawn(async move {
        if let Err(e) = mailer
            .send_sign_in_code(&to, &username, &code, codes::LIFE_MINUTES)
            .await
        {
            tracing::warn!(error = %e, "a console sign-in mail could not be sent");
            if let Ok(mut conn) = db.acquire().await {
                let _ = console_codes::clear(&mut conn, account.id).await;
            }
        }
    });
    Ok(())
}

/// `POST /sign-in/code`: the code typed back in the browser the address was given in.
async fn check_code(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    PreSessionForm(fields): PreSessionForm,
) -> Response {
    let (pre, _) = pre_value(&headers);
    let Some(code_for) = session::read_cookie(&headers, CODE_COOKIE)
        .and_then(|v| console.sealer.open::<CodeFor>(Purpose::ConsoleCode, &v))
    else {
        let notice = html::banner(
            "error",
            "No code is pending in this browser, or it expired; ask for a new one.",
        );
        let body = sign_in_body(&console, &pre, "/apps", Some(notice));
        return html_page(StatusCode::GONE, "Sign in", None, body);
    };
    match verify_code(&console, &code_for.address, fields.get("code")).await {
        Ok(account) => {
            let mut response = start_session(&console, &account, &code_for.return_to).await;
            response
                .headers_mut()
                .append(header::SET_COOKIE, session::cookie(CODE_COOKIE, "", 0));
            response
        }
        Err((status, message)) => {
            let notice = html::banner("error", &message);
            html_page(status, "Type the code", None, code_form(&pre, notice))
        }
    }
}

/// The account signed in to by `guess`, the code mailed to `address`.
async fn verify_code(
    console: &Console,
    address: &str,
    guess: &str,
) -> Result<Account, (StatusCode, String)> {
    let state = &console.state;
    let internal = |e: sqlx::Error| {
        tracing::error!(error = %e, "a console sign-in code could not be checked");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong; try again.".to_owned(),
        )
    };
    let gone = || {
        (
            StatusCode::GONE,
            "No code is pending for this address, or it expired; ask for a new one.".to_owned(),
        )
    };
    let account = people::account_for_address(state.db(), address)
        .await
        .map_err(internal)?
        .ok_or_else(gone)?;
    let mut tx = state.db().begin().await.map_err(internal)?;
    let code = console_codes::lock(&mut tx, account.id)
        .await
        .map_err(internal)?
        .ok_or_else(gone)?;
    if code.expires_at <= Utc::now() {
        console_codes::clear(&mut tx, account.id)
            .await
            .map_err(internal)?;
        tx.commit().await.map_err(internal)?;
        return Err(gone());
    }
    if code.wrong_codes >= codes::MAX_WRONG {
        return Err((
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{} wrong codes locked this one; ask for a new code.",
                codes::MAX_WRONG
            ),
        ));
    }
    if !codes::matches(&code_key(console), account.id, guess, &code.code_hash) {
        let wrong = console_codes::count_wrong(&mut tx, account.id)
            .await
            .map_err(internal)?;
        tx.commit().await.map_err(internal)?;
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "Wrong code; {} tries left.",
                (codes::MAX_WRONG - wrong).max(0)
            ),
        ));
    }
    console_codes::clear(&mut tx, account.id)
        .await
        .map_err(internal)?;
    tx.commit().await.map_err(internal)?;
    Ok(account)
}

/// What the flow cookie holds.
#[derive(Debug, Serialize, Deserialize)]
struct Flow {
    pending: Pending,
    return_to: String,
}

/// `GET /sign-in/upstream`: off to the provider.
async fn start_upstream(
    State(console): State<Arc<Console>>,
    Query(query): Query<ReturnTo>,
) -> Response {
    let Some(upstream) = &console.upstream else {
        return message_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in through an identity provider is not configured here; sign in by email.",
        );
    };
    match upstream.start().await {
        Ok((url, pending)) => {
            let flow = console.sealer.seal(
                Purpose::ConsoleFlow,
                &Flow {
                    pending,
                    return_to: return_path(query.return_to.as_deref()),
                },
                FLOW_LIFETIME,
            );
            let mut response = Redirect::to(&url).into_response();
            response.headers_mut().append(
                header::SET_COOKIE,
                session::cookie(FLOW_COOKIE, &flow, FLOW_LIFETIME.as_secs()),
            );
            response
        }
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "the identity provider cannot be reached"
            );
            message_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The identity provider cannot be reached now; try again later, or sign in by email.",
            )
        }
    }
}

#[derive(Debug, Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /sign-in/callback`: back from the provider.
async fn finish_upstream(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(callback): Query<Callback>,
) -> Response {
    let Some(upstream) = &console.upstream else {
        return message_page(
            StatusCode::SERVICE_UNAVAILABLE,
            "Sign-in through an identity provider is not configured here.",
        );
    };
    let flow = session::read_cookie(&headers, FLOW_COOKIE)
        .and_then(|v| console.sealer.open::<Flow>(Purpose::ConsoleFlow, &v));
    let Some(flow) = flow.filter(|f| {
        callback
            .state
            .as_deref()
            .is_some_and(|s| session::tokens_match(s, &f.pending.csrf))
    }) else {
        return message_page(
            StatusCode::BAD_REQUEST,
            "This sign-in expired or was started in another browser; start again.",
        );
    };
    if callback.error.is_some() {
        return message_page(
            StatusCode::FORBIDDEN,
            "The identity provider did not sign you in.",
        );
    }
    let Some(code) = callback.code else {
        return message_page(
            StatusCode::BAD_REQUEST,
            "The identity provider sent no code.",
        );
    };
    let upstreamed = match upstream.finish(flow.pending, &code).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "a console sign-in at the provider failed"
            );
            return message_page(
                StatusCode::BAD_GATEWAY,
                "The identity provider's answer could not be verified; try again.",
            );
        }
    };
    let mut response = match people::account_of(console.state.db(), &upstreamed).await {
        Ok(Ok(account)) => start_session(&console, &account, &flow.return_to).await,
        Ok(Err(no_account)) => message_page(
            StatusCode::FORBIDDEN,
            &format!("{no_account}. If that is not so, ask the platform's operator."),
        ),
        Err(e) => {
            tracing::error!(error = %e, "the account of a console sign-in could not be read");
            message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong; try again.",
            )
        }
    };
    response
        .headers_mut()
        .append(header::SET_COOKIE, session::cookie(FLOW_COOKIE, "", 0));
    response
}

/// Mints the session's token, sets the session cookie and sends the browser to `return_to`.
async fn start_session(console: &Console, account: &Account, return_to: &str) -> Response {
    let plaintext = token::generate();
    let scopes = scopes::default_scopes();
    let new = NewToken {
        user_id: account.id,
        hash: token::hash(&plaintext),
        label: Some("console sign-in"),
        scopes: &scopes,
        is_agent: false,
        expires_at: Some(Utc::now() + Duration::seconds(SESSION_LIFETIME.as_secs() as i64)),
        parent_id: None,
        only_path: None,
        audience: None,
    };
    let minted = match console.state.db().acquire().await {
        Ok(mut conn) => {
            slipway_store::db::tokens::insert_on(&mut conn, &new, Some("console_session")).await
        }
        Err(e) => Err(e),
    };
    let token_id = match minted {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "a console session's token could not be minted");
            return message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong; try again.",
            );
        }
    };
    let session = Session {
        user_id: account.id,
        username: account.username.clone(),
        token_id,
        token: plaintext,
        csrf: session::random_value(),
    };
    let sealed = console
        .sealer
        .seal(Purpose::ConsoleSession, &session, SESSION_LIFETIME);
    let mut response = Redirect::to(&return_path(Some(return_to))).into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        session::cookie(SESSION_COOKIE, &sealed, SESSION_LIFETIME.as_secs()),
    );
    response
}

/// `POST /sign-out`: the session's token is revoked and the cookie cleared.
async fn sign_out(write: Write) -> Response {
    let path = format!("/tokens/{}", write.person.session.token_id);
    if let Err(failure) = write.person.api.delete(&path).await
        && failure.status != 401
    {
        tracing::warn!(?failure, "a console session's token could not be revoked");
    }
    let mut response = Redirect::to("/sign-in").into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, session::cookie(SESSION_COOKIE, "", 0));
    response
}

/// A page with one message and a way back to the sign-in page.
fn message_page(status: StatusCode, message: &str) -> Response {
    let body = html! {
        (html::banner("error", message))
        p { a href="/sign-in" { "Back to sign-in" } }
    };
    html_page(status, "Sign in", None, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_to_stays_on_the_console_and_off_the_sign_in_pages() {
        assert_eq!(return_path(Some("/apps/x?y=1")), "/apps/x?y=1");
        for away in [
            None,
            Some("//evil"),
            Some("https://evil"),
            Some("/sign-in/code"),
            Some(""),
        ] {
            assert_eq!(return_path(away), "/apps", "{away:?}");
        }
    }
}
