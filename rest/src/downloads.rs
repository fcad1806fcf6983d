//! What every download route shares: the attachment answer, the platform's one switch for downloads (code, SQL snapshots and bucket
//! checkpoints alike), and the short-lived tokens that download one thing. A download token is a token of the
//! caller's, minted from the caller's token (revoking that revokes it), with one scope, good for one path only,
//! living an hour or until the caller's token expires if sooner; the plaintext is shown once.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use uuid::Uuid;

use slipway_auth::token;
use slipway_core::caller::Caller;
use slipway_core::error::ApiError;
use slipway_core::state::AppState;

/// How long a download token lives at most.
pub const TOKEN_LIFE: Duration = Duration::hours(1);

/// A download token, shown once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DownloadToken {
    /// The token (a bearer for `download_url` only).
    pub token: String,
    /// Path of the download route it is good for.
    pub download_url: String,
    /// When it stops working: in an hour, or when the caller's token does if sooner.
    pub expires_at: DateTime<Utc>,
}

/// A download's answer: `body` as an attachment named `filename`, of `content_type`.
pub fn attachment(
    body: Body,
    content_type: &'static str,
    filename: &str,
) -> Result<Response, ApiError> {
    let mut res = Response::new(body);
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&format!("attachment; filename=\"{filename}\""))
            .map_err(|e| ApiError::Internal(e.into()))?,
    );
    Ok(res)
}

/// 403 `download_disabled` when the platform keeps downloads off; `what` names the download.
pub fn require_enabled(state: &AppState, what: &str) -> Result<(), ApiError> {
    if state.limits().downloads {
        Ok(())
    } else {
        Err(ApiError::DownloadDisabled(format!(
            "this platform keeps downloads off, {what} included"
        )))
    }
}

/// What a download token is minted for.
pub struct Grant<'a> {
    /// The app whose data it downloads (for the audit journal).
    pub app_id: Uuid,
    /// Its one scope.
    pub scope: &'static str,
    /// The one path it is good for.
    pub path: String,
    /// The token's label.
    pub label: String,
    /// The audit action recorded.
    pub audit_action: &'static str,
    /// The audit details recorded (the expiry is added).
    pub audit_details: serde_json::Value,
    /// Whose token it is.
    pub caller: &'a Caller,
}

/// Mints a download token for `grant`, audit-logged.
pub async fn mint(state: &AppState, grant: Grant<'_>) -> Result<DownloadToken, ApiError> {
    let caller = grant.caller;
    let mut expires_at = Utc::now() + TOKEN_LIFE;
    if let Some(caller_expiry) = caller.expires_at {
        expires_at = expires_at.min(caller_expiry);
    }
    let plaintext = token::generate();
    let scopes = [grant.scope.to_owned()];
    slipway_store::db::tokens::insert(
        state.db(),
        &slipway_store::db::tokens::NewToken {
            user_id: caller.user_id,
            hash: token::hash(&plaintext),
            label: Some(&grant.label),
            scopes: &scopes,
            is_agent: caller.is_agent,
            expires_at: Some(expires_at),
            parent_id: Some(caller.token_id),
            only_path: Some(&grant.path),
            // Its one path is its audience, whoever minted it: the download tools of the MCP server exist to hand
            // an agent a URL it fetches itself, within the hour.
            audience: None,
        },
    )
    .await?;
    let mut details = grant.audit_details;
    if let Some(map) = details.as_object_mut() {
        map.insert("expires_at".into(), serde_json::json!(expires_at));
    }
    slipway_store::db::audit::record(
        state.db(),
        caller,
        Some(grant.app_id),
        grant.audit_action,
        details,
    )
    .await?;
    Ok(DownloadToken {
        token: plaintext,
        download_url: grant.path,
        expires_at,
    })
}
