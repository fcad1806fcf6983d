//! `sub` without storing anyone: an HMAC of the upstream issuer and subject under a key derived from the sign-in
//! secret. The same person gets the same `sub` on every app and host, for as long as the secret is kept; the
//! upstream's own id is not revealed to apps, and two upstream issuers never collide.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{KeyInit as _, Mac};

/// Characters of `sub` (22 base64url characters: 132 bits).
const SUB_LEN: usize = 22;

/// Derives `sub`. Its `Debug` does not show the key.
pub struct SubjectKey {
    key: [u8; 32],
}

impl std::fmt::Debug for SubjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectKey")
    }
}

impl SubjectKey {
    /// The key derived from `secret`.
    pub fn derive(secret: &[u8]) -> Self {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(b"slipway sign-in subject key");
        Self {
            key: mac.finalize().into_bytes().into(),
        }
    }

    /// The `sub` of the person the upstream `issuer` calls `subject`.
    pub fn sub(&self, issuer: &str, subject: &str) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(issuer.as_bytes());
        mac.update(&[0]);
        mac.update(subject.as_bytes());
        let mut sub = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        sub.truncate(SUB_LEN);
        sub
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_is_stable_per_person_and_distinct_across_issuers() {
        let key = SubjectKey::derive(b"0123456789abcdef0123456789abcdef");
        let a = key.sub("https://idp.example", "alice");
        assert_eq!(a, key.sub("https://idp.example", "alice"));
        assert_eq!(a.len(), SUB_LEN);
        assert_ne!(a, key.sub("https://idp.example", "bob"));
        assert_ne!(a, key.sub("https://other.example", "alice"));
        // The separator keeps (iss "a", sub "b\0c") and (iss "a\0b", sub "c") apart only if ids hold no NUL;
        // upstream ids are printable, so the boundary is unambiguous.
        assert_ne!(key.sub("https://idp.example/", "alice"), a);
        let other = SubjectKey::derive(b"another secret of thirty-two bytes!!");
        assert_ne!(a, other.sub("https://idp.example", "alice"));
    }
}
