//! Memberships of people other than the owner on an app.

use sqlx::PgPool;
use uuid::Uuid;

/// The apps `user` is a member of, with the role on each.
pub async fn apps_of(db: &PgPool, user: Uuid) -> sqlx::Result<Vec<(Uuid, String)>> {
    sqlx::query_as("SELECT app_id, role FROM app_members WHERE user_id = $1")
        .bind(user)
        .fetch_all(db)
        .await
}

/// Adds `user` to `app` with `role` (admin or member), or changes the role.
pub async fn put(db: &PgPool, app: Uuid, user: Uuid, role: &str) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO app_members (app_id, user_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (app_id, user_id) DO UPDATE SET role = EXCLUDED.role",
    )
    .bind(app)
    .bind(user)
    .bind(role)
    .execute(db)
    .await?;
    Ok(())
}

/// Removes every membership of a deleted app.
pub async fn remove_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM app_members WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}
