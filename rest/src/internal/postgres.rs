//! `/internal/v1/channels/{channel_id}/postgres`: what the operator needs from the platform database for a
//! channel's SQL database. The API server names the database after the channel (once), mints and seals both
//! roles' passwords (the operator never holds the keyring), and opens them for provisioning and for a deploy's
//! containers. `/internal/v1/deploys/{deploy_id}/postgres-snapshot` starts a deploy's `pre_deploy` checkpoint
//! (SQL snapshot and object-store marker) as a job before the operator starts its new container, and answers how it
//! is. Open only to callers whose role permits [`RouteGroup::Databases`] (the operator).

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
use crate::extract::{Json, Path};
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_data::checkpoints::pre_deploy;
use slipway_jobs::{self, store::Admission, store::Enqueued};
use slipway_postgres::snapshots;
use slipway_postgres::store::{self, NewRecord, Record};

/// The routes of this module (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/internal/v1/channels/{channel_id}/postgres",
            put(ensure_record).get(record).delete(delete_record),
        )
        .route(
            "/internal/v1/deploys/{deploy_id}/postgres-snapshot",
            put(pre_deploy_snapshot).delete(cancel_pre_deploy_snapshot),
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
    let app = super::app_by_id(&state, app_id).await?;
    if app.app.spec.template == Template::Static {
        return Err(ApiError::Conflict(
            "static channels have no database".into(),
        ));
    }
    let channel = super::channel_by_id(&state, &app, channel_id).await?;
    let channel_name: ChannelName = channel.channel_name().parse()?;
    let label = names::channel_host_label(&app.name, &channel_name, &app.owner)?;
    let names = slipway_backends::data_server::names::for_label(&label);
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
        slipway_data::checkpoints::exclusively(
            state.db(),
            channel_id,
            snapshots::forget_channel(state.db(), archive, channel_id),
        )
        .await?
        .map_err(ApiError::Internal)?;
    }
    store::delete(state.db(), channel_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn parse_id(what: &str, id: &str) -> Result<Uuid, ApiError> {
    id.parse()
        .map_err(|_| ApiError::BadRequest(format!("{what} is not a uuid")))
}

/// `PUT /internal/v1/deploys/{deploy_id}/postgres-snapshot`: starts the deploy's `pre_deploy` checkpoint as a job
/// (once per deploy: a repeated call finds the same job) and answers how it is after at most
/// [`slipway_jobs::Timing::answer_within`]: taken, skipped (and why), failed (and the deploy with it), or running
/// (the operator asks again). The job goes on whether or not anyone asks.
async fn pre_deploy_snapshot(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(deploy_id): Path<Uuid>,
    Json(request): Json<PreDeploySnapshotRequest>,
) -> Result<Json<PreDeploySnapshot>, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    let params = pre_deploy::Params {
        deploy_id,
        app_id: parse_id("app_id", &request.app_id)?,
        channel_id: parse_id("channel_id", &request.channel_id)?,
        git_sha: request.git_sha,
    };
    let app = super::app_by_id(&state, params.app_id).await?;
    super::channel_by_id(&state, &app, params.channel_id).await?;
    let job =
        match slipway_jobs::store::enqueue(state.db(), &pre_deploy::job(&params), Admission::Queue)
            .await?
        {
            Enqueued::New(job) => {
                state.jobs().wake();
                job
            }
            Enqueued::Existing(job) | Enqueued::Busy(job) => job,
        };
    let job = slipway_jobs::runner::wait_at_most(
        state.db(),
        job.id,
        Some(state.jobs().timing().answer_within),
    )
    .await?
    .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the checkpoint job {} vanished", job.id)))?;
    Ok(Json(pre_deploy::answer(&job)))
}

/// `DELETE /internal/v1/deploys/{deploy_id}/postgres-snapshot`: fails the deploy's checkpoint job if it has not
/// finished (the deploy gave up waiting); its runner stops the dump at its next heartbeat, leaving no snapshot. 204
/// either way.
async fn cancel_pre_deploy_snapshot(
    State(state): State<AppState>,
    caller: InternalCaller,
    Path(deploy_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::Databases)?;
    let subject = pre_deploy::subject(deploy_id);
    if let Some(job) =
        slipway_jobs::store::by_subject(state.db(), slipway_jobs::Kind::Checkpoint, &subject)
            .await?
    {
        slipway_jobs::store::cancel(
            state.db(),
            job.id,
            "the deploy stopped waiting for its pre-deploy checkpoint",
        )
        .await?;
    }
    Ok(StatusCode::NO_CONTENT)
}
