//! Channel key pairs in the shape S3 clients expect: a 20-character access key id and a 40-character secret. The
//! secret is sealed under the platform's keyring before it is stored, bound to its channel and access key id.

use rand::RngExt;
use uuid::Uuid;

/// Prefix of every channel access key id, so a leaked one is recognisable as slipway's.
pub const ACCESS_KEY_PREFIX: &str = "SVC";
const ACCESS_KEY_LEN: usize = 20;
const SECRET_LEN: usize = 40;
/// Characters of access key ids (as AWS uses: uppercase letters and digits).
const ACCESS_ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/// Characters of secrets: letters and digits, so no client quotes or escapes them.
pub(crate) const SECRET_ALPHABET: &[u8] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A channel's key pair.
pub struct KeyPair {
    /// Public half, stored in clear (it names the store).
    pub access_key_id: String,
    /// Secret half, stored sealed.
    pub secret_access_key: String,
}

pub(crate) fn random_string(len: usize, alphabet: &[u8]) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect()
}

/// A fresh key pair (about 85 bits in the id, 238 in the secret).
pub fn generate() -> KeyPair {
    KeyPair {
        access_key_id: format!(
            "{ACCESS_KEY_PREFIX}{}",
            random_string(ACCESS_KEY_LEN - ACCESS_KEY_PREFIX.len(), ACCESS_ALPHABET)
        ),
        secret_access_key: random_string(SECRET_LEN, SECRET_ALPHABET),
    }
}

/// The associated data a channel's secret is sealed with: it opens only in its own row.
pub fn aad(channel_id: Uuid, access_key_id: &str) -> Vec<u8> {
    format!("blob:{channel_id}:{access_key_id}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pairs_have_the_s3_shape_and_differ() {
        let a = generate();
        let b = generate();
        assert_eq!(a.access_key_id.len(), 20);
        assert!(a.access_key_id.starts_with("SVC"));
        assert!(
            a.access_key_id
                .bytes()
                .all(|c| ACCESS_ALPHABET.contains(&c))
        );
        assert_eq!(a.secret_access_key.len(), 40);
        assert!(
            a.secret_access_key
                .bytes()
                .all(|c| c.is_ascii_alphanumeric())
        );
        assert_ne!(a.access_key_id, b.access_key_id);
        assert_ne!(a.secret_access_key, b.secret_access_key);
    }

    #[test]
    fn a_sealed_secret_opens_only_in_its_own_row() {
        let ring = slipway_store::env::crypto::Keyring::parse(
            &slipway_store::env::crypto::Keyring::generate_line("k"),
        )
        .unwrap();
        let channel = Uuid::new_v4();
        let sealed = ring.seal(b"secret", &aad(channel, "SVCA")).unwrap();
        assert_eq!(
            ring.open(&sealed, &aad(channel, "SVCA")).unwrap(),
            b"secret"
        );
        assert!(ring.open(&sealed, &aad(channel, "SVCB")).is_err());
        assert!(ring.open(&sealed, &aad(Uuid::new_v4(), "SVCA")).is_err());
    }
}
