//! The console's pages. Each reads what it shows from the REST API with the person's token and posts its writes
//! to the same routes an HTTP client would; a refusal is shown with the route's own words, on the form's own page
//! with what was typed where the form has fields ([`crate::retry`]). Which forms a page offers follows the role
//! table of [`slipway_core::access::Action`], so a member sees read-only what only admins or the owner may change
//! (and the API refuses it anyway).

pub mod account;
pub mod activity;
pub mod app;
pub mod apps;
pub mod channel;
pub mod deploy;
pub mod downloads;
pub mod env;
#[cfg(test)]
mod fixtures;
pub mod lifecycle;
pub mod restores;
pub mod runtime_log;
pub mod ssh_keys;
pub mod tokens;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::html::{Markup, html};
use super::session::Person;
use super::{ConsoleRouter, html_page};
use slipway_core::access::{Action, Role};
use slipway_rest::app_health::{AppHealth, ChannelHealth};
use slipway_rest::deploys::DeployHistory;
use slipway_rest::views::{AppView, ChannelView};

/// Every page but signing in and out.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .merge(apps::routes())
        .merge(app::routes())
        .merge(lifecycle::routes())
        .merge(activity::routes())
        .merge(downloads::routes())
        .merge(restores::routes())
        .merge(env::routes())
        .merge(channel::routes())
        .merge(runtime_log::routes())
        .merge(deploy::routes())
        .merge(tokens::routes())
        .merge(account::routes())
}

/// The branch a channel deploys from (`git_ref_binding` `branch:<name>`); `master`, the default branch of the
/// repositories the platform makes, when it is bound otherwise.
pub fn bound_branch(channel: &ChannelView) -> &str {
    channel
        .git_ref_binding
        .strip_prefix("branch:")
        .unwrap_or("master")
}

/// The caller's role on an app as the API states it.
pub fn role_of(app: &AppView) -> Option<Role> {
    match app.role.as_str() {
        "owner" => Some(Role::Owner),
        "admin" => Some(Role::Admin),
        "member" => Some(Role::Member),
        _ => None,
    }
}

/// Whether the caller's role on `app` permits `action` (the one role table).
pub fn may(app: &AppView, action: Action) -> bool {
    role_of(app).is_some_and(|role| action.permitted_to(role))
}

/// A page for `person`.
pub fn person_page(person: &Person, title: &str, body: Markup) -> Response {
    person_page_as(person, StatusCode::OK, title, body)
}

/// A page for `person` answered with `status` (a form's refusal brought back to its page).
pub fn person_page_as(person: &Person, status: StatusCode, title: &str, body: Markup) -> Response {
    html_page(status, title, Some(&person.header()), body)
}

/// After a write: back to `to` (303, so a reload does not post again).
pub fn see(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// A notice named by a page's `done` query parameter: only the texts the page lists, never text from the URL.
pub fn notice(done: Option<&str>, known: &[(&str, &str)]) -> Markup {
    banner_named(done, known, "ok")
}

/// A warning named by a page's `done` query parameter (a write that went through but did not get what it asked
/// for), from the page's own list as [`notice`].
pub fn warning(done: Option<&str>, known: &[(&str, &str)]) -> Markup {
    banner_named(done, known, "warning")
}

fn banner_named(done: Option<&str>, known: &[(&str, &str)], kind: &str) -> Markup {
    done.and_then(|d| known.iter().find(|(k, _)| *k == d))
        .map(|(_, text)| super::html::banner(kind, text))
        .unwrap_or_default()
}

/// A channel's state in the words people use, styled by meaning: `live` (it serves a deploy), `crashed` (it
/// should serve one, and its container exited or waits to start again), `starting` (its first deploy is in
/// flight), `not deployed` (nothing ever went live and nothing is in flight) or `failed` (its database or bucket
/// could not be made). The API's `provisioning` covers both of the middle two. `health` is the channel's entry in
/// the app's health, where the page read it.
pub fn channel_state(channel: &ChannelView, health: Option<&ChannelHealth>) -> Markup {
    let word = match channel.status.as_str() {
        "running" if health.is_some_and(crashed) => "crashed",
        "running" => "live",
        "failed" => "failed",
        _ if channel.pending_deploy.is_some() => "starting",
        _ => "not deployed",
    };
    super::html::status(word)
}

/// A channel's state, followed for a channel that should serve (the API's `running`) by its health badge.
pub fn state_and_health(channel: &ChannelView, health: Option<&ChannelHealth>) -> Markup {
    let badge = health.filter(|_| channel.status == "running");
    html! {
        (channel_state(channel, health))
        @if let Some(health) = badge { " " (health_badge(health)) }
    }
}

/// Whether a channel's health entry shows its container down: exited, or waiting to start again.
fn crashed(health: &ChannelHealth) -> bool {
    health
        .container
        .as_ref()
        .is_some_and(|c| matches!(c.status.as_str(), "exited" | "waiting"))
}

/// The entry of channel `channel_id` in an app's health (`GET /apps/{id}/health`).
pub fn health_of<'a>(health: &'a AppHealth, channel_id: &str) -> Option<&'a ChannelHealth> {
    health.channels.iter().find(|c| c.channel_id == channel_id)
}

/// A channel's health in a few words, with the API's notes as its title: `out of memory` (its container was
/// killed for passing the memory limit), `restarted N×`, `healthy`, or `needs a look` (see the notes).
fn health_badge(health: &ChannelHealth) -> Markup {
    let container = health.container.as_ref();
    let restarts = container.map_or(0, |c| c.restart_count);
    let (class, words) = if container.is_some_and(|c| c.oom_killed) {
        ("bad", "out of memory".to_owned())
    } else if crashed(health) {
        ("bad", "down".to_owned())
    } else if restarts > 0 {
        ("warn", format!("restarted {restarts}×"))
    } else if health.healthy {
        ("ok", "healthy".to_owned())
    } else {
        ("warn", "needs a look".to_owned())
    };
    html! { span class={ "health health-" (class) } title=(health.notes.join("; ")) { (words) } }
}

/// A deploy's state in the words people use, from the API's `stage`: `queued`, `building`, `releasing`, `live`
/// (it succeeded and the channel serves it), `superseded` (it succeeded and a later deploy replaced it) or
/// `failed`.
pub fn deploy_word(stage: &str, serving: bool) -> &'static str {
    match stage {
        "queued" => "queued",
        "building" => "building",
        "releasing" => "releasing",
        "success" if serving => "live",
        "success" => "superseded",
        _ => "failed",
    }
}

/// Whether a deploy newer than `deploy_id` succeeded, in a channel's history (newest first): a successful deploy
/// is live until then, superseded after.
pub fn succeeded_after(history: &DeployHistory, deploy_id: &str) -> bool {
    history
        .deploys
        .iter()
        .take_while(|d| d.deploy_id != deploy_id)
        .any(|d| d.status == "success")
}

/// The `done` query parameter of a page.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    /// Which notice to show.
    pub done: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::fixtures::app;
    use super::*;
    use slipway_rest::app_health::ContainerState;
    use slipway_rest::deploys::DeployEntry;

    fn channel(status: &str, pending: Option<&str>) -> ChannelView {
        super::fixtures::channel("prod", status, pending)
    }

    fn health(
        container: Option<(&str, bool, i32)>,
        healthy: bool,
        notes: &[&str],
    ) -> ChannelHealth {
        ChannelHealth {
            channel_id: "c".into(),
            channel: "prod".into(),
            status: "running".into(),
            current_sha: None,
            pending_deploy: None,
            last_deploy: None,
            container: container.map(|(status, oom_killed, restart_count)| ContainerState {
                container_index: 1,
                status: status.into(),
                exit_code: None,
                oom_killed,
                restart_count,
                started_at: None,
                finished_at: None,
            }),
            healthy,
            notes: notes.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn forms_follow_the_role_table() {
        assert!(may(&app("member"), Action::Write));
        assert!(!may(&app("member"), Action::ManageMembers));
        assert!(may(&app("owner"), Action::ManageMembers));
        assert!(!may(&app(""), Action::Read));
    }

    #[test]
    fn a_channel_is_live_crashed_starting_not_deployed_or_failed() {
        let state = |channel: ChannelView, health: Option<&ChannelHealth>| {
            channel_state(&channel, health).into_string()
        };
        assert!(state(channel("running", None), None).contains(">live<"));
        assert!(state(channel("running", Some("running")), None).contains(">live<"));
        assert!(state(channel("provisioning", Some("queued")), None).contains(">starting<"));
        assert!(state(channel("provisioning", None), None).contains(">not deployed<"));
        assert!(state(channel("failed", None), None).contains(">failed<"));
        let down = health(Some(("waiting", false, 4)), false, &[]);
        assert!(state(channel("running", None), Some(&down)).contains(">crashed<"));
        let up = health(Some(("running", false, 0)), true, &[]);
        assert!(state(channel("running", None), Some(&up)).contains(">live<"));
    }

    #[test]
    fn the_health_badge_names_the_worst_thing_and_carries_the_notes() {
        let badge = |health: ChannelHealth| health_badge(&health).into_string();
        let oom = badge(health(
            Some(("running", true, 2)),
            false,
            &["the container was killed for passing its memory limit"],
        ));
        assert!(
            oom.contains(">out of memory<") && oom.contains("health-bad"),
            "{oom}"
        );
        assert!(
            oom.contains(r#"title="the container was killed for passing its memory limit""#),
            "{oom}"
        );
        assert!(badge(health(Some(("exited", false, 0)), false, &[])).contains(">down<"));
        assert!(badge(health(Some(("running", false, 3)), false, &[])).contains(">restarted 3×<"));
        assert!(badge(health(None, true, &[])).contains(">healthy<"));
        let failed = badge(health(None, false, &["the last deploy failed; <b>"]));
        assert!(
            failed.contains(">needs a look<") && failed.contains("&lt;b&gt;"),
            "{failed}"
        );
    }

    #[test]
    fn a_deploy_is_queued_building_releasing_live_superseded_or_failed() {
        for stage in ["queued", "building", "releasing", "failed"] {
            assert_eq!(deploy_word(stage, false), stage);
        }
        assert_eq!(deploy_word("success", true), "live");
        assert_eq!(deploy_word("success", false), "superseded");
    }

    #[test]
    fn a_deploy_is_superseded_only_by_a_later_success() {
        let entry = |id: &str, status: &str| DeployEntry {
            deploy_id: id.into(),
            git_sha: String::new(),
            status: status.into(),
            stage: status.into(),
            rewound_from: None,
            created_at: None,
            started_at: None,
            finished_at: None,
            message: None,
        };
        let history = DeployHistory {
            deploys: vec![
                entry("d4", "failed"),
                entry("d3", "success"),
                entry("d2", "running"),
                entry("d1", "success"),
            ],
        };
        assert!(!succeeded_after(&history, "d3"));
        assert!(succeeded_after(&history, "d1"));
        assert!(!succeeded_after(&history, "d4"));
    }

    #[test]
    fn notices_come_only_from_the_pages_list() {
        let known = [("saved", "Saved.")];
        let notice = |done| notice(done, &known).into_string();
        assert!(notice(Some("saved")).contains("Saved."));
        assert_eq!(notice(Some("<script>")), "");
        assert_eq!(notice(None), "");
    }
}
