//! Feedback rows and per-app threads of append-only notes with votes. Paged lists go newest first by row id,
//! except a thread's notes, which read oldest first like a conversation.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A feedback message.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Feedback {
    /// Its id (the cursor of the next page).
    pub id: i64,
    /// Who wrote it; `None` once their account is gone.
    pub author: Option<String>,
    /// The text.
    pub message: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Records feedback by `user`, about `app` or (with `None`) the platform.
pub async fn add_feedback(
    db: &PgPool,
    user: Uuid,
    app: Option<Uuid>,
    message: &str,
) -> sqlx::Result<Feedback> {
    sqlx::query_as(
        "WITH added AS (INSERT INTO feedback (user_id, app_id, message) VALUES ($1, $2, $3) \
         RETURNING id, user_id, message, created_at) \
         SELECT a.id, u.username AS author, a.message, a.created_at FROM added a JOIN users u ON u.id = a.user_id",
    )
    .bind(user)
    .bind(app)
    .bind(message)
    .fetch_one(db)
    .await
}

/// A page of `user`'s feedback on the platform, newest first, older than `before`.
pub async fn platform_feedback(
    db: &PgPool,
    user: Uuid,
    before: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<Feedback>> {
    sqlx::query_as(
        "SELECT f.id, u.username AS author, f.message, f.created_at FROM feedback f JOIN users u ON u.id = f.user_id \
         WHERE f.user_id = $1 AND f.app_id IS NULL AND ($2::bigint IS NULL OR f.id < $2) \
         ORDER BY f.id DESC LIMIT $3",
    )
    .bind(user)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A page of the feedback on `app`, newest first, older than `before`.
pub async fn app_feedback(
    db: &PgPool,
    app: Uuid,
    before: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<Feedback>> {
    sqlx::query_as(
        "SELECT f.id, u.username AS author, f.message, f.created_at FROM feedback f \
         LEFT JOIN users u ON u.id = f.user_id \
         WHERE f.app_id = $1 AND ($2::bigint IS NULL OR f.id < $2) ORDER BY f.id DESC LIMIT $3",
    )
    .bind(app)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A thread.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Thread {
    /// Its number within the app.
    pub number: i32,
    /// Its title.
    pub title: String,
    /// Who opened it.
    pub author: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
    /// How many notes it holds.
    pub note_count: i64,
}

/// The columns of a [`Thread`] (a macro, so queries stay static strings).
macro_rules! thread_columns {
    () => {
        "SELECT t.number, t.title, u.username AS author, t.created_at, \
         (SELECT count(*) FROM notes n WHERE n.app_id = t.app_id AND n.thread = t.number) AS note_count \
         FROM note_threads t LEFT JOIN users u ON u.id = t.author_id "
    };
}

/// Opens thread number max + 1 of `app`, numbered under a per-app lock so parallel calls get distinct numbers.
pub async fn open_thread(
    db: &PgPool,
    app: Uuid,
    author: Uuid,
    title: &str,
) -> sqlx::Result<Thread> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('note_threads:' || $1::text))")
        .bind(app)
        .execute(&mut *tx)
        .await?;
    let number: i32 = sqlx::query_scalar(
        "INSERT INTO note_threads (app_id, number, title, author_id) \
         SELECT $1, coalesce(max(number), 0) + 1, $2, $3 FROM note_threads WHERE app_id = $1 RETURNING number",
    )
    .bind(app)
    .bind(title)
    .bind(author)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    thread(db, app, number)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// Thread `number` of `app`.
pub async fn thread(db: &PgPool, app: Uuid, number: i32) -> sqlx::Result<Option<Thread>> {
    sqlx::query_as(concat!(
        thread_columns!(),
        "WHERE t.app_id = $1 AND t.number = $2"
    ))
    .bind(app)
    .bind(number)
    .fetch_optional(db)
    .await
}

/// A page of `app`'s threads, newest first, numbered below `before`.
pub async fn threads(
    db: &PgPool,
    app: Uuid,
    before: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<Thread>> {
    sqlx::query_as(concat!(
        thread_columns!(),
        "WHERE t.app_id = $1 AND ($2::bigint IS NULL OR t.number < $2) ORDER BY t.number DESC LIMIT $3"
    ))
    .bind(app)
    .bind(before)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// A note, with its votes summed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Note {
    /// Its id (how it is voted on).
    pub id: i64,
    /// Its thread's number.
    pub thread: i32,
    /// Its text.
    pub body: String,
    /// Who wrote it.
    pub author: Option<String>,
    /// When.
    pub created_at: DateTime<Utc>,
    /// Up votes minus down votes.
    pub score: i64,
    /// The reader's own vote: 1, -1 or 0.
    pub my_vote: i32,
}

/// The columns of a [`Note`], `$2` being the reader (a macro, so queries stay static strings).
macro_rules! note_columns {
    () => {
        "SELECT n.id, n.thread, n.body, u.username AS author, n.created_at, \
         coalesce((SELECT sum(v.value) FROM note_votes v WHERE v.note_id = n.id), 0)::bigint AS score, \
         coalesce((SELECT v.value FROM note_votes v WHERE v.note_id = n.id AND v.user_id = $2), 0)::int AS my_vote \
         FROM notes n LEFT JOIN users u ON u.id = n.author_id "
    };
}

/// Appends a note to thread `number` of `app`; `None` when there is no such thread.
pub async fn add_note(
    db: &PgPool,
    app: Uuid,
    number: i32,
    author: Uuid,
    body: &str,
) -> sqlx::Result<Option<Note>> {
    let id: Option<i64> = sqlx::query_scalar(
        "INSERT INTO notes (app_id, thread, body, author_id) \
         SELECT app_id, number, $3, $4 FROM note_threads WHERE app_id = $1 AND number = $2 RETURNING id",
    )
    .bind(app)
    .bind(number)
    .bind(body)
    .bind(author)
    .fetch_optional(db)
    .await?;
    match id {
        Some(id) => note(db, app, id, author).await,
        None => Ok(None),
    }
}

/// Note `id` of `app` as `reader` sees it.
pub async fn note(db: &PgPool, app: Uuid, id: i64, reader: Uuid) -> sqlx::Result<Option<Note>> {
    sqlx::query_as(concat!(
        note_columns!(),
        "WHERE n.app_id = $1 AND n.id = $3"
    ))
    .bind(app)
    .bind(reader)
    .bind(id)
    .fetch_optional(db)
    .await
}

/// A page of thread `number`'s notes, oldest first, after note `after`.
pub async fn notes(
    db: &PgPool,
    app: Uuid,
    number: i32,
    reader: Uuid,
    after: Option<i64>,
    limit: i64,
) -> sqlx::Result<Vec<Note>> {
    sqlx::query_as(concat!(
        note_columns!(),
        "WHERE n.app_id = $1 AND n.thread = $3 AND ($4::bigint IS NULL OR n.id > $4) ORDER BY n.id LIMIT $5"
    ))
    .bind(app)
    .bind(reader)
    .bind(number)
    .bind(after)
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Sets `user`'s vote on note `id` of thread `number` of `app` (0 withdraws it); `None` when there is no such note.
pub async fn vote(
    db: &PgPool,
    app: Uuid,
    number: i32,
    id: i64,
    user: Uuid,
    value: i16,
) -> sqlx::Result<Option<Note>> {
    let exists: Option<i64> =
        sqlx::query_scalar("SELECT id FROM notes WHERE app_id = $1 AND thread = $2 AND id = $3")
            .bind(app)
            .bind(number)
            .bind(id)
            .fetch_optional(db)
            .await?;
    if exists.is_none() {
        return Ok(None);
    }
    if value == 0 {
        sqlx::query("DELETE FROM note_votes WHERE note_id = $1 AND user_id = $2")
            .bind(id)
            .bind(user)
            .execute(db)
            .await?;
    } else {
        sqlx::query(
            "INSERT INTO note_votes (note_id, user_id, value) VALUES ($1, $2, $3) \
             ON CONFLICT (note_id, user_id) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(id)
        .bind(user)
        .bind(value)
        .execute(db)
        .await?;
    }
    note(db, app, id, user).await
}

/// Forgets the threads, notes and feedback of a deleted app.
pub async fn remove_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM note_threads WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    sqlx::query("DELETE FROM feedback WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}
