//! The `channel_databases` rows: one per non-static channel, with the names of its database and roles (fixed at
//! the first record) and both roles' passwords, sealed under the platform's keyring and bound to their row.

use chrono::{DateTime, Utc};
use rand::RngExt;
use rand::distr::Alphanumeric;
use sqlx::PgPool;
use uuid::Uuid;

use slipway_backends::data_server::DatabaseNames;
use slipway_store::env::crypto::{Keyring, Sealed};

/// Characters of a role password (letters and digits: nothing a connection URL must escape).
const PASSWORD_LEN: usize = 40;

/// A row of `channel_databases`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Record {
    /// The channel's id.
    pub channel_id: Uuid,
    /// Its app's id.
    pub app_id: Uuid,
    /// Username of the app's owner.
    pub owner: String,
    /// The database.
    pub db_name: String,
    /// The write role.
    pub role_name: String,
    /// The read-only role.
    pub readonly_role_name: String,
    /// Keyring entry that sealed the passwords.
    pub key_id: String,
    /// The write role's sealed password.
    pub sealed_password: Vec<u8>,
    /// The read-only role's sealed password.
    pub sealed_readonly_password: Vec<u8>,
    /// When the database was first recorded.
    pub created_at: DateTime<Utc>,
}

/// A new role password: 40 letters and digits (about 238 bits).
pub fn new_password() -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(PASSWORD_LEN)
        .map(char::from)
        .collect()
}

/// The associated data a password is sealed with: it opens only for its own role of its own channel.
pub fn aad(channel_id: Uuid, role: &str) -> Vec<u8> {
    format!("postgres:{channel_id}:{role}").into_bytes()
}

impl Record {
    /// The database and role names.
    pub fn names(&self) -> DatabaseNames {
        DatabaseNames {
            db_name: self.db_name.clone(),
            role_name: self.role_name.clone(),
            readonly_role_name: self.readonly_role_name.clone(),
        }
    }

    /// Opens both passwords: (write role, read-only role).
    pub fn passwords(&self, ring: &Keyring) -> anyhow::Result<(String, String)> {
        let open = |bytes: &[u8], role: &str| -> anyhow::Result<String> {
            let sealed = Sealed {
                key_id: self.key_id.clone(),
                bytes: bytes.to_vec(),
            };
            Ok(String::from_utf8(
                ring.open(&sealed, &aad(self.channel_id, role))?,
            )?)
        };
        Ok((
            open(&self.sealed_password, &self.role_name)?,
            open(&self.sealed_readonly_password, &self.readonly_role_name)?,
        ))
    }
}

/// What a new record is made of.
#[derive(Debug)]
pub struct NewRecord<'a> {
    /// The channel's id.
    pub channel_id: Uuid,
    /// Its app's id.
    pub app_id: Uuid,
    /// Username of the app's owner.
    pub owner: &'a str,
    /// The names the database gets.
    pub names: &'a DatabaseNames,
}

/// Records the channel's database with fresh passwords, unless it has one; answers the stored row either way.
/// Under the channel's record lock ([`slipway_store::db::lock_channel_records`]), which a transfer's swap of records holds.
pub async fn ensure(db: &PgPool, ring: &Keyring, new: &NewRecord<'_>) -> anyhow::Result<Record> {
    // Most calls find the record made: one query, no lock.
    if let Some(record) = by_channel(db, new.channel_id).await? {
        return Ok(record);
    }
    let mut tx = db.begin().await?;
    slipway_store::db::lock_channel_records(&mut tx, new.channel_id).await?;
    if let Some(record) = by_channel(&mut *tx, new.channel_id).await? {
        return Ok(record);
    }
    let names = new.names;
    let sealed = ring.seal(
        new_password().as_bytes(),
        &aad(new.channel_id, &names.role_name),
    )?;
    let sealed_readonly = ring.seal(
        new_password().as_bytes(),
        &aad(new.channel_id, &names.readonly_role_name),
    )?;
    let record: Record = sqlx::query_as(
        "INSERT INTO channel_databases (channel_id, app_id, owner, db_name, role_name, readonly_role_name, key_id, \
         sealed_password, sealed_readonly_password) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         RETURNING *",
    )
    .bind(new.channel_id)
    .bind(new.app_id)
    .bind(new.owner)
    .bind(&names.db_name)
    .bind(&names.role_name)
    .bind(&names.readonly_role_name)
    .bind(&sealed.key_id)
    .bind(&sealed.bytes)
    .bind(&sealed_readonly.bytes)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(record)
}

/// The record of a channel.
pub async fn by_channel(
    db: impl sqlx::PgExecutor<'_>,
    channel_id: Uuid,
) -> sqlx::Result<Option<Record>> {
    sqlx::query_as("SELECT * FROM channel_databases WHERE channel_id = $1")
        .bind(channel_id)
        .fetch_optional(db)
        .await
}

/// The records of every channel of apps `owner` owns.
pub async fn by_owner(db: &PgPool, owner: &str) -> sqlx::Result<Vec<Record>> {
    sqlx::query_as("SELECT * FROM channel_databases WHERE owner = $1 ORDER BY db_name")
        .bind(owner)
        .fetch_all(db)
        .await
}

/// Forgets the channel's database (it was dropped).
pub async fn delete(db: &PgPool, channel_id: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM channel_databases WHERE channel_id = $1")
        .bind(channel_id)
        .execute(db)
        .await?;
    Ok(())
}

/// Seals every record's passwords again with the keyring's first key (after a rotation); how many it resealed.
pub async fn reseal_all(db: &PgPool, ring: &Keyring) -> anyhow::Result<u64> {
    let mut tx = db.begin().await?;
    let stale: Vec<Record> =
        sqlx::query_as("SELECT * FROM channel_databases WHERE key_id <> $1 FOR UPDATE")
            .bind(ring.active_id())
            .fetch_all(&mut *tx)
            .await?;
    for record in &stale {
        let (password, readonly) = record.passwords(ring)?;
        let sealed = ring.seal(
            password.as_bytes(),
            &aad(record.channel_id, &record.role_name),
        )?;
        let sealed_readonly = ring.seal(
            readonly.as_bytes(),
            &aad(record.channel_id, &record.readonly_role_name),
        )?;
        sqlx::query(
            "UPDATE channel_databases SET key_id = $1, sealed_password = $2, sealed_readonly_password = $3 \
             WHERE channel_id = $4",
        )
        .bind(&sealed.key_id)
        .bind(&sealed.bytes)
        .bind(&sealed_readonly.bytes)
        .bind(record.channel_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(stale.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_password_opens_only_for_its_own_role() {
        let ring = Keyring::parse(&Keyring::generate_line("k")).unwrap();
        let channel = Uuid::new_v4();
        let sealed = ring.seal(b"pw", &aad(channel, "a_b")).unwrap();
        assert_eq!(ring.open(&sealed, &aad(channel, "a_b")).unwrap(), b"pw");
        assert!(ring.open(&sealed, &aad(channel, "a_b_ro")).is_err());
        assert!(ring.open(&sealed, &aad(Uuid::new_v4(), "a_b")).is_err());
    }
}
