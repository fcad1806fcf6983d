//! The data server's side of a transfer's new credentials: the moved databases' roles take the passwords the
//! re-keying recorded ([`super::rekey`]) before that is committed, and every session they have open ends (the
//! old app's pods, a former member's `psql`, the external SQL proxy's relays), so that nothing opened with the
//! old passwords outlives the move. The passwords are set the way provisioning sets them
//! ([`DataServer::set_roles`]), with the new owner's connection limit.
//!
//! The operator sets the passwords a record holds on every reconcile, so a reconcile of the old channel that read
//! the record before the re-keying could set the old passwords after the data server took the new ones. Each
//! moved database's roles are locked ([`DataServer::lock_roles`], the lock the operator takes from reading a
//! record to setting its passwords) from before the new passwords are set until the re-keying committed or the
//! old passwords are back: a reconcile either finished before, or reads the record once it is committed.

use slipway_backends::data_server::{DataServer, RoleSettings, RolesLock};
use slipway_crds::plans::Plan;
use uuid::Uuid;

use super::rekey::NewPasswords;
use crate::error::ApiError;
use crate::state::AppState;

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

/// The moved databases' roles' locks, held until the re-keying committed or the old passwords are back.
#[must_use = "the locks are released when this is dropped"]
pub(super) struct Locked(Vec<RolesLock>);

impl Locked {
    /// Releases every lock.
    pub(super) async fn release(self) {
        for lock in self.0 {
            lock.release().await;
        }
    }
}

/// Locks each moved database's roles, gives them their new passwords and ends their sessions, and the external
/// SQL sessions of the old app `old_app`; answers the locks, for the caller to release once it committed. 503
/// `postgres_unavailable` when there are databases and no data server to reach, or it refused: some roles may
/// have their new passwords then, for the caller to [`put_back`].
pub(super) async fn give_to_server(
    state: &AppState,
    databases: &[NewPasswords],
    plan: &Plan,
    old_app: Uuid,
) -> Result<Locked, ApiError> {
    state.sql_sessions().cut_app(old_app);
    if databases.is_empty() {
        return Ok(Locked(Vec::new()));
    }
    let server = server(state)?;
    let mut locked = Locked(Vec::with_capacity(databases.len()));
    let mut by_channel: Vec<&NewPasswords> = databases.iter().collect();
    // One order for every caller, so two holders of several never wait for each other.
    by_channel.sort_by_key(|database| database.channel_id);
    for database in by_channel {
        match server.lock_roles(&database.channel_id.to_string()).await {
            Ok(lock) => locked.0.push(lock),
            Err(e) => {
                locked.release().await;
                return Err(refused(e));
            }
        }
    }
    let given = async {
        for database in databases {
            let settings = RoleSettings {
                password: &database.new.0,
                readonly_password: &database.new.1,
                connection_limit: plan.database_connection_limit(),
            };
            server.set_roles(&database.names, &settings).await?;
            server.end_sessions(&database.names).await?;
        }
        Ok(())
    }
    .await;
    match given {
        Ok(()) => Ok(locked),
        Err(e) => {
            locked.release().await;
            Err(refused(e))
        }
    }
}

/// Puts the passwords the roles had back, after a transfer that could not commit (the records still hold them, so
/// a reconcile meanwhile sets the same); a failure is logged (the operator sets the recorded passwords again when
/// it next reconciles the channel).
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

fn refused(e: slipway_backends::data_server::ServerError) -> ApiError {
    tracing::warn!(error = %e, "a transfer could not give its databases new passwords");
    ApiError::PostgresUnavailable(
        "the data server could not give the app's databases new passwords; nothing was moved, try again".into(),
    )
}
