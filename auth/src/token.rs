//! Token plaintexts and their hashes. A token is `svc_` and 64 lowercase hex digits (256 random bits); only its
//! SHA-256 is ever stored.

use rand::RngExt;
use sha2::{Digest, Sha256};

/// Prefix of every token.
pub const PREFIX: &str = "svc_";

/// A new random token.
pub fn generate() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    format!("{PREFIX}{}", hex::encode(bytes))
}

/// SHA-256 of a token's plaintext.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Cheap shape check before a database lookup.
pub fn looks_like_token(token: &str) -> bool {
    token
        .strip_prefix(PREFIX)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_random_and_hash_stably() {
        let (a, b) = (generate(), generate());
        assert!(looks_like_token(&a) && looks_like_token(&b));
        assert_ne!(a, b);
        assert_eq!(hash(&a), hash(&a));
        assert_ne!(hash(&a), hash(&b));
        assert!(!looks_like_token("svc_short"));
        assert!(!looks_like_token(&a.replacen("svc_", "tok_", 1)));
    }
}
