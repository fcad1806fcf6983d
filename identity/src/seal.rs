//! Sealed values: what sign-in hands from one step to the next through the browser (the auth host's flow cookie,
//! the handoff code to the channel host), encrypted and authenticated with AES-256-GCM under a key derived from
//! the sign-in secret, with an expiry and a purpose inside, so no value opens for another step or after its time.

use std::time::Duration;

use aes_gcm::KeyInit as _;
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

const NONCE_LEN: usize = 12;

/// What a sealed value is for; a value sealed for one purpose never opens for another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The auth host's cookie across the upstream provider.
    Flow,
    /// The auth host's handoff to the channel host.
    Handoff,
    /// The console's session cookie.
    ConsoleSession,
    /// The console's cookie carrying its own sign-in across the upstream provider.
    ConsoleFlow,
    /// The console's cookie naming the address a sign-in code was mailed to.
    ConsoleCode,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Flow => b"slipway sign-in flow",
            Purpose::Handoff => b"slipway sign-in handoff",
            Purpose::ConsoleSession => b"slipway console session",
            Purpose::ConsoleFlow => b"slipway console sign-in flow",
            Purpose::ConsoleCode => b"slipway console sign-in code",
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope<T> {
    exp: u64,
    value: T,
}

/// Seals and opens values. Its `Debug` does not show the key.
pub struct Sealer {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A sealer whose key is derived from `secret`.
    pub fn derive(secret: &[u8]) -> Self {
        Self::derive_for(secret, b"slipway sign-in sealing key")
    }

    /// A sealer whose key is derived from `secret` under `label` (one label per user of a secret).
    pub fn derive_for(secret: &[u8], label: &[u8]) -> Self {
        let key = super::hmac_sha256(secret, &[label]);
        Self {
            cipher: Aes256Gcm::new_from_slice(&key)
                .unwrap_or_else(|_| unreachable!("HMAC-SHA256 gives 32 bytes")),
        }
    }

    /// `value` sealed for `purpose`, good for `lifetime`, as URL- and cookie-safe text.
    pub fn seal<T: Serialize>(&self, purpose: Purpose, value: &T, lifetime: Duration) -> String {
        let envelope = Envelope {
            exp: slipway_internal::source_url::unix_now() + lifetime.as_secs(),
            value,
        };
        let plain = serde_json::to_vec(&envelope)
            .unwrap_or_else(|e| unreachable!("sign-in values serialize: {e}"));
        let nonce: [u8; NONCE_LEN] = rand::rng().random();
        let sealed = self
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &plain,
                    aad: purpose.label(),
                },
            )
            .unwrap_or_else(|_| unreachable!("AES-GCM seals any message this small"));
        let mut bytes = nonce.to_vec();
        bytes.extend(sealed);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The value in `text` when it was sealed for `purpose` by this key and has not expired.
    pub fn open<T: DeserializeOwned>(&self, purpose: Purpose, text: &str) -> Option<T> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        if bytes.len() <= NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let plain = self
            .cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: sealed,
                    aad: purpose.label(),
                },
            )
            .ok()?;
        let envelope: Envelope<T> = serde_json::from_slice(&plain).ok()?;
        (envelope.exp >= slipway_internal::source_url::unix_now()).then_some(envelope.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_value_opens_only_for_its_purpose_key_and_time() {
        let sealer = Sealer::derive(SECRET);
        let text = sealer.seal(Purpose::Flow, &"hello", Duration::from_secs(60));
        assert_eq!(
            sealer.open::<String>(Purpose::Flow, &text).as_deref(),
            Some("hello")
        );
        assert_eq!(sealer.open::<String>(Purpose::Handoff, &text), None);
        let other = Sealer::derive(b"another secret of thirty-two bytes!!");
        assert_eq!(other.open::<String>(Purpose::Flow, &text), None);
        // One whose time has passed does not open.
        let past = Envelope {
            exp: 1,
            value: "hello",
        };
        let plain = serde_json::to_vec(&past).unwrap();
        let nonce = [7u8; NONCE_LEN];
        let mut bytes = nonce.to_vec();
        bytes.extend(
            sealer
                .cipher
                .encrypt(
                    &Nonce::from(nonce),
                    Payload {
                        msg: &plain,
                        aad: Purpose::Flow.label(),
                    },
                )
                .unwrap(),
        );
        assert_eq!(
            sealer.open::<String>(Purpose::Flow, &URL_SAFE_NO_PAD.encode(bytes)),
            None
        );
    }

    #[test]
    fn a_tampered_value_does_not_open() {
        let sealer = Sealer::derive(SECRET);
        let text = sealer.seal(Purpose::Handoff, &"hello", Duration::from_secs(60));
        let mut bytes = URL_SAFE_NO_PAD.decode(&text).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert_eq!(
            sealer.open::<String>(Purpose::Handoff, &URL_SAFE_NO_PAD.encode(bytes)),
            None
        );
        for junk in ["", "!!", "AAAA"] {
            assert_eq!(sealer.open::<String>(Purpose::Handoff, junk), None);
        }
    }
}
