//! `/tokens` ({console_url}/tokens in the spec): the account's tokens with label, scopes, expiry and last use,
//! revocation, and minting a token with a label (`?label=ci` prefills it). A minted token's plaintext is shown
//! once, on the page that answers the mint, with a copy button; nothing keeps it.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;

use super::{notice, person_page, person_page_as, see};
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{Console, ConsoleRouter};
use slipway_rest::in_process::Failure;
use slipway_rest::tokens::TokenList;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/tokens", get(tokens).post(mint))
        .route("/tokens/{token_id}/revoke", post(revoke))
}

/// Lives a person may pick for a token, in seconds (`None`: it does not expire).
const LIVES: &[(&str, &str, Option<i64>)] = &[
    ("30d", "30 days", Some(30 * 86_400)),
    ("90d", "90 days", Some(90 * 86_400)),
    ("1y", "1 year", Some(365 * 86_400)),
    ("never", "never expires", None),
];

#[derive(Debug, Default, Deserialize)]
struct TokensQuery {
    label: Option<String>,
    done: Option<String>,
}

fn origin_name(origin: Option<&str>) -> &'static str {
    match origin {
        Some("console") => "console",
        Some("console_session") => "console sign-in",
        Some("registration") => "registration",
        Some("ssh_login") => "SSH login",
        _ => "API",
    }
}

async fn tokens(person: Person, Query(query): Query<TokensQuery>) -> Response {
    page(&person, &query, None).await
}

/// The page, answering `retry` when a mint from it was refused.
async fn page(person: &Person, query: &TokensQuery, retry: Option<&Retry<'_>>) -> Response {
    let listing: TokenList = match person.api.read("/tokens").await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, "/tokens"),
    };
    let csrf = html::csrf_field(&person.session.csrf);
    let rows: Vec<Vec<Markup>> = listing
        .tokens
        .iter()
        .map(|t| {
            let id = t.id.to_string();
            let this_session = t.id == person.session.token_id;
            let label = t.label.as_deref();
            let revoke = if this_session {
                html! { span.hint { "this browser's sign-in" } }
            } else {
                html::Destructive {
                    action: &format!("/tokens/{}/revoke", seg(&id)),
                    hidden: &csrf,
                    opener: "Revoke",
                    consequence: &match label {
                        Some(label) => format!("Anything that signs in with the token “{label}” is refused from now on."),
                        None => "Anything that signs in with this token is refused from now on.".to_owned(),
                    },
                    button: "Revoke the token",
                }
                .html()
            };
            vec![
                html! { span.token-label data-token=(id) { (label.unwrap_or("—")) } },
                html! { (origin_name(t.origin.as_deref())) },
                html! { small { (t.scopes.join(" ")) } },
                html::at(t.created_at),
                t.expires_at.map_or_else(|| html! { "never" }, html::at),
                t.last_used_at.map_or_else(|| html! { "never" }, html::at),
                revoke,
            ]
        })
        .collect();
    let form = Form::of(retry, "mint-token");
    let lives: Vec<(&str, &str)> = LIVES
        .iter()
        .map(|(value, label, _)| (*value, *label))
        .collect();
    let body = html! {
        (notice(
            query.done.as_deref(),
            &[("revoked", "The token is revoked; it stops working at once.")],
        ))
        section.card {
            h2 { "New token" }
            (form.alert())
            form #mint-token method="post" action="/tokens" {
                (csrf)
                label {
                    "Label "
                    input #token-label name="label" value=[form.value("label", query.label.as_deref().unwrap_or_default())]
                        maxlength=(slipway_rest::tokens::MAX_LABEL) required;
                }
                label { "Expires " select name="life" { (form.options("life", &lives)) } }
                button type="submit" { "Create token" }
            }
            p.hint { "A token carries the nine default scopes. It is shown once, right after you create it." }
        }
        h2 { "Your tokens" }
        (html::table(
            &["label", "made by", "scopes", "created", "expires", "last used", ""],
            &rows,
            "No tokens.",
        ))
    };
    person_page_as(person, status(retry), "Tokens", body)
}

/// The tokens page again with `failure`, the refusal of a mint, and the form as it was sent.
async fn refused_mint(write: &Write, failure: &Failure) -> Response {
    retry::refused(write, "mint-token", failure, "/tokens", async |retry| {
        page(&write.person, &TokensQuery::default(), Some(retry)).await
    })
    .await
}

async fn mint(State(console): State<Arc<Console>>, write: Write) -> Response {
    // The session must still be live (the same check as every route's) before it vouches for a new token.
    let caller =
        match slipway_core::caller::authenticate(&console.state, &write.person.session.token).await
        {
            Ok(caller) => caller,
            Err(e) => return write.person.refused(&Failure::of_error(&e), "/tokens"),
        };
    let Some((_, _, life)) = LIVES
        .iter()
        .find(|(value, _, _)| *value == write.fields.get("life"))
    else {
        return refused_mint(
            &write,
            &Failure::bad_request("pick how long the token lives"),
        )
        .await;
    };
    let minted = match slipway_rest::tokens::mint_for_person(
        &console.state,
        caller.user_id,
        write.fields.opt("label"),
        *life,
    )
    .await
    {
        Ok(minted) => minted,
        Err(e) => return refused_mint(&write, &Failure::of_error(&e)).await,
    };
    let body = html! {
        (html::banner(
            "warning",
            "Copy it now: this is the only time it is shown. Use it as `Authorization: Bearer <token>`, or as the git password."
        ))
        p {
            "Token " b { (minted.label.as_deref().unwrap_or("—")) } ", "
            @match minted.expires_at {
                Some(at) => { "expires " (at.to_rfc3339()) }
                None => "never expires",
            }
            ":"
        }
        p {
            code.secret #new-token { (minted.token) } " "
            button #copy-token type="button" data-copy="new-token" { "Copy" }
        }
        p { a href="/tokens" { "Back to your tokens" } }
    };
    person_page(&write.person, "Your new token", body)
}

async fn revoke(Path(token_id): Path<String>, write: Write) -> Response {
    match write
        .person
        .api
        .delete(&format!("/tokens/{}", seg(&token_id)))
        .await
    {
        Ok(_) => see("/tokens?done=revoked"),
        Err(f) => write.person.refused(&f, "/tokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_life_is_one_the_api_takes() {
        for (_, _, life) in LIVES {
            if let Some(seconds) = life {
                assert!((1..=slipway_rest::tokens::MAX_TOKEN_SECONDS).contains(seconds));
            }
        }
    }
}
