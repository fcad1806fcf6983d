//! `/tokens` and `/credentials`: minting and revoking access tokens. A minted token never carries more scope, a
//! longer life or a wider audience than the token that minted it (a token of the MCP server's OAuth sign-in, good
//! at `/mcp` only, mints tokens good at `/mcp` only), never carries `email:bind`, and is stored only as its SHA-256.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, OptionalJson, Path};
use slipway_auth::{scopes, token};
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::state::AppState;
use slipway_store::db::tokens::NewToken;

/// Longest life of a credential: 30 days.
pub const MAX_CREDENTIAL_SECONDS: i64 = 2_592_000;
/// Longest `expires_in` of `POST /tokens`: 100 years (365-day years). The spec sets no bound; one is needed so the
/// expiry is a time every part (chrono, Postgres, clients) can represent.
pub const MAX_TOKEN_SECONDS: i64 = 100 * 365 * 86_400;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_token, list_tokens))
        .routes(routes!(revoke_token))
        .routes(routes!(create_credential))
}

/// `POST /tokens` request (optional body).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateToken {
    /// A note on what the token is for.
    pub label: Option<String>,
    /// Life in seconds, 1 to 3153600000 (100 years); never longer than the calling token's remaining life.
    pub expires_in: Option<i64>,
}

/// `POST /tokens` response. The plaintext `token` is shown only here.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenCreated {
    /// Token id, for `DELETE /tokens/{token_id}`.
    pub id: Uuid,
    /// The token (`svc_...`).
    pub token: String,
    /// The note given at creation.
    pub label: Option<String>,
    /// The nine default scopes.
    pub scopes: Vec<String>,
    /// When it stops working; null when it does not expire.
    pub expires_at: Option<DateTime<Utc>>,
}

/// One of the account's tokens in `GET /tokens`: never its plaintext.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    /// Token id, for `DELETE /tokens/{token_id}`.
    pub id: Uuid,
    /// The note given at creation.
    pub label: Option<String>,
    /// Its scopes.
    pub scopes: Vec<String>,
    /// Where it came from: `console` (minted on the console's token page), `console_session` (a console sign-in),
    /// `registration`, `ssh_login`; null for one minted with `POST /tokens` or `POST /credentials` or by the
    /// platform operator.
    pub origin: Option<String>,
    /// Whether it is good for one download only (a snapshot download token).
    pub download_only: bool,
    /// When it was minted.
    pub created_at: DateTime<Utc>,
    /// When it stops working; null when it does not expire.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last used, to the minute; null when never.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// `GET /tokens` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    /// The account's tokens that still work, newest first.
    pub tokens: Vec<TokenInfo>,
}

/// `POST /credentials` request.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateCredential {
    /// A subset of the default scopes the calling token holds; omitted means all of them.
    pub scopes: Option<Vec<String>>,
    /// Life in seconds, 1 to 2592000; capped at the calling token's remaining life.
    pub expires_in: Option<i64>,
}

/// A unified credential: git password, SQL password, object-store and download credential, and API bearer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Credential {
    /// The token (`svc_...`).
    pub token: String,
    /// Username to pair it with.
    pub username: String,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
    /// Its scopes.
    pub scopes: Vec<String>,
}

/// The earlier of `wanted` and the caller's own expiry.
fn capped_expiry(caller: &Caller, wanted: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (wanted, caller.expires_at) {
        (Some(w), Some(c)) => Some(w.min(c)),
        (w, c) => w.or(c),
    }
}

/// The moment `seconds` from now, for an `expires_in` that must lie in `1..=max`. Checked arithmetic: whatever a
/// client sends is a 400, never an overflow.
fn expiry_in(seconds: i64, max: i64) -> Result<DateTime<Utc>, ApiError> {
    let refused =
        || ApiError::bad_request(format!("expires_in must be between 1 and {max} seconds"));
    if !(1..=max).contains(&seconds) {
        return Err(refused());
    }
    Duration::try_seconds(seconds)
        .and_then(|life| Utc::now().checked_add_signed(life))
        .ok_or_else(refused)
}

async fn mint(
    state: &AppState,
    caller: &Caller,
    label: Option<&str>,
    scopes: &[String],
    expires_at: Option<DateTime<Utc>>,
) -> Result<(Uuid, String), ApiError> {
    let plaintext = token::generate();
    let new = NewToken {
        user_id: caller.user_id,
        hash: token::hash(&plaintext),
        label,
        scopes,
        is_agent: caller.is_agent,
        expires_at,
        parent_id: Some(caller.token_id),
        only_path: None,
        // Never wider than the caller's: a credential minted through the MCP server's `get_credentials` with an
        // OAuth token stays good at `/mcp` only, or that token's audience would be a 30-day token away.
        audience: caller.audience.as_deref(),
    };
    let id = slipway_store::db::tokens::insert(state.db(), &new).await?;
    Ok((id, plaintext))
}

/// Create a token with the nine default scopes, good where the calling token is good.
#[utoipa::path(post, path = "/tokens", tag = "tokens", security(("bearer" = [])), request_body(content = Option<CreateToken>),
    responses((status = 200, body = TokenCreated), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope)))]
async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    OptionalJson(req): OptionalJson<CreateToken>,
) -> Result<Json<TokenCreated>, ApiError> {
    for scope in scopes::DEFAULT {
        caller.require_scope(scope)?;
    }
    let req = req.unwrap_or_default();
    let label = checked_label(req.label)?;
    let wanted = match req.expires_in {
        Some(seconds) => Some(expiry_in(seconds, MAX_TOKEN_SECONDS)?),
        None => None,
    };
    let expires_at = capped_expiry(&caller, wanted);
    let scopes = scopes::default_scopes();
    let (id, token) = mint(&state, &caller, label.as_deref(), &scopes, expires_at).await?;
    Ok(Json(TokenCreated {
        id,
        token,
        label,
        scopes,
        expires_at,
    }))
}

/// List the account's tokens that still work (not revoked, not expired), newest first, with when each was last
/// used. Any of the account's tokens may list them, as any may revoke them.
#[utoipa::path(get, path = "/tokens", tag = "tokens", security(("bearer" = [])),
    responses((status = 200, body = TokenList), (status = 401, body = ErrorEnvelope)))]
async fn list_tokens(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<TokenList>, ApiError> {
    let tokens = slipway_store::db::tokens::live_of_user(state.db(), caller.user_id)
        .await?
        .into_iter()
        .map(|t| TokenInfo {
            id: t.id,
            label: t.label,
            scopes: t.scopes,
            origin: t.origin,
            download_only: t.download_only,
            created_at: t.created_at,
            expires_at: t.expires_at,
            last_used_at: t.last_used_at,
        })
        .collect();
    Ok(Json(TokenList { tokens }))
}

/// Longest token label taken (`POST /tokens` and the console's token page).
pub const MAX_LABEL: usize = 100;

/// The label as given, refused when longer than [`MAX_LABEL`] characters; a blank one is no label.
pub fn checked_label(label: Option<String>) -> Result<Option<String>, ApiError> {
    let label = label.map(|l| l.trim().to_owned()).filter(|l| !l.is_empty());
    if label
        .as_ref()
        .is_some_and(|l| l.chars().count() > MAX_LABEL)
    {
        return Err(ApiError::bad_request(format!(
            "label must be at most {MAX_LABEL} characters"
        )));
    }
    Ok(label)
}

/// A token a person mints for their own account on the console's token page, after signing in there: the nine
/// default scopes, `label`, and `expires_in` seconds of life (1 to 100 years, or none). It is the root of its
/// chain (its own sign-in is what vouches for it, as a registration's key does), so signing out of the console,
/// which revokes the session's token, leaves it working. The plaintext is returned once.
pub async fn mint_for_person(
    state: &AppState,
    user_id: Uuid,
    label: Option<String>,
    expires_in: Option<i64>,
) -> Result<TokenCreated, ApiError> {
    let label = checked_label(label)?;
    let expires_at = match expires_in {
        Some(seconds) => Some(expiry_in(seconds, MAX_TOKEN_SECONDS)?),
        None => None,
    };
    let scopes = scopes::default_scopes();
    let plaintext = token::generate();
    let new = NewToken {
        user_id,
        hash: token::hash(&plaintext),
        label: label.as_deref(),
        scopes: &scopes,
        is_agent: false,
        expires_at,
        parent_id: None,
        only_path: None,
        audience: None,
    };
    let id = slipway_store::db::tokens::insert_on(
        &mut *state.db().acquire().await?,
        &new,
        Some("console"),
    )
    .await?;
    Ok(TokenCreated {
        id,
        token: plaintext,
        label,
        scopes,
        expires_at,
    })
}

/// Revoke one of the caller's tokens; it stops working at once, and so does every token and credential minted from
/// it (and from those, down the chain).
#[utoipa::path(delete, path = "/tokens/{token_id}", tag = "tokens", security(("bearer" = [])),
    params(("token_id" = Uuid, Path, description = "Token id")),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 404, body = ErrorEnvelope)))]
async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(token_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    if slipway_store::db::tokens::revoke(state.db(), caller.user_id, token_id).await? {
        // This process refuses the chain from the next request on; the others hear of it from the database.
        state.tokens().forget_all();
        // External SQL sessions on the revoked chain end now, not at the next periodic check.
        state.sql_sessions().recheck_soon();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("token"))
    }
}

/// Mint a unified credential: some or all of the caller's default scopes, for up to 30 days. It is good where the
/// calling token is good: a token good at the MCP endpoint only (the MCP server's OAuth sign-in) mints one good there
/// only.
#[utoipa::path(post, path = "/credentials", tag = "tokens", security(("bearer" = [])), request_body(content = Option<CreateCredential>),
    responses((status = 200, body = Credential), (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope)))]
async fn create_credential(
    State(state): State<AppState>,
    caller: Caller,
    OptionalJson(req): OptionalJson<CreateCredential>,
) -> Result<Json<Credential>, ApiError> {
    let req = req.unwrap_or_default();
    let held: Vec<String> = scopes::DEFAULT
        .iter()
        .filter(|s| caller.scopes.iter().any(|h| h == *s))
        .map(|s| (*s).to_owned())
        .collect();
    let scopes = match req.scopes {
        None => held,
        Some(requested) => {
            for scope in &requested {
                if !scopes::DEFAULT.contains(&scope.as_str()) {
                    return Err(ApiError::bad_request(format!(
                        "{scope} cannot be minted: a credential carries only default scopes ({})",
                        scopes::DEFAULT.join(", ")
                    )));
                }
                caller.require_scope(scope)?;
            }
            let mut requested: Vec<String> = scopes::DEFAULT
                .iter()
                .filter(|s| requested.iter().any(|r| r == *s))
                .map(|s| (*s).to_owned())
                .collect();
            requested.dedup();
            requested
        }
    };
    let wanted = expiry_in(
        req.expires_in.unwrap_or(MAX_CREDENTIAL_SECONDS),
        MAX_CREDENTIAL_SECONDS,
    )?;
    let expires_at = capped_expiry(&caller, Some(wanted)).unwrap_or(wanted);
    let (_, token) = mint(
        &state,
        &caller,
        Some("credential"),
        &scopes,
        Some(expires_at),
    )
    .await?;
    Ok(Json(Credential {
        token,
        username: caller.username.clone(),
        expires_at,
        scopes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lives_out_of_range_are_refused_not_overflowed() {
        for seconds in [
            0,
            -1,
            i64::MIN,
            MAX_TOKEN_SECONDS + 1,
            i64::MAX / 1_000_000,
            i64::MAX,
        ] {
            assert!(
                matches!(
                    expiry_in(seconds, MAX_TOKEN_SECONDS),
                    Err(ApiError::BadRequest(_))
                ),
                "{seconds}"
            );
        }
        let longest = expiry_in(MAX_TOKEN_SECONDS, MAX_TOKEN_SECONDS).unwrap();
        assert!(longest > Utc::now() + Duration::days(36_000));
        assert!(expiry_in(MAX_CREDENTIAL_SECONDS + 1, MAX_CREDENTIAL_SECONDS).is_err());
    }
}
