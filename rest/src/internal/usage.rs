//! `POST /internal/v1/usage/bandwidth`: the edges report the bytes they sent per account, added to each account's
//! month. Open only to callers whose role permits [`RouteGroup::Bandwidth`] (the edge and the operator).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use slipway_internal::RouteGroup;
use slipway_internal::protocol::BandwidthReport;

use super::guard::InternalCaller;
use crate::extract::Json;
use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// The routes of this module (state: the API's).
pub fn routes() -> Router<AppState> {
    Router::new().route("/internal/v1/usage/bandwidth", post(report_bandwidth))
}

async fn report_bandwidth(
    State(state): State<AppState>,
    caller: InternalCaller,
    Json(report): Json<BandwidthReport>,
) -> Result<StatusCode, ApiError> {
    caller.require(&state, RouteGroup::Bandwidth)?;
    let bytes: Vec<(String, i64)> = report
        .bytes
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(owner, b)| (owner, i64::try_from(b).unwrap_or(i64::MAX)))
        .collect();
    if !bytes.is_empty() {
        slipway_store::db::bandwidth::add(state.db(), &bytes).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}
