//! PKCE (RFC 7636), S256 only: a code is redeemed by the verifier whose SHA-256, base64url without padding, is the
//! challenge the authorization request carried.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Whether `value` is 43 to 128 characters of the unreserved set (`A-Z a-z 0-9 - . _ ~`): the shape of both a
/// verifier and, base64url-encoded, a challenge.
fn well_formed(value: &str) -> bool {
    (43..=128).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `challenge` can be an S256 challenge (43 base64url characters).
pub fn is_challenge(challenge: &str) -> bool {
    challenge.len() == 43 && well_formed(challenge)
}

/// Whether `verifier` is well formed and hashes to `challenge`.
pub fn verifies(verifier: &str, challenge: &str) -> bool {
    if !well_formed(verifier) {
        return false;
    }
    let computed = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    computed.as_bytes().ct_eq(challenge.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfcs_example_verifies() {
        // RFC 7636, appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert!(is_challenge(challenge));
        assert!(verifies(verifier, challenge));
        assert!(!verifies(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj",
            challenge
        ));
        assert!(!verifies(
            verifier,
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cN"
        ));
    }

    #[test]
    fn malformed_values_never_verify() {
        assert!(!is_challenge("short"));
        assert!(!is_challenge(&"a".repeat(44)));
        assert!(!is_challenge(&format!("{}=", "a".repeat(42))));
        let short = "a".repeat(42);
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(short.as_bytes()));
        assert!(
            !verifies(&short, &challenge),
            "a verifier under 43 characters"
        );
        let spaced = format!("{} ", "a".repeat(43));
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(spaced.as_bytes()));
        assert!(!verifies(&spaced, &challenge), "characters outside the set");
    }
}
