//! `sub` without storing anyone: an HMAC of the upstream issuer and subject under a key derived from the sign-in
//! secret. The same person gets the same `sub` on every app and host, for as long as the secret is kept; the
//! upstream's own id is not revealed to apps, and two upstream issuers never collide.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

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
        Self {
            key: super::hmac_sha256(secret, &[b"slipway sign-in subject key"]),
        }
    }

    /// The `sub` of the person the upstream `issuer` calls `subject`.
    pub fn sub(&self, issuer: &str, subject: &str) -> String {
        let mac = super::hmac_sha256(&self.key, &[issuer.as_bytes(), &[0], subject.as_bytes()]);
        let mut sub = URL_SAFE_NO_PAD.encode(mac);
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
        // The issuer is the verified ID token's own (one per platform), so a subject cannot borrow part of it.
        assert_ne!(key.sub("https://idp.example/", "alice"), a);
        let other = SubjectKey::derive(b"another secret of thirty-two bytes!!");
        assert_ne!(a, other.sub("https://idp.example", "alice"));
    }
}
