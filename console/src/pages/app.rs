//! `/apps/{id}`: one app: its channels, members (shared with whom, in which role), raw TCP forwards, settings,
//! and for its owner the transfer to another account.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::json;

use super::apps::{channel_cells, soft_cap_warning};
use super::lifecycle;
use super::{Done, may, notice, person_page_as, see};
use crate::html::{self, Markup, html, seg};
use crate::retry::{self, Form, Retry, status};
use crate::session::{Person, Write};
use crate::{Console, ConsoleRouter, error_page};
use slipway_core::access::Action;
use slipway_core::sharing::MemberList;
use slipway_git::mirror::service::MirrorStatus;
use slipway_rest::app_health::AppHealth;
use slipway_rest::forwards::ForwardList;
use slipway_rest::in_process::Failure;
use slipway_rest::views::AppView;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route("/apps/{app_id}", get(app))
        .route("/apps/{app_id}/members", post(add_member))
        .route(
            "/apps/{app_id}/members/{username}/remove",
            post(remove_member),
        )
        .route("/apps/{app_id}/transfer", post(transfer))
}

const NOTICES: &[(&str, &str)] = &[
    (
        "created",
        "The app is created, with its prod channel and an empty repository.",
    ),
    ("member-saved", "The member is saved."),
    ("member-removed", "The member is removed."),
    ("setting-saved", "The setting is saved."),
    (
        "channel-deleted",
        "The channel is deleted, with its database and bucket; its custom domains are free.",
    ),
];

async fn app(person: Person, Path(app_id): Path<String>, Query(done): Query<Done>) -> Response {
    page(&person, &app_id, &done, None).await
}

/// The page, answering `retry` when a write from it was refused.
pub(super) async fn page(
    person: &Person,
    app_id: &str,
    done: &Done,
    retry: Option<&Retry<'_>>,
) -> Response {
    let here = format!("/apps/{}", seg(app_id));
    let app: AppView = match person.api.read(&here).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let members = person
        .api
        .read::<MemberList>(&format!("{here}/members"))
        .await
        .map(|l| l.members)
        .unwrap_or_default();
    let forwards = person
        .api
        .read::<ForwardList>(&format!("{here}/forwards"))
        .await
        .map(|l| l.forwards)
        .unwrap_or_default();
    let csrf = html::csrf_field(&person.session.csrf);
    // Health is a word beside each channel's state; a page that cannot read it shows the state alone.
    let health: Option<AppHealth> = person.api.read(&format!("{here}/health")).await.ok();
    let rows: Vec<Vec<Markup>> = app
        .channels
        .iter()
        .map(|c| channel_cells(app_id, c, health.as_ref(), person.apps_port))
        .collect();
    let manages_members = may(&app, Action::ManageMembers);
    let member_rows: Vec<Vec<Markup>> = members
        .iter()
        .map(|m| {
            let name = &m.username;
            let remove = if manages_members && m.role != "owner" {
                html::Destructive {
                    action: &format!("{here}/members/{}/remove", seg(name)),
                    hidden: &csrf,
                    opener: "Remove",
                    consequence: &format!("{name} loses access to this app at once."),
                    button: "Remove the member",
                }
                .html()
            } else {
                Markup::default()
            };
            vec![html! { (name) }, html! { (m.role) }, remove]
        })
        .collect();
    let forward_rows: Vec<Vec<Markup>> = forwards
        .iter()
        .map(|f| {
            vec![
                html! { (f.channel) },
                html! { (f.host) ":" (f.port) },
                html! {
                    @if f.allow_cidrs.is_empty() { "anywhere" } @else { (f.allow_cidrs.join(", ")) }
                },
                html! { @if f.active { "active" } @else { "inactive" } },
            ]
        })
        .collect();
    let member_form = Form::of(retry, "add-member");
    let transfer_form = Form::of(retry, "transfer");
    let body = html! {
        (html::breadcrumbs(&[("Apps", "/apps")], &app.name))
        (notice(done.done.as_deref(), NOTICES))
        (soft_cap_warning(person).await)
        p {
            "Template " b { (app.template) }
            " · owner " b { (app.owner_username) }
            " · your role " b.role { (app.role) }
            " · " a href={ (here) "/env" } { "Environment" }
            " · " a href={ (here) "/activity" } { "Activity" }
        }
        p.hint { "Clone: " code { (app.repo_url) } }
        (first_push(person, &app, app_id).await)
        h2 { "Channels" }
        (html::live(
            "channels",
            html::table(
                &["channel", "hostname", "status", "commit", "deploy in flight"],
                &rows,
                "No channels.",
            ),
        ))
        (lifecycle::new_channel(&app, &here, &csrf, Form::of(retry, "create-channel")))
        (lifecycle::settings(&app, &here, &csrf, Form::of(retry, "settings")))
        h2 { "Members" }
        (html::table(&["username", "role", ""], &member_rows, "No members."))
        @if manages_members {
            (member_form.alert())
            form #add-member method="post" action={ (here) "/members" } {
                (csrf)
                label { "Username " input name="username" value=[member_form.value("username", "")] required; }
                label {
                    "Role "
                    select name="role" { (member_form.options("role", &[("member", "member"), ("admin", "admin")])) }
                }
                button type="submit" { "Share" }
            }
        }
        h2 { "Raw TCP forwards" }
        (html::table(
            &["channel", "address", "allowed from", "state"],
            &forward_rows,
            "No channel is exposed.",
        ))
        @if may(&app, Action::TransferApp) {
            section.card {
                h2 { "Transfer ownership" }
                p {
                    "Moves the app, its channels, repository, environment, databases, buckets and snapshots to \
                     another account. Its hostnames change to the new owner's ("
                    code { "<app>-<owner>" }
                    "), each channel is deployed again there at the commit it serves now (the deploy history \
                     starts anew), its databases and buckets get new credentials, and neither you nor its members \
                     keep a role on it. Custom domains and raw TCP forwards must be removed first."
                }
                (transfer_form.alert())
                form #transfer method="post" action={ (here) "/transfer" } {
                    (csrf)
                    label { "New owner's username " input name="to" value=[transfer_form.value("to", "")] required; }
                    label {
                        "Type the app's name to confirm "
                        input name="confirm" value=[transfer_form.value("confirm", "")] required autocomplete="off";
                    }
                    button.danger type="submit" { "Transfer" }
                }
            }
        }
        (lifecycle::delete(&app, &here, &csrf, Form::of(retry, "delete-app")))
    };
    person_page_as(person, status(retry), &app.name, body)
}

/// The app's page again with `failure`, the refusal of what its form `form` sent.
pub(super) async fn refused(
    form: &'static str,
    app_id: &str,
    write: &Write,
    failure: &Failure,
) -> Response {
    let back = format!("/apps/{}", seg(app_id));
    retry::refused(write, form, failure, &back, async |retry| {
        page(&write.person, app_id, &Done::default(), Some(retry)).await
    })
    .await
}

async fn add_member(Path(app_id): Path<String>, write: Write) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    let path = format!("{here}/members/{}", seg(write.fields.get("username")));
    match write
        .person
        .api
        .write(
            Method::PUT,
            &path,
            &json!({"role": write.fields.get("role")}),
        )
        .await
    {
        Ok(_) => see(&format!("{here}?done=member-saved")),
        Err(f) => refused("add-member", &app_id, &write, &f).await,
    }
}

async fn remove_member(Path((app_id, username)): Path<(String, String)>, write: Write) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    match write
        .person
        .api
        .delete(&format!("{here}/members/{}", seg(&username)))
        .await
    {
        Ok(_) => see(&format!("{here}?done=member-removed")),
        Err(f) => write.person.refused(&f, &here),
    }
}

/// What to do next on an app that has never been deployed, for someone who may push: the two git commands that
/// store code (a push deploys nothing: the channel's Deploy button does), with a copy button and where the password
/// comes from. An app whose code comes from a connected external repository takes no push, so it gets none.
async fn first_push(person: &Person, app: &AppView, app_id: &str) -> Markup {
    let deployed = app.channels.iter().any(|c| c.current_sha.is_some());
    if deployed || !may(app, Action::Write) {
        return Markup::default();
    }
    let mirrored = person
        .api
        .read::<MirrorStatus>(&format!("/apps/{}/github", seg(app_id)))
        .await
        .is_ok_and(|m| m.connected);
    if mirrored {
        return Markup::default();
    }
    let prod = app.channels.first();
    let branch = prod.map_or("master", super::bound_branch);
    let channel = prod.map(|c| c.id.as_str()).unwrap_or_default();
    html! {
        section.card #first-push {
            h2 { "Push your code" }
            p { "From your project's directory:" }
            pre.commands {
                code #push-commands {
                    "git remote add slipway " (app.repo_url) "\ngit push slipway HEAD:" (branch)
                }
            }
            p { button type="button" data-copy="push-commands" { "Copy" } }
            p.hint {
                "Git asks for a password: give it a token from " a href="/tokens?label=git" { "Tokens" }
                " (any username will do). A push stores the code; "
                a href={ "/apps/" (seg(app_id)) "/channels/" (seg(channel)) } { "the channel's page" }
                " deploys it."
            }
        }
    }
}

async fn transfer(
    State(console): State<Arc<Console>>,
    Path(app_id): Path<String>,
    write: Write,
) -> Response {
    let here = format!("/apps/{}", seg(&app_id));
    let Ok(app_id) = app_id.parse::<uuid::Uuid>() else {
        return error_page(StatusCode::NOT_FOUND, "There is no such page.");
    };
    // The same check as every route's: the session's token, live, with its budget.
    let caller =
        match slipway_core::caller::authenticate(&console.state, &write.person.session.token).await
        {
            Ok(caller) => caller,
            Err(e) => return write.person.refused(&Failure::of_error(&e), &here),
        };
    let request = slipway_core::transfer::Request {
        app_id,
        to: write.fields.get("to").to_owned(),
        confirm_name: write.fields.raw("confirm").to_owned(),
    };
    match slipway_core::transfer::transfer(&console.state, &caller, request).await {
        Ok(_) => see("/apps?done=transferred"),
        Err(e) => {
            refused(
                "transfer",
                &app_id.to_string(),
                &write,
                &Failure::of_error(&e),
            )
            .await
        }
    }
}
