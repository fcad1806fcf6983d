//! A channel's SQL database as the routes, the SQL proxy and exports meet it: the data server or 503, the channel
//! that can have a database, and its record once provisioning has succeeded.

use slipway_backends::data_server::DataServer;
use slipway_crds::conditions::{self, reasons};
use slipway_crds::{Channel, Template};
use uuid::Uuid;

use super::access::{self, VisibleApp};
use super::error::ApiError;
use super::state::AppState;
use slipway_postgres::store;

/// What the Channel's condition says of its database: (status, last error).
pub fn condition_state(channel: &Channel) -> (&'static str, Option<String>) {
    let condition = channel.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::DATABASE_READY)
    });
    match condition {
        Some(c) if c.status == "True" => ("ready", None),
        Some(c) if c.reason == reasons::DATABASE_FAILED => ("failed", Some(c.message.clone())),
        _ => ("provisioning", None),
    }
}

/// The data server, or 503 `postgres_unavailable`.
pub fn configured(state: &AppState) -> Result<&DataServer, ApiError> {
    state.data_server().ok_or_else(|| {
        ApiError::PostgresUnavailable("no SQL data server is configured on this platform".into())
    })
}

/// 503 `postgres_unavailable` for a data server that failed to answer (the cause is logged).
pub fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "data server did not answer");
    ApiError::PostgresUnavailable("the SQL data server cannot answer right now; try again".into())
}

/// The channel of a non-static app: static channels have no database (404).
pub fn database_channel(
    state: &AppState,
    app: &VisibleApp,
    channel_id: Uuid,
) -> Result<std::sync::Arc<Channel>, ApiError> {
    let channel = access::channel_of(state, app, channel_id)?;
    if app.app.spec.template == Template::Static {
        return Err(ApiError::Missing(
            "not_found",
            "static channels have no SQL database".into(),
        ));
    }
    Ok(channel)
}

/// The recorded, ready database of a channel: 409 `conflict` until provisioning has succeeded.
pub async fn ready_record(
    channel: &Channel,
    channel_id: Uuid,
    state: &AppState,
) -> Result<store::Record, ApiError> {
    let (status, last_error) = condition_state(channel);
    let record = store::by_channel(state.db(), channel_id).await?;
    match (record, status) {
        (Some(record), "ready") => Ok(record),
        _ => Err(ApiError::Conflict(match last_error {
            Some(e) => format!("the channel's database is not ready: {e}"),
            None => "the channel's database is not ready yet; try again shortly".into(),
        })),
    }
}
