//! Downloading a channel's snapshots from its page: an SQL snapshot as the dump `pg_restore` reads, a bucket
//! snapshot as its tar.gz. Each is a form posted with the session's CSRF token (a download is an audited act, so a
//! link another site could make the browser follow is not enough), answered with the route's own response: its
//! headers (the attachment's name and type) and its body streamed through, never held in the console.

use axum::extract::Path;
use axum::response::Response;
use axum::routing::post;

use super::may;
use crate::ConsoleRouter;
use crate::html::{Markup, html, seg};
use crate::session::Write;
use slipway_core::access::Action;
use slipway_rest::views::AppView;

/// The routes of the downloads.
pub fn routes() -> ConsoleRouter {
    ConsoleRouter::new()
        .route(
            "/apps/{app_id}/channels/{channel_id}/postgres/snapshots/{snapshot_id}/download",
            post(sql),
        )
        .route(
            "/apps/{app_id}/channels/{channel_id}/blob/snapshots/{snapshot_id}/download",
            post(bucket),
        )
}

/// The download button of the snapshot the routes name `snapshot_id` under the list at `list` (the channel's
/// `.../postgres/snapshots` or `.../blob/snapshots`, a console path that is the route's too), for those who may
/// download data. Both routes name a snapshot by its SQL checkpoint's id: a bucket snapshot by its
/// `pg_snapshot_id`, and one without (none to name it by) gets no button.
pub fn button(app: &AppView, list: &str, snapshot_id: &str, csrf: &Markup) -> Markup {
    html! {
        @if may(app, Action::DownloadData) && !snapshot_id.is_empty() {
            form.inline method="post" action={ (list) "/" (seg(snapshot_id)) "/download" } {
                (csrf)
                button.quiet type="submit" { "Download" }
            }
        }
    }
}

async fn sql(
    Path((app_id, channel_id, snapshot_id)): Path<(String, String, String)>,
    write: Write,
) -> Response {
    download(&write, &app_id, &channel_id, "postgres", &snapshot_id).await
}

async fn bucket(
    Path((app_id, channel_id, snapshot_id)): Path<(String, String, String)>,
    write: Write,
) -> Response {
    download(&write, &app_id, &channel_id, "blob", &snapshot_id).await
}

/// The route's answer to `GET .../{kind}/snapshots/{snapshot_id}/download`, passed on.
async fn download(
    write: &Write,
    app_id: &str,
    channel_id: &str,
    kind: &str,
    snapshot_id: &str,
) -> Response {
    let channel = format!("/apps/{}/channels/{}", seg(app_id), seg(channel_id));
    let path = format!("{channel}/{kind}/snapshots/{}/download", seg(snapshot_id));
    match write.person.api.stream(&path).await {
        Ok(response) => response,
        Err(f) => write.person.refused(&f, &channel),
    }
}
