//! `/apps/{id}/env`: an app's variables and secrets. Secret values are never shown in the list (the API answers
//! them as null); the owner may reveal one through the reveal route, which records the `env.reveal` audit event
//! before it answers, and the value is shown on that one page only.

use axum::extract::{Path, Query};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::json;

use super::{Done, may, notice, person_page, person_page_as, see};
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{ConsoleRouter, dotenv};
use slipway_core::access::Action;
use slipway_rest::deploys::DeployTriggered;
use slipway_rest::env::{EnvList, Revealed};
use slipway_rest::in_process::{Failure, with_query};
use slipway_rest::views::AppView;
use slipway_store::env::Kind;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/apps/{app_id}/env", get(env).post(set))
        .route("/apps/{app_id}/env/paste", post(paste))
        .route("/apps/{app_id}/env/{key}/delete", post(delete))
        .route("/apps/{app_id}/env/{key}/reveal", post(reveal))
}

const NOTICES: &[(&str, &str)] = &[
    ("saved", "Saved. It takes effect at the next deploy."),
    ("deleted", "Deleted. It takes effect at the next deploy."),
    (
        "pasted",
        "Saved every variable of the file. They take effect at the next deploy.",
    ),
    (
        "pasted-deployed",
        "Saved every variable of the file, and deployed the channels they apply to again.",
    ),
    (
        "pasted-none-deployed",
        "Saved every variable of the file. No channel they apply to serves a commit yet, so none was deployed: \
         they take effect at its first deploy.",
    ),
];

/// The id of the form that takes a pasted `.env` file.
const PASTE_FORM: &str = "paste-env";

async fn env(person: Person, Path(app_id): Path<String>, Query(done): Query<Done>) -> Response {
    page(&person, &app_id, &done, None).await
}

/// The page, answering `retry` when a write from it was refused.
async fn page(person: &Person, app_id: &str, done: &Done, retry: Option<&Retry<'_>>) -> Response {
    let base = format!("/apps/{}", seg(app_id));
    let here = format!("{base}/env");
    let app: AppView = match person.api.read(&base).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let rows: EnvList = match person.api.read(&here).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let channels = &app.channels;
    let channel_name = |id: &str| {
        channels
            .iter()
            .find(|c| c.id == id)
            .map_or_else(|| id.to_owned(), |c| c.name.clone())
    };
    let csrf = html::csrf_field(&person.session.csrf);
    let writes = may(&app, Action::Write);
    let reveals = super::role_of(&app) == Some(slipway_core::access::Role::Owner);
    let table_rows: Vec<Vec<Markup>> = rows
        .env
        .iter()
        .map(|e| {
            let key = &e.key;
            let channel_id = e.channel_id.map(|id| id.to_string()).unwrap_or_default();
            let hidden = html! {
                (csrf)
                input type="hidden" name="channel_id" value=(channel_id);
            };
            vec![
                html! { code { (key) } },
                html! { (e.kind.as_str()) },
                html! {
                    @if channel_id.is_empty() { "app" } @else { "channel " (channel_name(&channel_id)) }
                },
                html! {
                    @match &e.value {
                        Some(v) => code { (v) },
                        None => span.hint { "hidden" },
                    }
                },
                html! {
                    @if reveals && e.kind == Kind::Secret {
                        form.inline method="post" action={ (here) "/" (seg(key)) "/reveal" } {
                            (hidden)
                            button.quiet type="submit" { "Reveal" }
                        }
                        " "
                    }
                    @if writes {
                        (html::Destructive {
                            action: &format!("{here}/{}/delete", seg(key)),
                            hidden: &hidden,
                            opener: "Delete",
                            consequence: &format!("{key} is removed; deploys from now on run without it."),
                            button: "Delete the variable",
                        }
                        .html())
                    }
                },
            ]
        })
        .collect();
    let scopes: Vec<(&str, String)> = std::iter::once(("", "app default".to_owned()))
        .chain(
            channels
                .iter()
                .map(|c| (c.id.as_str(), format!("channel {}", c.name))),
        )
        .collect();
    let scopes: Vec<(&str, &str)> = scopes.iter().map(|(v, l)| (*v, l.as_str())).collect();
    let form = Form::of(retry, "set-env");
    // A secret's value is not sent back to the page (the module's doc says why).
    let secret = form.typed("kind") == Some("secret");
    let body = html! {
        (html::breadcrumbs(&[("Apps", "/apps"), (&app.name, &base)], "Environment"))
        (notice(done.done.as_deref(), NOTICES))
        (html::table(&["key", "kind", "scope", "value", ""], &table_rows, "No variables."))
        @if writes {
            section.card {
                h2 { "Set a variable" }
                (form.alert())
                form #set-env method="post" action=(here) {
                    (csrf)
                    label { "Key " input name="key" value=[form.value("key", "")] required pattern="[A-Z_][A-Z0-9_]*"; }
                    label {
                        "Value "
                        input name="value" value=[(!secret).then(|| form.value("value", "")).flatten()]
                            placeholder=[secret.then_some("the secret's value, again")];
                    }
                    label { "Kind " select name="kind" { (form.options("kind", &[("env", "variable"), ("secret", "secret")])) } }
                    label { "Scope " select name="channel_id" { (form.options("channel_id", &scopes)) } }
                    button type="submit" { "Save" }
                }
            }
            (paste_form(&here, &csrf, Form::of(retry, PASTE_FORM), &scopes))
        }
    };
    person_page_as(
        person,
        status(retry),
        &format!("{} · environment", app.name),
        body,
    )
}

async fn set(Path(app_id): Path<String>, write: Write) -> Response {
    let here = format!("/apps/{}/env", seg(&app_id));
    let mut body = json!({
        "key": write.fields.get("key"),
        "value": write.fields.raw("value"),
        "kind": write.fields.get("kind"),
    });
    if let Some(channel) = write.fields.opt("channel_id") {
        body["channel_id"] = json!(channel);
    }
    match write.person.api.write(Method::POST, &here, &body).await {
        Ok(_) => see(&format!("{here}?done=saved")),
        Err(f) => {
            retry::refused(&write, "set-env", &f, &here, async |retry| {
                page(&write.person, &app_id, &Done::default(), Some(retry)).await
            })
            .await
        }
    }
}

/// The form that takes a whole `.env` file, to save, or to save and deploy what it applies to. Refused, it comes
/// back with the file as typed, unless it held secrets (the module's doc says why).
fn paste_form(here: &str, csrf: &Markup, form: Form<'_>, scopes: &[(&str, &str)]) -> Markup {
    let pasted = match form.typed("kind") {
        Some("secret") => "",
        _ => form.typed("dotenv").unwrap_or_default(),
    };
    html! {
        section.card {
            h2 { "Paste a " code { ".env" } " file" }
            (form.alert())
            form method="post" action={ (here) "/paste" } id=(PASTE_FORM) {
                (csrf)
                p.hint {
                    "One " code { "KEY=value" } " per line; " code { "#" } " comments, " code { "export" }
                    " and quoted values are read, and " code { "$NAMES" }
                    " are kept as typed. Every line is checked before any is saved."
                }
                label {
                    "File "
                    textarea name="dotenv" rows="8" cols="60" required spellcheck="false" { (pasted) }
                }
                label { "Kind " select name="kind" { (form.options("kind", &[("env", "variables"), ("secret", "secrets")])) } }
                label { "Scope " select name="channel_id" { (form.options("channel_id", scopes)) } }
                button type="submit" { "Save" } " "
                button.quiet type="submit" name="then" value="deploy" { "Save and deploy" }
            }
        }
    }
}

/// Saves every variable of a pasted `.env` file, checked whole first; then, for "Save and deploy", deploys again
/// each channel they apply to that serves a commit (the scope's channel, or every channel for app defaults), at
/// the commit it serves. The API saves one variable per call: should one call be refused after the file was
/// checked (the database unavailable), the page says which variables were saved before it.
async fn paste(Path(app_id): Path<String>, write: Write) -> Response {
    let base = format!("/apps/{}", seg(&app_id));
    let here = format!("{base}/env");
    let entries = match dotenv::parse(write.fields.raw("dotenv")) {
        Ok(entries) => entries,
        Err(message) => {
            let failure = Failure::new(StatusCode::BAD_REQUEST, "bad_request", message);
            return refused_paste(&write, &app_id, &failure).await;
        }
    };
    let channel = write.fields.opt("channel_id");
    for (saved, entry) in entries.iter().enumerate() {
        let mut body = json!({
            "key": entry.key,
            "value": entry.value,
            "kind": write.fields.get("kind"),
        });
        if let Some(channel) = &channel {
            body["channel_id"] = json!(channel);
        }
        match write.person.api.write(Method::POST, &here, &body).await {
            Ok(_) => {}
            Err(f) => {
                let keys: Vec<&str> = entries[..saved].iter().map(|e| e.key.as_str()).collect();
                let message = if keys.is_empty() {
                    format!("Nothing was saved: {}", f.message)
                } else {
                    format!(
                        "Saved {}; {} and the rest were not: {}",
                        keys.join(", "),
                        entry.key,
                        f.message
                    )
                };
                let status = StatusCode::from_u16(f.status).unwrap_or(StatusCode::BAD_GATEWAY);
                return refused_paste(&write, &app_id, &Failure::new(status, &f.code, message))
                    .await;
            }
        }
    }
    if write.fields.opt("then").as_deref() != Some("deploy") {
        return see(&format!("{here}?done=pasted"));
    }
    let app: AppView = match write.person.api.read(&base).await {
        Ok(app) => app,
        Err(f) => return write.person.refused(&f, &here),
    };
    let mut deployed = Vec::new();
    for c in &app.channels {
        let id = c.id.as_str();
        let Some(sha) = &c.current_sha else {
            continue;
        };
        if channel.as_deref().is_some_and(|chosen| chosen != id) {
            continue;
        }
        let path = format!("{base}/channels/{}/deploy", seg(id));
        match write
            .person
            .api
            .write_as::<DeployTriggered>(Method::POST, &path, &json!({"sha": sha}))
            .await
        {
            Ok(d) => deployed.push(format!(
                "{base}/channels/{}/deploys/{}",
                seg(id),
                seg(&d.deploy_id)
            )),
            Err(f) => {
                return write
                    .person
                    .refused(&f, &format!("{base}/channels/{}", seg(id)));
            }
        }
    }
    match deployed.as_slice() {
        [] => see(&format!("{here}?done=pasted-none-deployed")),
        // One deploy: its page, where its log follows.
        [only] => see(only),
        _ => see(&format!("{here}?done=pasted-deployed")),
    }
}

/// The env page again with `failure`, the refusal of a pasted file (or the sign-in page, for a session that
/// stopped working).
async fn refused_paste(write: &Write, app_id: &str, failure: &Failure) -> Response {
    let back = format!("/apps/{}/env", seg(app_id));
    retry::refused(write, PASTE_FORM, failure, &back, async |retry| {
        page(&write.person, app_id, &Done::default(), Some(retry)).await
    })
    .await
}

async fn delete(Path((app_id, key)): Path<(String, String)>, write: Write) -> Response {
    let here = format!("/apps/{}/env", seg(&app_id));
    let path = with_query(
        &format!("{here}/{}", seg(&key)),
        &[("channel_id", write.fields.opt("channel_id"))],
    );
    match write.person.api.delete(&path).await {
        Ok(_) => see(&format!("{here}?done=deleted")),
        Err(f) => write.person.refused(&f, &here),
    }
}

async fn reveal(Path((app_id, key)): Path<(String, String)>, write: Write) -> Response {
    let here = format!("/apps/{}/env", seg(&app_id));
    let path = with_query(
        &format!("{here}/{}/value", seg(&key)),
        &[("channel_id", write.fields.opt("channel_id"))],
    );
    match write.person.api.read::<Revealed>(&path).await {
        Ok(revealed) => {
            let body = html! {
                (html::banner("warning", "This reveal is recorded in the app's activity journal."))
                p { code { (revealed.key) } " (" (revealed.scope.as_str()) " scope):" }
                p {
                    code.secret #revealed { (revealed.value) } " "
                    button type="button" data-copy="revealed" { "Copy" }
                }
                p { a href=(here) { "Back to the environment" } }
            };
            person_page(&write.person, "Secret value", body)
        }
        Err(f) => write.person.refused(&f, &here),
    }
}
