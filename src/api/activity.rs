//! `GET /apps/{app_id}/activity`: the app's journal of audit-logged actions (secret reveals, SQL reset, dump and
//! restore, object-store restores and credential reads, downloads), newest first, readable by every member. The
//! spec records these events and shows no route to read them; this is that route, paged by an opaque cursor.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{self, Action};
use super::error::{ApiError, ErrorEnvelope};
use super::extract::{Json, Path, Query};
use super::state::AppState;
use crate::auth::{Caller, scopes};

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_activity))
}

/// Default page size of paged lists.
pub const DEFAULT_LIMIT: i64 = 50;
/// Largest page size of paged lists.
pub const MAX_LIMIT: i64 = 200;

/// `limit` and `cursor` of a paged list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct PageQuery {
    /// Entries per page, 1 to 200 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page; omitted for the first.
    pub cursor: Option<String>,
}

impl PageQuery {
    /// The page size, or 400 `bad_request` out of range.
    pub fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
            Some(limit) => Err(ApiError::bad_request(format!(
                "limit must be between 1 and {MAX_LIMIT}, not {limit}"
            ))),
        }
    }

    /// The position the page starts after, or 400 `bad_request` for a cursor this API did not hand out.
    pub fn after(&self) -> Result<Option<i64>, ApiError> {
        self.cursor
            .as_deref()
            .map(|c| {
                c.parse::<i64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ApiError::bad_request("cursor is not one this API handed out"))
            })
            .transpose()
    }
}

/// The cursor of the page after one that ended at `last`, when the page was full.
pub fn next_cursor(page_len: usize, limit: i64, last: Option<i64>) -> Option<String> {
    (i64::try_from(page_len).ok() == Some(limit))
        .then_some(last)
        .flatten()
        .map(|id| id.to_string())
}

/// One journal entry.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActivityEvent {
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Who did it; null once their account is gone.
    pub actor: Option<String>,
    /// What was done, e.g. `env.reveal`, `postgres.restore`, `blob.credentials`.
    pub action: String,
    /// Its details (the channel, snapshot or key concerned).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// `GET /apps/{app_id}/activity` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActivityPage {
    /// Newest first.
    pub events: Vec<ActivityEvent>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// The app's journal of audit-logged actions, newest first (any member; `stats:read`).
#[utoipa::path(get, path = "/apps/{app_id}/activity", tag = "apps", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), PageQuery),
    responses((status = 200, body = ActivityPage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (stats:read)"), (status = 404, body = ErrorEnvelope)))]
async fn list_activity(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(page): Query<PageQuery>,
) -> Result<Json<ActivityPage>, ApiError> {
    caller.require_scope(scopes::STATS_READ)?;
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let limit = page.limit()?;
    let rows = crate::db::audit::journal(state.db(), app.id, page.after()?, limit).await?;
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|r| r.id));
    let events = rows
        .into_iter()
        .map(|r| ActivityEvent {
            at: r.at,
            actor: r.actor,
            action: r.action,
            detail: r.detail,
        })
        .collect();
    Ok(Json(ActivityPage {
        events,
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_size_outside_one_to_two_hundred_is_refused() {
        let page = |limit| PageQuery {
            limit,
            cursor: None,
        };
        assert_eq!(page(None).limit().unwrap(), 50);
        assert_eq!(page(Some(1)).limit().unwrap(), 1);
        assert_eq!(page(Some(200)).limit().unwrap(), 200);
        assert!(page(Some(0)).limit().is_err());
        assert!(page(Some(201)).limit().is_err());
    }

    #[test]
    fn only_a_cursor_handed_out_is_taken() {
        let cursor = |c: &str| PageQuery {
            limit: None,
            cursor: Some(c.to_owned()),
        };
        assert_eq!(cursor("17").after().unwrap(), Some(17));
        assert!(cursor("abc").after().is_err());
        assert!(cursor("-3").after().is_err());
        assert_eq!(PageQuery::default().after().unwrap(), None);
    }

    #[test]
    fn a_full_page_has_a_next_cursor_and_a_short_one_none() {
        assert_eq!(next_cursor(2, 2, Some(9)), Some("9".to_owned()));
        assert_eq!(next_cursor(1, 2, Some(9)), None);
        assert_eq!(next_cursor(0, 2, None), None);
    }
}
