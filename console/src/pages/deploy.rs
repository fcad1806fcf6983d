//! `/apps/{id}/channels/{cid}/deploys/{did}`: one deploy's status and build log. While the deploy is queued or
//! running, the page's script reads the log on from where the page left it (`.../log.json?offset=`, the log
//! route's next window) every second, until the deploy's status is `success` or `failed` and the whole log is
//! shown. The state is worded as [`super::deploy_word`] words it: building, releasing, live.

use axum::Json;
use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;

use super::person_page;
use crate::ConsoleRouter;
use crate::html::{self, html, seg};
use crate::session::Person;
use slipway_rest::deploys::{DeployHistory, DeployLog, MAX_WINDOW};
use slipway_rest::in_process::with_query;
use slipway_rest::views::AppView;

/// The routes of this page.
pub fn routes() -> ConsoleRouter {
    let base = "/apps/{app_id}/channels/{channel_id}/deploys/{deploy_id}";
    ConsoleRouter::new()
        .route(base, get(deploy))
        .route(&format!("{base}/log.json"), get(log_window))
}

/// One window of the log from `offset`.
async fn window(
    person: &Person,
    channel: &str,
    deploy_id: &str,
    offset: u64,
) -> Result<DeployLog, slipway_rest::in_process::Failure> {
    let path = with_query(
        &format!("{channel}/logs"),
        &[
            ("deploy", Some(deploy_id.to_owned())),
            ("offset", Some(offset.to_string())),
            ("max_bytes", Some(MAX_WINDOW.to_string())),
        ],
    );
    person.api.read(&path).await
}

async fn deploy(
    person: Person,
    Path((app_id, channel_id, deploy_id)): Path<(String, String, String)>,
) -> Response {
    let app_path = format!("/apps/{}", seg(&app_id));
    let channel = format!("{app_path}/channels/{}", seg(&channel_id));
    let here = format!("{channel}/deploys/{}", seg(&deploy_id));
    let log = match window(&person, &channel, &deploy_id, 0).await {
        Ok(v) => v,
        Err(f) => return person.refused(&f, &here),
    };
    let status = log.status.as_str();
    // A successful deploy is live until a later one succeeds.
    let serving = status == "success"
        && person
            .api
            .read::<DeployHistory>(&format!("{channel}/deploys"))
            .await
            .is_ok_and(|history| !super::succeeded_after(&history, &deploy_id));
    let word = super::deploy_word(&log.stage, serving);
    let next = log.offset + log.window_bytes;
    // The names for the trail; the log was readable, so the app is too.
    let app: Option<AppView> = person.api.read(&app_path).await.ok();
    let app_name = app.as_ref().map_or("app", |a| a.name.as_str());
    let channel_name = app
        .iter()
        .flat_map(|a| &a.channels)
        .find(|c| c.id == channel_id)
        .map_or("channel", |c| c.name.as_str());
    let crumbs = html::breadcrumbs(
        &[
            ("Apps", "/apps"),
            (app_name, &app_path),
            (channel_name, &channel),
        ],
        &format!("deploy {}", deploy_id.split('-').next().unwrap_or_default()),
    );
    let body = html! {
        (crumbs)
        p {
            "Status " span #deploy-status class={ "status status-" (word) } { (word) }
            " · commit " (html::sha(Some(&log.git_sha)))
            " · started " (log.started_at)
            " · finished " span #deploy-finished { (log.finished_at.as_deref().unwrap_or("—")) }
            @if let Some(from) = &log.rewound_from { " · rewind of deploy " code { (from) } }
        }
        pre.log #deploy-log data-source={ (here) "/log.json" } data-offset=(next) data-status=(status)
            data-status-id="deploy-status" { (log.log) }
    };
    person_page(&person, "Deploy", body)
}

#[derive(Debug, Deserialize)]
struct Offset {
    offset: Option<u64>,
}

/// The next window of the log, for the page's script: `{status, word, log, next_offset, log_bytes, finished_at}`
/// (`word` as the page shows it; a deploy that succeeds while it is watched is the live one).
async fn log_window(
    person: Person,
    Path((app_id, channel_id, deploy_id)): Path<(String, String, String)>,
    Query(query): Query<Offset>,
) -> Response {
    let channel = format!("/apps/{}/channels/{}", seg(&app_id), seg(&channel_id));
    match window(&person, &channel, &deploy_id, query.offset.unwrap_or(0)).await {
        Ok(log) => Json(json!({
            "status": log.status,
            "word": super::deploy_word(&log.stage, true),
            "log": log.log,
            "next_offset": log.offset + log.window_bytes,
            "log_bytes": log.log_bytes,
            "finished_at": log.finished_at,
        }))
        .into_response(),
        Err(f) => (
            axum::http::StatusCode::from_u16(f.status)
                .unwrap_or(axum::http::StatusCode::BAD_GATEWAY),
            Json(json!({"error": {"code": f.code, "message": f.message}})),
        )
            .into_response(),
    }
}
