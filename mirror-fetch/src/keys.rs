//! The deploy key of a mirror: a fresh Ed25519 key per connection, whose public line the owner installs on the
//! external repository (read-only) and whose private half is sealed with the env keyring, bound to the app, so
//! only this app's syncs can open it.

use rand::RngExt;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::{LineEnding, PrivateKey};
use uuid::Uuid;
use zeroize::Zeroizing;

use slipway_store::env::crypto::{Keyring, Sealed};

/// A new deploy key: the private key and its OpenSSH public line, commented with what it is for.
pub fn generate(comment: &str) -> anyhow::Result<(PrivateKey, String)> {
    let seed: [u8; 32] = rand::rng().random();
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&seed));
    key.set_comment(comment);
    let public = key.public_key().to_openssh()?;
    Ok((key, public))
}

/// Where a mirror's key is sealed: the associated data that binds it to its app.
pub fn place(app: Uuid) -> Vec<u8> {
    format!("git-mirror-key\0{app}").into_bytes()
}

/// Seals `key` for `app`.
pub fn seal(ring: &Keyring, app: Uuid, key: &PrivateKey) -> anyhow::Result<Sealed> {
    let pem = key.to_openssh(LineEnding::LF)?;
    ring.seal(pem.as_bytes(), &place(app))
}

/// Opens the key sealed for `app`.
pub fn open(ring: &Keyring, app: Uuid, sealed: &Sealed) -> anyhow::Result<PrivateKey> {
    let pem = Zeroizing::new(ring.open(sealed, &place(app))?);
    Ok(PrivateKey::from_openssh(&*pem)?)
}

/// Re-seals every mirror key another keyring entry sealed (key rotation); returns how many changed.
pub async fn reseal_all(db: &sqlx::PgPool, ring: &Keyring) -> anyhow::Result<u64> {
    let mut tx = db.begin().await?;
    let stale =
        slipway_store::db::mirrors::sealed_with_other_keys(&mut tx, ring.active_id()).await?;
    for (app, key_id, bytes) in &stale {
        let value = Zeroizing::new(ring.open(
            &Sealed {
                key_id: key_id.clone(),
                bytes: bytes.clone(),
            },
            &place(*app),
        )?);
        let sealed = ring.seal(&value, &place(*app))?;
        slipway_store::db::mirrors::reseal(&mut tx, *app, &sealed.key_id, &sealed.bytes).await?;
    }
    tx.commit().await?;
    Ok(stale.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_key_opens_for_its_app_only() {
        let ring = Keyring::parse(&Keyring::generate_line("k1")).unwrap();
        let (key, public) = generate("owner/app").unwrap();
        assert!(public.starts_with("ssh-ed25519 AAAA"), "{public}");
        assert!(public.ends_with(" owner/app"), "{public}");
        let app = Uuid::new_v4();
        let sealed = seal(&ring, app, &key).unwrap();
        let opened = open(&ring, app, &sealed).unwrap();
        assert_eq!(opened.public_key().to_openssh().unwrap(), public);
        assert!(
            open(&ring, Uuid::new_v4(), &sealed).is_err(),
            "bound to its app"
        );
        let (other, other_public) = generate("x").unwrap();
        assert_ne!(other_public, public, "every connection gets a new key");
        drop(other);
    }
}
