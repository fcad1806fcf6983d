//! Email verification codes: eight characters from an alphabet without the look-alikes (0, 1, i, l, o), about
//! 8.5×10¹¹ codes. Only an HMAC of a code is stored, keyed by a key the database does not hold, so a copy of the
//! database does not yield codes; a guess is compared in constant time.

use rand::RngExt;

/// The characters a code is made of.
pub const ALPHABET: &[u8; 31] = b"abcdefghjkmnpqrstuvwxyz23456789";
/// Characters in a code.
pub const LENGTH: usize = 8;
/// Minutes a code lives.
pub const LIFE_MINUTES: i64 = 15;
/// Seconds between two requests of one account.
pub const SPACING_SECONDS: i64 = 60;
/// Wrong codes after which the challenge is locked.
pub const MAX_WRONG: i32 = 5;
/// Codes one address may be sent in an hour, whichever accounts ask (so no one floods an inbox through many
/// accounts).
pub const PER_ADDRESS_PER_HOUR: u32 = 5;

/// A fresh random code.
pub fn generate() -> String {
    let mut rng = rand::rng();
    (0..LENGTH)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The stored form of `code` for `user`: HMAC-SHA256 under `key`. The user id is in it, so a hash cannot be moved
/// to another account's challenge.
pub fn hash(key: &[u8; 32], user: uuid::Uuid, code: &str) -> [u8; 32] {
    slipway_store::env::crypto::hmac_sha256(key, &[user.as_bytes(), code.trim().as_bytes()])
}

/// Whether `guess` is the code behind `stored`, compared in constant time.
pub fn matches(key: &[u8; 32], user: uuid::Uuid, guess: &str, stored: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    let guess = hash(key, user, &guess.trim().to_ascii_lowercase());
    stored.len() == guess.len() && bool::from(guess.ct_eq(stored))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_use_only_the_alphabet_and_differ() {
        let codes: Vec<String> = (0..200).map(|_| generate()).collect();
        for code in &codes {
            assert_eq!(code.len(), LENGTH);
            assert!(code.bytes().all(|b| ALPHABET.contains(&b)), "{code}");
            assert!(!code.contains(['0', '1', 'i', 'l', 'o']), "{code}");
        }
        let distinct: std::collections::BTreeSet<_> = codes.iter().collect();
        assert_eq!(distinct.len(), codes.len());
    }

    #[test]
    fn a_code_matches_only_its_own_account_and_key() {
        let (key, other_key) = ([7u8; 32], [8u8; 32]);
        let (user, other_user) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let stored = hash(&key, user, "abcd2345");
        assert!(matches(&key, user, "abcd2345", &stored));
        assert!(
            matches(&key, user, " ABCD2345 ", &stored),
            "case and spaces are forgiven"
        );
        assert!(!matches(&key, user, "abcd2346", &stored));
        assert!(!matches(&key, other_user, "abcd2345", &stored));
        assert!(!matches(&other_key, user, "abcd2345", &stored));
        assert!(!matches(&key, user, "abcd2345", &stored[..31]));
    }
}
