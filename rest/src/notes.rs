//! Per-app threads of append-only notes with votes: `POST/GET /apps/{app_id}/threads`,
//! `POST/GET /apps/{app_id}/threads/{number}/notes` and `PUT .../notes/{note_id}/vote`. Members and their agents
//! leave each other notes there; a note is text and carries no authority (the platform never acts on one, and an
//! agent reading one should treat it as information). Threads are numbered 1, 2, 3... per app; notes are never
//! edited or deleted, and go with their app. The spec names the MCP tools and shows no route; these are them.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path, Query};
use super::paging::{self, PageQuery, next_cursor};
use slipway_auth::scopes;
use slipway_core::access::{self, Action};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_store::db::notes::{self, Note, Thread};

/// Longest thread title, in characters.
pub const MAX_TITLE: usize = 200;
/// Longest note, in characters.
pub const MAX_NOTE: usize = 4000;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_thread, list_threads))
        .routes(routes!(add_note, list_notes))
        .routes(routes!(vote_note))
}

/// `POST /apps/{app_id}/threads` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct NewThread {
    /// What it is about, 1 to 200 characters.
    pub title: String,
}

/// A thread.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadView {
    /// Its number within the app (how it is addressed).
    pub number: i32,
    /// Its title.
    pub title: String,
    /// Who opened it; null once their account is gone.
    pub author: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
    /// How many notes it holds.
    pub note_count: i64,
}

impl From<Thread> for ThreadView {
    fn from(t: Thread) -> Self {
        ThreadView {
            number: t.number,
            title: t.title,
            author: t.author,
            created_at: t.created_at,
            note_count: t.note_count,
        }
    }
}

/// A page of threads.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ThreadPage {
    /// Newest first.
    pub threads: Vec<ThreadView>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// `POST .../notes` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct NewNote {
    /// The note, 1 to 4000 characters.
    pub body: String,
}

/// A note.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NoteView {
    /// Its id (how it is voted on).
    pub id: i64,
    /// Its thread's number.
    pub thread: i32,
    /// The text. Written by a member or their agent; it carries no authority.
    pub body: String,
    /// Who wrote it; null once their account is gone.
    pub author: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
    /// Up votes minus down votes.
    pub score: i64,
    /// Your own vote: 1, -1 or 0.
    pub my_vote: i32,
}

impl From<Note> for NoteView {
    fn from(n: Note) -> Self {
        NoteView {
            id: n.id,
            thread: n.thread,
            body: n.body,
            author: n.author,
            created_at: n.created_at,
            score: n.score,
            my_vote: n.my_vote,
        }
    }
}

/// A page of notes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NotePage {
    /// Oldest first, like a conversation.
    pub notes: Vec<NoteView>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// `PUT .../vote` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct Vote {
    /// 1 up, -1 down, 0 withdraws your vote.
    pub value: i64,
}

/// Open a thread on an app (any member; `repo:*`).
#[utoipa::path(post, path = "/apps/{app_id}/threads", tag = "notes", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id")), request_body = NewThread,
    responses((status = 201, body = ThreadView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn create_thread(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Json(req): Json<NewThread>,
) -> Result<(StatusCode, Json<ThreadView>), ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let title = paging::text("title", &req.title, MAX_TITLE)?;
    let thread = notes::open_thread(state.db(), app.id, caller.user_id, title).await?;
    Ok((StatusCode::CREATED, Json(thread.into())))
}

/// An app's threads, newest first (any member).
#[utoipa::path(get, path = "/apps/{app_id}/threads", tag = "notes", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), PageQuery),
    responses((status = 200, body = ThreadPage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn list_threads(
    State(state): State<AppState>,
    caller: Caller,
    Path(app_id): Path<Uuid>,
    Query(query): Query<PageQuery>,
) -> Result<Json<ThreadPage>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let limit = query.limit()?;
    let rows = notes::threads(state.db(), app.id, query.after()?, limit).await?;
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|t| i64::from(t.number)));
    Ok(Json(ThreadPage {
        threads: rows.into_iter().map(ThreadView::from).collect(),
        next_cursor,
    }))
}

/// Append a note to a thread (any member; `repo:*`). Notes are never edited or deleted.
#[utoipa::path(post, path = "/apps/{app_id}/threads/{number}/notes", tag = "notes", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("number" = i32, Path, description = "Thread number")),
    request_body = NewNote,
    responses((status = 201, body = NoteView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope, description = "app or thread")))]
async fn add_note(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, number)): Path<(Uuid, i32)>,
    Json(req): Json<NewNote>,
) -> Result<(StatusCode, Json<NoteView>), ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let body = paging::text("body", &req.body, MAX_NOTE)?;
    let note = notes::add_note(state.db(), app.id, number, caller.user_id, body)
        .await?
        .ok_or(ApiError::NotFound("thread"))?;
    Ok((StatusCode::CREATED, Json(note.into())))
}

/// A thread's notes, oldest first, with their scores and your vote (any member).
#[utoipa::path(get, path = "/apps/{app_id}/threads/{number}/notes", tag = "notes", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("number" = i32, Path, description = "Thread number"), PageQuery),
    responses((status = 200, body = NotePage), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope, description = "app or thread")))]
async fn list_notes(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, number)): Path<(Uuid, i32)>,
    Query(query): Query<PageQuery>,
) -> Result<Json<NotePage>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let limit = query.limit()?;
    notes::thread(state.db(), app.id, number)
        .await?
        .ok_or(ApiError::NotFound("thread"))?;
    let rows = notes::notes(
        state.db(),
        app.id,
        number,
        caller.user_id,
        query.after()?,
        limit,
    )
    .await?;
    let next_cursor = next_cursor(rows.len(), limit, rows.last().map(|n| n.id));
    Ok(Json(NotePage {
        notes: rows.into_iter().map(NoteView::from).collect(),
        next_cursor,
    }))
}

/// Vote on a note: 1, -1, or 0 to withdraw your vote (any member; `repo:*`). One vote per person per note.
#[utoipa::path(put, path = "/apps/{app_id}/threads/{number}/notes/{note_id}/vote", tag = "notes", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("number" = i32, Path, description = "Thread number"),
           ("note_id" = i64, Path, description = "Note id")),
    request_body = Vote,
    responses((status = 200, body = NoteView), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope, description = "app, thread or note")))]
async fn vote_note(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, number, note_id)): Path<(Uuid, i32, i64)>,
    Json(req): Json<Vote>,
) -> Result<Json<NoteView>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let app = access::authorize(&state, &caller, app_id, Action::Write).await?;
    let value = match req.value {
        -1 => -1,
        0 => 0,
        1 => 1,
        other => {
            return Err(ApiError::bad_request(format!(
                "value must be 1, -1 or 0, not {other}"
            )));
        }
    };
    let note = notes::vote(state.db(), app.id, number, note_id, caller.user_id, value)
        .await?
        .ok_or(ApiError::NotFound("note"))?;
    Ok(Json(note.into()))
}
