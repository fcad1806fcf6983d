//! `PUT /internal/v1/runtime/containers/{container_id}` and `POST .../{container_id}/log`: the operator's log archive
//! records each generation of a channel's app container and appends its output (and `POST .../runtime/settle` ends
//! the generations whose pods went while no archive watched), so the runtime-log route can read
//! a container's output after Kubernetes has dropped it. Open to callers whose role permits
//! [`RouteGroup::RuntimeLogs`] (the operator).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{post, put};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use slipway_internal::RouteGroup;
use slipway_internal::protocol::{RuntimeContainer, RuntimeContainerRecord, RuntimeSettle};
use uuid::Uuid;

use super::app_in_cache;
use super::guard::InternalCaller;
use crate::extract::{Json, Path};
use slipway_core::access;
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_store::db::runtime_logs::{self, Facts};

/// Largest append accepted (the archive sends far smaller batches).
const APPEND_LIMIT: usize = 1024 * 1024;

/// The routes of this module (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/internal/v1/runtime/containers/{container_id}",
            put(record_container),
        )
        .route(
            "/internal/v1/runtime/containers/{container_id}/log",
            post(append).layer(axum::extract::DefaultBodyLimit::max(APPEND_LIMIT)),
        )
        .route("/internal/v1/runtime/settle", post(settle))
}

async fn settle(
    State(state): State<AppState>,
    caller: InternalCaller,
    Json(live): Json<RuntimeSettle>,
) -> Result<Json<u64>, ApiError> {
    caller.require(&state, RouteGroup::RuntimeLogs)?;
    let ended = runtime_logs::settle(state.db(), &live.container_ids).await?;
    if ended > 0 {
        tracing::info!(
            ended,
            "runtime-log generations whose pods went while no archive watched recorded as ended"
        );
    }
    Ok(Json(ended))
}

async fn record_container(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(container_id): Path<String>,
    Json(report): Json<RuntimeContainer>,
) -> Result<Json<RuntimeContainerRecord>, ApiError> {
    caller.require(&state, RouteGroup::RuntimeLogs)?;
    let app_id: Uuid = report
        .app_id
        .parse()
        .map_err(|_| ApiError::NotFound("app"))?;
    let channel_id: Uuid = report
        .channel_id
        .parse()
        .map_err(|_| ApiError::NotFound("channel"))?;
    // A generation of an app or channel that is gone is not recorded: its archive was removed with it.
    let app = app_in_cache(&state, app_id)?;
    access::channel_of(&state, &app, channel_id)?;
    let facts = Facts {
        app_id,
        channel_id,
        container_id,
        pod_name: report.pod_name,
        deploy_id: report.deploy_id.and_then(|d| d.parse().ok()),
        running: report.running,
        status: report.status,
        exit_code: report.exit_code,
        oom_killed: report.oom_killed,
        started_at: report.started_at.as_ref().and_then(chrono_time),
        finished_at: report.finished_at.as_ref().and_then(chrono_time),
    };
    let row = runtime_logs::upsert(state.db(), &facts).await?;
    Ok(Json(RuntimeContainerRecord {
        container_index: row.container_index,
        finished: row.finished_at.is_some(),
        last_timestamp: row.last_timestamp,
    }))
}

async fn append(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(container_id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::RuntimeLogs)?;
    let last = last_timestamp(&body).ok_or_else(|| {
        ApiError::bad_request(
            "the body must be whole lines, each starting with its RFC 3339 timestamp",
        )
    })?;
    runtime_logs::append(state.db(), &container_id, &body, last)
        .await?
        .ok_or(ApiError::NotFound("container"))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The timestamp of the last line of `lines`, when they are whole lines and that one starts with one.
fn last_timestamp(lines: &[u8]) -> Option<&str> {
    let body = lines.strip_suffix(b"\n")?;
    let last = body.rsplit(|b| *b == b'\n').next()?;
    let stamp = last.split(|b| *b == b' ').next()?;
    let stamp = std::str::from_utf8(stamp).ok()?;
    DateTime::parse_from_rfc3339(stamp).ok()?;
    Some(stamp)
}

fn chrono_time(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(
        t.0.as_second(),
        u32::try_from(t.0.subsec_nanosecond()).ok()?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_names_the_timestamp_and_anything_else_is_refused() {
        let lines = b"2026-11-24T10:00:00.1Z one\n2026-11-24T10:00:01.25Z two words\n";
        assert_eq!(last_timestamp(lines), Some("2026-11-24T10:00:01.25Z"));
        assert_eq!(
            last_timestamp(b"2026-11-24T10:00:00Z\n"),
            Some("2026-11-24T10:00:00Z")
        );
        assert_eq!(last_timestamp(b"2026-11-24T10:00:00Z no newline"), None);
        assert_eq!(last_timestamp(b"not a time\n"), None);
        assert_eq!(last_timestamp(b""), None);
    }
}
