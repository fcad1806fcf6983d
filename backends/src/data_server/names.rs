//! Names of a channel's database and roles on the data server. The database is named after the channel's hostname
//! label (`next-blog-alice` -> `next_blog_alice`), so the name a person types to confirm a destructive operation
//! is one they recognise; the write role has the same name and the read-only role adds `_ro`. Names are fixed when
//! the database is first recorded (a later change of owner or name keeps them), and are short enough for
//! Postgres' 63-byte identifiers: a long label keeps its start and ends in a hash of the whole.

use sha2::{Digest, Sha256};

use super::DatabaseNames;

/// Postgres truncates identifiers to 63 bytes; the read-only role's suffix must fit too.
const MAX_DB_NAME: usize = 63 - READONLY_SUFFIX.len();
const READONLY_SUFFIX: &str = "_ro";
/// Hex digits of the hash that ends a shortened name.
const HASH_DIGITS: usize = 10;

/// The names of the database of the channel whose hostname label is `label`.
pub fn for_label(label: &str) -> DatabaseNames {
    let plain = label.to_ascii_lowercase().replace('-', "_");
    let db_name = if plain.len() <= MAX_DB_NAME {
        plain
    } else {
        let digest = hex(&Sha256::digest(label.as_bytes()));
        let keep = MAX_DB_NAME - HASH_DIGITS - 1;
        format!(
            "{}_{}",
            plain[..keep].trim_end_matches('_'),
            &digest[..HASH_DIGITS]
        )
    };
    DatabaseNames {
        role_name: db_name.clone(),
        readonly_role_name: format!("{db_name}{READONLY_SUFFIX}"),
        db_name,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_hostname_label() {
        let names = for_label("next-blog-alice");
        assert_eq!(names.db_name, "next_blog_alice");
        assert_eq!(names.role_name, "next_blog_alice");
        assert_eq!(names.readonly_role_name, "next_blog_alice_ro");
    }

    #[test]
    fn long_labels_are_shortened_and_stay_distinct() {
        let a = for_label(&format!("{}-alice", "a".repeat(57)));
        let b = for_label(&format!("{}-bobby", "a".repeat(57)));
        assert_ne!(a.db_name, b.db_name);
        for names in [&a, &b] {
            assert!(names.db_name.len() <= 60, "{}", names.db_name);
            assert!(names.readonly_role_name.len() <= 63);
            assert!(names.db_name.starts_with("aaaa"));
        }
    }
}
