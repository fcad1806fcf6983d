//! The env a deploy was given, recorded once at deploy time (still sealed) so `GET .../deploys/{id}/env` can show
//! it later and a rollback can run with exactly the same values. System-injected keys are kept by name only.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use super::crypto::{Keyring, Sealed};
use super::resolve::Entry;
use super::{Kind, Scope};

#[derive(Debug, Serialize, Deserialize)]
struct StoredEntry {
    key: String,
    kind: Kind,
    source: Scope,
    key_id: String,
    sealed: String,
}

/// One variable of a snapshot as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotEntryView {
    /// Name.
    pub key: String,
    /// env or secret.
    pub kind: Kind,
    /// app or channel.
    pub source: Scope,
    /// The value for env; null for secrets.
    pub value: Option<String>,
}

/// `GET .../deploys/{deploy_id}/env` response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotView {
    /// The deploy.
    pub deploy_id: Uuid,
    /// What the deploy received, by key.
    pub env: Vec<SnapshotEntryView>,
    /// Keys the platform injected, by name only.
    pub system_keys: Vec<String>,
}

fn place(deploy: Uuid, key: &str) -> Vec<u8> {
    format!("snapshot/{deploy}/{key}").into_bytes()
}

/// The value of one snapshot entry, in the clear.
fn open_entry(ring: &Keyring, deploy: Uuid, e: &StoredEntry) -> anyhow::Result<String> {
    let sealed = Sealed {
        key_id: e.key_id.clone(),
        bytes: STANDARD.decode(&e.sealed)?,
    };
    Ok(String::from_utf8(
        ring.open(&sealed, &place(deploy, &e.key))?,
    )?)
}

/// Records what `deploy` receives, once: a second call for the same deploy (an operator that restarted) keeps the
/// first record, so a deploy always runs with the values of its start.
pub async fn record(
    db: &PgPool,
    ring: &Keyring,
    deploy: Uuid,
    app: Uuid,
    channel: Uuid,
    entries: &[Entry],
    system_keys: &[&str],
) -> anyhow::Result<()> {
    let mut stored = Vec::with_capacity(entries.len());
    for e in entries {
        let sealed = ring.seal(e.value.as_bytes(), &place(deploy, &e.key))?;
        stored.push(StoredEntry {
            key: e.key.clone(),
            kind: e.kind,
            source: e.scope,
            key_id: sealed.key_id,
            sealed: STANDARD.encode(sealed.bytes),
        });
    }
    sqlx::query(
        "INSERT INTO deploy_env_snapshots (deploy_id, app_id, channel_id, entries, system_keys) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (deploy_id) DO NOTHING",
    )
    .bind(deploy)
    .bind(app)
    .bind(channel)
    .bind(serde_json::to_value(&stored)?)
    .bind(system_keys)
    .execute(db)
    .await?;
    Ok(())
}

/// The snapshot of `deploy` on `channel` as the API shows it (secret values null).
pub async fn view(
    db: &PgPool,
    ring: &Keyring,
    deploy: Uuid,
    channel: Uuid,
) -> anyhow::Result<Option<SnapshotView>> {
    let row: Option<(serde_json::Value, Vec<String>)> =
        sqlx::query_as("SELECT entries, system_keys FROM deploy_env_snapshots WHERE deploy_id = $1 AND channel_id = $2")
            .bind(deploy)
            .bind(channel)
            .fetch_optional(db)
            .await?;
    let Some((entries, system_keys)) = row else {
        return Ok(None);
    };
    let stored: Vec<StoredEntry> = serde_json::from_value(entries)?;
    let mut env = Vec::with_capacity(stored.len());
    for e in stored {
        let value = match e.kind {
            Kind::Secret => None,
            Kind::Env => Some(open_entry(ring, deploy, &e)?),
        };
        env.push(SnapshotEntryView {
            key: e.key,
            kind: e.kind,
            source: e.source,
            value,
        });
    }
    Ok(Some(SnapshotView {
        deploy_id: deploy,
        env,
        system_keys,
    }))
}

/// Every value of `deploy`'s snapshot in the clear, secrets included (what its containers receive); `None` when
/// the deploy has no snapshot.
pub async fn values(
    db: &PgPool,
    ring: &Keyring,
    deploy: Uuid,
) -> anyhow::Result<Option<Vec<(String, String)>>> {
    let entries: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT entries FROM deploy_env_snapshots WHERE deploy_id = $1")
            .bind(deploy)
            .fetch_optional(db)
            .await?;
    let Some(entries) = entries else {
        return Ok(None);
    };
    let stored: Vec<StoredEntry> = serde_json::from_value(entries)?;
    let mut values = Vec::with_capacity(stored.len());
    for e in stored {
        let value = open_entry(ring, deploy, &e)?;
        values.push((e.key, value));
    }
    Ok(Some(values))
}

/// Forgets the snapshots of every deploy of a deleted app.
pub async fn delete_app(db: &PgPool, app: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM deploy_env_snapshots WHERE app_id = $1")
        .bind(app)
        .execute(db)
        .await?;
    Ok(())
}

/// A snapshot's `entries`, sealed for deploy `from`, opened and sealed again for deploy `to` (a restored platform
/// gives every Deploy a new uid, and so a new id).
pub fn rekey_entries(
    ring: &Keyring,
    entries: serde_json::Value,
    from: Uuid,
    to: Uuid,
) -> anyhow::Result<serde_json::Value> {
    let mut stored: Vec<StoredEntry> = serde_json::from_value(entries)?;
    for e in &mut stored {
        let value = ring.open(
            &Sealed {
                key_id: e.key_id.clone(),
                bytes: STANDARD.decode(&e.sealed)?,
            },
            &place(from, &e.key),
        )?;
        let sealed = ring.seal(&value, &place(to, &e.key))?;
        (e.key_id, e.sealed) = (sealed.key_id, STANDARD.encode(sealed.bytes));
    }
    Ok(serde_json::to_value(&stored)?)
}

/// Re-seals every snapshot value with the active key (key rotation); returns how many snapshots changed.
pub async fn reseal_all(db: &PgPool, ring: &Keyring) -> anyhow::Result<u64> {
    let mut tx = db.begin().await?;
    let rows: Vec<(Uuid, serde_json::Value)> =
        sqlx::query_as("SELECT deploy_id, entries FROM deploy_env_snapshots FOR UPDATE")
            .fetch_all(&mut *tx)
            .await?;
    let mut changed = 0;
    for (deploy, entries) in rows {
        let mut stored: Vec<StoredEntry> = serde_json::from_value(entries)?;
        if stored.iter().all(|e| e.key_id == ring.active_id()) {
            continue;
        }
        for e in &mut stored {
            let at = place(deploy, &e.key);
            let value = ring.open(
                &Sealed {
                    key_id: e.key_id.clone(),
                    bytes: STANDARD.decode(&e.sealed)?,
                },
                &at,
            )?;
            let sealed = ring.seal(&value, &at)?;
            (e.key_id, e.sealed) = (sealed.key_id, STANDARD.encode(sealed.bytes));
        }
        sqlx::query("UPDATE deploy_env_snapshots SET entries = $1 WHERE deploy_id = $2")
            .bind(serde_json::to_value(&stored)?)
            .bind(deploy)
            .execute(&mut *tx)
            .await?;
        changed += 1;
    }
    tx.commit().await?;
    Ok(changed)
}
