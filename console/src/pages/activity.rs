//! `/apps/{id}/activity`: the app's journal of audit-logged actions (secret reveals, SQL resets, dumps and
//! restores, bucket restores and key reads, downloads), newest first, fifty to a page with a link to older ones.
//! Every member reads it, as the route allows.

use axum::extract::{Path, Query};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::Value;

use super::person_page;
use crate::ConsoleRouter;
use crate::html::{self, Markup, html, seg};
use crate::session::Person;
use slipway_rest::activity::ActivityPage;
use slipway_rest::in_process::with_query;
use slipway_rest::views::AppView;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new().route("/apps/{app_id}/activity", get(activity))
}

/// Where in the journal the page starts: the route's own cursor, passed on unread.
#[derive(Debug, Default, Deserialize)]
struct Cursor {
    cursor: Option<String>,
}

async fn activity(
    person: Person,
    Path(app_id): Path<String>,
    Query(at): Query<Cursor>,
) -> Response {
    let base = format!("/apps/{}", seg(&app_id));
    let here = format!("{base}/activity");
    let app: AppView = match person.api.read(&base).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let page: ActivityPage = match person
        .api
        .read(&with_query(&here, &[("cursor", at.cursor.clone())]))
        .await
    {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let rows: Vec<Vec<Markup>> = page
        .events
        .iter()
        .map(|e| {
            vec![
                html::at(e.at),
                html! { (e.actor.as_deref().unwrap_or("a deleted account")) },
                html! { code { (e.action) } },
                html! { small { (detail(&e.detail)) } },
            ]
        })
        .collect();
    let next = page.next_cursor.as_deref();
    let body = html! {
        (html::breadcrumbs(&[("Apps", "/apps"), (&app.name, &base)], "Activity"))
        p.hint { "Who revealed a secret, reset, restored or downloaded data, or read a bucket's keys." }
        (html::table(&["when", "who", "what", "details"], &rows, "Nothing recorded yet."))
        @if let Some(next) = next {
            p { a href=(with_query(&here, &[("cursor", Some(next.to_owned()))])) rel="next" { "Older" } }
        }
    };
    person_page(&person, &format!("{} · activity", app.name), body)
}

/// An event's details as `key value` pairs in one line (the channel, snapshot or key concerned).
fn detail(detail: &Value) -> String {
    match detail {
        Value::Object(fields) => fields
            .iter()
            .map(|(key, value)| match value {
                Value::String(s) => format!("{key} {s}"),
                other => format!("{key} {other}"),
            })
            .collect::<Vec<_>>()
            .join(" · "),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_read_as_pairs() {
        let one = serde_json::json!({"channel": "prod"});
        assert_eq!(detail(&one), "channel prod");
        let two = detail(&serde_json::json!({"snapshot_id": "s1", "bytes": 12}));
        assert!(
            two == "snapshot_id s1 · bytes 12" || two == "bytes 12 · snapshot_id s1",
            "{two}"
        );
        assert_eq!(detail(&Value::Null), "");
    }
}
