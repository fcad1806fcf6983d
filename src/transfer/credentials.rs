//! The data server's side of a transfer's new credentials: the moved databases' roles take the passwords the
//! re-keying recorded ([`super::rekey`]) before that is committed, and every session they have open ends (the
//! old app's pods, a former member's `psql`, the external SQL proxy's relays), so that nothing opened with the
//! old passwords outlives the move. The passwords are set the way provisioning sets them
//! ([`DataServer::set_roles`]), with the new owner's connection limit.

use slipway_controllers::postgres::server::{DataServer, RoleSettings};
use slipway_crds::plans::Plan;
use uuid::Uuid;

use super::rekey::NewPasswords;
use crate::api::error::ApiError;
use crate::api::state::AppState;

/// 503 `postgres_unavailable` when a channel of `channels` has a database and there is no data server to give its
/// roles new passwords: checked before anything is written.
pub(super) async fn check_server(state: &AppState, channels: &[Uuid]) -> Result<(), ApiError> {
    if state.data_server().is_some() {
        return Ok(());
    }
    let recorded: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM channel_databases WHERE channel_id = ANY($1))",
    )
    .bind(channels)
    .fetch_one(state.db())
    .await?;
    if recorded {
        server(state).map(|_| ())
    } else {
        Ok(())
    }
}

/// Gives each moved database's roles their new passwords and ends their sessions, and the external SQL sessions
/// of the old app `old_app`. 503 `postgres_unavailable` when there are databases and no data server to reach.
pub(super) async fn give_to_server(
    state: &AppState,
    databases: &[NewPasswords],
    plan: &Plan,
    old_app: Uuid,
) -> Result<(), ApiError> {
    state.sql_sessions().cut_app(old_app);
    if databases.is_empty() {
        return Ok(());
    }
    let server = server(state)?;
    for database in databases {
        let settings = RoleSettings {
            password: &database.new.0,
            readonly_password: &database.new.1,
            connection_limit: plan.database_connection_limit(),
        };
        server
            .set_roles(&database.names, &settings)
            .await
            .map_err(refused)?;
        server
            .end_sessions(&database.names)
            .await
            .map_err(refused)?;
    }
    Ok(())
}

/// Puts the passwords the roles had back, after a transfer that could not commit; a failure is logged (the
/// operator sets the recorded passwords again when it next reconciles the channel).
pub(super) async fn put_back(state: &AppState, databases: &[NewPasswords], plan: &Plan) {
    let Ok(server) = server(state) else { return };
    for database in databases {
        let settings = RoleSettings {
            password: &database.previous.0,
            readonly_password: &database.previous.1,
            connection_limit: plan.database_connection_limit(),
        };
        if let Err(e) = server.set_roles(&database.names, &settings).await {
            tracing::error!(error = %e, db = %database.names.db_name,
                "the roles' passwords of a failed transfer could not be put back");
        }
    }
}

fn server(state: &AppState) -> Result<&DataServer, ApiError> {
    state.data_server().ok_or_else(|| {
        ApiError::PostgresUnavailable(
            "the app's databases need new passwords when it moves, and no data server is configured".into(),
        )
    })
}

fn refused(e: slipway_controllers::postgres::server::ServerError) -> ApiError {
    tracing::warn!(error = %e, "a transfer could not give its databases new passwords");
    ApiError::PostgresUnavailable(
        "the data server could not give the app's databases new passwords; nothing was moved, try again".into(),
    )
}
