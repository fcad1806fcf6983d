//! `GET /plans` (public) and `GET /me/usage`.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use slipway_crds::plans::{PLANS, Plan};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::Json;
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_plans))
        .routes(routes!(usage))
}

/// `GET /plans` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PlanList {
    /// Every tier, ascending by rank.
    pub plans: Vec<Plan>,
}

/// `GET /me/usage` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    /// The caller's plan tier.
    pub plan: String,
    /// Bytes the caller's channel databases occupy.
    pub storage_bytes: i64,
    /// The plan's database storage (advisory).
    pub storage_limit_mb: u32,
    /// Bytes the edge sent for the caller's channels (and their public S3 endpoints) this calendar month (UTC),
    /// reported by the edges every 30 seconds.
    pub bandwidth_month_bytes: i64,
    /// The last 30 days (UTC) of the same bytes, oldest first and today last (still counting). Not in the spec's
    /// response: the console draws it. A day with nothing sent, or from before the platform kept daily figures,
    /// is 0.
    pub bandwidth_days: Vec<BandwidthDay>,
}

/// Bytes the edge sent for the caller on one day.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BandwidthDay {
    /// The day (UTC), `YYYY-MM-DD`.
    #[schema(value_type = String, format = Date)]
    pub day: chrono::NaiveDate,
    /// Bytes sent that day.
    pub bytes: i64,
}

/// Days of bandwidth history `GET /me/usage` gives.
const BANDWIDTH_DAYS: i32 = 30;

/// The plan tiers and their limits. No bearer, no database read.
#[utoipa::path(get, path = "/plans", tag = "plans", responses((status = 200, body = PlanList)))]
async fn list_plans() -> Json<PlanList> {
    Json(PlanList {
        plans: PLANS.to_vec(),
    })
}

/// The caller's plan and what they use.
#[utoipa::path(get, path = "/me/usage", tag = "plans", security(("bearer" = [])),
    responses((status = 200, body = Usage), (status = 401, body = ErrorEnvelope),
              (status = 503, body = ErrorEnvelope, description = "postgres_unavailable: no data server is configured, or a database could not be measured")))]
async fn usage(State(state): State<AppState>, caller: Caller) -> Result<Json<Usage>, ApiError> {
    let plan = Plan::by_tier(&caller.plan)
        .ok_or_else(|| anyhow::anyhow!("unknown plan {}", caller.plan))?;
    let bandwidth_month_bytes =
        slipway_store::db::bandwidth::this_month(state.db(), &caller.username).await?;
    let bandwidth_days =
        slipway_store::db::bandwidth::last_days(state.db(), &caller.username, BANDWIDTH_DAYS)
            .await?
            .into_iter()
            .map(|(day, bytes)| BandwidthDay { day, bytes })
            .collect();
    // Database storage is measured on the data server; without one it cannot be, and a made-up 0 would read as a
    // fact (503 postgres_unavailable, as the spec's row says).
    let server = slipway_core::channel_database::configured(&state)?;
    let storage_bytes = super::postgres::owned_databases(&state, server, &caller.username)
        .await?
        .0;
    Ok(Json(Usage {
        plan: plan.tier.to_owned(),
        storage_bytes,
        storage_limit_mb: plan.storage_mb,
        bandwidth_month_bytes,
        bandwidth_days,
    }))
}
