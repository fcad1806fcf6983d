//! Memberships of people other than the owner on an app.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// The apps `user` is a member of, with the role on each.
pub async fn apps_of(db: &PgPool, user: Uuid) -> sqlx::Result<Vec<(Uuid, String)>> {
    sqlx::query_as("SELECT app_id, role FROM app_members WHERE user_id = $1")
        .bind(user)
        .fetch_all(db)
        .await
}

/// A member of an app.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Member {
    /// The account.
    pub user_id: Uuid,
    /// Its username.
    pub username: String,
    /// `admin` or `member`.
    pub role: String,
    /// When the membership began.
    pub created_at: DateTime<Utc>,
}

/// The members of `app`, oldest first.
pub async fn of_app(db: &PgPool, app: Uuid) -> sqlx::Result<Vec<Member>> {
    sqlx::query_as(
        "SELECT m.user_id, u.username, m.role, m.created_at FROM app_members m JOIN users u ON u.id = m.user_id
         WHERE m.app_id = $1 ORDER BY m.created_at, u.username",
    )
    .bind(app)
    .fetch_all(db)
    .await
}

/// Adds `user` to `app` with `role` (admin or member), or changes the role; returns the membership.
pub async fn put(db: &PgPool, app: Uuid, user: Uuid, role: &str) -> sqlx::Result<Member> {
    sqlx::query_as(
        "WITH m AS (
             INSERT INTO app_members (app_id, user_id, role) VALUES ($1, $2, $3)
             ON CONFLICT (app_id, user_id) DO UPDATE SET role = EXCLUDED.role
             RETURNING user_id, role, created_at)
         SELECT m.user_id, u.username, m.role, m.created_at FROM m JOIN users u ON u.id = m.user_id",
    )
    .bind(app)
    .bind(user)
    .bind(role)
    .fetch_one(db)
    .await
}

/// Removes `user` from `app`; false when they were not a member.
pub async fn remove(db: &PgPool, app: Uuid, user: Uuid) -> sqlx::Result<bool> {
    let done = sqlx::query("DELETE FROM app_members WHERE app_id = $1 AND user_id = $2")
        .bind(app)
        .bind(user)
        .execute(db)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Removes every membership of a deleted app.
pub async fn remove_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM app_members WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}
