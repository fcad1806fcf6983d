//! Who is signed in to the console, and the checks every write passes.
//!
//! A sign-in mints a token for the person's account (origin `console_session`, the nine default scopes, as long
//! as the session) and keeps its plaintext in the session cookie `__Host-slipway_session`, sealed (AES-256-GCM
//! under a key derived from the console secret; see [`slipway_identity::seal`]) with the session's CSRF token. The
//! cookie is `Secure; HttpOnly; SameSite=Lax; Path=/` without a `Domain`: the `__Host-` prefix makes a browser
//! refuse it from anywhere but the console's own host over HTTPS. Every page calls the REST API with that token,
//! so the API decides what the person sees and may do; a revoked or expired token signs the browser out.
//!
//! Every form that writes carries the session's CSRF token in a hidden field, and a write is refused (403) unless
//! the field matches (compared in constant time) and the browser's `Sec-Fetch-Site` and `Origin`, when it sends
//! them, say the request came from the console itself. Before a sign-in, the sign-in forms are held to a random
//! value in the cookie `__Host-slipway_pre` the same way (a page elsewhere cannot read it to copy it into a form).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use rand::RngExt as _;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Console;
use slipway_identity::seal::Purpose;
use slipway_rest::in_process::Rest;

/// The session cookie.
pub const SESSION_COOKIE: &str = "__Host-slipway_session";
/// The cookie that holds sign-in forms to the browser that loaded them.
pub const PRE_COOKIE: &str = "__Host-slipway_pre";
/// How long a console session (and its token) lasts.
pub const SESSION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(12 * 3600);
/// Largest form body a page posts.
const FORM_LIMIT: usize = 64 * 1024;

/// What the session cookie holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    /// The account.
    pub user_id: Uuid,
    /// Its username.
    pub username: String,
    /// The session token's id (revoked at sign-out).
    pub token_id: Uuid,
    /// The session token.
    pub token: String,
    /// The CSRF token of this session's forms.
    pub csrf: String,
}

/// A random value for a CSRF token or the pre-sign-in cookie.
pub fn random_value() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    hex::encode(bytes)
}

/// A `Set-Cookie` value for a `__Host-` cookie `name` holding `value` for `max_age` seconds (0 removes it).
pub fn cookie(name: &str, value: &str, max_age: u64) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age={max_age}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("__Host-slipway_invalid=; Path=/; Max-Age=0"))
}

/// The value of the cookie `name` in the request's `Cookie` headers.
pub fn read_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    slipway_http::cookies::read(headers, name)
}

/// A signed-in person: their session, and the REST API as they see it.
pub struct Person {
    /// The session.
    pub session: Session,
    /// The API, called with the session's token.
    pub api: Rest,
    /// The path of the page asked for, for the navigation to mark where they are.
    pub path: String,
    /// The port apps answer HTTPS on, for links to them.
    pub apps_port: u16,
    /// Host of the git transports ({git_host}), for the SSH remote's address.
    pub git_host: String,
    /// Where clients reach external SQL access (HOST:PORT), when it is served.
    pub sql_address: Option<String>,
    /// The API's synced cache of the platform's objects, for what no route answers: which database name a
    /// connection string gives a channel.
    pub cache: slipway_core::platform::cache::Cache,
}

impl Person {
    /// The page header for this person.
    pub fn header(&self) -> super::html::Header<'_> {
        super::html::Header {
            username: &self.session.username,
            csrf: &self.session.csrf,
            path: &self.path,
        }
    }
}

/// The answer to a request without a live session: to the sign-in page, coming back here afterwards.
pub struct SignedOut {
    return_to: String,
}

impl IntoResponse for SignedOut {
    fn into_response(self) -> Response {
        let target = format!(
            "/sign-in?return_to={}",
            form_urlencoded::byte_serialize(self.return_to.as_bytes()).collect::<String>()
        );
        let mut response = Redirect::to(&target).into_response();
        response
            .headers_mut()
            .append(header::SET_COOKIE, cookie(SESSION_COOKIE, "", 0));
        response
    }
}

impl SignedOut {
    /// Back to the sign-in page, returning to `path` afterwards (the session cookie is cleared).
    pub fn returning_to(path: &str) -> Self {
        Self {
            return_to: slipway_identity::same_host_path(path)
                .unwrap_or("/apps")
                .to_owned(),
        }
    }
}

impl FromRequestParts<Arc<Console>> for Person {
    type Rejection = SignedOut;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, Self::Rejection> {
        let here = parts
            .uri
            .path_and_query()
            .map_or("/apps", |p| p.as_str())
            .to_owned();
        let here = if parts.method == axum::http::Method::GET {
            here
        } else {
            "/apps".to_owned()
        };
        let session: Session = read_cookie(&parts.headers, SESSION_COOKIE)
            .and_then(|sealed| console.sealer.open(Purpose::ConsoleSession, &sealed))
            .ok_or_else(|| SignedOut::returning_to(&here))?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", session.token))
            .map_err(|_| SignedOut::returning_to(&here))?;
        Ok(Person {
            api: Rest::new(console.api.clone(), Some(bearer)),
            session,
            path: parts.uri.path().to_owned(),
            apps_port: console.apps_port,
            git_host: console.state.names().git_host.clone(),
            sql_address: console.state.names().sql_address.clone(),
            cache: console.state.cache().clone(),
        })
    }
}

/// A form's fields, by name (the last value wins).
#[derive(Debug, Default)]
pub struct Fields(HashMap<String, String>);

impl Fields {
    /// Parses an `application/x-www-form-urlencoded` body.
    pub fn parse(body: &[u8]) -> Self {
        Self(form_urlencoded::parse(body).into_owned().collect())
    }

    /// The field `name`, trimmed; empty when absent.
    pub fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", |v| v.trim())
    }

    /// The field `name` untrimmed (a value kept exactly as typed); empty when absent.
    pub fn raw(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }

    /// The field `name` when present and not blank.
    pub fn opt(&self, name: &str) -> Option<String> {
        Some(self.get(name))
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
}

/// A refused write: 403 with a short page.
pub struct Forbidden(pub &'static str);

impl IntoResponse for Forbidden {
    fn into_response(self) -> Response {
        (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            super::html::page(
                "Refused",
                None,
                super::html::html! {
                    (super::html::banner("error", self.0))
                    p { a href="/apps" { "Back to the console" } }
                },
            )
            .into_string(),
        )
            .into_response()
    }
}

/// Whether the request says it came from the console's own pages: `Sec-Fetch-Site` (when sent) is `same-origin`
/// (or `none`, a person typing the address), and `Origin` (when sent) is the console's origin.
pub fn same_origin(headers: &HeaderMap, origin: &str) -> bool {
    let fetch_site_ok = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|site| site == "same-origin" || site == "none");
    let origin_ok = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|o| o == origin);
    fetch_site_ok && origin_ok
}

/// Whether `given` is `expected`, compared in constant time.
pub fn tokens_match(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    !expected.is_empty()
        && given.len() == expected.len()
        && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// A write by a signed-in person: the session, and the form's fields, once the CSRF checks passed.
pub struct Write {
    /// The person.
    pub person: Person,
    /// The form.
    pub fields: Fields,
}

/// Why a write was not taken.
pub enum WriteRefused {
    /// No live session.
    SignedOut(SignedOut),
    /// The CSRF checks failed, or the body was not a form.
    Forbidden(Forbidden),
}

impl IntoResponse for WriteRefused {
    fn into_response(self) -> Response {
        match self {
            WriteRefused::SignedOut(s) => s.into_response(),
            WriteRefused::Forbidden(f) => f.into_response(),
        }
    }
}

impl FromRequest<Arc<Console>> for Write {
    type Rejection = WriteRefused;

    async fn from_request(req: Request, console: &Arc<Console>) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let person = Person::from_request_parts(&mut parts, console)
            .await
            .map_err(WriteRefused::SignedOut)?;
        let fields = checked_form(&parts.headers, body, &console.origin).await?;
        if !tokens_match(fields.get("csrf"), &person.session.csrf) {
            return Err(WriteRefused::Forbidden(Forbidden(
                "This form is out of date or did not come from the console (its CSRF token does not match). \
                 Reload the page and try again.",
            )));
        }
        Ok(Write { person, fields })
    }
}

/// A sign-in form posted before there is a session, held to the `__Host-slipway_pre` cookie.
pub struct PreSessionForm(pub Fields);

impl FromRequest<Arc<Console>> for PreSessionForm {
    type Rejection = WriteRefused;

    async fn from_request(req: Request, console: &Arc<Console>) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let fields = checked_form(&parts.headers, body, &console.origin).await?;
        let expected = read_cookie(&parts.headers, PRE_COOKIE).unwrap_or_default();
        if !tokens_match(fields.get("csrf"), &expected) {
            return Err(WriteRefused::Forbidden(Forbidden(
                "This sign-in form is out of date or did not come from the console. Reload the page and try again.",
            )));
        }
        Ok(PreSessionForm(fields))
    }
}

/// The form in `body`, after the origin checks.
async fn checked_form(
    headers: &HeaderMap,
    body: axum::body::Body,
    origin: &str,
) -> Result<Fields, WriteRefused> {
    if !same_origin(headers, origin) {
        return Err(WriteRefused::Forbidden(Forbidden(
            "A write must come from the console's own pages.",
        )));
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(WriteRefused::Forbidden(Forbidden(
            "A write must be a form the console's pages post.",
        )));
    }
    let bytes = axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|_| WriteRefused::Forbidden(Forbidden("The form is too large.")))?;
    Ok(Fields::parse(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_the_consoles_own_pages_may_write() {
        let origin = "https://console.example:8443";
        assert!(
            same_origin(&headers(&[]), origin),
            "an old browser sends neither"
        );
        assert!(same_origin(
            &headers(&[
                ("sec-fetch-site", "same-origin"),
                ("origin", "https://console.example:8443")
            ]),
            origin
        ));
        for refused in [
            &[("sec-fetch-site", "cross-site")][..],
            &[("sec-fetch-site", "same-site")][..],
            &[("origin", "https://evil.example")][..],
            &[("origin", "https://console.example")][..],
            &[("origin", "null")][..],
        ] {
            assert!(!same_origin(&headers(refused), origin), "{refused:?}");
        }
    }

    #[test]
    fn csrf_tokens_must_match_and_exist() {
        let t = random_value();
        assert_eq!(t.len(), 48);
        assert!(tokens_match(&t, &t));
        assert!(!tokens_match("", ""), "no token is no match");
        assert!(!tokens_match(&t[..47], &t));
        assert!(!tokens_match(&random_value(), &t));
    }

    #[test]
    fn cookies_are_host_only_secure_and_read_back() {
        let c = cookie(SESSION_COOKIE, "abc", 60);
        assert_eq!(
            c.to_str().unwrap(),
            "__Host-slipway_session=abc; Path=/; Secure; HttpOnly; SameSite=Lax; Max-Age=60"
        );
        let h = headers(&[("cookie", "a=1; __Host-slipway_session=xyz; b=2")]);
        assert_eq!(read_cookie(&h, SESSION_COOKIE).as_deref(), Some("xyz"));
        assert_eq!(read_cookie(&h, PRE_COOKIE), None);
    }

    #[test]
    fn form_fields_are_read_by_name() {
        let f = Fields::parse(b"csrf=abc&name=+my+app+&value=a%26b&empty=");
        assert_eq!(f.get("name"), "my app");
        assert_eq!(f.raw("name"), " my app ");
        assert_eq!(f.get("value"), "a&b");
        assert_eq!(f.opt("empty"), None);
        assert_eq!(f.get("missing"), "");
    }
}
