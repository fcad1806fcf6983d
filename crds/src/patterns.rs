//! The rules of [`crate::names`] spelled as JSON Schema patterns (ECMA-262 regular expressions, lookaheads
//! included), so that the OpenAPI document states what the routes accept and a generated client checks a value
//! before it sends it. The parsers stay the rules; each pattern is built from the same constants, and the tests
//! below hold every pattern to its parser over generated strings.

use crate::names::{
    BINDING_PREFIX, BRANCH_MAX_LEN, BRANCH_REF_PREFIX, ENV_KEY_MAX_LEN, NAME_MAX_LEN, PROD_CHANNEL,
    RESERVED_APP_PREFIXES, RESERVED_ENV_KEYS,
};

/// A DNS label of 1 to `max` characters, unanchored.
fn dns_label(max: usize) -> String {
    format!("[a-z0-9](?:[a-z0-9-]{{0,{}}}[a-z0-9])?", max - 2)
}

/// A branch name ([`crate::names::is_branch_name`]) at the end of the value, unanchored at its start.
fn branch_tail() -> String {
    format!(
        "(?![-/.])(?!.*(?:\\.\\.|//|/\\.))(?!.*(?:[/.]|\\.lock)$)[A-Za-z0-9._/+-]{{1,{BRANCH_MAX_LEN}}}"
    )
}

/// An app name: a DNS label of at most 40 characters that starts with no reserved prefix.
pub fn app_name() -> String {
    format!(
        "^(?!(?:{})){}$",
        RESERVED_APP_PREFIXES.join("|"),
        dns_label(NAME_MAX_LEN)
    )
}

/// A channel name that can be created: a DNS label of at most 40 characters, not `prod`.
pub fn new_channel_name() -> String {
    format!("^(?!{PROD_CHANNEL}$){}$", dns_label(NAME_MAX_LEN))
}

/// A branch name.
pub fn branch() -> String {
    format!("^{}$", branch_tail())
}

/// A branch name, bare or as `refs/heads/<name>`.
pub fn branch_ref() -> String {
    // A bare name may not itself start with the prefix: `refs/heads/-` is the branch `-`, which is refused.
    format!(
        "^(?:{BRANCH_REF_PREFIX}{tail}|(?!{BRANCH_REF_PREFIX}){tail})$",
        tail = branch_tail()
    )
}

/// A channel's git ref binding, `branch:<name>`.
pub fn binding() -> String {
    format!("^{BINDING_PREFIX}{}$", branch_tail())
}

/// What a deploy's `sha` names: a full commit id or a branch name (a commit id is itself a valid branch name).
pub fn sha_or_branch() -> String {
    branch()
}

/// An environment variable name a user may set.
pub fn env_key() -> String {
    format!(
        "^(?!(?:{})$)[A-Z_][A-Z0-9_]{{0,{}}}$",
        RESERVED_ENV_KEYS.join("|"),
        ENV_KEY_MAX_LEN - 1
    )
}

/// One octet of a dotted IPv4 address, without leading zeros.
const OCTET: &str = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

fn ipv4() -> String {
    format!("(?:{OCTET}\\.){{3}}{OCTET}")
}

/// An IPv6 address in every textual form the address parser reads (an IPv4 tail included).
fn ipv6() -> String {
    let h = "[0-9A-Fa-f]{1,4}";
    let v4 = ipv4();
    [
        format!("(?:{h}:){{7}}{h}"),
        format!("(?:{h}:){{1,7}}:"),
        format!("(?:{h}:){{1,6}}:{h}"),
        format!("(?:{h}:){{1,5}}(?::{h}){{1,2}}"),
        format!("(?:{h}:){{1,4}}(?::{h}){{1,3}}"),
        format!("(?:{h}:){{1,3}}(?::{h}){{1,4}}"),
        format!("(?:{h}:){{1,2}}(?::{h}){{1,5}}"),
        format!("{h}:(?::{h}){{1,6}}"),
        format!(":(?:(?::{h}){{1,7}}|:)"),
        format!("(?:{h}:){{6}}{v4}"),
        format!("(?:{h}:){{1,5}}:{v4}"),
        format!("(?:{h}:){{1,4}}:{h}:{v4}"),
        format!("(?:{h}:){{1,3}}:(?:{h}:){{1,2}}{v4}"),
        format!("(?:{h}:){{1,2}}:(?:{h}:){{1,3}}{v4}"),
        format!("{h}::(?:{h}:){{1,4}}{v4}"),
        format!("::(?:{h}:){{0,5}}{v4}"),
    ]
    .join("|")
}

/// An entry of a forward's allowlist as the API takes it: an IPv4 or IPv6 address, or a range of either in CIDR
/// notation (host bits may be set).
pub fn allow_cidr() -> String {
    format!(
        "^(?:{}(?:/(?:3[0-2]|[12][0-9]|[0-9]))?|(?:{})(?:/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$",
        ipv4(),
        ipv6()
    )
}

/// A custom domain as the API takes it: two or more labels of letters, digits and `-` (any case; Unicode labels too,
/// whose IDNA validity the route checks), 253 characters at most, one trailing dot allowed, not an IPv4 address.
pub fn domain() -> String {
    let label = "[A-Za-z0-9\\u0080-\\uFFFF](?:[A-Za-z0-9\\u0080-\\uFFFF-]{0,61}[A-Za-z0-9\\u0080-\\uFFFF])?";
    format!(
        "^(?=.{{1,253}}\\.?$)(?!{}\\.?$)(?:{label}\\.)+{label}\\.?$",
        ipv4()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{
        AppName, BranchName, ChannelName, CommitSha, DomainName, EnvKey, GitRefBinding,
    };
    use fancy_regex::Regex;
    use proptest::prelude::*;

    fn matches(pattern: &str, value: &str) -> bool {
        static COMPILED: std::sync::LazyLock<
            std::sync::Mutex<std::collections::HashMap<String, Regex>>,
        > = std::sync::LazyLock::new(Default::default);
        let mut compiled = COMPILED.lock().expect("not poisoned");
        compiled
            .entry(pattern.to_owned())
            .or_insert_with(|| Regex::new(pattern).expect("the pattern compiles"))
            .is_match(value)
            .expect("the pattern runs")
    }

    /// Strings near the rules' edges: short, of the characters a name may hold and a few it may not.
    fn near(chars: &'static str, max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            proptest::sample::select(chars.chars().collect::<Vec<_>>()),
            0..max,
        )
        .prop_map(|c| c.into_iter().collect())
    }

    fn prefixed(
        prefixes: &'static [&'static str],
        rest: impl Strategy<Value = String>,
    ) -> impl Strategy<Value = String> {
        (proptest::sample::select(prefixes), rest).prop_map(|(p, r)| format!("{p}{r}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn app_names(s in prefixed(&["", "", "git", "api", "ad", "stag", "b"], near("abz09-_A", 44))) {
            prop_assert_eq!(matches(&app_name(), &s), s.parse::<AppName>().is_ok(), "{:?}", s);
        }

        #[test]
        fn new_channel_names(s in prefixed(&["", "", "prod", "pro"], near("adoprz09-_", 44))) {
            let parsed = s.parse::<ChannelName>().is_ok_and(|c| !c.is_prod());
            prop_assert_eq!(matches(&new_channel_name(), &s), parsed, "{:?}", s);
        }

        #[test]
        fn branches(s in near("ab9._/+-lock*~ ", 14)) {
            prop_assert_eq!(matches(&branch(), &s), s.parse::<BranchName>().is_ok(), "{:?}", s);
            let bound = format!("branch:{s}");
            prop_assert_eq!(
                matches(&binding(), &bound),
                bound.parse::<GitRefBinding>().is_ok(),
                "{:?}", bound
            );
            let full = format!("refs/heads/{s}");
            prop_assert_eq!(matches(&branch_ref(), &full), BranchName::from_ref(&full).is_ok(), "{:?}", full);
            prop_assert_eq!(matches(&branch_ref(), &s), BranchName::from_ref(&s).is_ok(), "{:?}", s);
        }

        #[test]
        fn env_keys(s in prefixed(&["", "", "PORT", "DATABASE_URL", "S3_"], near("AZ_09a-", 10))) {
            prop_assert_eq!(matches(&env_key(), &s), s.parse::<EnvKey>().is_ok(), "{:?}", s);
        }

        #[test]
        fn cidrs(
            v4 in (0u16..300, 0u16..300, 0u16..300, 0u16..300),
            v6 in proptest::collection::vec(0u32..0x1_0000, 8),
            compress in 0usize..9,
            prefix in proptest::option::of(0u16..140),
        ) {
            let prefix = prefix.map(|p| format!("/{p}")).unwrap_or_default();
            let four = format!("{}.{}.{}.{}{prefix}", v4.0, v4.1, v4.2, v4.3);
            let groups: Vec<String> = v6.iter().map(|g| format!("{g:x}")).collect();
            let six = if compress < 8 {
                format!("{}::{}{prefix}", groups[..compress].join(":"), groups[compress + 1..].join(":"))
            } else {
                format!("{}{prefix}", groups.join(":"))
            };
            for written in [four, six] {
                prop_assert_eq!(matches(&allow_cidr(), &written), accepted_cidr(&written), "{:?}", written);
            }
        }

        #[test]
        fn domains(labels in proptest::collection::vec(near("aZ09-_", 8), 1..4), dot in any::<bool>()) {
            let s = format!("{}{}", labels.join("."), if dot { "." } else { "" });
            prop_assert_eq!(matches(&domain(), &s), s.parse::<DomainName>().is_ok(), "{:?}", s);
        }
    }

    /// What the forward route takes: an address (its own /32 or /128) or a CIDR.
    fn accepted_cidr(s: &str) -> bool {
        let normalized = match s.parse::<std::net::IpAddr>() {
            Ok(ip) => format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 }),
            Err(_) => s.to_owned(),
        };
        normalized.parse::<crate::names::Cidr>().is_ok()
    }

    #[test]
    fn the_edges_the_generators_may_miss() {
        let sha = "0123456789abcdef0123456789abcdef01234567";
        assert!(matches(&sha_or_branch(), sha) && sha.parse::<CommitSha>().is_ok());
        assert!(matches(&app_name(), &"a".repeat(40)));
        assert!(!matches(&app_name(), &"a".repeat(41)));
        assert!(!matches(&app_name(), "github"), "a reserved prefix");
        assert!(matches(&new_channel_name(), "production"));
        assert!(!matches(&binding(), "branch:*"));
        assert!(matches(&branch(), &"b".repeat(200)));
        assert!(!matches(&branch(), &"b".repeat(201)));
        assert!(!matches(&branch(), "a.lock"));
        assert!(matches(&env_key(), &"K".repeat(256)));
        assert!(!matches(&env_key(), &"K".repeat(257)));
        for address in [
            "::1",
            "::ffff:192.0.2.1",
            "2001:db8::/32",
            "fe80::1:2:3:4/64",
            "192.0.2.0/24",
        ] {
            assert!(matches(&allow_cidr(), address), "{address}");
            assert!(accepted_cidr(address), "{address}");
        }
        for refused in ["192.0.2.1/33", "01.2.3.4", "::1/129", "1.2.3.4/08"] {
            assert!(!matches(&allow_cidr(), refused), "{refused}");
            assert!(!accepted_cidr(refused), "{refused}");
        }
        let long = format!(
            "{}.com",
            [
                "a".repeat(63),
                "b".repeat(63),
                "c".repeat(63),
                "d".repeat(57)
            ]
            .join(".")
        );
        assert_eq!(long.len(), 253);
        assert!(matches(&domain(), &long) && long.parse::<DomainName>().is_ok());
        let longer = format!("x{long}");
        assert!(!matches(&domain(), &longer) && longer.parse::<DomainName>().is_err());
        assert!(!matches(&domain(), "192.0.2.1") && "192.0.2.1".parse::<DomainName>().is_err());
        assert!(
            matches(&domain(), "bücher.example") && "bücher.example".parse::<DomainName>().is_ok()
        );
    }
}
