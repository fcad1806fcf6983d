//! `/internal/v1/channels/{channel_id}/postgres`: what the operator needs from the platform database for a
//! channel's SQL database. The API server names the database after the channel (once), mints and seals both
//! roles' passwords (the operator never holds the keyring), and opens them for provisioning and for a deploy's
//! containers. `/internal/v1/deploys/{deploy_id}/postgres-snapshot` takes a deploy's `pre_deploy` checkpoint (SQL
//! snapshot and object-store marker) before the operator starts its new container. Open only to callers whose role permits [`RouteGroup::Databases`] (the
//! operator).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::put;
use slipway_crds::Template;
use slipway_crds::names::{self, ChannelName};
use slipway_internal::RouteGroup;
use slipway_internal::protocol::{
    DatabaseRecord, DatabaseRequest, PreDeploySnapshot, PreDeploySnapshotRequest,
};
use uuid::Uuid;

use super::guard::InternalCaller;
use crate::api::access;
use crate::api::error::{ApiError, pool_exhausted};
use crate::api::extract::{Json, Path};
use crate::api::state::AppState;
use crate::checkpoints::{self, Checkpoint, SqlLeg};
use crate::postgres::snapshots::{self, Kind, Occasion, Parts};
use crate::postgres::store::{self, NewRecord, Record};

/// The routes of this module (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/internal/v1/channels/{channel_id}/postgres",
            put(ensure_record).get(record).delete(delete_record),
        )
        .route(
            "/internal/v1/deploys/{deploy_id}/postgres-snapshot",
            put(pre_deploy_snapshot),
        )
}

fn answer(state: &AppState, record: Record) -> Result<Json<DatabaseRecord>, ApiError> {
    let (password, readonly_password) = record
        .passwords(state.keyring())
        .map_err(ApiError::Internal)?;
    Ok(Json(DatabaseRecord {
        db_name: record.db_name,
        role_name: record.role_name,
        readonly_role_name: record.readonly_role_name,
        password,
        readonly_password,
    }))
}

/// `PUT /internal/v1/channels/{channel_id}/postgres`: records the channel's database with fresh passwords, or
/// answers the one recorded.
async fn ensure_record(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
    Json(request): Json<DatabaseRequest>,
) -> Result<Json<DatabaseRecord>, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    let app_id: Uuid = request
        .app_id
        .parse()
        .map_err(|_| ApiError::BadRequest("app_id is not a uuid".into()))?;
    let app = super::app_by_id(&state, app_id)?;
    if app.app.spec.template == Template::Static {
        return Err(ApiError::Conflict(
            "static channels have no database".into(),
        ));
    }
    let channel = access::channel_of(&state, &app, channel_id)?;
    let channel_name: ChannelName = channel.channel_name().parse()?;
    let label = names::channel_host_label(&app.name, &channel_name, &app.owner)?;
    let names = slipway_controllers::postgres::names::for_label(&label);
    let record = store::ensure(
        state.db(),
        state.keyring(),
        &NewRecord {
            channel_id,
            app_id,
            owner: app.owner.as_str(),
            names: &names,
        },
    )
    .await?;
    answer(&state, record)
}

/// `GET /internal/v1/channels/{channel_id}/postgres`: the recorded database with its roles' passwords.
async fn record(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
) -> Result<Json<DatabaseRecord>, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    let record = store::by_channel(state.db(), channel_id)
        .await?
        .ok_or_else(|| {
            ApiError::Missing("not_found", "the channel's database is not recorded".into())
        })?;
    answer(&state, record)
}

/// `DELETE /internal/v1/channels/{channel_id}/postgres`: forgets the database (it was dropped) and removes its
/// snapshots; 204 either way.
async fn delete_record(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(channel_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    if let Some(archive) = state.snapshot_archive() {
        snapshots::forget_channel(state.db(), archive, channel_id)
            .await
            .map_err(ApiError::Internal)?;
    }
    store::delete(state.db(), channel_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn parse_id(what: &str, id: &str) -> Result<Uuid, ApiError> {
    id.parse()
        .map_err(|_| ApiError::BadRequest(format!("{what} is not a uuid")))
}

/// `PUT /internal/v1/deploys/{deploy_id}/postgres-snapshot`: takes the deploy's `pre_deploy` checkpoint (once
/// per deploy): the SQL snapshot when the channel's database is ready, the object-store marker when its bucket is;
/// or says why there is nothing to take. A dump that fails is `failed`, and the deploy with it.
async fn pre_deploy_snapshot(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(deploy_id): Path<Uuid>,
    Json(request): Json<PreDeploySnapshotRequest>,
) -> Result<Json<PreDeploySnapshot>, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    let app_id = parse_id("app_id", &request.app_id)?;
    let channel_id = parse_id("channel_id", &request.channel_id)?;
    let app = super::app_by_id(&state, app_id)?;
    let channel = access::channel_of(&state, &app, channel_id)?;
    let blob = checkpoints::blob_leg(&state, &channel, channel_id).await;
    let record = match store::by_channel(state.db(), channel_id).await? {
        Some(record)
            if record.app_id == app_id
                && channel.condition_is_true(slipway_crds::conditions::DATABASE_READY) =>
        {
            Some(record)
        }
        _ => None,
    };
    let sql_parts = match (state.data_server(), state.snapshot_archive()) {
        (Some(server), Some(archive)) => Some(Parts {
            db: state.db(),
            server,
            archive,
        }),
        _ => None,
    };
    let sql = match (sql_parts, &record) {
        (Some(parts), Some(record)) => Some(SqlLeg { parts, record }),
        _ => None,
    };
    if sql.is_none() && blob.is_none() {
        return Ok(Json(PreDeploySnapshot::Skipped {
            reason: "nothing to keep: the channel has no ready database or bucket, or this platform keeps no \
                     snapshots"
                .to_owned(),
        }));
    }
    let plan = crate::postgres::nightly::owner_plan(state.db(), app.owner.as_str())
        .await
        .map_err(ApiError::Internal)?;
    let occasion = Occasion {
        kind: Kind::PreDeploy,
        deploy_id: Some(deploy_id),
        git_sha: request.git_sha,
    };
    let taken = checkpoints::take(state.db(), channel_id, sql, blob, &occasion, plan).await;
    if let Err(e) = &taken {
        tracing::warn!(%deploy_id, %channel_id, error = %e, "pre-deploy checkpoint failed");
    }
    checkpoint_answer(taken).map(Json)
}

/// What the operator hears of a pre-deploy checkpoint. A checkpoint that failed fails the deploy, unless all that
/// failed was the wait for a database connection: the platform was busy, not the dump, so the call answers 503
/// and the operator asks again (the occasion's legs already taken are not taken twice).
fn checkpoint_answer(taken: anyhow::Result<Checkpoint>) -> Result<PreDeploySnapshot, ApiError> {
    Ok(match taken {
        Ok(Checkpoint {
            sql: Some(snapshot),
            ..
        }) => PreDeploySnapshot::Taken {
            snapshot_id: snapshot.id.to_string(),
        },
        Ok(Checkpoint { sql: None, .. }) => PreDeploySnapshot::Skipped {
            reason: "the channel's database is not ready: only its bucket was checkpointed"
                .to_owned(),
        },
        Err(e) if pool_exhausted(&e) => return Err(ApiError::Internal(e)),
        Err(e) => PreDeploySnapshot::Failed {
            reason: format!("the pre-deploy SQL snapshot failed: {e}"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    #[test]
    fn a_checkpoint_that_waited_in_vain_for_a_connection_is_retried_not_failed() {
        let busy = anyhow::Error::new(sqlx::Error::PoolTimedOut).context("recording the snapshot");
        let Err(error) = checkpoint_answer(Err(busy)) else {
            panic!("a busy platform failed the deploy");
        };
        assert_eq!(
            error.into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn a_checkpoint_whose_dump_failed_fails_the_deploy() {
        let dump = anyhow::anyhow!("pg_dump exited with status 1");
        match checkpoint_answer(Err(dump)) {
            Ok(PreDeploySnapshot::Failed { reason }) => {
                assert!(reason.contains("pg_dump exited with status 1"), "{reason}");
            }
            other => panic!("expected a failed checkpoint, got {other:?}"),
        }
    }
}
