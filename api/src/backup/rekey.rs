//! A restored platform's ids. An App's, Channel's and Deploy's id is its Kubernetes uid, and the apiserver gives
//! every object it creates a new one, so the objects a restore creates have new ids. Every row of the platform
//! database kept under an old id is moved to the new one here, in one transaction:
//!
//! - values sealed with their row's ids as associated data (env values, deploy snapshots, mirror keys, channel
//!   database passwords, bucket secret keys) are opened for their old place and sealed for the new one, with the
//!   backup's keyring; the values themselves (the data server's passwords, the buckets' key pairs) stay;
//! - then every `uuid` column of every table is rewritten through the map of old to new ids, with the foreign keys
//!   dropped for the moment and checked again when they are put back. Uids are random, so no other id is taken for
//!   an old one.

use std::collections::HashMap;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use slipway_store::env::crypto::Keyring;
use uuid::Uuid;
use zeroize::Zeroizing;

/// What the admin side hands the api pod: the keyring the backup's values are sealed with, and the new id of each
/// old one.
#[derive(Debug, Serialize, Deserialize)]
pub struct Moves {
    /// The backup's keyring (the text of its `keys` entry).
    pub keyring: String,
    /// Old id to new id.
    pub ids: HashMap<Uuid, Uuid>,
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// Moves every row to its new ids; returns how many sealed values were sealed again.
pub async fn apply(db: &sqlx::PgPool, moves: &Moves) -> anyhow::Result<u64> {
    let ring = Keyring::parse(&moves.keyring).context("the backup's keyring")?;
    let moved = |id: Uuid| moves.ids.get(&id).copied().unwrap_or(id);
    let mut tx = db.begin().await?;
    let resealed = reseal_env(&mut tx, &ring, &moved).await?
        + reseal_snapshots(&mut tx, &ring, &moved).await?
        + reseal_mirror_keys(&mut tx, &ring, &moved).await?
        + reseal_database_passwords(&mut tx, &ring, &moved).await?
        + reseal_bucket_secrets(&mut tx, &ring, &moved).await?;
    rewrite_ids(&mut tx, &moves.ids).await?;
    tx.commit().await?;
    Ok(resealed)
}

#[derive(sqlx::FromRow)]
struct EnvRow {
    app_id: Uuid,
    channel_id: Option<Uuid>,
    key: String,
    key_id: String,
    sealed: Vec<u8>,
}

async fn reseal_env(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: &impl Fn(Uuid) -> Uuid,
) -> anyhow::Result<u64> {
    use slipway_store::env::store::place;
    let rows: Vec<EnvRow> =
        sqlx::query_as("SELECT app_id, channel_id, key, key_id, sealed FROM env_vars FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
    for row in &rows {
        let again = ring.reseal(
            &row.key_id,
            &row.sealed,
            &place(row.app_id, row.channel_id, &row.key),
            &place(moved(row.app_id), row.channel_id.map(moved), &row.key),
        )?;
        sqlx::query(
            "UPDATE env_vars SET key_id = $1, sealed = $2
             WHERE app_id = $3 AND key = $4 AND channel_id IS NOT DISTINCT FROM $5",
        )
        .bind(&again.key_id)
        .bind(&again.bytes)
        .bind(row.app_id)
        .bind(&row.key)
        .bind(row.channel_id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(rows.len() as u64)
}

async fn reseal_snapshots(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: &impl Fn(Uuid) -> Uuid,
) -> anyhow::Result<u64> {
    let rows: Vec<(Uuid, serde_json::Value)> =
        sqlx::query_as("SELECT deploy_id, entries FROM deploy_env_snapshots FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
    let count = rows.len() as u64;
    for (deploy, entries) in rows {
        let entries =
            slipway_store::env::snapshot::rekey_entries(ring, entries, deploy, moved(deploy))?;
        sqlx::query("UPDATE deploy_env_snapshots SET entries = $1 WHERE deploy_id = $2")
            .bind(entries)
            .bind(deploy)
            .execute(&mut **tx)
            .await?;
    }
    Ok(count)
}

async fn reseal_mirror_keys(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: &impl Fn(Uuid) -> Uuid,
) -> anyhow::Result<u64> {
    use slipway_mirror_fetch::keys::place;
    let rows: Vec<(Uuid, String, Vec<u8>)> =
        sqlx::query_as("SELECT app_id, private_key_id, private_key FROM git_mirrors FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
    for (app, key_id, sealed) in &rows {
        let again = ring.reseal(key_id, sealed, &place(*app), &place(moved(*app)))?;
        sqlx::query(
            "UPDATE git_mirrors SET private_key_id = $1, private_key = $2 WHERE app_id = $3",
        )
        .bind(&again.key_id)
        .bind(&again.bytes)
        .bind(app)
        .execute(&mut **tx)
        .await?;
    }
    Ok(rows.len() as u64)
}

async fn reseal_database_passwords(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: &impl Fn(Uuid) -> Uuid,
) -> anyhow::Result<u64> {
    use slipway_postgres::store::aad;
    let records: Vec<slipway_postgres::store::Record> =
        sqlx::query_as("SELECT * FROM channel_databases FOR UPDATE")
            .fetch_all(&mut **tx)
            .await?;
    for record in &records {
        let (password, readonly) = record.passwords(ring)?;
        let (password, readonly) = (Zeroizing::new(password), Zeroizing::new(readonly));
        let to = moved(record.channel_id);
        let sealed = ring.seal(password.as_bytes(), &aad(to, &record.role_name))?;
        let sealed_readonly =
            ring.seal(readonly.as_bytes(), &aad(to, &record.readonly_role_name))?;
        sqlx::query(
            "UPDATE channel_databases SET key_id = $1, sealed_password = $2, sealed_readonly_password = $3
             WHERE channel_id = $4",
        )
        .bind(&sealed.key_id)
        .bind(&sealed.bytes)
        .bind(&sealed_readonly.bytes)
        .bind(record.channel_id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(records.len() as u64)
}

async fn reseal_bucket_secrets(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: &impl Fn(Uuid) -> Uuid,
) -> anyhow::Result<u64> {
    use slipway_blob::keys::aad;
    let rows: Vec<(Uuid, String, String, Vec<u8>)> = sqlx::query_as(
        "SELECT channel_id, access_key_id, key_id, sealed_secret FROM blob_stores FOR UPDATE",
    )
    .fetch_all(&mut **tx)
    .await?;
    for (channel, access_key, key_id, sealed) in &rows {
        let again = ring.reseal(
            key_id,
            sealed,
            &aad(*channel, access_key),
            &aad(moved(*channel), access_key),
        )?;
        sqlx::query("UPDATE blob_stores SET key_id = $1, sealed_secret = $2 WHERE channel_id = $3")
            .bind(&again.key_id)
            .bind(&again.bytes)
            .bind(channel)
            .execute(&mut **tx)
            .await?;
    }
    Ok(rows.len() as u64)
}

/// Rewrites every `uuid` and `uuid[]` column of the public schema through `ids`.
async fn rewrite_ids(tx: &mut Tx<'_>, ids: &HashMap<Uuid, Uuid>) -> anyhow::Result<()> {
    sqlx::query("CREATE TEMPORARY TABLE restore_ids (old uuid PRIMARY KEY, new uuid NOT NULL) ON COMMIT DROP")
        .execute(&mut **tx)
        .await?;
    let (old, new): (Vec<Uuid>, Vec<Uuid>) = ids.iter().map(|(o, n)| (*o, *n)).unzip();
    sqlx::query("INSERT INTO restore_ids SELECT * FROM unnest($1::uuid[], $2::uuid[])")
        .bind(&old)
        .bind(&new)
        .execute(&mut **tx)
        .await?;
    let foreign_keys: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT conrelid::regclass::text, quote_ident(conname), pg_get_constraintdef(oid)
         FROM pg_constraint WHERE contype = 'f' AND connamespace = 'public'::regnamespace",
    )
    .fetch_all(&mut **tx)
    .await?;
    for (table, name, _) in &foreign_keys {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {table} DROP CONSTRAINT {name}"
        )))
        .execute(&mut **tx)
        .await?;
    }
    let columns: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT quote_ident(table_name), quote_ident(column_name), udt_name FROM information_schema.columns
         WHERE table_schema = 'public' AND udt_name IN ('uuid', '_uuid')
           AND table_name IN (SELECT table_name FROM information_schema.tables
                              WHERE table_schema = 'public' AND table_type = 'BASE TABLE')",
    )
    .fetch_all(&mut **tx)
    .await?;
    for (table, column, kind) in &columns {
        let sql = if kind == "uuid" {
            format!(
                "UPDATE {table} t SET {column} = r.new FROM restore_ids r WHERE t.{column} = r.old"
            )
        } else {
            format!(
                "UPDATE {table} SET {column} = ARRAY(SELECT coalesce(r.new, x) FROM unnest({column}) x \
                 LEFT JOIN restore_ids r ON r.old = x) WHERE {column} && (SELECT array_agg(old) FROM restore_ids)"
            )
        };
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut **tx)
            .await
            .with_context(|| format!("move the ids in {table}.{column}"))?;
    }
    for (table, name, definition) in &foreign_keys {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
        )))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
