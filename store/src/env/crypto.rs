//! Sealing of env values with AES-256-GCM under the platform's keyring, so a dump of the database alone reveals no
//! value. Each row is bound to its place (app, channel, key) as associated data: a sealed value moved to another
//! row does not open.
//!
//! The keyring is a file of lines `<key-id> <base64 of 32 bytes>` (from a Kubernetes Secret the chart creates).
//! The first line seals; every line opens. Rotation: put a new key first, restart, run
//! `slipway admin reseal-env`, then drop the old line.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use anyhow::{Context, bail, ensure};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::RngExt;

const NONCE_LEN: usize = 12;

/// The keys env values are sealed with.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<(String, Aes256Gcm)>,
    /// The sealing key's bytes, from which [`Keyring::derived_key`] derives keys for other purposes.
    active: [u8; 32],
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring").field("key_ids", &ids).finish()
    }
}

/// HMAC-SHA256 of `parts` (concatenated) under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{KeyInit as _, Mac as _};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// A sealed value and the key that sealed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The keyring entry that sealed it.
    pub key_id: String,
    /// Nonce followed by ciphertext and tag.
    pub bytes: Vec<u8>,
}

impl Keyring {
    /// Parses keyring text: one `<key-id> <base64 key>` per line, blank lines and `#` comments ignored.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut keys = Vec::new();
        let mut active = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (id, key) = line.split_once(char::is_whitespace).with_context(|| {
                format!("keyring line {}: expected `<key-id> <base64 key>`", n + 1)
            })?;
            let key = STANDARD
                .decode(key.trim())
                .with_context(|| format!("keyring line {}: the key is not base64", n + 1))?;
            ensure!(
                key.len() == 32,
                "keyring line {}: the key must be 32 bytes, not {}",
                n + 1,
                key.len()
            );
            let cipher = Aes256Gcm::new_from_slice(&key)
                .map_err(|_| anyhow::anyhow!("keyring line {}: bad key", n + 1))?;
            ensure!(
                !keys.iter().any(|(k, _)| k == id),
                "keyring line {}: duplicate key id {id}",
                n + 1
            );
            keys.push((id.to_owned(), cipher));
            if active.is_none() {
                active = <[u8; 32]>::try_from(key.as_slice()).ok();
            }
        }
        let Some(active) = active else {
            bail!("the keyring holds no key");
        };
        Ok(Self { keys, active })
    }

    /// Reads a keyring file.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read the env keyring {}", path.display()))?;
        Self::parse(&text)
    }

    /// A keyring line with a fresh random key (for `slipway admin new-env-key` and tests).
    pub fn generate_line(id: &str) -> String {
        let key: [u8; 32] = rand::rng().random();
        format!("{id} {}", STANDARD.encode(key))
    }

    /// A key for `purpose` derived from the sealing key (HMAC-SHA256 of the purpose): for keyed hashes the
    /// database stores, such as email codes. It changes when the keyring's first key does.
    pub fn derived_key(&self, purpose: &str) -> [u8; 32] {
        hmac_sha256(
            &self.active,
            &[b"slipway derived key\0", purpose.as_bytes()],
        )
    }

    /// The id of the sealing key.
    pub fn active_id(&self) -> &str {
        &self.keys[0].0
    }

    /// Seals `value` for the place named by `aad`.
    pub fn seal(&self, value: &[u8], aad: &[u8]) -> anyhow::Result<Sealed> {
        let (id, cipher) = &self.keys[0];
        let nonce_bytes: [u8; NONCE_LEN] = rand::rng().random();
        let nonce = Nonce::from(nonce_bytes);
        let ciphertext = cipher
            .encrypt(&nonce, Payload { msg: value, aad })
            .map_err(|_| anyhow::anyhow!("sealing failed"))?;
        let mut bytes = nonce_bytes.to_vec();
        bytes.extend(ciphertext);
        Ok(Sealed {
            key_id: id.clone(),
            bytes,
        })
    }

    /// The value `bytes` (sealed by the key `key_id`), opened for the place `from` and sealed again for the place
    /// `to` (a row that moves to new ids); the value in the clear is wiped once sealed again.
    pub fn reseal(
        &self,
        key_id: &str,
        bytes: &[u8],
        from: &[u8],
        to: &[u8],
    ) -> anyhow::Result<Sealed> {
        let sealed = Sealed {
            key_id: key_id.to_owned(),
            bytes: bytes.to_vec(),
        };
        let plain = zeroize::Zeroizing::new(self.open(&sealed, from)?);
        self.seal(&plain, to)
    }

    /// Opens a sealed value for the place named by `aad`.
    pub fn open(&self, sealed: &Sealed, aad: &[u8]) -> anyhow::Result<Vec<u8>> {
        let cipher = self
            .keys
            .iter()
            .find(|(id, _)| *id == sealed.key_id)
            .map(|(_, c)| c)
            .with_context(|| {
                format!(
                    "the env keyring has no key {}; was it removed before resealing?",
                    sealed.key_id
                )
            })?;
        ensure!(sealed.bytes.len() > NONCE_LEN, "sealed value too short");
        let (nonce, ciphertext) = sealed.bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().context("nonce length")?;
        cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: ciphertext,
                    aad,
                },
            )
            .map_err(|_| {
                anyhow::anyhow!("a sealed env value does not open (wrong key or moved row)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_open_only_in_their_place_and_under_a_known_key() {
        let ring = Keyring::parse(&Keyring::generate_line("k1")).unwrap();
        let sealed = ring.seal(b"hunter2", b"app/a/KEY").unwrap();
        assert_eq!(sealed.key_id, "k1");
        assert!(!sealed.bytes.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(ring.open(&sealed, b"app/a/KEY").unwrap(), b"hunter2");
        assert!(
            ring.open(&sealed, b"app/b/KEY").is_err(),
            "bound to its place"
        );
        let other = Keyring::parse(&Keyring::generate_line("k1")).unwrap();
        assert!(
            other.open(&sealed, b"app/a/KEY").is_err(),
            "another key does not open it"
        );
        assert_ne!(
            ring.seal(b"hunter2", b"x").unwrap().bytes,
            ring.seal(b"hunter2", b"x").unwrap().bytes,
            "fresh nonces"
        );
    }

    #[test]
    fn rotation_seals_with_the_first_key_and_opens_with_any() {
        let (old, new) = (Keyring::generate_line("old"), Keyring::generate_line("new"));
        let before = Keyring::parse(&old).unwrap();
        let sealed_old = before.seal(b"v", b"p").unwrap();
        let during = Keyring::parse(&format!("{new}\n# previous\n{old}\n")).unwrap();
        assert_eq!(during.active_id(), "new");
        assert_eq!(during.open(&sealed_old, b"p").unwrap(), b"v");
        assert_eq!(during.seal(b"v", b"p").unwrap().key_id, "new");
        let after = Keyring::parse(&new).unwrap();
        assert!(
            after
                .open(&sealed_old, b"p")
                .unwrap_err()
                .to_string()
                .contains("no key old")
        );
    }

    #[test]
    fn bad_keyrings_are_refused_with_the_line() {
        assert!(Keyring::parse("").is_err());
        assert!(
            Keyring::parse("k1")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        assert!(
            Keyring::parse("k1 AAAA")
                .unwrap_err()
                .to_string()
                .contains("32 bytes")
        );
        let line = Keyring::generate_line("k1");
        assert!(
            Keyring::parse(&format!("{line}\n{line}"))
                .unwrap_err()
                .to_string()
                .contains("duplicate")
        );
    }
}
