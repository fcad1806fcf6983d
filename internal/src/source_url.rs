//! Signed source URLs: how a build pod, which holds no credential at all, fetches the files of the one commit it
//! builds from the internal listener.
//!
//! The API server alone holds the signing key (`--build-source-key-file`), a key used for nothing else: the
//! operator asks the API for a URL (`POST /internal/v1/apps/{app_id}/source-urls`) when a build Job leaves the
//! queue, and puts it on the Job's pod. The signature is HMAC-SHA256 over `<app_id>/<sha>/<expires>`, so a URL
//! opens one commit of one app until it expires, and nothing else.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{KeyInit, Mac};

use crate::protocol::{PREFIX, SourceUrlResponse};

/// How long a signed source URL stays valid.
pub const LIFETIME: Duration = Duration::from_secs(3600);

/// The shortest signing key accepted, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

/// A signing key that is not fit for use.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file cannot be read.
    #[error("read the build source key from {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The key is too short to be secret.
    #[error("the build source key {path} holds {len} bytes; it needs at least {MIN_KEY_BYTES}")]
    TooShort {
        /// Where the key came from.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
}

/// The key source URLs are signed with. Its `Debug` does not show it.
#[derive(Clone)]
pub struct SourceKey(Vec<u8>);

impl std::fmt::Debug for SourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceKey(..)")
    }
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl SourceKey {
    /// A key of `bytes`; refuses one shorter than [`MIN_KEY_BYTES`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                path: PathBuf::from("(given)"),
                len: bytes.len(),
            });
        }
        Ok(Self(bytes))
    }

    /// Reads the key from a file: its bytes without surrounding whitespace (so a trailing newline is not part of
    /// it).
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::new(bytes.trim_ascii()).map_err(|e| match e {
            KeyError::TooShort { len, .. } => KeyError::TooShort {
                path: path.to_owned(),
                len,
            },
            other => other,
        })
    }

    fn mac(&self, app_id: &str, sha: &str, expires: u64) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(format!("{app_id}/{sha}/{expires}").as_bytes());
        mac
    }

    /// The signature of a URL for `sha` of `app_id` valid until `expires`, in hex.
    pub fn sign(&self, app_id: &str, sha: &str, expires: u64) -> String {
        hex::encode(self.mac(app_id, sha, expires).finalize().into_bytes())
    }

    /// Whether `signature` opens `sha` of `app_id` at `now`: made with this key for exactly that commit and
    /// expiry, and not expired. The comparison takes the same time wherever the signatures differ.
    pub fn verify(&self, app_id: &str, sha: &str, expires: u64, signature: &str, now: u64) -> bool {
        if expires < now {
            return false;
        }
        let Ok(given) = hex::decode(signature) else {
            return false;
        };
        self.mac(app_id, sha, expires).verify_slice(&given).is_ok()
    }

    /// A signed path and query for `sha` of `app_id`, valid for [`LIFETIME`] from `now`.
    pub fn signed_path(&self, app_id: &str, sha: &str, now: u64) -> SourceUrlResponse {
        let expires = now + LIFETIME.as_secs();
        let signature = self.sign(app_id, sha, expires);
        SourceUrlResponse {
            path: format!(
                "{PREFIX}/apps/{app_id}/archive/{sha}?expires={expires}&signature={signature}"
            ),
            expires,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: &str = "6f1c2a4e-0000-4000-8000-000000000001";
    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
    const OTHER_SHA: &str = "89abcdef0123456789abcdef0123456789abcdef";

    fn key(fill: u8) -> SourceKey {
        SourceKey::new(vec![fill; 32]).unwrap()
    }

    /// Expiry and signature of a signed path.
    fn query(path: &str) -> (u64, String) {
        let query = path.split_once('?').unwrap().1;
        let mut expires = 0;
        let mut signature = String::new();
        for pair in query.split('&') {
            match pair.split_once('=').unwrap() {
                ("expires", v) => expires = v.parse().unwrap(),
                ("signature", v) => signature = v.to_owned(),
                other => panic!("unexpected {other:?}"),
            }
        }
        (expires, signature)
    }

    #[test]
    fn a_url_opens_its_commit_of_its_app_until_it_expires() {
        let now = 1_800_000_000;
        let url = key(1).signed_path(APP, SHA, now);
        assert_eq!(
            url.path.split_once('?').unwrap().0,
            format!("/internal/v1/apps/{APP}/archive/{SHA}")
        );
        let (expires, sig) = query(&url.path);
        assert_eq!(expires, now + 3600);
        assert_eq!(url.expires, expires);
        let k = key(1);
        assert!(k.verify(APP, SHA, expires, &sig, now));
        assert!(
            k.verify(APP, SHA, expires, &sig, expires),
            "valid up to the second it names"
        );
        assert!(
            !k.verify(APP, OTHER_SHA, expires, &sig, now),
            "another commit"
        );
        assert!(
            !k.verify("another-app", SHA, expires, &sig, now),
            "another app"
        );
        assert!(
            !k.verify(APP, SHA, expires + 3600, &sig, now),
            "a later expiry"
        );
        assert!(!k.verify(APP, SHA, expires, &sig, expires + 1), "expired");
        assert!(!key(2).verify(APP, SHA, expires, &sig, now), "another key");
        assert!(!k.verify(APP, SHA, expires, "zz", now), "not hex");
        assert!(!k.verify(APP, SHA, expires, "", now), "empty");
    }

    #[test]
    fn short_keys_are_refused_and_files_lose_their_newline() {
        assert!(matches!(
            SourceKey::new(vec![7; 31]),
            Err(KeyError::TooShort { len: 31, .. })
        ));
        let dir = std::env::temp_dir().join(format!("slipway-source-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, format!("{}\n", "a".repeat(32))).unwrap();
        let loaded = SourceKey::load(&file).unwrap();
        assert_eq!(
            loaded.sign(APP, SHA, 1),
            SourceKey::new("a".repeat(32)).unwrap().sign(APP, SHA, 1)
        );
        std::fs::write(&file, format!("{}\n", "a".repeat(31))).unwrap();
        let err = SourceKey::load(&file).unwrap_err();
        assert!(err.to_string().contains("31 bytes"), "{err}");
        assert!(matches!(
            SourceKey::load(&dir.join("missing")),
            Err(KeyError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
