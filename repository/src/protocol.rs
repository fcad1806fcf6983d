//! The `GIT_PROTOCOL` values slipway hands the real git programs, whether it serves them (git hosting) or runs
//! them against an external repository (mirror syncs): a client's value is passed on only when it is plain.

/// `GIT_PROTOCOL` values are `key=value` pairs joined by `:`; anything else is dropped.
pub fn valid(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 256
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b':' | b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_protocol_values_are_plain() {
        assert!(valid("version=2"));
        assert!(valid("version=2:object-format=sha1"));
        assert!(!valid("version=2\nX=1"));
        assert!(!valid(""));
    }
}
