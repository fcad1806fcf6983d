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

/// A network in CIDR notation, IPv4 or IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    /// The address as written (host bits may be set, as `isCIDR` in CEL allows).
    pub addr: std::net::IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = InvalidName(messages::CIDR);
        let (addr, prefix) = s.split_once('/').ok_or(err.clone())?;
        let addr: std::net::IpAddr = addr.parse().map_err(|_| err.clone())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let digits_ok =
            !prefix.is_empty() && prefix.len() <= 3 && prefix.bytes().all(|b| b.is_ascii_digit());
        let leading_zero = prefix.len() > 1 && prefix.starts_with('0');
        let prefix: u8 = prefix.parse().map_err(|_| err.clone())?;
        if !digits_ok || leading_zero || prefix > max || s.len() > CIDR_MAX_LEN {
            return Err(err);
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Parses an allowlist: at most [`crate::forward::MAX_ALLOW_CIDRS`] CIDRs.
pub fn parse_allow_cidrs<S: AsRef<str>>(cidrs: &[S]) -> Result<Vec<Cidr>, InvalidName> {
    if cidrs.len() > crate::forward::MAX_ALLOW_CIDRS {
        return Err(InvalidName(messages::TOO_MANY_CIDRS));
    }
    cidrs.iter().map(|c| c.as_ref().parse()).collect()
}

string_newtype!(
    /// A custom domain: lowercase ASCII (IDNA-encoded) labels, at least two, without a trailing dot.
    DomainName
);

/// Why a custom domain was refused: the hosting API's closed set of reasons, shared by the REST API, the webhook
/// and the reconciler so every path names the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid domain: {}: {}", self.reason(), self.explanation())]
pub enum InvalidDomain {
    /// An IPv4 or IPv6 address, not a name.
    IsIpAddress,
    /// Not valid under IDNA (UTS #46): a character no domain may hold, or an `xn--` label that does not decode.
    InvalidIdna,
    /// Longer than 253 characters, or a label longer than 63 (once IDNA-encoded).
    TooLong,
    /// An empty label, or one with characters other than letters, digits and `-`, or with `-` at an end.
    InvalidLabel,
    /// The platform's own domain or a name under it.
    PlatformDomainForbidden,
    /// A single label: a custom domain has at least two.
    NeedsDot,
}

impl InvalidDomain {
    /// The reason as the API names it.
    pub fn reason(self) -> &'static str {
        match self {
            Self::IsIpAddress => "is_ip_address",
            Self::InvalidIdna => "invalid_idna",
            Self::TooLong => "too_long",
            Self::InvalidLabel => "invalid_label",
            Self::PlatformDomainForbidden => "platform_domain_forbidden",
            Self::NeedsDot => "needs_dot",
        }
    }

    /// The API's error code: `invalid domain: <reason>`.
    pub fn code(self) -> &'static str {
        match self {
            Self::IsIpAddress => "invalid domain: is_ip_address",
            Self::InvalidIdna => "invalid domain: invalid_idna",
            Self::TooLong => "invalid domain: too_long",
            Self::InvalidLabel => "invalid domain: invalid_label",
            Self::PlatformDomainForbidden => "invalid domain: platform_domain_forbidden",
            Self::NeedsDot => "invalid domain: needs_dot",
        }
    }

    fn explanation(self) -> &'static str {
        match self {
            Self::IsIpAddress => "attach a hostname, not an IP address",
            Self::InvalidIdna => "the name is not a valid internationalized domain name",
            Self::TooLong => "a domain has at most 253 characters and each label at most 63",
            Self::InvalidLabel => {
                "labels are letters, digits and '-', not empty, not starting or ending with '-'"
            }
            Self::PlatformDomainForbidden => {
                "names under the platform's own domain cannot be attached"
            }
            Self::NeedsDot => "a domain has at least two labels, such as example.com",
        }
    }
}

impl FromStr for DomainName {
    type Err = InvalidDomain;
    /// Normalises as the API stores domains: one trailing dot dropped, IDNA-encoded (UTS #46: case-folded,
    /// Unicode labels as `xn--`), then the length and label rules.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
        let trimmed = s.strip_suffix('.').unwrap_or(s);
        if is_ip_address(trimmed) {
            return Err(InvalidDomain::IsIpAddress);
        }
        // Characters outside letters, digits and '-' pass here and are refused below as label errors, so an
        // ASCII typo reads as a bad label rather than as an IDNA failure.
        let ascii = Uts46::new()
            .to_ascii(
                trimmed.as_bytes(),
                AsciiDenyList::EMPTY,
                Hyphens::Allow,
                DnsLength::Ignore,
            )
            .map_err(|_| InvalidDomain::InvalidIdna)?
            .into_owned();
        if is_ip_address(&ascii) {
            return Err(InvalidDomain::IsIpAddress);
        }
        if ascii.len() > DOMAIN_MAX_LEN || ascii.split('.').any(|l| l.len() > 63) {
            return Err(InvalidDomain::TooLong);
        }
        if !ascii.split('.').all(|l| is_dns_label(l, 63)) {
            return Err(InvalidDomain::InvalidLabel);
        }
        if !ascii.contains('.') {
            return Err(InvalidDomain::NeedsDot);
        }
        Ok(Self(ascii))
    }
}

impl DomainName {
    /// Parses a domain a user asks to attach: [`DomainName::from_str`], and not `app_domain` nor under it.
    pub fn parse_attachable(s: &str, app_domain: &str) -> Result<Self, InvalidDomain> {
        let domain: Self = s.parse()?;
        if domain.is_under(app_domain) {
            return Err(InvalidDomain::PlatformDomainForbidden);
        }
        Ok(domain)
    }

    /// Whether this is `parent` or a name under it (`parent` in any case, with or without a trailing dot).
    pub fn is_under(&self, parent: &str) -> bool {
        let parent = parent.trim_end_matches('.').to_ascii_lowercase();
        !parent.is_empty()
            && (self.0 == parent
                || self
                    .0
                    .strip_suffix(parent.as_str())
                    .is_some_and(|head| head.ends_with('.')))
    }
}

/// Whether `s` is an IPv4 or IPv6 address (bracketed or not).
fn is_ip_address(s: &str) -> bool {
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<std::net::IpAddr>().is_ok()
}

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

/// A channel's git ref binding, `branch:<name>`; the legacy `branch:*` is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct GitRefBinding {
    branch: BranchName,
}

impl GitRefBinding {
    /// The binding of a channel that follows `branch`.
    pub fn branch(branch: BranchName) -> Self {
        Self { branch }
    }

    /// The binding of the `prod` channel.
    pub fn prod() -> Self {
        Self {
            branch: BranchName(PROD_BRANCH.to_owned()),
        }
    }

    /// The branch this binding follows.
    pub fn branch_name(&self) -> &BranchName {
        &self.branch
    }
}

impl FromStr for GitRefBinding {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let branch = s
            .strip_prefix(BINDING_PREFIX)
            .ok_or(InvalidName(messages::BINDING))?;
        if branch == "*" {
            return Err(InvalidName(messages::BINDING_WILDCARD));
        }
        let branch = branch.parse().map_err(|_| InvalidName(messages::BINDING))?;
        Ok(Self { branch })
    }
}

impl fmt::Display for GitRefBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{BINDING_PREFIX}{}", self.branch)
    }
}

impl From<GitRefBinding> for String {
    fn from(b: GitRefBinding) -> Self {
        b.to_string()
    }
}

impl<'de> Deserialize<'de> for GitRefBinding {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Longest DNS label, and so the longest first label of a channel hostname.
pub const HOST_LABEL_MAX_LEN: usize = 63;

/// The first DNS label of a channel's hostname: `<app>-<owner>` for prod, `<channel>-<app>-<owner>` otherwise.
/// Refused when it would be longer than a DNS label may be.
pub fn channel_host_label(
    app: &AppName,
    channel: &ChannelName,
    owner: &Username,
) -> Result<String, InvalidName> {
    let label = if channel.is_prod() {
        format!("{app}-{owner}")
    } else {
        format!("{channel}-{app}-{owner}")
    };
    if label.len() > HOST_LABEL_MAX_LEN {
        return Err(InvalidName(messages::HOST_LABEL_TOO_LONG));
    }
    Ok(label)
}

/// A channel's hostname under `app_domain`.
pub fn channel_hostname(
    app: &AppName,
    channel: &ChannelName,
    owner: &Username,
    app_domain: &str,
) -> Result<String, InvalidName> {
    Ok(format!(
        "{}.{app_domain}",
        channel_host_label(app, channel, owner)?
    ))
}

/// Name of a Channel resource: `<app>.<channel>`, unique per namespace because app names are.
pub fn channel_resource_name(app: &AppName, channel: &ChannelName) -> String {
    format!("{app}.{channel}")
}

/// Base name of what a channel runs on the cluster (its Service, and its Deployments with a deploy suffix): the
/// Channel resource name with `-` for `.`, so a valid DNS-1035 label of at most 62 characters. The hostname rule
/// keeps `<channel>-<app>` under 62 characters, and a leading digit gets an `s` in front, as Services need a letter.
pub fn workload_name(channel_resource_name: &str) -> String {
    let name = channel_resource_name.replace('.', "-");
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        format!("s{name}")
    } else {
        name
    }
}

/// Splits a Channel resource name into its app and channel names.
pub fn parse_channel_resource_name(name: &str) -> Result<(AppName, ChannelName), InvalidName> {
    let (app, channel) = name
        .split_once('.')
        .ok_or(InvalidName(messages::CHANNEL_NAME))?;
    // The app part of an existing resource was validated when the App was created; a reserved prefix here only
    // matters for new apps, so it is checked as a DNS label, not as a new app name.
    if !is_dns_label(app, NAME_MAX_LEN) {
        return Err(InvalidName(messages::APP_NAME));
    }
    Ok((AppName(app.to_owned()), channel.parse()?))
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
    fn bindings_name_one_branch() {
        let b: GitRefBinding = "branch:feature/login".parse().unwrap();
        assert_eq!(b.branch_name().as_str(), "feature/login");
        assert_eq!(b.to_string(), "branch:feature/login");
        assert_eq!(
            "branch:*".parse::<GitRefBinding>(),
            Err(InvalidName(messages::BINDING_WILDCARD))
        );
        for bad in [
            "master",
            "branch:",
            "tag:v1",
            "branch:a..b",
            "branch:-x",
            "branch:x.lock",
            "branch:a b",
        ] {
            assert_eq!(
                bad.parse::<GitRefBinding>(),
                Err(InvalidName(messages::BINDING)),
                "{bad}"
            );
        }
        assert_eq!(GitRefBinding::prod().to_string(), "branch:master");
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
    fn workload_names_are_dns_1035_labels() {
        assert_eq!(workload_name("blog.prod"), "blog-prod");
        assert_eq!(workload_name("9lives.next"), "s9lives-next");
        let longest = format!("{}.{}", "a".repeat(40), "b".repeat(20));
        assert!(workload_name(&longest).len() <= 63);
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
    fn cidrs_parse_both_families() {
        assert_eq!("10.0.0.0/8".parse::<Cidr>().unwrap().prefix, 8);
        assert!("2001:db8::/32".parse::<Cidr>().is_ok());
        assert!("0.0.0.0/0".parse::<Cidr>().is_ok());
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x/1",
            "10.0.0.0/08",
            "10.0.0.0/+8",
            "/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        let many: Vec<String> = (0..17).map(|i| format!("10.0.{i}.0/24")).collect();
        assert_eq!(
            parse_allow_cidrs(&many),
            Err(InvalidName(messages::TOO_MANY_CIDRS))
        );
        assert_eq!(parse_allow_cidrs(&many[..16]).unwrap().len(), 16);
    }

    #[test]
    fn domains_are_stored_canonically() {
        for (given, stored) in [
            ("WWW.Example.COM.", "www.example.com"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("Bücher.Example", "xn--bcher-kva.example"),
            ("münchen.de.", "xn--mnchen-3ya.de"),
            ("ＥＸＡＭＰＬＥ.com", "example.com"),
        ] {
            assert_eq!(
                given.parse::<DomainName>().unwrap().as_str(),
                stored,
                "{given}"
            );
        }
    }

    #[test]
    fn every_invalid_domain_has_its_reason() {
        use InvalidDomain::*;
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
        for (given, reason) in [
            ("192.0.2.1", IsIpAddress),
            ("192.0.2.1.", IsIpAddress),
            ("2001:db8::1", IsIpAddress),
            ("[2001:db8::1]", IsIpAddress),
            ("xn--zz.example", InvalidIdna),
            ("xn--a.example", InvalidIdna),
            (long_label.as_str(), TooLong),
            (long_name.as_str(), TooLong),
            ("a..b", InvalidLabel),
            ("-a.com", InvalidLabel),
            ("a-.com", InvalidLabel),
            ("ex ample.com", InvalidLabel),
            ("under_score.com", InvalidLabel),
            ("", InvalidLabel),
            ("localhost", NeedsDot),
            ("münchen", NeedsDot),
        ] {
            assert_eq!(given.parse::<DomainName>(), Err(reason), "{given:?}");
        }
        assert_eq!(IsIpAddress.code(), "invalid domain: is_ip_address");
        assert!(
            NeedsDot
                .to_string()
                .starts_with("invalid domain: needs_dot: ")
        );
    }

    #[test]
    fn the_platform_domain_cannot_be_attached() {
        for given in ["apps.test", "Blog-Alice.Apps.Test.", "a.b.apps.test"] {
            assert_eq!(
                DomainName::parse_attachable(given, "apps.test"),
                Err(InvalidDomain::PlatformDomainForbidden),
                "{given}"
            );
        }
        for given in ["myapps.test", "apps.test.example", "test"] {
            assert_ne!(
                DomainName::parse_attachable(given, "apps.test"),
                Err(InvalidDomain::PlatformDomainForbidden),
                "{given}"
            );
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
    fn no_two_accounts_form_the_same_hostname() {
        // With hyphens in usernames, app "a-b" of "c" and app "a" of "b-c" both wanted a-b-c. The owner is now the
        // last part of every label, so labels of different owners differ whatever the app and channel names.
        let apps = ["a", "a-b", "b", "x-y-z"];
        let channels = ["prod", "a", "b-c", "y"];
        let owners = ["c", "bc", "b", "z"];
        let mut seen = std::collections::HashMap::new();
        for app in apps {
            for channel in channels {
                for owner in owners {
                    let label = channel_host_label(
                        &app.parse().unwrap(),
                        &channel.parse().unwrap(),
                        &owner.parse().unwrap(),
                    )
                    .unwrap();
                    if let Some(other) = seen.insert(label.clone(), owner) {
                        assert_eq!(other, owner, "{label} is formed by {other} and {owner}");
                    }
                }
            }
        }
    }

    #[test]
    fn hostnames_follow_the_spec_forms() {
        let (app, owner): (AppName, Username) = ("blog".parse().unwrap(), "alice".parse().unwrap());
        let prod = ChannelName::prod();
        let next: ChannelName = "next".parse().unwrap();
        assert_eq!(
            channel_hostname(&app, &prod, &owner, "apps.test").unwrap(),
            "blog-alice.apps.test"
        );
        assert_eq!(
            channel_hostname(&app, &next, &owner, "apps.test").unwrap(),
            "next-blog-alice.apps.test"
        );
        let long: AppName = "a".repeat(40).parse().unwrap();
        let longer: ChannelName = "c".repeat(30).parse().unwrap();
        assert_eq!(
            channel_host_label(&long, &longer, &owner),
            Err(InvalidName(messages::HOST_LABEL_TOO_LONG))
        );
        assert_eq!(channel_host_label(&long, &prod, &owner).unwrap().len(), 46);
    }

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

    #[test]
    fn channel_resource_names_round_trip() {
        let app: AppName = "blog".parse().unwrap();
        let ch: ChannelName = "staging".parse().unwrap();
        let name = channel_resource_name(&app, &ch);
        assert_eq!(name, "blog.staging");
        assert_eq!(parse_channel_resource_name(&name).unwrap(), (app, ch));
        assert!(parse_channel_resource_name("blog").is_err());
    }

    #[test]
    fn serde_refuses_invalid_values() {
        assert!(serde_json::from_str::<AppName>("\"Bad\"").is_err());
        assert!(serde_json::from_str::<GitRefBinding>("\"branch:*\"").is_err());
        let b: GitRefBinding = serde_json::from_str("\"branch:dev\"").unwrap();
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"branch:dev\"");
    }
}
