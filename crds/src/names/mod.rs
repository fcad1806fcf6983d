//! Validated names shared by the REST API, the admission webhook and the reconcilers.
//!
//! Each type parses once at the edge ("parse, don't validate") and carries its guarantee from then on. The rules
//! and their messages live here only: [`crate::cel`] turns the same constants into the CEL rules the apiserver
//! enforces, so `kubectl apply` and the REST API refuse a bad name with the same words.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

/// The DNS-label pattern app and channel names follow.
pub const DNS_LABEL_PATTERN: &str = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$";
/// Longest app or channel name, and longest username.
pub const NAME_MAX_LEN: usize = 40;
/// The pattern usernames follow: lowercase letters and digits, no `-`. The owner is the last `-`-separated part of
/// every channel hostname (`<app>-<owner>`, `<channel>-<app>-<owner>`), so no two accounts can ever form the same
/// hostname; with a `-` allowed, user `b-c` could take `a-b-c`, the future hostname of app `a-b` of user `c`.
pub const USERNAME_PATTERN: &str = "^[a-z0-9]+$";
/// App names may not start with any of these.
pub const RESERVED_APP_PREFIXES: [&str; 6] = ["git", "api", "www", "admin", "preview", "staging"];
/// The channel every app is created with; it cannot be created or deleted by hand.
pub const PROD_CHANNEL: &str = "prod";
/// The branch the `prod` channel follows.
pub const PROD_BRANCH: &str = "master";
/// Prefix of a channel's git ref binding.
pub const BINDING_PREFIX: &str = "branch:";
/// Longest branch name a binding or deploy may name.
pub const BRANCH_MAX_LEN: usize = 200;
/// Characters a branch name may use (a conservative subset of what git allows).
pub const BRANCH_CHARS_PATTERN: &str = "^[A-Za-z0-9._/+-]+$";
/// Prefix of a full branch ref.
pub const BRANCH_REF_PREFIX: &str = "refs/heads/";
/// Pattern of a full commit id.
pub const SHA_PATTERN: &str = "^[0-9a-f]{40}$";
/// Pattern of an image reference by digest, `<registry>/<repository>@sha256:<64 hex>` (what a build records).
pub const IMAGE_DIGEST_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:/-]*@sha256:[0-9a-f]{64}$";
/// Longest image reference a Deploy may name.
pub const IMAGE_MAX_LEN: usize = 512;

/// Longest CIDR text (a full IPv6 address and a three-digit prefix).
pub const CIDR_MAX_LEN: usize = 43;
/// Longest hostname.
pub const DOMAIN_MAX_LEN: usize = 253;
/// Pattern of a hostname: lowercase labels of 1-63 characters, at least two, no trailing dot. (`[.]` rather than an
/// escaped dot so the pattern reads the same in CEL string literals.)
pub const DOMAIN_PATTERN: &str =
    "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?[.])+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";

/// Keys the platform injects into every container; users may not set them.
pub const RESERVED_ENV_KEYS: [&str; 15] = [
    "SVC_USER",
    "SVC_SHA",
    "SVC_HTTP_PORT",
    "PORT",
    "SVC_FORWARD_PORT",
    "SVC_READY_FILE",
    "DATABASE_URL",
    "DATABASE_URL_READONLY",
    "DATABASE_HOST",
    "DATABASE_PASSWORD",
    "S3_ENDPOINT",
    "S3_BUCKET",
    "S3_ACCESS_KEY_ID",
    "S3_SECRET_ACCESS_KEY",
    "S3_REGION",
];
/// Longest environment variable name.
pub const ENV_KEY_MAX_LEN: usize = 256;

/// Messages of the rules below, shared with the CEL rules so both paths say the same thing.
pub mod messages {
    /// An app name that is not a DNS label of at most 40 characters.
    pub const APP_NAME: &str = "app name must be 1-40 characters of lowercase letters, digits and '-', starting and ending with a letter or digit";
    /// An app name with a reserved prefix.
    pub const APP_NAME_RESERVED: &str =
        "app name must not start with a reserved prefix (git, api, www, admin, preview, staging)";
    /// A channel name that is not a DNS label of at most 40 characters.
    pub const CHANNEL_NAME: &str = "channel name must be 1-40 characters of lowercase letters, digits and '-', starting and ending with a letter or digit";
    /// A username outside [`super::USERNAME_PATTERN`].
    pub const USERNAME: &str = "username must be 1-40 characters of lowercase letters and digits (no '-': the username ends every channel hostname)";
    /// A binding that is not `branch:<name>`.
    pub const BINDING: &str =
        "git_ref_binding must have the form branch:<name> with a valid git branch name";
    /// The legacy wildcard binding.
    pub const BINDING_WILDCARD: &str =
        "git_ref_binding branch:* is no longer accepted; bind the channel to one branch";
    /// A branch name git would refuse (or that slipway does not accept).
    pub const BRANCH: &str = "branch name must be 1-200 characters of letters, digits and . _ / + -, must not start with '-', '/' or '.', must not end with '/', '.' or '.lock', and must not contain '..', '//' or '/.'";
    /// A commit id that is not 40 lowercase hex digits.
    pub const SHA: &str = "sha must be a 40-character hexadecimal commit id";
    /// An image reference that is not pinned by digest.
    pub const IMAGE_DIGEST: &str =
        "image must be a reference by digest: <registry>/<repository>@sha256:<64 hex digits>";
    /// A rewind that does not name both the deploy and its image.
    pub const REWIND_PAIR: &str =
        "a rewind names both rewindOf (the earlier Deploy) and image (the image it recorded)";
    /// A rewind whose sha is not a full commit id.
    pub const REWIND_SHA: &str =
        "a rewind's sha must be the 40-character commit id of the image it runs again";
    /// A deploy's `sha`, which may also name a branch.
    pub const DEPLOY_SHA: &str =
        "sha must be a 40-character hexadecimal commit id or a branch name";
    /// An environment key outside `^[A-Z_][A-Z0-9_]*$`.
    pub const ENV_KEY: &str = "key must match ^[A-Z_][A-Z0-9_]*$ (uppercase letters, digits and _, not starting with a digit), at most 256 characters";
    /// A key the platform injects itself.
    pub const ENV_KEY_RESERVED: &str = "is reserved: the platform sets it in every container";
    /// A CIDR that does not parse.
    pub const CIDR: &str =
        "allow_cidrs entries must be CIDRs such as 203.0.113.0/24 or 2001:db8::/32";
    /// An allowlist that is too long.
    pub const TOO_MANY_CIDRS: &str = "allow_cidrs holds at most 16 entries";
    /// A hostname that is not a valid domain.
    pub const DOMAIN: &str = "domain must be a hostname of at least two labels (letters, digits and '-', at most 63 characters each, 253 in all)";
    /// A hostname label over 63 characters.
    pub const HOST_LABEL_TOO_LONG: &str = "the channel hostname <channel>-<app>-<owner> would be longer than 63 characters; choose shorter app or channel names";
    /// The prod channel bound to another branch.
    pub const PROD_BINDING: &str = "the prod channel is bound to branch:master";
}

/// Why a name was refused; the message is the one the API returns in `error.message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidName(pub &'static str);

/// Whether `s` is a DNS label of at most `max` characters (see [`DNS_LABEL_PATTERN`]).
pub fn is_dns_label(s: &str, max: usize) -> bool {
    let bytes = s.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => s.len() <= max && inner_ok && *first != b'-' && *last != b'-',
        _ => false,
    }
}

/// Whether `s` is an image reference pinned by digest ([`IMAGE_DIGEST_PATTERN`], at most [`IMAGE_MAX_LEN`]).
pub fn is_image_by_digest(s: &str) -> bool {
    let Some((name, digest)) = s.split_once("@sha256:") else {
        return false;
    };
    s.len() <= IMAGE_MAX_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
        && digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `s` is a username: 1-40 lowercase letters and digits (see [`USERNAME_PATTERN`]).
pub fn is_username(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_MAX_LEN
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether `s` is a branch name slipway accepts: the rules of `git check-ref-format --branch` over the character
/// set of [`BRANCH_CHARS_PATTERN`].
pub fn is_branch_name(s: &str) -> bool {
    let chars_ok = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'+' | b'-'));
    !s.is_empty()
        && s.len() <= BRANCH_MAX_LEN
        && chars_ok
        && !s.starts_with(['-', '/', '.'])
        && !s.ends_with(['/', '.'])
        && !s.ends_with(".lock")
        && !s.contains("..")
        && !s.contains("//")
        && !s.contains("/.")
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The validated string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = String::deserialize(d)?;
                raw.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

mod binding;
mod cidr;
mod derived;
mod domain;
mod env_key;

pub use self::binding::GitRefBinding;
pub use self::cidr::{Cidr, parse_allow_cidrs};
pub use self::derived::{
    HOST_LABEL_MAX_LEN, channel_host_label, channel_hostname, channel_resource_name,
    parse_channel_resource_name, workload_name,
};
pub use self::domain::{DomainName, InvalidDomain};
pub use self::env_key::{EnvKey, InvalidEnvKey};

string_newtype!(
    /// An app name: a DNS label of at most 40 characters without a reserved prefix.
    AppName
);
string_newtype!(
    /// A channel name: a DNS label of at most 40 characters.
    ChannelName
);
string_newtype!(
    /// A username: 1-40 lowercase letters and digits. It ends every channel hostname, so it has no `-` (see
    /// [`USERNAME_PATTERN`]).
    Username
);
string_newtype!(
    /// A git branch name slipway accepts (see [`is_branch_name`]).
    BranchName
);
string_newtype!(
    /// A full commit id: 40 lowercase hex digits.
    CommitSha
);

impl FromStr for AppName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if !is_dns_label(s, NAME_MAX_LEN) {
            return Err(InvalidName(messages::APP_NAME));
        }
        if RESERVED_APP_PREFIXES.iter().any(|p| s.starts_with(p)) {
            return Err(InvalidName(messages::APP_NAME_RESERVED));
        }
        Ok(Self(s.to_owned()))
    }
}

impl FromStr for ChannelName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_dns_label(s, NAME_MAX_LEN) {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidName(messages::CHANNEL_NAME))
        }
    }
}

impl ChannelName {
    /// The `prod` channel.
    pub fn prod() -> Self {
        Self(PROD_CHANNEL.to_owned())
    }

    /// Whether this is the `prod` channel.
    pub fn is_prod(&self) -> bool {
        self.0 == PROD_CHANNEL
    }
}

impl FromStr for Username {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_username(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidName(messages::USERNAME))
        }
    }
}

impl FromStr for BranchName {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_branch_name(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidName(messages::BRANCH))
        }
    }
}

impl BranchName {
    /// Parses a branch given bare (`main`) or as a full ref (`refs/heads/main`).
    pub fn from_ref(s: &str) -> Result<Self, InvalidName> {
        s.strip_prefix(BRANCH_REF_PREFIX).unwrap_or(s).parse()
    }
}

impl FromStr for CommitSha {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() == 40
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Self(s.to_owned()))
        } else {
            Err(InvalidName(messages::SHA))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_follow_the_dns_label_rule() {
        for ok in [
            "a",
            "blog",
            "my-app",
            "a1",
            "x".repeat(40).as_str(),
            "apple",
            "gi",
        ] {
            assert!(ok.parse::<AppName>().is_ok(), "{ok} should be accepted");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "My",
            "a_b",
            "a.b",
            "x".repeat(41).as_str(),
            "ä",
        ] {
            assert_eq!(
                bad.parse::<AppName>(),
                Err(InvalidName(messages::APP_NAME)),
                "{bad}"
            );
        }
    }

    #[test]
    fn reserved_prefixes_are_refused() {
        for bad in [
            "git",
            "github-sync",
            "api",
            "api-1",
            "www",
            "admin",
            "preview-x",
            "staging2",
        ] {
            assert_eq!(
                bad.parse::<AppName>(),
                Err(InvalidName(messages::APP_NAME_RESERVED)),
                "{bad}"
            );
        }
    }

    #[test]
    fn images_are_pinned_by_digest() {
        let digest = "0123456789abcdef".repeat(4);
        assert!(is_image_by_digest(&format!(
            "10.0.0.1:5000/slipway-user-a/web-prod@sha256:{digest}"
        )));
        for bad in [
            "registry/web:tag".to_owned(),
            format!("registry/web@sha256:{}", &digest[1..]),
            format!("registry/web@sha256:{}", digest.to_uppercase()),
            format!("@sha256:{digest}"),
            format!("a b@sha256:{digest}"),
            format!("a@b@sha256:{digest}"),
        ] {
            assert!(!is_image_by_digest(&bad), "{bad}");
        }
    }

    #[test]
    fn shas_are_forty_lowercase_hex() {
        assert!(
            "0123456789abcdef0123456789abcdef01234567"
                .parse::<CommitSha>()
                .is_ok()
        );
        for bad in [
            "",
            "abc",
            "0123456789ABCDEF0123456789ABCDEF01234567",
            &"g".repeat(40),
        ] {
            assert!(bad.parse::<CommitSha>().is_err(), "{bad}");
        }
    }

    #[test]
    fn usernames_have_no_hyphen() {
        for ok in ["alice", "a", "agent0abc1", "x9", &"u".repeat(40)] {
            assert!(ok.parse::<Username>().is_ok(), "{ok} should be accepted");
        }
        for bad in [
            "",
            "b-c",
            "-a",
            "a-",
            "Alice",
            "a_b",
            "a.b",
            &"u".repeat(41),
            "ä",
        ] {
            assert_eq!(
                bad.parse::<Username>(),
                Err(InvalidName(messages::USERNAME)),
                "{bad}"
            );
        }
    }

    #[test]
    fn serde_refuses_invalid_values() {
        assert!(serde_json::from_str::<AppName>("\"Bad\"").is_err());
        assert!(serde_json::from_str::<GitRefBinding>("\"branch:*\"").is_err());
        let b: GitRefBinding = serde_json::from_str("\"branch:dev\"").unwrap();
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"branch:dev\"");
    }
}
