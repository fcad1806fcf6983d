//! `/apps`: the apps a person owns and those shared with them (with their role), each channel's hostname, status,
//! commit and deploy in flight; and a form that creates an app.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use super::{Done, notice, person_page_as, see};
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{Console, ConsoleRouter};
use slipway_rest::app_health::AppHealth;
use slipway_rest::apps::AppList;
use slipway_rest::plans::Usage;
use slipway_rest::views::{AppView, ChannelView};

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new().route("/apps", get(apps).post(create))
}

/// The warning the spec asks for when the account's databases are over the plan's soft cap; empty otherwise (or
/// when usage cannot be measured now).
pub async fn soft_cap_warning(person: &Person) -> Markup {
    let Ok(usage) = person.api.read::<Usage>("/me/usage").await else {
        return Markup::default();
    };
    let used = html::unsigned(usage.storage_bytes);
    let limit_mb = u64::from(usage.storage_limit_mb);
    if limit_mb > 0 && used > limit_mb * 1024 * 1024 {
        html::banner(
            "warning",
            &format!(
                "Your databases hold {} — over the {} plan's {limit_mb} MB. This is a soft cap: nothing is blocked, \
                 but consider cleaning up or moving to a larger plan.",
                html::bytes(used),
                usage.plan
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
    channel: &ChannelView,
    health: Option<&AppHealth>,
    apps_port: u16,
) -> Vec<Markup> {
    let health = health.and_then(|h| super::health_of(h, &channel.id));
    let channel_href = format!("/apps/{}/channels/{}", seg(app_id), seg(&channel.id));
    let pending = html! {
        @match &channel.pending_deploy {
            Some(p) => {
                a href={ (channel_href) "/deploys/" (seg(&p.deploy_id)) } {
                    (html::status(super::deploy_word(&p.stage, false)))
                }
                " " (html::sha(p.sha.as_deref()))
            }
            None => "—",
        }
    };
    vec![
        html! { a href=(channel_href) { (channel.name) } },
        html::app_link(&channel.hostname, apps_port),
        super::state_and_health(channel, health),
        html::sha(channel.current_sha.as_deref()),
        pending,
    ]
}

async fn apps(person: Person, Query(done): Query<Done>) -> Response {
    page(&person, &done, None).await
}

/// The page, answering `retry` when a write from it was refused.
async fn page(person: &Person, done: &Done, retry: Option<&Retry<'_>>) -> Response {
    let apps = match person.api.read::<AppList>("/apps").await {
        Ok(listing) => listing.apps,
        Err(f) => return person.refused(&f, "/apps"),
    };
    let form = Form::of(retry, "create-app");
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
        @for app in &apps {
            @let rows: Vec<Vec<Markup>> = app
                .channels
                .iter()
                .map(|c| channel_cells(&app.id, c, None, person.apps_port))
                .collect();
            section.card.app data-app=(app.name) {
                h2 {
                    a href={ "/apps/" (seg(&app.id)) } {
                        @if app.owner_username != person.session.username { (app.owner_username) "/" }
                        (app.name)
                    }
                    " "
                    small { (app.template) " · your role: " span.role { (app.role) } }
                }
                (html::live(
                    &format!("channels-{}", app.id),
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
        .write_as::<AppView>(axum::http::Method::POST, "/apps", &body)
        .await
    {
        Ok(app) => see(&format!("/apps/{}?done=created", seg(&app.id))),
        Err(f) => {
            retry::refused(&write, "create-app", &f, "/apps", async |retry| {
                page(&write.person, &Done::default(), Some(retry)).await
            })
            .await
        }
    }
}
