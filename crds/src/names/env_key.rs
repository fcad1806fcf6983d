//! Environment variable names, and the ones the platform keeps for itself.

use super::*;

string_newtype!(
    /// An environment variable name: `^[A-Z_][A-Z0-9_]*$`, not one of [`RESERVED_ENV_KEYS`].
    EnvKey
);

impl FromStr for EnvKey {
    type Err = InvalidEnvKey;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let first_ok = s
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_');
        let rest_ok = s
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !first_ok || !rest_ok || s.len() > ENV_KEY_MAX_LEN {
            return Err(InvalidEnvKey::Format);
        }
        if RESERVED_ENV_KEYS.contains(&s) {
            return Err(InvalidEnvKey::Reserved(s.to_owned()));
        }
        Ok(Self(s.to_owned()))
    }
}

/// Why an environment key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEnvKey {
    /// Not `^[A-Z_][A-Z0-9_]*$`.
    #[error("{}", messages::ENV_KEY)]
    Format,
    /// A key the platform sets.
    #[error("{key} {reason}", key = .0, reason = messages::ENV_KEY_RESERVED)]
    Reserved(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_keys_follow_the_pattern_and_skip_reserved_ones() {
        for ok in ["A", "_X", "API_KEY", "X1", "SVC_USERS", "PORT2"] {
            assert!(ok.parse::<EnvKey>().is_ok(), "{ok}");
        }
        for bad in ["", "a", "1X", "API-KEY", "Api", "X Y", &"K".repeat(257)] {
            assert_eq!(bad.parse::<EnvKey>(), Err(InvalidEnvKey::Format), "{bad}");
        }
        for reserved in RESERVED_ENV_KEYS {
            assert_eq!(
                reserved.parse::<EnvKey>(),
                Err(InvalidEnvKey::Reserved(reserved.into()))
            );
        }
        assert_eq!(
            "PORT".parse::<EnvKey>().unwrap_err().to_string(),
            "PORT is reserved: the platform sets it in every container"
        );
    }
}
