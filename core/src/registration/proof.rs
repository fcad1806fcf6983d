//! The signed messages of registration and SSH login, and their check. A message is three newline-terminated
//! lines: the purpose (`svc-register` or `svc-login`, also the signature's namespace, so a signature made for one
//! can never pass as the other), a subject (the requested username, or the key's `SHA256:` fingerprint), and the
//! Unix time, which must lie within [`WINDOW_SECONDS`] of the server's clock. The signature is the armored form
//! `ssh-keygen -Y sign` prints; `ssh-key` checks it, so no SSHSIG parsing is written here.

use russh::keys::ssh_key::SshSig;
use russh::keys::{Algorithm, HashAlg, PublicKey};
use sha2::{Digest, Sha256};

/// How far a signed time may be from the server's, either way, in seconds.
pub const WINDOW_SECONDS: i64 = 300;

/// What a signature is for; its text is both the message's first line and the signature's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `POST /registrations`: the subject line is the requested username (empty when none).
    Register,
    /// `POST /auth/ssh-key`: the subject line is the key's fingerprint.
    Login,
}

impl Purpose {
    /// The namespace and first line.
    pub fn namespace(self) -> &'static str {
        match self {
            Purpose::Register => "svc-register",
            Purpose::Login => "svc-login",
        }
    }
}

/// Until when a used signature made at `timestamp` is remembered: well after its time can no longer pass the check,
/// so neither the check's whole seconds nor a clock that differs between an API process and the database opens a
/// gap for a replay.
pub fn remembered_until(timestamp: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(timestamp.saturating_add(2 * WINDOW_SECONDS), 0)
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// The exact bytes that are signed.
pub fn message(purpose: Purpose, subject: &str, timestamp: i64) -> String {
    format!("{}\n{subject}\n{timestamp}\n", purpose.namespace())
}

/// A public key that is acceptable to register: one `ssh-ed25519` line.
#[derive(Debug, Clone)]
pub struct Ed25519Key {
    key: PublicKey,
    /// The key as one line without its comment.
    pub line: String,
    /// `SHA256:...`, exactly as `ssh-keygen -l` prints it.
    pub fingerprint: String,
    /// The line's comment (may be empty).
    pub comment: String,
}

/// A signature that passed, and what identifies it for the replay check.
#[derive(Debug, Clone)]
pub struct Verified {
    /// SHA-256 of the raw signature: the same signature can be used once.
    pub signature_hash: [u8; 32],
}

/// Why a proof is refused; each is a 400 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not one OpenSSH public key line.
    #[error("public_key must be one OpenSSH public key line (ssh-ed25519 AAAA...)")]
    NotAKey,
    /// Another algorithm.
    #[error("only ssh-ed25519 keys are accepted, not {0}")]
    NotEd25519(String),
    /// The time is outside the window.
    #[error(
        "timestamp {timestamp} is more than {WINDOW_SECONDS} seconds from the server's time ({now}); sign a message with the current Unix time"
    )]
    Stale {
        /// What was sent.
        timestamp: i64,
        /// The server's time.
        now: i64,
    },
    /// Not an armored SSH signature.
    #[error(
        "signature must be an armored SSH signature (-----BEGIN SSH SIGNATURE-----), as `ssh-keygen -Y sign` prints it"
    )]
    NotASignature,
    /// Made in another namespace.
    #[error(
        "the signature was made in namespace {found:?}; sign with `ssh-keygen -Y sign -n {wanted}`"
    )]
    Namespace {
        /// The namespace the signature names.
        found: String,
        /// The one needed.
        wanted: &'static str,
    },
    /// Made by another key.
    #[error("the signature was made by another key than public_key")]
    OtherKey,
    /// Not over the expected message.
    #[error("the signature does not verify over the expected message {expected:?}")]
    WrongMessage {
        /// The message the server checked.
        expected: String,
    },
}

impl Ed25519Key {
    /// Parses one OpenSSH public key line; only `ssh-ed25519` passes.
    pub fn parse(line: &str) -> Result<Self, Refusal> {
        let line = line.trim();
        if line.is_empty() || line.contains(['\n', '\r']) {
            return Err(Refusal::NotAKey);
        }
        let key = PublicKey::from_openssh(line).map_err(|_| Refusal::NotAKey)?;
        if key.algorithm() != Algorithm::Ed25519 {
            return Err(Refusal::NotEd25519(key.algorithm().to_string()));
        }
        let comment = key.comment().to_string();
        let mut bare = key.clone();
        bare.set_comment("");
        let text = bare.to_openssh().map_err(|_| Refusal::NotAKey)?;
        Ok(Self {
            fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
            line: text.trim().to_owned(),
            comment,
            key: bare,
        })
    }

    /// Checks `signature` (armored) by this key over the message of `purpose`, `subject` and `timestamp`, with
    /// `timestamp` within the window of `now`.
    pub fn verify(
        &self,
        purpose: Purpose,
        subject: &str,
        timestamp: i64,
        signature: &str,
        now: i64,
    ) -> Result<Verified, Refusal> {
        if now.abs_diff(timestamp) > WINDOW_SECONDS.unsigned_abs() {
            return Err(Refusal::Stale { timestamp, now });
        }
        let signature: SshSig = signature
            .trim()
            .parse()
            .map_err(|_| Refusal::NotASignature)?;
        let wanted = purpose.namespace();
        if signature.namespace() != wanted {
            return Err(Refusal::Namespace {
                found: signature.namespace().to_owned(),
                wanted,
            });
        }
        if signature.public_key() != self.key.key_data() {
            return Err(Refusal::OtherKey);
        }
        let expected = message(purpose, subject, timestamp);
        self.key
            .verify(wanted, expected.as_bytes(), &signature)
            .map_err(|_| Refusal::WrongMessage { expected })?;
        Ok(Verified {
            signature_hash: Sha256::digest(signature.signature_bytes()).into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::ssh_key::{LineEnding, PrivateKey};

    fn key() -> PrivateKey {
        use rand::RngExt as _;
        let seed: [u8; 32] = rand::rng().random();
        PrivateKey::from(russh::keys::ssh_key::private::Ed25519Keypair::from_seed(
            &seed,
        ))
    }

    fn sign(key: &PrivateKey, namespace: &str, message: &str) -> String {
        SshSig::sign(key, namespace, HashAlg::Sha512, message.as_bytes())
            .unwrap()
            .to_pem(LineEnding::LF)
            .unwrap()
    }

    fn public(key: &PrivateKey) -> Ed25519Key {
        Ed25519Key::parse(&key.public_key().to_openssh().unwrap()).unwrap()
    }

    #[test]
    fn a_signature_over_the_exact_message_passes_once_per_signature() {
        let private = key();
        let key = public(&private);
        let now = 1_800_000_000;
        let text = message(Purpose::Register, "agentabcde", now);
        assert_eq!(text, "svc-register\nagentabcde\n1800000000\n");
        let signature = sign(&private, "svc-register", &text);
        let a = key
            .verify(Purpose::Register, "agentabcde", now, &signature, now + 299)
            .unwrap();
        let b = key
            .verify(Purpose::Register, "agentabcde", now, &signature, now)
            .unwrap();
        assert_eq!(
            a.signature_hash, b.signature_hash,
            "the replay key is the signature"
        );
    }

    #[test]
    fn every_mismatch_is_refused_with_its_reason() {
        let private = key();
        let key = public(&private);
        let now = 1_800_000_000;
        let good = message(Purpose::Register, "", now);
        let signature = sign(&private, "svc-register", &good);
        assert!(matches!(
            key.verify(Purpose::Register, "", now, &signature, now + 301),
            Err(Refusal::Stale { .. })
        ));
        assert!(matches!(
            key.verify(Purpose::Register, "", now, &signature, now - 301),
            Err(Refusal::Stale { .. })
        ));
        assert!(matches!(
            key.verify(Purpose::Register, "agentother", now, &signature, now),
            Err(Refusal::WrongMessage { .. })
        ));
        assert!(matches!(
            key.verify(Purpose::Login, "", now, &signature, now),
            Err(Refusal::Namespace { found, .. }) if found == "svc-register"
        ));
        let other = public(&self::key());
        assert_eq!(
            other
                .verify(Purpose::Register, "", now, &signature, now)
                .unwrap_err(),
            Refusal::OtherKey
        );
        assert_eq!(
            key.verify(Purpose::Register, "", now, "not armored", now)
                .unwrap_err(),
            Refusal::NotASignature
        );
    }

    #[test]
    fn only_single_ed25519_lines_are_keys() {
        let line = key().public_key().to_openssh().unwrap();
        assert!(Ed25519Key::parse(&format!("{line} laptop")).is_ok());
        assert_eq!(Ed25519Key::parse("").unwrap_err(), Refusal::NotAKey);
        assert_eq!(
            Ed25519Key::parse(&format!("{line}\n{line}")).unwrap_err(),
            Refusal::NotAKey
        );
        let ecdsa = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmxkZMy7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg=";
        assert!(matches!(
            Ed25519Key::parse(ecdsa),
            Err(Refusal::NotEd25519(_))
        ));
    }
}
