//! Restoring a channel's SQL database or bucket to a snapshot from the channel's page. Each snapshot row offers
//! Restore to those who may replace data, behind a second click that asks what the route asks for (the database's
//! name, or the channel's, typed), and the form calls the route an HTTP client would (`POST …/postgres/restore`,
//! `POST …/blob/restore`), so the prod guard, `channel_busy` and the journal entry are the routes'.
//!
//! A restore of gigabytes runs for minutes, as a job no caller's leaving cancels; the route waits for it as long as
//! it takes, but a page cannot. The console makes the call from a task of its own and waits for it at most
//! [`ANSWER_WITHIN`]: a restore done by then answers with the channel's page saying so; one still running answers
//! with the page saying it goes on (and where its end shows), while the task keeps waiting for the route, so the
//! job is recorded and runs whatever the browser does.

use std::time::Duration;

use axum::extract::Path;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::json;

use super::{Done, may, see};
use crate::ConsoleRouter;
use crate::html::{Markup, html, seg};
use crate::retry::{self, Form};
use crate::session::Write;
use slipway_core::access::Action;
use slipway_rest::in_process::Failure;
use slipway_rest::views::AppView;

/// Longest a restore form waits for the route before its page says the restore goes on: well inside the console's
/// request timeout, and long enough for a database of tens of megabytes.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// What is restored: the route's path segment, its confirmation field and the form's id.
#[derive(Clone, Copy)]
pub enum Leg {
    /// The SQL database; the confirmation is the database's name.
    Sql,
    /// The bucket; the confirmation is the channel's name.
    Bucket,
}

impl Leg {
    fn segment(self) -> &'static str {
        match self {
            Leg::Sql => "postgres",
            Leg::Bucket => "blob",
        }
    }

    fn confirm_field(self) -> &'static str {
        match self {
            Leg::Sql => "confirm_db_name",
            Leg::Bucket => "confirm_channel_name",
        }
    }

    /// The id of its forms, which a refusal names to come back to the row that sent it.
    pub fn form(self) -> &'static str {
        match self {
            Leg::Sql => "restore-sql",
            Leg::Bucket => "restore-bucket",
        }
    }
}

/// The routes of the restore forms.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route(
            "/apps/{app_id}/channels/{channel_id}/postgres/restore",
            post(sql),
        )
        .route(
            "/apps/{app_id}/channels/{channel_id}/blob/restore",
            post(bucket),
        )
}

/// The notices of the channel's page after a restore form.
pub const NOTICES: &[(&str, &str)] = &[
    (
        "restored",
        "The restore is done: the data is as it was when the snapshot was taken.",
    ),
    (
        "restoring",
        "The restore is running. It goes on whether or not this page stays open, and another restore of this channel is refused until it ends. The app's activity records it when it succeeds; one that fails changes nothing.",
    ),
];

/// The Restore button of snapshot `snapshot_id` on the channel at `here`, for those who may replace data: a second
/// click opens the form that asks for `name` (the database's or the channel's) typed. `form` is the page's view of
/// a refused restore: the row that sent it opens with the refusal and what was typed.
pub fn button(
    app: &AppView,
    leg: Leg,
    here: &str,
    snapshot_id: &str,
    name: &str,
    csrf: &Markup,
    form: Form<'_>,
) -> Markup {
    if !may(app, Action::ReplaceData) || snapshot_id.is_empty() {
        return Markup::default();
    }
    let this_row = form.typed("snapshot_id") == Some(snapshot_id);
    let (what, asked) = match leg {
        Leg::Sql => ("database", "the database's name"),
        Leg::Bucket => ("bucket", "the channel's name"),
    };
    html! {
        details.confirm open[this_row] {
            summary { "Restore" }
            @if this_row { (form.alert()) }
            form method="post" action={ (here) "/" (leg.segment()) "/restore" } {
                (csrf)
                input type="hidden" name="snapshot_id" value=(snapshot_id);
                p { "The " (what) " goes back to this snapshot; what was written since is replaced." }
                label {
                    "Type " (asked) ", " b { (name) } ", to confirm "
                    input name="confirm" value=[this_row.then(|| form.value("confirm", "")).flatten()]
                        required autocomplete="off";
                }
                button.danger type="submit" { "Restore the " (what) }
            }
        }
    }
}

async fn sql(Path((app_id, channel_id)): Path<(String, String)>, write: Write) -> Response {
    restore(&write, &app_id, &channel_id, Leg::Sql).await
}

async fn bucket(Path((app_id, channel_id)): Path<(String, String)>, write: Write) -> Response {
    restore(&write, &app_id, &channel_id, Leg::Bucket).await
}

async fn restore(write: &Write, app_id: &str, channel_id: &str, leg: Leg) -> Response {
    let here = format!("/apps/{}/channels/{}", seg(app_id), seg(channel_id));
    let path = format!("{here}/{}/restore", leg.segment());
    let body = json!({
        "snapshot_id": write.fields.get("snapshot_id"),
        leg.confirm_field(): write.fields.get("confirm"),
    });
    // Its own task: the wait below may end before the route answers, and the route must go on to record the job.
    let api = write.person.api.clone();
    let call = tokio::spawn(async move {
        let answered = api.write(Method::POST, &path, &body).await;
        if let Err(f) = &answered {
            // Its page may be long answered: the log keeps why it was refused or failed.
            tracing::info!(path = %path, status = f.status, code = %f.code, message = %f.message, "a restore asked from the console did not succeed");
        }
        answered
    });
    let answered = match tokio::time::timeout(ANSWER_WITHIN, call).await {
        Err(_) => return see(&format!("{here}?done=restoring")),
        Ok(Ok(answered)) => answered,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "a restore's call from the console ended without an answer");
            Err(Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the restore's answer was lost; the app's activity records it if it succeeded",
            ))
        }
    };
    match answered {
        Ok(_) => see(&format!("{here}?done=restored")),
        Err(f) => {
            retry::refused(write, leg.form(), &f, &here, async |retry| {
                let done = Done::default();
                super::channel::page(&write.person, app_id, channel_id, &done, Some(retry)).await
            })
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::app;
    use super::*;

    #[test]
    fn only_those_who_may_replace_data_are_offered_a_restore() {
        let here = "/apps/a/channels/c";
        let offered = |role| {
            button(
                &app(role),
                Leg::Sql,
                here,
                "s1",
                "db_x",
                &html! {},
                Form::of(None, "x"),
            )
            .into_string()
        };
        assert!(offered("admin").contains(r#"action="/apps/a/channels/c/postgres/restore""#));
        assert!(offered("owner").contains(r#"name="snapshot_id" value="s1""#));
        assert!(offered("member").is_empty());
        // A bucket snapshot without a database checkpoint beside it has nothing to restore by.
        assert!(
            button(
                &app("owner"),
                Leg::Bucket,
                here,
                "",
                "prod",
                &html! {},
                Form::of(None, "x")
            )
            .into_string()
            .is_empty()
        );
    }
}
