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
pub mod lifecycle;
pub mod restores;
pub mod runtime_log;
pub mod ssh_keys;
pub mod tokens;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::html::{Markup, html};
use super::session::Person;
use super::{ConsoleRouter, html_page};
use slipway_core::access::{Action, Role};

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
pub fn bound_branch(channel: &Value) -> &str {
    text(channel, "git_ref_binding")
        .strip_prefix("branch:")
        .unwrap_or("master")
}

/// The string at `key` of a JSON object; empty when absent or not a string.
pub fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The array at `key` of a JSON object; empty when absent.
pub fn list<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The caller's role on an app as the API states it.
pub fn role_of(app: &Value) -> Option<Role> {
    match text(app, "role") {
        "owner" => Some(Role::Owner),
        "admin" => Some(Role::Admin),
        "member" => Some(Role::Member),
        _ => None,
    }
}

/// Whether the caller's role on `app` permits `action` (the one role table).
pub fn may(app: &Value, action: Action) -> bool {
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
pub fn channel_state(channel: &Value, health: Option<&Value>) -> Markup {
    let in_flight = channel.get("pending_deploy").is_some_and(|p| !p.is_null());
    let word = match text(channel, "status") {
        "running" if health.is_some_and(crashed) => "crashed",
        "running" => "live",
        "failed" => "failed",
        _ if in_flight => "starting",
        _ => "not deployed",
    };
    super::html::status(word)
}

/// A channel's state, followed for a channel that should serve (the API's `running`) by its health badge.
pub fn state_and_health(channel: &Value, health: Option<&Value>) -> Markup {
    let badge = health.filter(|_| text(channel, "status") == "running");
    html! {
        (channel_state(channel, health))
        @if let Some(health) = badge { " " (health_badge(health)) }
    }
}

/// Whether a channel's health entry shows its container down: exited, or waiting to start again.
fn crashed(health: &Value) -> bool {
    matches!(text(&health["container"], "status"), "exited" | "waiting")
}

/// The entry of channel `channel_id` in an app's health (`GET /apps/{id}/health`).
pub fn health_of<'a>(health: &'a Value, channel_id: &str) -> Option<&'a Value> {
    list(health, "channels")
        .iter()
        .find(|c| text(c, "channel_id") == channel_id)
}

/// A channel's health in a few words, with the API's notes as its title: `out of memory` (its container was
/// killed for passing the memory limit), `restarted N×`, `healthy`, or `needs a look` (see the notes).
fn health_badge(health: &Value) -> Markup {
    let container = &health["container"];
    let restarts = container["restart_count"].as_i64().unwrap_or(0);
    let (class, words) = if container["oom_killed"] == true {
        ("bad", "out of memory".to_owned())
    } else if crashed(health) {
        ("bad", "down".to_owned())
    } else if restarts > 0 {
        ("warn", format!("restarted {restarts}×"))
    } else if health["healthy"] == true {
        ("ok", "healthy".to_owned())
    } else {
        ("warn", "needs a look".to_owned())
    };
    let notes: Vec<&str> = list(health, "notes")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    html! { span class={ "health health-" (class) } title=(notes.join("; ")) { (words) } }
}

/// A deploy's state in the words people use, from the API's `stage`: `queued`, `building`, `releasing`, `live`
/// (it succeeded and the channel serves it), `superseded` (it succeeded and a later deploy replaced it) or
/// `failed`.
pub fn deploy_word(deploy: &Value, serving: bool) -> &'static str {
    match text(deploy, "stage") {
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
pub fn succeeded_after(history: &Value, deploy_id: &str) -> bool {
    list(history, "deploys")
        .iter()
        .take_while(|d| text(d, "deploy_id") != deploy_id)
        .any(|d| text(d, "status") == "success")
}

/// The `done` query parameter of a page.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    /// Which notice to show.
    pub done: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_follow_the_role_table() {
        let member = serde_json::json!({"role": "member"});
        let owner = serde_json::json!({"role": "owner"});
        assert!(may(&member, Action::Write));
        assert!(!may(&member, Action::ManageMembers));
        assert!(may(&owner, Action::ManageMembers));
        assert!(!may(&serde_json::json!({}), Action::Read));
    }

    #[test]
    fn a_channel_is_live_crashed_starting_not_deployed_or_failed() {
        use serde_json::json;
        let state = |channel: Value| channel_state(&channel, None).into_string();
        assert!(state(json!({"status": "running", "pending_deploy": null})).contains(">live<"));
        assert!(
            state(json!({"status": "running", "pending_deploy": {"status": "running"}}))
                .contains(">live<")
        );
        assert!(
            state(json!({"status": "provisioning", "pending_deploy": {"status": "queued"}}))
                .contains(">starting<")
        );
        assert!(
            state(json!({"status": "provisioning", "pending_deploy": null}))
                .contains(">not deployed<")
        );
        assert!(state(json!({"status": "failed"})).contains(">failed<"));
        let running = json!({"status": "running"});
        let down = json!({"container": {"status": "waiting", "restart_count": 4}});
        let channel_state = |channel, health| channel_state(channel, health).into_string();
        assert!(channel_state(&running, Some(&down)).contains(">crashed<"));
        let up = json!({"container": {"status": "running"}});
        assert!(channel_state(&running, Some(&up)).contains(">live<"));
    }

    #[test]
    fn the_health_badge_names_the_worst_thing_and_carries_the_notes() {
        use serde_json::json;
        let badge = |health: Value| health_badge(&health).into_string();
        let oom = badge(
            json!({"container": {"status": "running", "oom_killed": true, "restart_count": 2},
            "notes": ["the container was killed for passing its memory limit"]}),
        );
        assert!(
            oom.contains(">out of memory<") && oom.contains("health-bad"),
            "{oom}"
        );
        assert!(
            oom.contains(r#"title="the container was killed for passing its memory limit""#),
            "{oom}"
        );
        assert!(badge(json!({"container": {"status": "exited"}})).contains(">down<"));
        assert!(
            badge(json!({"container": {"status": "running", "restart_count": 3}}))
                .contains(">restarted 3×<")
        );
        assert!(badge(json!({"healthy": true, "container": null})).contains(">healthy<"));
        let failed = badge(json!({"healthy": false, "notes": ["the last deploy failed; <b>"]}));
        assert!(
            failed.contains(">needs a look<") && failed.contains("&lt;b&gt;"),
            "{failed}"
        );
    }

    #[test]
    fn a_deploy_is_queued_building_releasing_live_superseded_or_failed() {
        use serde_json::json;
        let word = |stage: &str, serving| deploy_word(&json!({ "stage": stage }), serving);
        for stage in ["queued", "building", "releasing", "failed"] {
            assert_eq!(word(stage, false), stage);
        }
        assert_eq!(word("success", true), "live");
        assert_eq!(word("success", false), "superseded");
    }

    #[test]
    fn a_deploy_is_superseded_only_by_a_later_success() {
        let history = serde_json::json!({"deploys": [
            {"deploy_id": "d4", "status": "failed"},
            {"deploy_id": "d3", "status": "success"},
            {"deploy_id": "d2", "status": "running"},
            {"deploy_id": "d1", "status": "success"},
        ]});
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
