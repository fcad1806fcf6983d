//! Env rows in the platform database, sealed with the keyring before they are written. The kind rules of the API
//! live here so every writer follows them: an omitted kind keeps an existing key's kind (a new channel override
//! takes the kind of the app default it overrides, so a secret stays secret), a new key is `env`, and only an
//! explicit kind flips a key.

use chrono::{DateTime, Utc};
use slipway_crds::names::EnvKey;
use sqlx::PgPool;
use uuid::Uuid;

use super::Kind;
use super::crypto::{Keyring, Sealed};

/// A stored row, still sealed.
#[derive(Debug, Clone)]
pub struct Row {
    /// None for the app default, else the channel it overrides.
    pub channel_id: Option<Uuid>,
    /// Variable name.
    pub key: String,
    /// env or secret.
    pub kind: Kind,
    /// The sealed value.
    pub sealed: Sealed,
    /// Last write.
    pub updated_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct RawRow {
    channel_id: Option<Uuid>,
    key: String,
    kind: String,
    key_id: String,
    sealed: Vec<u8>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<RawRow> for Row {
    type Error = anyhow::Error;
    fn try_from(r: RawRow) -> anyhow::Result<Self> {
        let kind = Kind::parse(&r.kind)
            .ok_or_else(|| anyhow::anyhow!("stored env kind {} is unknown", r.kind))?;
        Ok(Row {
            channel_id: r.channel_id,
            key: r.key,
            kind,
            sealed: Sealed {
                key_id: r.key_id,
                bytes: r.sealed,
            },
            updated_at: r.updated_at,
        })
    }
}

/// The associated data binding a sealed value to its row.
pub fn place(app: Uuid, channel: Option<Uuid>, key: &str) -> Vec<u8> {
    match channel {
        Some(c) => format!("env/{app}/channel/{c}/{key}").into_bytes(),
        None => format!("env/{app}/app/{key}").into_bytes(),
    }
}

impl Row {
    /// The plaintext value.
    pub fn open(&self, ring: &Keyring, app: Uuid) -> anyhow::Result<String> {
        let bytes = ring.open(&self.sealed, &place(app, self.channel_id, &self.key))?;
        Ok(String::from_utf8(bytes)?)
    }
}

/// Sets `key` at the app (channel None) or a channel, following the kind rules; returns the kind written.
pub async fn put(
    db: &PgPool,
    ring: &Keyring,
    app: Uuid,
    channel: Option<Uuid>,
    key: &EnvKey,
    value: &str,
    kind: Option<Kind>,
) -> anyhow::Result<Kind> {
    let mut tx = db.begin().await?;
    // Serializes writers of the same key so the kind decision and the write are one step.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(String::from_utf8_lossy(&place(app, channel, key.as_str())).into_owned())
        .execute(&mut *tx)
        .await?;
    let existing: Vec<(Option<Uuid>, String)> = sqlx::query_as(
        "SELECT channel_id, kind FROM env_vars WHERE app_id = $1 AND key = $2 AND (channel_id IS NULL OR channel_id = $3)",
    )
    .bind(app)
    .bind(key.as_str())
    .bind(channel)
    .fetch_all(&mut *tx)
    .await?;
    let same_scope = existing
        .iter()
        .find(|(c, _)| *c == channel)
        .and_then(|(_, k)| Kind::parse(k));
    let app_default = existing
        .iter()
        .find(|(c, _)| c.is_none())
        .and_then(|(_, k)| Kind::parse(k));
    let kind = kind.or(same_scope).or(app_default).unwrap_or(Kind::Env);
    let sealed = ring.seal(value.as_bytes(), &place(app, channel, key.as_str()))?;
    sqlx::query(
        "INSERT INTO env_vars (app_id, channel_id, key, kind, key_id, sealed) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (app_id, coalesce(channel_id, '00000000-0000-0000-0000-000000000000'::uuid), key)
         DO UPDATE SET kind = EXCLUDED.kind, key_id = EXCLUDED.key_id, sealed = EXCLUDED.sealed, updated_at = now()",
    )
    .bind(app)
    .bind(channel)
    .bind(key.as_str())
    .bind(kind.as_str())
    .bind(&sealed.key_id)
    .bind(&sealed.bytes)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(kind)
}

/// Every row of an app (defaults and overrides), ordered by key then scope.
pub async fn rows(db: &PgPool, app: Uuid) -> anyhow::Result<Vec<Row>> {
    let raw: Vec<RawRow> = sqlx::query_as(
        "SELECT channel_id, key, kind, key_id, sealed, updated_at FROM env_vars WHERE app_id = $1
         ORDER BY key, channel_id NULLS FIRST",
    )
    .bind(app)
    .fetch_all(db)
    .await?;
    raw.into_iter().map(Row::try_from).collect()
}

/// Removes `key` at one scope; false when there was nothing to remove.
pub async fn delete(
    db: &PgPool,
    app: Uuid,
    channel: Option<Uuid>,
    key: &str,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "DELETE FROM env_vars WHERE app_id = $1 AND key = $2 AND channel_id IS NOT DISTINCT FROM $3",
    )
    .bind(app)
    .bind(key)
    .bind(channel)
    .execute(db)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Removes every row of a deleted app.
pub async fn delete_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM env_vars WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}

/// Removes the overrides of a deleted channel.
pub async fn delete_channel(db: &PgPool, app: Uuid, channel: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM env_vars WHERE app_id = $1 AND channel_id = $2")
        .bind(app)
        .bind(channel)
        .execute(db)
        .await?;
    Ok(())
}

/// Re-seals every row with the keyring's active key (key rotation); returns how many rows changed.
pub async fn reseal_all(db: &PgPool, ring: &Keyring) -> anyhow::Result<u64> {
    #[derive(sqlx::FromRow)]
    struct Stale {
        app_id: Uuid,
        channel_id: Option<Uuid>,
        key: String,
        key_id: String,
        sealed: Vec<u8>,
    }
    let mut tx = db.begin().await?;
    let stale: Vec<Stale> = sqlx::query_as(
        "SELECT app_id, channel_id, key, key_id, sealed FROM env_vars WHERE key_id <> $1 FOR UPDATE",
    )
    .bind(ring.active_id())
    .fetch_all(&mut *tx)
    .await?;
    for row in &stale {
        let at = place(row.app_id, row.channel_id, &row.key);
        let value = ring.open(
            &Sealed {
                key_id: row.key_id.clone(),
                bytes: row.sealed.clone(),
            },
            &at,
        )?;
        let sealed = ring.seal(&value, &at)?;
        sqlx::query(
            "UPDATE env_vars SET key_id = $1, sealed = $2
             WHERE app_id = $3 AND key = $4 AND channel_id IS NOT DISTINCT FROM $5",
        )
        .bind(&sealed.key_id)
        .bind(&sealed.bytes)
        .bind(row.app_id)
        .bind(&row.key)
        .bind(row.channel_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(stale.len() as u64)
}
