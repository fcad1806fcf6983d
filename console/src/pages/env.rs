//! `/apps/{id}/env`: an app's variables and secrets. Secret values are never shown in the list (the API answers
//! them as null); the owner may reveal one through the reveal route, which records the `env.reveal` audit event
//! before it answers, and the value is shown on that one page only.

use axum::extract::{Path, Query};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{Done, list, may, notice, person_page, person_page_as, see, text};
use crate::html::{self, esc, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{ConsoleRouter, dotenv};
use slipway_core::access::Action;
use slipway_rest::in_process::{Failure, with_query};

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
    let app = match person.api.get(&base).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let rows = match person.api.get(&here).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let channels = list(&app, "channels");
    let channel_name = |id: &str| {
        channels
            .iter()
            .find(|c| text(c, "id") == id)
            .map_or_else(|| id.to_owned(), |c| text(c, "name").to_owned())
    };
    let csrf = html::csrf_field(&person.session.csrf);
    let writes = may(&app, Action::Write);
    let reveals = super::role_of(&app) == Some(slipway_core::access::Role::Owner);
    let table_rows: Vec<Vec<String>> = list(&rows, "env")
        .iter()
        .map(|e| {
            let key = text(e, "key");
            let channel_id = e.get("channel_id").and_then(Value::as_str).unwrap_or_default();
            let scope = if channel_id.is_empty() {
                "app".to_owned()
            } else {
                format!("channel {}", esc(&channel_name(channel_id)))
            };
            let value = match e.get("value").and_then(Value::as_str) {
                Some(v) => format!("<code>{}</code>", esc(v)),
                None => r#"<span class="hint">hidden</span>"#.to_owned(),
            };
            let hidden_channel = format!(
                r#"<input type="hidden" name="channel_id" value="{}">"#,
                esc(channel_id)
            );
            let mut actions = String::new();
            if reveals && text(e, "kind") == "secret" {
                actions.push_str(&format!(
                    r#"<form method="post" class="inline" action="{here}/{}/reveal">{csrf}{hidden_channel}<button class="quiet" type="submit">Reveal</button></form> "#,
                    seg(key)
                ));
            }
            if writes {
                actions.push_str(
                    &html::Destructive {
                        action: &format!("{here}/{}/delete", seg(key)),
                        hidden: &format!("{csrf}{hidden_channel}"),
                        opener: "Delete",
                        consequence: &format!("{key} is removed; deploys from now on run without it."),
                        button: "Delete the variable",
                    }
                    .html(),
                );
            }
            vec![
                format!("<code>{}</code>", esc(key)),
                esc(text(e, "kind")),
                scope,
                value,
                actions,
            ]
        })
        .collect();
    let mut body = html::breadcrumbs(
        &[("Apps", "/apps"), (text(&app, "name"), &base)],
        "Environment",
    );
    body.push_str(&notice(done.done.as_deref(), NOTICES));
    body.push_str(&html::table(
        &["key", "kind", "scope", "value", ""],
        &table_rows,
        "No variables.",
    ));
    if writes {
        let form = Form::of(retry, "set-env");
        let scopes: Vec<(&str, String)> = std::iter::once(("", "app default".to_owned()))
            .chain(
                channels
                    .iter()
                    .map(|c| (text(c, "id"), format!("channel {}", text(c, "name")))),
            )
            .collect();
        let scopes: Vec<(&str, &str)> = scopes.iter().map(|(v, l)| (*v, l.as_str())).collect();
        // A secret's value is not sent back to the page (the module's doc says why).
        let value = match form.typed("kind") {
            Some("secret") => r#" placeholder="the secret's value, again""#.to_owned(),
            _ => form.value("value", ""),
        };
        body.push_str(&format!(
            r#"<section class="card"><h2>Set a variable</h2>{alert}<form method="post" action="{here}" id="set-env">{csrf}
<label>Key <input name="key"{key} required pattern="[A-Z_][A-Z0-9_]*"></label>
<label>Value <input name="value"{value}></label>
<label>Kind <select name="kind">{kinds}</select></label>
<label>Scope <select name="channel_id">{scopes}</select></label>
<button type="submit">Save</button></form></section>"#,
            alert = form.alert(),
            key = form.value("key", ""),
            kinds = form.options("kind", &[("env", "variable"), ("secret", "secret")]),
            scopes = form.options("channel_id", &scopes),
        ));
        body.push_str(&paste_form(
            &here,
            &csrf,
            Form::of(retry, PASTE_FORM),
            &scopes,
        ));
    }
    person_page_as(
        person,
        status(retry),
        &format!("{} · environment", text(&app, "name")),
        &body,
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
fn paste_form(here: &str, csrf: &str, form: Form<'_>, scopes: &[(&str, &str)]) -> String {
    let pasted = match form.typed("kind") {
        Some("secret") => String::new(),
        _ => esc(form.typed("dotenv").unwrap_or_default()),
    };
    format!(
        r#"<section class="card"><h2>Paste a <code>.env</code> file</h2>{alert}<form method="post" action="{here}/paste" id="{PASTE_FORM}">{csrf}
<p class="hint">One <code>KEY=value</code> per line; <code>#</code> comments, <code>export</code> and quoted values are read, and <code>$NAMES</code> are kept as typed. Every line is checked before any is saved.</p>
<label>File <textarea name="dotenv" rows="8" cols="60" required spellcheck="false">{pasted}</textarea></label>
<label>Kind <select name="kind">{kinds}</select></label>
<label>Scope <select name="channel_id">{scopes}</select></label>
<button type="submit">Save</button> <button type="submit" name="then" value="deploy" class="quiet">Save and deploy</button></form></section>"#,
        alert = form.alert(),
        kinds = form.options("kind", &[("env", "variables"), ("secret", "secrets")]),
        scopes = form.options("channel_id", scopes),
    )
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
    let app = match write.person.api.get(&base).await {
        Ok(app) => app,
        Err(f) => return write.person.refused(&f, &here),
    };
    let mut deployed = Vec::new();
    for c in list(&app, "channels") {
        let id = text(c, "id");
        let Some(sha) = c.get("current_sha").and_then(Value::as_str) else {
            continue;
        };
        if channel.as_deref().is_some_and(|chosen| chosen != id) {
            continue;
        }
        let path = format!("{base}/channels/{}/deploy", seg(id));
        match write
            .person
            .api
            .write(Method::POST, &path, &json!({"sha": sha}))
            .await
        {
            Ok(d) => deployed.push(format!(
                "{base}/channels/{}/deploys/{}",
                seg(id),
                seg(text(&d, "deploy_id"))
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
    match write.person.api.get(&path).await {
        Ok(revealed) => {
            let body = format!(
                r#"{}<p><code>{}</code> ({} scope):</p><p><code class="secret" id="revealed">{}</code> <button type="button" data-copy="revealed">Copy</button></p>
<p><a href="{here}">Back to the environment</a></p>"#,
                html::banner(
                    "warning",
                    "This reveal is recorded in the app's activity journal."
                ),
                esc(text(&revealed, "key")),
                esc(text(&revealed, "scope")),
                esc(text(&revealed, "value")),
            );
            person_page(&write.person, "Secret value", &body)
        }
        Err(f) => write.person.refused(&f, &here),
    }
}
