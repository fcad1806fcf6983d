//! `POST /me/email-verifications` and `.../complete`: an account binds an email address by a code mailed to it.
//! The request needs an `email:bind` token (only registration and SSH login grant one); the code lives 15
//! minutes, is stored only as a keyed hash, and five wrong codes lock it until a new request. A verified address
//! moves a `starter` account to `basic`; the operator applies the new limits to running apps in the background.

use axum::extract::State;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::Json;
use slipway_auth::scopes;
use slipway_core::caller::Caller;
use slipway_core::error::{ApiError, ErrorEnvelope};
use slipway_core::registration::{STARTER, VERIFIED, codes, mailer};
use slipway_core::state::AppState;
use slipway_store::db::email_challenges::{self, Challenge};

/// The routes of this module.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(request_code))
        .routes(routes!(complete))
}

/// `POST /me/email-verifications` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct EmailRequest {
    /// The address to verify.
    pub email: String,
}

/// `POST /me/email-verifications` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CodeSent {
    /// `sent`.
    pub status: &'static str,
    /// When the code stops working.
    pub expires_at: DateTime<Utc>,
}

/// `POST /me/email-verifications/complete` request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CodeRequest {
    /// The 8-character code from the mail.
    pub code: String,
}

/// `POST /me/email-verifications/complete` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Verified {
    /// `verified`.
    pub status: &'static str,
    /// The account's plan now.
    pub plan: String,
    /// Whether new limits are being applied to the account's workloads now: true when the plan moved (slipway has
    /// no account moves that would hold it back), false when it did not change.
    pub apply_queued: bool,
}

/// The key codes are hashed under.
fn code_key(state: &AppState) -> [u8; 32] {
    state.keyring().derived_key("email verification codes")
}

/// Mail a verification code to an address.
#[utoipa::path(post, path = "/me/email-verifications", tag = "registration", security(("bearer" = [])),
    request_body = EmailRequest,
    responses((status = 200, body = CodeSent), (status = 400, body = ErrorEnvelope, description = "not one plain address"),
              (status = 401, body = ErrorEnvelope),
              (status = 403, body = ErrorEnvelope, description = "scope_denied: the token lacks email:bind (only registration and SSH-login tokens carry it)"),
              (status = 409, body = ErrorEnvelope, description = "the account has a verified address already"),
              (status = 429, body = ErrorEnvelope, description = "a code was sent less than 60 seconds ago (Retry-After)"),
              (status = 503, body = ErrorEnvelope, description = "service_unavailable: no mail relay is configured, or it did not take the message")))]
async fn request_code(
    State(state): State<AppState>,
    caller: Caller,
    Json(req): Json<EmailRequest>,
) -> Result<Json<CodeSent>, ApiError> {
    caller.require_scope(scopes::EMAIL_BIND)?;
    let to = mailer::plain_address(&req.email).ok_or_else(|| {
        ApiError::bad_request("email must be one plain address, like ada@example.com")
    })?;
    let mailer = state.mailer().cloned().ok_or_else(|| {
        ApiError::Unavailable(
            "email verification is not configured on this platform (no mail relay)".into(),
        )
    })?;
    state
        .spend_mail_to(to.email.as_ref())
        .await?
        .map_err(|wait| {
            ApiError::Throttled(
                "this address has been sent as many codes as it may this hour".into(),
                wait,
            )
        })?;
    let mut tx = state.db().begin().await?;
    let verified = email_challenges::lock_account(&mut tx, caller.user_id)
        .await?
        .ok_or(ApiError::TokenInvalid)?;
    if let Some(address) = verified {
        return Err(ApiError::Conflict(format!(
            "the account has the verified address {address} already"
        )));
    }
    let now = Utc::now();
    if let Some(earlier) = email_challenges::of_user(&mut tx, caller.user_id).await? {
        let next = earlier.sent_at + Duration::seconds(codes::SPACING_SECONDS);
        if next > now {
            return Err(ApiError::Throttled(
                format!(
                    "a code was sent less than {} seconds ago",
                    codes::SPACING_SECONDS
                ),
                (next - now).to_std().unwrap_or_default(),
            ));
        }
    }
    let code = codes::generate();
    let challenge = Challenge {
        user_id: caller.user_id,
        email: to.email.to_string(),
        code_hash: codes::hash(&code_key(&state), caller.user_id, &code).to_vec(),
        sent_at: now,
        expires_at: now + Duration::minutes(codes::LIFE_MINUTES),
        wrong_codes: 0,
    };
    email_challenges::replace(&mut tx, &challenge).await?;
    tx.commit().await?;
    // The challenge (and with it the 60 s spacing) is committed before the mail goes out, and the sending runs as
    // a task of its own: a client that hangs up cannot undo the spacing nor hold the account's row while the relay
    // answers. A mail the relay refused takes its challenge back out, so the code that never arrived is no
    // obstacle to asking again.
    let username = caller.username.clone();
    let sent = tokio::spawn(async move {
        mailer
            .send_code(&to, &username, &code, codes::LIFE_MINUTES)
            .await
    })
    .await
    .map_err(|e| anyhow::anyhow!("the mail task failed: {e}"))?;
    if let Err(e) = sent {
        tracing::warn!(
            error = format!("{e:#}"),
            "a verification mail could not be sent"
        );
        email_challenges::withdraw(state.db(), caller.user_id, &challenge.code_hash).await?;
        return Err(ApiError::Unavailable(
            "the mail relay did not take the message; try again later".into(),
        ));
    }
    Ok(Json(CodeSent {
        status: "sent",
        expires_at: challenge.expires_at,
    }))
}

/// Complete a verification with the mailed code.
#[utoipa::path(post, path = "/me/email-verifications/complete", tag = "registration", security(("bearer" = [])),
    request_body = CodeRequest,
    responses((status = 200, body = Verified), (status = 400, body = ErrorEnvelope, description = "wrong code"),
              (status = 401, body = ErrorEnvelope),
              (status = 409, body = ErrorEnvelope, description = "the address is verified on another account (the challenge is cleared)"),
              (status = 410, body = ErrorEnvelope, description = "gone: no challenge, or it expired"),
              (status = 429, body = ErrorEnvelope, description = "five wrong codes locked the challenge; request a new code")))]
async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Json(req): Json<CodeRequest>,
) -> Result<Json<Verified>, ApiError> {
    let mut tx = state.db().begin().await?;
    email_challenges::lock_account(&mut tx, caller.user_id)
        .await?
        .ok_or(ApiError::TokenInvalid)?;
    let gone = || {
        ApiError::Gone(
            "no verification code is pending; request one with POST /me/email-verifications".into(),
        )
    };
    let challenge = email_challenges::of_user(&mut tx, caller.user_id)
        .await?
        .ok_or_else(gone)?;
    if challenge.expires_at <= Utc::now() {
        email_challenges::clear(&mut tx, caller.user_id).await?;
        tx.commit().await?;
        return Err(ApiError::Gone("the code expired; request a new one".into()));
    }
    if challenge.wrong_codes >= codes::MAX_WRONG {
        let next = challenge.sent_at + Duration::seconds(codes::SPACING_SECONDS);
        return Err(ApiError::Throttled(
            format!(
                "{} wrong codes locked this challenge; request a new code",
                codes::MAX_WRONG
            ),
            (next - Utc::now()).to_std().unwrap_or_default(),
        ));
    }
    if !codes::matches(
        &code_key(&state),
        caller.user_id,
        &req.code,
        &challenge.code_hash,
    ) {
        let wrong = email_challenges::count_wrong(&mut tx, caller.user_id).await?;
        tx.commit().await?;
        return Err(ApiError::bad_request(format!(
            "wrong code; {} tries left",
            (codes::MAX_WRONG - wrong).max(0)
        )));
    }
    email_challenges::clear(&mut tx, caller.user_id).await?;
    if email_challenges::verified_elsewhere(&mut tx, caller.user_id, &challenge.email).await? {
        tx.commit().await?;
        return Err(ApiError::Conflict(format!(
            "{} is verified on another account",
            challenge.email
        )));
    }
    let plan = match email_challenges::verify(
        &mut tx,
        caller.user_id,
        &challenge.email,
        STARTER,
        VERIFIED,
    )
    .await
    {
        Ok(plan) => plan,
        // Another account verified the same address in the same instant: the transaction is spent, so the
        // challenge is cleared on its own.
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            drop(tx);
            email_challenges::clear(&mut *state.db().acquire().await?, caller.user_id).await?;
            return Err(ApiError::Conflict(format!(
                "{} is verified on another account",
                challenge.email
            )));
        }
        Err(e) => return Err(e.into()),
    };
    tx.commit().await?;
    // The caller's next request is judged by the new plan in this process at once (others hear of it from the
    // database).
    state.tokens().forget_all();
    // The namespace's plan label is what the operator sizes workloads and the webhook counts channels by. It
    // follows the database, never leads it: moved after the commit, by a task a hung-up client cannot stop, and
    // put right by the API's periodic pass if this process dies first.
    let moved = plan != caller.plan;
    if moved {
        slipway_core::platform::tenancy::relabel_soon(
            state.kube().clone(),
            caller.username.parse()?,
            plan.clone(),
        );
    }
    slipway_store::db::audit::record(
        state.db(),
        &caller,
        None,
        "account.email_verified",
        serde_json::json!({"email": challenge.email, "plan": plan}),
    )
    .await?;
    Ok(Json(Verified {
        status: "verified",
        plan,
        apply_queued: moved,
    }))
}
