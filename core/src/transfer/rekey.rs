//! The platform database's side of a transfer: every row kept under the app's and its channels' old ids is
//! re-keyed to the new ones in one transaction, and sealed values (bound to their row's ids as the associated data
//! of their encryption) are opened under their old place and sealed again under the new one.
//!
//! Credentials are not carried over: whoever ran code of the app, or read its variables, before the move (the old
//! owner, a former member, an agent of theirs) has seen them. So each moved database record gets two new role
//! passwords and each moved bucket record a new key pair; the transaction is handed back open with the new
//! passwords, for the caller to give them to the data server before it commits ([`super::credentials`]). The
//! bucket's key pair needs nothing outside the platform database: the S3 gateway reads key pairs from it.

use std::collections::HashMap;
use std::sync::Arc;

use slipway_backends::data_server::DatabaseNames;
use slipway_crds::Channel;
use slipway_crds::names;
use uuid::Uuid;
use zeroize::Zeroizing;

use super::Target;
use crate::access::VisibleApp;
use crate::state::AppState;
use slipway_store::env::crypto::Keyring;

/// The transaction of a re-keying, not yet committed, and the new passwords it recorded.
pub(super) struct Rekeyed {
    /// Commit it once the data server has the new passwords; dropping it takes everything back.
    pub tx: Tx<'static>,
    /// One entry per moved database.
    pub databases: Vec<NewPasswords>,
}

/// A moved database's roles with the passwords the re-keying recorded for them, and the ones they had.
pub(super) struct NewPasswords {
    /// The old channel, whose record it was.
    pub channel_id: Uuid,
    /// The database and its roles (their names stay).
    pub names: DatabaseNames,
    /// The write role's and the read-only role's new passwords.
    pub new: (Zeroizing<String>, Zeroizing<String>),
    /// Their passwords before, to put back if the transaction cannot commit.
    pub previous: (Zeroizing<String>, Zeroizing<String>),
}

/// Re-keys every row of the platform database from the old ids to the new ones, in one transaction, with new
/// credentials for the moved databases and buckets; answers the transaction uncommitted. See the module docs.
pub(super) async fn rekey(
    state: &AppState,
    app: &VisibleApp,
    target: &Target,
    new_app: Uuid,
    pairs: &[(Arc<Channel>, Arc<Channel>)],
) -> anyhow::Result<Rekeyed> {
    let ring = state.keyring();
    let old_app = app.id;
    let uid = |c: &Channel| -> anyhow::Result<Uuid> {
        Ok(c.metadata.uid.as_deref().unwrap_or_default().parse()?)
    };
    let mut channel_ids = HashMap::new();
    for (old, new) in pairs {
        channel_ids.insert(uid(old)?, uid(new)?);
    }
    let mut tx = state.db().begin().await?;
    // Memberships do not move: they were the old owner's choices, and the new owner would find the old owner's
    // people (a sock account among them) with roles on an app that is now theirs and counts against their plan.
    sqlx::query("DELETE FROM app_members WHERE app_id = $1")
        .bind(old_app)
        .execute(&mut *tx)
        .await?;
    for table in [
        "audit_events",
        "deploy_env_snapshots",
        "note_threads",
        "feedback",
        "postgres_snapshots",
        "blob_snapshots",
        "runtime_containers",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET app_id = $2 WHERE app_id = $1"
        )))
        .bind(old_app)
        .bind(new_app)
        .execute(&mut *tx)
        .await?;
    }
    for (old_id, new_id) in &channel_ids {
        for table in [
            "deploy_env_snapshots",
            "postgres_snapshots",
            "blob_snapshots",
            "runtime_containers",
        ] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {table} SET channel_id = $2 WHERE channel_id = $1"
            )))
            .bind(old_id)
            .bind(new_id)
            .execute(&mut *tx)
            .await?;
        }
    }
    move_env(&mut tx, ring, old_app, new_app, &channel_ids).await?;
    move_mirror_key(&mut tx, ring, old_app, new_app).await?;
    // The operator may be recording the new channels' databases and buckets right now: their rows must not appear
    // half-way through a swap. Locked in one order, so two transactions never wait on each other's.
    let mut locked: Vec<Uuid> = channel_ids
        .iter()
        .flat_map(|(old, new)| [*old, *new])
        .collect();
    locked.sort();
    for id in locked {
        slipway_store::db::lock_channel_records(&mut tx, id).await?;
    }
    let mut databases = Vec::new();
    for (old, new) in pairs {
        let (old_id, new_id) = (uid(old)?, uid(new)?);
        let new_label =
            names::channel_host_label(&app.name, &new.channel_name().parse()?, &target.username)?;
        let old_label =
            names::channel_host_label(&app.name, &old.channel_name().parse()?, &app.owner)?;
        databases.extend(swap_databases(&mut tx, ring, old_id, new_id).await?);
        swap_stores(&mut tx, ring, old_id, new_id).await?;
        // The moved records take the new channel's identity; a fresh one the operator made for the new channel
        // now sits under the old id, with the old identity, for the old channel's finalizer to remove.
        for (id, app_id, owner, label) in [
            (
                new_id,
                new_app,
                target.username.as_str(),
                new_label.as_str(),
            ),
            (old_id, old_app, app.owner.as_str(), old_label.as_str()),
        ] {
            sqlx::query(
                "UPDATE channel_databases SET app_id = $2, owner = $3 WHERE channel_id = $1",
            )
            .bind(id)
            .bind(app_id)
            .bind(owner)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE blob_stores SET app_id = $2, owner = $3, virtual_bucket = $4 WHERE channel_id = $1",
            )
            .bind(id)
            .bind(app_id)
            .bind(owner)
            .bind(label)
            .execute(&mut *tx)
            .await?;
            // A lease moved with its store is the gateway's no more (it knows the store by its old id): it counts,
            // as a reservation now, until a recount that is due at once.
            sqlx::query(
                "UPDATE blob_pending SET owner = $2, leased = false, \
                 expires_at = CASE WHEN leased THEN now() ELSE expires_at END WHERE channel_id = $1",
            )
                .bind(id)
                .bind(owner)
                .execute(&mut *tx)
                .await?;
        }
    }
    Ok(Rekeyed { tx, databases })
}

pub(super) type Tx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// The app's variables and secrets, under the new app and channel ids.
async fn move_env(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    old_app: Uuid,
    new_app: Uuid,
    channels: &HashMap<Uuid, Uuid>,
) -> anyhow::Result<()> {
    let rows: Vec<(Option<Uuid>, String, String, Vec<u8>)> = sqlx::query_as(
        "SELECT channel_id, key, key_id, sealed FROM env_vars WHERE app_id = $1 FOR UPDATE",
    )
    .bind(old_app)
    .fetch_all(&mut **tx)
    .await?;
    for (channel, key, key_id, sealed) in rows {
        let new_channel = channel.map(|c| channels.get(&c).copied().unwrap_or(c));
        let moved = ring.reseal(
            &key_id,
            &sealed,
            &slipway_store::env::store::place(old_app, channel, &key),
            &slipway_store::env::store::place(new_app, new_channel, &key),
        )?;
        sqlx::query(
            "UPDATE env_vars SET app_id = $1, channel_id = $2, key_id = $3, sealed = $4
             WHERE app_id = $5 AND key = $6 AND channel_id IS NOT DISTINCT FROM $7",
        )
        .bind(new_app)
        .bind(new_channel)
        .bind(&moved.key_id)
        .bind(&moved.bytes)
        .bind(old_app)
        .bind(&key)
        .bind(channel)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The mirror's settings and deploy key, under the new app id.
async fn move_mirror_key(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    old_app: Uuid,
    new_app: Uuid,
) -> anyhow::Result<()> {
    let row: Option<(String, Vec<u8>)> = sqlx::query_as(
        "SELECT private_key_id, private_key FROM git_mirrors WHERE app_id = $1 FOR UPDATE",
    )
    .bind(old_app)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some((key_id, sealed)) = row {
        let moved = ring.reseal(
            &key_id,
            &sealed,
            &slipway_mirror_fetch::keys::place(old_app),
            &slipway_mirror_fetch::keys::place(new_app),
        )?;
        sqlx::query(
            "UPDATE git_mirrors SET app_id = $2, private_key_id = $3, private_key = $4 WHERE app_id = $1",
        )
        .bind(old_app)
        .bind(new_app)
        .bind(&moved.key_id)
        .bind(&moved.bytes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Swaps the database records of the channels `moved` (the old channel) and `fresh` (the new one; either record
/// may be missing): the moved record goes under `fresh` with two new passwords, answered; a record the operator
/// made for the new channel already goes under `moved`, its passwords sealed again for their new place. The swap
/// goes through a third id: the primary key is checked row by row.
async fn swap_databases(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: Uuid,
    fresh: Uuid,
) -> anyhow::Result<Option<NewPasswords>> {
    let rows: Vec<slipway_postgres::store::Record> =
        sqlx::query_as("SELECT * FROM channel_databases WHERE channel_id IN ($1, $2) FOR UPDATE")
            .bind(moved)
            .bind(fresh)
            .fetch_all(&mut **tx)
            .await?;
    swap_ids(tx, "channel_databases", moved, fresh).await?;
    let mut rotated = None;
    for record in rows {
        use slipway_postgres::store::{aad, new_password};
        let (password, readonly) = record.passwords(ring)?;
        let (password, readonly) = (Zeroizing::new(password), Zeroizing::new(readonly));
        let to = if record.channel_id == moved {
            fresh
        } else {
            moved
        };
        let (sealed, sealed_readonly) = if record.channel_id == moved {
            let new = (
                Zeroizing::new(new_password()),
                Zeroizing::new(new_password()),
            );
            let sealed = (
                ring.seal(new.0.as_bytes(), &aad(to, &record.role_name))?,
                ring.seal(new.1.as_bytes(), &aad(to, &record.readonly_role_name))?,
            );
            rotated = Some(NewPasswords {
                channel_id: moved,
                names: record.names(),
                new,
                previous: (password, readonly),
            });
            sealed
        } else {
            (
                ring.seal(password.as_bytes(), &aad(to, &record.role_name))?,
                ring.seal(readonly.as_bytes(), &aad(to, &record.readonly_role_name))?,
            )
        };
        sqlx::query(
            "UPDATE channel_databases SET key_id = $2, sealed_password = $3, sealed_readonly_password = $4
             WHERE channel_id = $1",
        )
        .bind(to)
        .bind(&sealed.key_id)
        .bind(&sealed.bytes)
        .bind(&sealed_readonly.bytes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(rotated)
}

/// Swaps the bucket records of the channels `moved` and `fresh` as [`swap_databases`] does: the moved one gets a
/// new key pair, the old one stops naming any bucket; a fresh one keeps its pair, its secret sealed again.
async fn swap_stores(
    tx: &mut Tx<'_>,
    ring: &Keyring,
    moved: Uuid,
    fresh: Uuid,
) -> anyhow::Result<()> {
    let rows: Vec<(Uuid, String, String, Vec<u8>)> = sqlx::query_as(
        "SELECT channel_id, access_key_id, key_id, sealed_secret FROM blob_stores
         WHERE channel_id IN ($1, $2) FOR UPDATE",
    )
    .bind(moved)
    .bind(fresh)
    .fetch_all(&mut **tx)
    .await?;
    swap_ids(tx, "blob_stores", moved, fresh).await?;
    for (from, access_key, key_id, sealed) in rows {
        use slipway_blob::keys::{aad, generate};
        let (to, access_key, secret) = if from == moved {
            let pair = generate();
            let secret = ring.seal(
                pair.secret_access_key.as_bytes(),
                &aad(fresh, &pair.access_key_id),
            )?;
            (fresh, pair.access_key_id, secret)
        } else {
            let secret = ring.reseal(
                &key_id,
                &sealed,
                &aad(from, &access_key),
                &aad(moved, &access_key),
            )?;
            (moved, access_key, secret)
        };
        sqlx::query(
            "UPDATE blob_stores SET access_key_id = $2, key_id = $3, sealed_secret = $4 WHERE channel_id = $1",
        )
        .bind(to)
        .bind(&access_key)
        .bind(&secret.key_id)
        .bind(&secret.bytes)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Swaps the `channel_id` of the rows of `table` under `a` and `b`, through a third id.
async fn swap_ids(tx: &mut Tx<'_>, table: &str, a: Uuid, b: Uuid) -> sqlx::Result<()> {
    let spare = Uuid::new_v4();
    for (from, to) in [(a, spare), (b, a), (spare, b)] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET channel_id = $2 WHERE channel_id = $1"
        )))
        .bind(from)
        .bind(to)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
