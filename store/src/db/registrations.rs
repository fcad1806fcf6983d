//! What registration and SSH login keep: the accounts registration made (the global budget counts them), the
//! signatures already used (a replay is refused), and where a token came from (registration and SSH-login tokens
//! carry `email:bind`; an account holds at most the API's `registration::MAX_LOGIN_TOKENS` SSH-login tokens).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::ssh_keys::SshKey;
use super::tokens::NewToken;
use super::users::User;

/// Where a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `POST /registrations`.
    Registration,
    /// `POST /auth/ssh-key`.
    SshLogin,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Origin::Registration => "registration",
            Origin::SshLogin => "ssh_login",
        }
    }
}

/// Why a registration did not create an account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCreated {
    /// The global budget is spent: registrations in the last hour reached it. The next fits after this wait.
    Budget(std::time::Duration),
    /// The signature was used before.
    Replayed,
    /// Another account has this username.
    UsernameTaken,
    /// The key is registered on an account already.
    KeyTaken,
}

/// A new self-registered account: its username, its key and the token it gets.
#[derive(Debug, Clone)]
pub struct NewRegistration<'a> {
    /// The username to create.
    pub username: &'a slipway_crds::names::Username,
    /// The plan.
    pub plan: &'a str,
    /// The key: `ssh-ed25519 AAAA...` without comment, and its fingerprint.
    pub public_key: &'a str,
    /// `SHA256:...`.
    pub fingerprint: &'a str,
    /// The key's label.
    pub label: &'a str,
    /// SHA-256 of the signature that proved the key.
    pub signature_hash: &'a [u8; 32],
    /// When the signature's timestamp leaves the window (until then a replay could pass the time check).
    pub signature_expires_at: DateTime<Utc>,
    /// The token's SHA-256 and expiry.
    pub token_hash: &'a [u8; 32],
    /// The token's scopes.
    pub scopes: &'a [String],
    /// When the token expires.
    pub token_expires_at: DateTime<Utc>,
    /// At most this many registrations in the last hour, platform-wide; 0 is unlimited.
    pub global_per_hour: u32,
    /// Where the request came from (for the audit journal).
    pub source: std::net::IpAddr,
}

/// What a registration made.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The account.
    pub user: User,
    /// The key.
    pub key: SshKey,
}

/// Arbitrates the global budget: registrations take this transaction-scoped advisory lock while they count.
const REGISTRATION_LOCK: i64 = 0x736c_6970_7265_6701;

/// Creates the account, its key (with `api_login`) and its token in one transaction, after the global budget and
/// the replay check; nothing is kept when any step refuses.
pub async fn register(
    db: &PgPool,
    new: &NewRegistration<'_>,
) -> sqlx::Result<Result<Registered, NotCreated>> {
    let mut tx = db.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(REGISTRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    if new.global_per_hour > 0 {
        let (count, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
            "SELECT count(*), min(created_at) FROM users
             WHERE origin = 'registration' AND created_at > now() - interval '1 hour'",
        )
        .fetch_one(&mut *tx)
        .await?;
        if count >= i64::from(new.global_per_hour) {
            let frees_at = oldest.unwrap_or_else(Utc::now) + chrono::Duration::hours(1);
            let wait = (frees_at - Utc::now()).to_std().unwrap_or_default();
            return Ok(Err(NotCreated::Budget(wait)));
        }
    }
    if !spend_signature(&mut tx, new.signature_hash, new.signature_expires_at).await? {
        return Ok(Err(NotCreated::Replayed));
    }
    let user: Option<User> = sqlx::query_as(
        "INSERT INTO users (id, username, plan, origin) VALUES ($1, $2, $3, 'registration')
         ON CONFLICT (username) DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(new.username.as_str())
    .bind(new.plan)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(user) = user else {
        return Ok(Err(NotCreated::UsernameTaken));
    };
    let key: Option<SshKey> = sqlx::query_as(
        "INSERT INTO ssh_keys (id, user_id, public_key, fingerprint_sha256, label, api_login)
         VALUES ($1, $2, $3, $4, $5, true) ON CONFLICT (fingerprint_sha256) DO NOTHING RETURNING *",
    )
    .bind(Uuid::new_v4())
    .bind(user.id)
    .bind(new.public_key)
    .bind(new.fingerprint)
    .bind(new.label)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(key) = key else {
        return Ok(Err(NotCreated::KeyTaken));
    };
    insert_token(
        &mut tx,
        &NewToken {
            user_id: user.id,
            hash: *new.token_hash,
            label: Some(new.label),
            scopes: new.scopes,
            is_agent: true,
            expires_at: Some(new.token_expires_at),
            parent_id: None,
            only_path: None,
            audience: None,
        },
        Origin::Registration,
    )
    .await?;
    sqlx::query(
        "INSERT INTO audit_events (user_id, action, detail) VALUES ($1, 'account.register', $2)",
    )
    .bind(user.id)
    .bind(serde_json::json!({"fingerprint": new.fingerprint, "source": new.source.to_string()}))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(Registered { user, key }))
}

/// Records a used signature; false when it was used before. Signatures whose window has passed are forgotten on
/// the way (their timestamps could not pass the time check any more).
pub async fn spend_signature(
    conn: &mut PgConnection,
    hash: &[u8; 32],
    expires_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    sqlx::query("DELETE FROM used_signatures WHERE expires_at < now()")
        .execute(&mut *conn)
        .await?;
    let inserted = sqlx::query(
        "INSERT INTO used_signatures (signature_hash, expires_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(&hash[..])
    .bind(expires_at)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// The account of a live `api_login` key with this fingerprint.
pub async fn login_key(db: &PgPool, fingerprint: &str) -> sqlx::Result<Option<(SshKey, User)>> {
    let Some(key): Option<SshKey> = sqlx::query_as(
        "SELECT k.* FROM ssh_keys k JOIN users u ON u.id = k.user_id
         WHERE k.fingerprint_sha256 = $1 AND k.api_login AND u.deactivated_at IS NULL",
    )
    .bind(fingerprint)
    .fetch_optional(db)
    .await?
    else {
        return Ok(None);
    };
    let user: User = sqlx::query_as("SELECT * FROM users WHERE id = $1")
        .bind(key.user_id)
        .fetch_one(db)
        .await?;
    Ok(Some((key, user)))
}

/// Mints an SSH-login token after the replay check, and revokes the account's oldest live SSH-login tokens past
/// `keep`; `None` when the signature was used before.
pub async fn login(
    db: &PgPool,
    signature_hash: &[u8; 32],
    signature_expires_at: DateTime<Utc>,
    token: &NewToken<'_>,
    keep: i64,
) -> sqlx::Result<Option<Uuid>> {
    let mut tx = db.begin().await?;
    // One login of an account at a time: the cap below counts what the others committed.
    sqlx::query("SELECT 1 FROM users WHERE id = $1 FOR UPDATE")
        .bind(token.user_id)
        .execute(&mut *tx)
        .await?;
    if !spend_signature(&mut tx, signature_hash, signature_expires_at).await? {
        return Ok(None);
    }
    let id = insert_token(&mut tx, token, Origin::SshLogin).await?;
    sqlx::query(
        "UPDATE tokens SET revoked_at = now() WHERE id IN (
             SELECT id FROM tokens
             WHERE user_id = $1 AND origin = 'ssh_login' AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > now())
             ORDER BY created_at DESC, id OFFSET $2)",
    )
    .bind(token.user_id)
    .bind(keep)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(id))
}

async fn insert_token(
    conn: &mut PgConnection,
    t: &NewToken<'_>,
    origin: Origin,
) -> sqlx::Result<Uuid> {
    super::tokens::insert_on(conn, t, Some(origin.as_str())).await
}

/// Deactivates an account: its SSH keys are removed, every token of it is revoked (and so stops at once, with
/// what was minted from it), and it is marked so no SSH login finds it. False when there is no such live account.
pub async fn deactivate(db: &PgPool, username: &str) -> sqlx::Result<bool> {
    let mut tx = db.begin().await?;
    let user: Option<(Uuid,)> = sqlx::query_as(
        "UPDATE users SET deactivated_at = now() WHERE username = $1 AND deactivated_at IS NULL RETURNING id",
    )
    .bind(username)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((id,)) = user else {
        return Ok(false);
    };
    sqlx::query("DELETE FROM ssh_keys WHERE user_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE tokens SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM email_challenges WHERE user_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
