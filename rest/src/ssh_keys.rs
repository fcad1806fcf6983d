//! `/ssh-keys`: the SSH public keys of the caller's account. A registered key authenticates git over SSH for
//! that account; a key belongs to one account only. Only `ssh-ed25519` keys are accepted, as at registration.
//!
//! The body is the spec's `{public_key, label, api_login}`. A proof of possession (`timestamp` and `signature`, as
//! for `POST /auth/ssh-key`) may be added and is then checked, but is never required: a public key is public, so
//! an account could hold a key it copied. What that buys it is little: a key is unique platform-wide, so the
//! copy shuts the holder's own registration of it out (409), a push over SSH with it authenticates as the copier
//! and reaches nothing of the holder's, and a sign-in with it (`POST /auth/ssh-key`) answers the copier's
//! username, which the holder sees is not theirs.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{Json, Path};
use slipway_auth::scopes;
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::registration::proof::{self, Ed25519Key, Purpose};
use slipway_core::state::AppState;
use slipway_store::db::ssh_keys::{self, NewKey, SshKey};

/// Longest label.
pub const LABEL_MAX_CHARS: usize = 64;

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_keys, add_key))
        .routes(routes!(delete_key))
}

/// `POST /ssh-keys` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct AddKey {
    /// One OpenSSH public key line: `ssh-ed25519 AAAA... [comment]`.
    pub public_key: String,
    /// A name for the key, at most 64 characters; default: the key's comment, else `ssh key`.
    pub label: Option<String>,
    /// Whether the key may also sign in to the API (`POST /auth/ssh-key`); needs the nine default scopes and an
    /// `email:bind` token (or a verified address).
    #[serde(default)]
    pub api_login: bool,
    /// Optional proof that the caller holds the key, with `signature`: Unix seconds, within 300 s of the server's
    /// clock.
    pub timestamp: Option<i64>,
    /// Optional proof that the caller holds the key, with `timestamp`: the armored signature (`ssh-keygen -Y sign
    /// -n svc-login`) over `svc-login\n<SHA256:fingerprint>\n<timestamp>\n`, made with this key. When sent, it
    /// must verify (and is spent, as a login's); a key added with it cannot have been copied from somebody else.
    pub signature: Option<String>,
}

/// A registered key.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyView {
    /// Key id.
    pub id: Uuid,
    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fingerprint_sha256: String,
    /// The key without comment.
    pub public_key: String,
    /// Its label.
    pub label: String,
    /// Whether it may sign in to the API.
    pub api_login: bool,
    /// When it was added (ISO 8601 UTC).
    pub created_at: String,
}

/// `GET /ssh-keys` response.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyList {
    /// The caller's keys, oldest first.
    pub ssh_keys: Vec<KeyView>,
}

impl From<SshKey> for KeyView {
    fn from(k: SshKey) -> Self {
        Self {
            id: k.id,
            fingerprint_sha256: k.fingerprint_sha256,
            public_key: k.public_key,
            label: k.label,
            api_login: k.api_login,
            created_at: k
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }
}

/// Register an SSH public key on the caller's account (git over SSH).
#[utoipa::path(post, path = "/ssh-keys", tag = "ssh-keys", security(("bearer" = [])), request_body = AddKey,
    responses((status = 200, body = KeyView), (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied (repo:*)"),
              (status = 400, body = ErrorEnvelope, description = "not one ssh-ed25519 line, a bad label, or a proof of possession sent that does not verify (or only half of one)"),
              (status = 409, body = ErrorEnvelope, description = "the key is already registered, or api_login without the scopes it needs")))]
async fn add_key(
    State(state): State<AppState>,
    caller: Caller,
    Json(req): Json<AddKey>,
) -> Result<Json<KeyView>, ApiError> {
    caller.require_scope(scopes::REPO)?;
    let key = Ed25519Key::parse(&req.public_key).map_err(ApiError::bad_request)?;
    let (public_key, fingerprint, comment) = (&key.line, &key.fingerprint, &key.comment);
    let label = match req.label {
        Some(label) => label.trim().to_owned(),
        None if !comment.trim().is_empty() => {
            comment.trim().chars().take(LABEL_MAX_CHARS).collect()
        }
        None => "ssh key".to_owned(),
    };
    if label.is_empty()
        || label.chars().count() > LABEL_MAX_CHARS
        || label.chars().any(char::is_control)
    {
        return Err(ApiError::bad_request(
            "label must be 1-64 characters without control characters",
        ));
    }
    if req.api_login {
        let all_defaults = scopes::DEFAULT
            .iter()
            .all(|s| caller.scopes.iter().any(|c| c == s));
        let bound = caller.scopes.iter().any(|s| s == scopes::EMAIL_BIND)
            || slipway_store::db::users::has_verified_email(state.db(), caller.user_id).await?;
        if !all_defaults || !bound {
            return Err(ApiError::Conflict(
                "api_login keys need a token with the nine default scopes, and either email:bind or a verified email address on the account".into(),
            ));
        }
    }
    match (req.timestamp, req.signature.as_deref()) {
        (None, None) => {}
        (Some(timestamp), Some(signature)) => {
            prove_possession(&state, &key, timestamp, signature).await?;
        }
        _ => {
            return Err(ApiError::bad_request(
                "timestamp and signature prove possession of the key together; send both or neither",
            ));
        }
    }
    let new = NewKey {
        user_id: caller.user_id,
        public_key,
        fingerprint_sha256: fingerprint,
        label: &label,
        api_login: req.api_login,
    };
    let stored = ssh_keys::insert(state.db(), &new).await?.ok_or_else(|| {
        ApiError::Conflict(format!("the key {fingerprint} is already registered"))
    })?;
    Ok(Json(stored.into()))
}

/// Checks a proof that the caller holds `key`: a `svc-login` signature over its fingerprint and `timestamp`, not
/// used before (it is spent here, as a login's would be).
async fn prove_possession(
    state: &AppState,
    key: &Ed25519Key,
    timestamp: i64,
    signature: &str,
) -> Result<(), ApiError> {
    let verified = key
        .verify(
            Purpose::Login,
            &key.fingerprint,
            timestamp,
            signature,
            chrono::Utc::now().timestamp(),
        )
        .map_err(ApiError::bad_request)?;
    let mut conn = state.db().acquire().await?;
    let until = proof::remembered_until(timestamp);
    if slipway_store::db::registrations::spend_signature(&mut conn, &verified.signature_hash, until)
        .await?
    {
        Ok(())
    } else {
        Err(super::registrations::replayed())
    }
}

/// List the SSH keys of the caller's account.
#[utoipa::path(get, path = "/ssh-keys", tag = "ssh-keys", security(("bearer" = [])),
    responses((status = 200, body = KeyList), (status = 401, body = ErrorEnvelope)))]
async fn list_keys(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<KeyList>, ApiError> {
    let keys = ssh_keys::of_user(state.db(), caller.user_id).await?;
    Ok(Json(KeyList {
        ssh_keys: keys.into_iter().map(KeyView::from).collect(),
    }))
}

/// Remove an SSH key from the caller's account; it stops working at once.
#[utoipa::path(delete, path = "/ssh-keys/{key_id}", tag = "ssh-keys", security(("bearer" = [])),
    params(("key_id" = Uuid, Path, description = "Key id")),
    responses((status = 204), (status = 401, body = ErrorEnvelope), (status = 403, body = ErrorEnvelope),
              (status = 404, body = ErrorEnvelope)))]
async fn delete_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(key_id): Path<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require_scope(scopes::REPO)?;
    if ssh_keys::delete(state.db(), caller.user_id, key_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("ssh key"))
    }
}
