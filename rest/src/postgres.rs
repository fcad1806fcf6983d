//! The SQL database of a channel: its status, and the caller's storage rollup. The database's state comes from
//! the Channel's `DatabaseReady` condition (the reconciler's), its names and password from the platform database,
//! and its connections and size are measured on the data server at each call (a call that cannot measure answers
//! 503 postgres_unavailable rather than a guess).

use axum::extract::State;
use serde::{Deserialize, Serialize};
use slipway_backends::data_server::names;
use slipway_backends::data_server::{DataServer, DumpFormat};
use slipway_crds::Channel;
use slipway_crds::names::{self as crd_names, ChannelName};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::access::{self, Action, VisibleApp};
use slipway_core::caller::Caller;
use slipway_core::channel_database::{
    condition_state, configured, database_channel, ready_record, unavailable,
};
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_postgres::store;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_postgres))
        .routes(routes!(reset_postgres))
        .routes(routes!(dump_postgres))
        .routes(routes!(my_postgres_storage))
}

/// SQL database status of a non-static channel.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatabaseStatus {
    /// Name of the channel's own database; also the typed confirmation of destructive operations.
    pub db_name: String,
    /// The role in `DATABASE_URL` (owner of the database).
    pub role_name: String,
    /// `provisioning`, `ready` or `failed` (see `last_error`; retried hourly and at any change of the channel).
    pub status: String,
    /// Why provisioning failed, while `failed`.
    pub last_error: Option<String>,
    /// Live connections held by the role.
    pub connection_count: i64,
    /// Configured connection limit of the role (0 before it exists).
    pub connection_limit: i64,
    /// Whether the role has a stored password.
    pub password_set: bool,
    /// Bytes the database occupies (0 before it exists).
    pub storage_bytes: i64,
}

/// Body of the destructive routes: the database's name, typed.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct Confirmation {
    /// Must equal the channel's current `db_name`.
    pub confirm_db_name: String,
}

/// The caller's SQL storage across the databases of their apps.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DatabaseStorage {
    /// Bytes the databases occupy together.
    pub database_size_bytes: i64,
    /// Number of databases.
    pub database_count: i64,
}

/// Empty a channel's SQL database (typed confirmation; role and password kept; audit-logged).
#[utoipa::path(post, path = "/apps/{app_id}/channels/{channel_id}/postgres/reset", tag = "postgres", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    request_body = Confirmation,
    responses((status = 204, description = "the database is empty"), (status = 400, body = ErrorEnvelope),
              (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (db:*: the spec states no scope for this route; emptying a database is a db:* act, so a narrow credential such as stats:read cannot) or permission_denied"),
              (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn reset_postgres(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
    Json(confirmation): Json<Confirmation>,
) -> Result<axum::http::StatusCode, ApiError> {
    caller.require_scope(scopes::DB)?;
    let app = access::authorize(&state, &caller, app_id, Action::ReplaceData).await?;
    let channel = database_channel(&state, &app, channel_id)?;
    let server = configured(&state)?;
    let record = ready_record(&channel, channel_id, &state).await?;
    confirm(&confirmation.confirm_db_name, &record)?;
    server.reset(&record.names()).await.map_err(unavailable)?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "postgres.reset",
        serde_json::json!({"channel_id": channel_id, "db_name": record.db_name}),
    )
    .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// 400 `invalid_confirmation` unless the typed name is the database's.
pub fn confirm(typed: &str, record: &store::Record) -> Result<(), ApiError> {
    if typed == record.db_name {
        Ok(())
    } else {
        Err(ApiError::InvalidConfirmation(format!(
            "confirm_db_name must be the channel's database name, {}",
            record.db_name
        )))
    }
}

/// Download a channel's SQL data as plain SQL, streamed (audit-logged). A dump that fails half-way breaks the
/// transfer; a complete one ends with `-- PostgreSQL database dump complete`.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/postgres/dump", tag = "postgres", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, description = "the dump", content_type = "application/sql", body = String),
              (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (db:*: the spec states no scope for this route; every row of the database is a db:* read) or permission_denied"),
              (status = 404, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn dump_postgres(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<axum::response::Response, ApiError> {
    caller.require_scope(scopes::DB)?;
    let app = access::authorize(&state, &caller, app_id, Action::DownloadData).await?;
    let channel = database_channel(&state, &app, channel_id)?;
    let server = configured(&state)?;
    let record = ready_record(&channel, channel_id, &state).await?;
    // Reachable now, so a down server is a 503 rather than a transfer that breaks at once.
    server.measure(&record.names()).await.map_err(unavailable)?;
    let command = server.dump_command(&record.db_name, DumpFormat::Plain);
    let body = slipway_postgres::stream::stdout_of(command, "pg_dump").map_err(unavailable)?;
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        Some(app_id),
        "postgres.dump",
        serde_json::json!({"channel_id": channel_id, "db_name": record.db_name}),
    )
    .await?;
    super::downloads::attachment(
        axum::body::Body::from_stream(body),
        "application/sql",
        &format!("{}.sql", record.db_name),
    )
}

/// Read a channel's SQL database status.
#[utoipa::path(get, path = "/apps/{app_id}/channels/{channel_id}/postgres", tag = "postgres", security(("bearer" = [])),
    params(("app_id" = Uuid, Path, description = "App id"), ("channel_id" = Uuid, Path, description = "Channel id")),
    responses((status = 200, body = DatabaseStatus), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope),
              (status = 503, body = ErrorEnvelope)))]
async fn get_postgres(
    State(state): State<AppState>,
    caller: Caller,
    Path((app_id, channel_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<DatabaseStatus>, ApiError> {
    let app = access::authorize(&state, &caller, app_id, Action::Read).await?;
    let channel = database_channel(&state, &app, channel_id)?;
    Ok(Json(status_of(&state, &app, &channel, channel_id).await?))
}

/// The status of a channel's database, measured now.
pub async fn status_of(
    state: &AppState,
    app: &VisibleApp,
    channel: &Channel,
    channel_id: Uuid,
) -> Result<DatabaseStatus, ApiError> {
    let server = configured(state)?;
    let (status, last_error) = condition_state(channel);
    let record = store::by_channel(state.db(), channel_id).await?;
    let names = match &record {
        Some(record) => record.names(),
        // Not recorded yet: the names it is about to get.
        None => {
            let channel_name: ChannelName = channel.channel_name().parse()?;
            names::for_label(&crd_names::channel_host_label(
                &app.name,
                &channel_name,
                &app.owner,
            )?)
        }
    };
    let measured = server.measure(&names).await.map_err(unavailable)?;
    Ok(DatabaseStatus {
        db_name: names.db_name,
        role_name: names.role_name,
        status: status.to_owned(),
        last_error,
        connection_count: measured.connection_count,
        connection_limit: measured.connection_limit.map_or(0, i64::from),
        password_set: record.is_some(),
        storage_bytes: measured.storage_bytes.unwrap_or(0),
    })
}

/// The bytes and number of the databases of `owner`'s apps, measured in one query (whole, or 503).
pub async fn owned_databases(
    state: &AppState,
    server: &DataServer,
    owner: &str,
) -> Result<(i64, i64), ApiError> {
    let db_names: Vec<String> = store::by_owner(state.db(), owner)
        .await?
        .into_iter()
        .map(|r| r.db_name)
        .collect();
    server.total_size(&db_names).await.map_err(unavailable)
}

/// The caller's SQL storage: bytes and number of databases of the apps they own.
#[utoipa::path(get, path = "/me/postgres/storage", tag = "postgres", security(("bearer" = [])),
    responses((status = 200, body = DatabaseStorage), (status = 401, body = ErrorEnvelope), (status = 503, body = ErrorEnvelope)))]
async fn my_postgres_storage(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<DatabaseStorage>, ApiError> {
    let server = configured(&state)?;
    let (database_size_bytes, database_count) =
        owned_databases(&state, server, &caller.username).await?;
    Ok(Json(DatabaseStorage {
        database_size_bytes,
        database_count,
    }))
}
