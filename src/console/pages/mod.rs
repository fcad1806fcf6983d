//! The console's pages. Each reads what it shows from the REST API with the person's token and posts its writes
//! to the same routes an HTTP client would; a refusal is shown with the route's own words. Which forms a page
//! offers follows the role table of [`crate::core::access::Action`], so a member sees read-only what only admins
//! or the owner may change (and the API refuses it anyway).

pub mod account;
pub mod app;
pub mod apps;
pub mod channel;
pub mod deploy;
pub mod env;
pub mod tokens;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::session::Person;
use super::{ConsoleRouter, html_page};
use crate::core::access::{Action, Role};

/// Every page but signing in and out.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .merge(apps::routes())
        .merge(app::routes())
        .merge(env::routes())
        .merge(channel::routes())
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
pub fn person_page(person: &Person, title: &str, body: &str) -> Response {
    html_page(StatusCode::OK, title, Some(&person.header()), body)
}

/// After a write: back to `to` (303, so a reload does not post again).
pub fn see(to: &str) -> Response {
    Redirect::to(to).into_response()
}

/// A notice named by a page's `done` query parameter: only the texts the page lists, never text from the URL.
pub fn notice(done: Option<&str>, known: &[(&str, &str)]) -> String {
    banner_named(done, known, "ok")
}

/// A warning named by a page's `done` query parameter (a write that went through but did not get what it asked
/// for), from the page's own list as [`notice`].
pub fn warning(done: Option<&str>, known: &[(&str, &str)]) -> String {
    banner_named(done, known, "warning")
}

fn banner_named(done: Option<&str>, known: &[(&str, &str)], kind: &str) -> String {
    done.and_then(|d| known.iter().find(|(k, _)| *k == d))
        .map(|(_, text)| super::html::banner(kind, text))
        .unwrap_or_default()
}

/// A channel's state in the words people use, styled by meaning: `live` (it serves a deploy), `starting` (its
/// first deploy is in flight), `not deployed` (nothing ever went live and nothing is in flight) or `failed` (its
/// database or bucket could not be made). The API's `provisioning` covers both of the middle two.
pub fn channel_state(channel: &Value) -> String {
    let in_flight = channel.get("pending_deploy").is_some_and(|p| !p.is_null());
    let word = match text(channel, "status") {
        "running" => "live",
        "failed" => "failed",
        _ if in_flight => "starting",
        _ => "not deployed",
    };
    super::html::status(word)
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
    fn a_channel_is_live_starting_not_deployed_or_failed() {
        use serde_json::json;
        let state = |channel: Value| channel_state(&channel);
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
    fn notices_come_only_from_the_pages_list() {
        let known = [("saved", "Saved.")];
        assert!(notice(Some("saved"), &known).contains("Saved."));
        assert_eq!(notice(Some("<script>"), &known), "");
        assert_eq!(notice(None, &known), "");
    }
}
