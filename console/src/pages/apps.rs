//! `/apps`: the apps a person owns and those shared with them (with their role), each channel's hostname, status,
//! commit and deploy in flight; and a form that creates an app.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};

use super::{Done, list, notice, person_page_as, see, text};
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{Console, ConsoleRouter};

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new().route("/apps", get(apps).post(create))
}

/// The warning the spec asks for when the account's databases are over the plan's soft cap; empty otherwise (or
/// when usage cannot be measured now).
pub async fn soft_cap_warning(person: &Person) -> Markup {
    let Ok(usage) = person.api.get("/me/usage").await else {
        return Markup::default();
    };
    let used = usage["storage_bytes"].as_u64().unwrap_or(0);
    let limit_mb = usage["storage_limit_mb"].as_u64().unwrap_or(0);
    if limit_mb > 0 && used > limit_mb * 1024 * 1024 {
        html::banner(
            "warning",
            &format!(
                "Your databases hold {} — over the {} plan's {limit_mb} MB. This is a soft cap: nothing is blocked, \
                 but consider cleaning up or moving to a larger plan.",
                html::bytes(used),
                text(&usage, "plan")
            ),
        )
    } else {
        Markup::default()
    }
}

/// A channel's one-line summary: name (a link to its page), hostname (a link to the app on `apps_port`), status
/// (with its health badge where the page read the app's `health`), commit, deploy in flight.
pub fn channel_cells(
    app_id: &str,
    channel: &Value,
    health: Option<&Value>,
    apps_port: u16,
) -> Vec<Markup> {
    let health = health.and_then(|h| super::health_of(h, text(channel, "id")));
    let channel_href = format!(
        "/apps/{}/channels/{}",
        seg(app_id),
        seg(text(channel, "id"))
    );
    let pending = html! {
        @match channel.get("pending_deploy").filter(|p| !p.is_null()) {
            Some(p) => {
                a href={ (channel_href) "/deploys/" (seg(text(p, "deploy_id"))) } {
                    (html::status(super::deploy_word(p, false)))
                }
                " " (html::sha(p.get("sha").and_then(Value::as_str)))
            }
            None => "—",
        }
    };
    vec![
        html! { a href=(channel_href) { (text(channel, "name")) } },
        html::app_link(text(channel, "hostname"), apps_port),
        super::state_and_health(channel, health),
        html::sha(channel.get("current_sha").and_then(Value::as_str)),
        pending,
    ]
}

async fn apps(person: Person, Query(done): Query<Done>) -> Response {
    page(&person, &done, None).await
}

/// The page, answering `retry` when a write from it was refused.
async fn page(person: &Person, done: &Done, retry: Option<&Retry<'_>>) -> Response {
    let listing = match person.api.get("/apps").await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, "/apps"),
    };
    let form = Form::of(retry, "create-app");
    let apps = list(&listing, "apps");
    let body = html! {
        (notice(
            done.done.as_deref(),
            &[
                ("deleted", "The app was deleted."),
                (
                    "transferred",
                    "The app was moved to its new owner, and is deployed again under their account.",
                ),
            ],
        ))
        (soft_cap_warning(person).await)
        @if apps.is_empty() { p.empty { "No apps yet." } }
        @for app in apps {
            @let id = text(app, "id");
            @let owner = text(app, "owner_username");
            @let rows: Vec<Vec<Markup>> = list(app, "channels")
                .iter()
                .map(|c| channel_cells(id, c, None, person.apps_port))
                .collect();
            section.card.app data-app=(text(app, "name")) {
                h2 {
                    a href={ "/apps/" (seg(id)) } {
                        @if owner != person.session.username { (owner) "/" }
                        (text(app, "name"))
                    }
                    " "
                    small { (text(app, "template")) " · your role: " span.role { (text(app, "role")) } }
                }
                (html::live(
                    &format!("channels-{id}"),
                    html::table(
                        &["channel", "hostname", "status", "commit", "deploy in flight"],
                        &rows,
                        "No channels.",
                    ),
                ))
            }
        }
        section.card {
            h2 { "New app" }
            (form.alert())
            form #create-app method="post" action="/apps" {
                (html::csrf_field(&person.session.csrf))
                label {
                    "Name "
                    input name="name" value=[form.value("name", "")] required
                        pattern="[a-z0-9]([a-z0-9-]*[a-z0-9])?" maxlength="40";
                }
                label {
                    "Template "
                    select name="template" {
                        (form.options("template", &[("static", "static"), ("app", "app"), ("docker", "docker")]))
                    }
                }
                button type="submit" { "Create" }
            }
        }
    };
    person_page_as(person, status(retry), "Apps", body)
}

async fn create(State(_): State<Arc<Console>>, write: Write) -> Response {
    let body = json!({"name": write.fields.get("name"), "template": write.fields.get("template")});
    match write
        .person
        .api
        .write(axum::http::Method::POST, "/apps", &body)
        .await
    {
        Ok(app) => see(&format!("/apps/{}?done=created", seg(text(&app, "id")))),
        Err(f) => {
            retry::refused(&write, "create-app", &f, "/apps", async |retry| {
                page(&write.person, &Done::default(), Some(retry)).await
            })
            .await
        }
    }
}
