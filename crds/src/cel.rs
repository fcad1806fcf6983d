//! The CEL rules the apiserver enforces on single objects, built from the constants and messages of
//! [`crate::names`] so the apiserver, the webhook and the REST API refuse the same input with the same words.
//!
//! The resource types attach these with `#[x_kube(validation = ...)]` / `#[kube(validation = ...)]`; they end up
//! as `x-kubernetes-validations` in the generated CRD YAML.

use kube::core::{Message, Rule};

use crate::names::{self, messages};

/// A CEL expression that is true when the string expression `e` is a DNS label of at most `max` characters.
fn dns_label(e: &str, max: usize) -> String {
    format!(
        "{e}.size() <= {max} && {e}.matches('{}')",
        names::DNS_LABEL_PATTERN
    )
}

/// A CEL expression that is true when the string expression `e` is a branch name [`names::is_branch_name`] accepts.
fn branch_name(e: &str) -> String {
    [
        format!("{e}.size() >= 1"),
        format!("{e}.size() <= {}", names::BRANCH_MAX_LEN),
        format!("{e}.matches('{}')", names::BRANCH_CHARS_PATTERN),
        format!("!{e}.startsWith('-') && !{e}.startsWith('/') && !{e}.startsWith('.')"),
        format!("!{e}.endsWith('/') && !{e}.endsWith('.') && !{e}.endsWith('.lock')"),
        format!("!{e}.contains('..') && !{e}.contains('//') && !{e}.contains('/.')"),
    ]
    .join(" && ")
}

/// The resource name of an App is the app name.
pub fn app_name() -> Rule {
    Rule::new(dns_label("self.metadata.name", names::NAME_MAX_LEN))
        .message(messages::APP_NAME)
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// App names may not start with a reserved prefix.
pub fn app_name_not_reserved() -> Rule {
    let prefixes = names::RESERVED_APP_PREFIXES
        .map(|p| format!("'{p}'"))
        .join(", ");
    Rule::new(format!(
        "![{prefixes}].exists(p, self.metadata.name.startsWith(p))"
    ))
    .message(messages::APP_NAME_RESERVED)
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// A username field: [`names::USERNAME_PATTERN`], at most [`names::NAME_MAX_LEN`] characters.
pub fn username() -> Rule {
    Rule::new(format!(
        "self.size() <= {} && self.matches('{}')",
        names::NAME_MAX_LEN,
        names::USERNAME_PATTERN
    ))
    .message(messages::USERNAME)
}

/// A field naming an App (the app name rule without the reserved-prefix check, which applies to new apps only).
pub fn app_reference() -> Rule {
    Rule::new(dns_label("self", names::NAME_MAX_LEN)).message(messages::APP_NAME)
}

/// A Channel is named `<app>.<channel>`.
pub fn channel_name_has_app_prefix() -> Rule {
    Rule::new("self.metadata.name.startsWith(self.spec.app + '.')")
        .message(
            "a Channel is named <app>.<channel>: metadata.name must start with spec.app and a dot",
        )
        .reason(kube::core::Reason::FieldValueInvalid)
}

/// The channel part of a Channel's name follows the channel name rule.
pub fn channel_name() -> Rule {
    let rest = "self.metadata.name.substring(self.spec.app.size() + 1)";
    Rule::new(format!(
        "!self.metadata.name.startsWith(self.spec.app + '.') || ({})",
        dns_label(rest, names::NAME_MAX_LEN)
    ))
    .message(messages::CHANNEL_NAME)
    .reason(kube::core::Reason::FieldValueInvalid)
}

/// The `prod` channel follows `master`.
pub fn prod_channel_binding() -> Rule {
    Rule::new(format!(
        "!self.metadata.name.endsWith('.{}') || self.spec.gitRefBinding == '{}{}'",
        names::PROD_CHANNEL,
        names::BINDING_PREFIX,
        names::PROD_BRANCH
    ))
    .message(messages::PROD_BINDING)
    .field_path(".spec.gitRefBinding")
}

/// The legacy wildcard binding is refused.
pub fn binding_not_wildcard() -> Rule {
    Rule::new(format!("self != '{}*'", names::BINDING_PREFIX)).message(messages::BINDING_WILDCARD)
}

/// A binding is `branch:<name>`.
pub fn binding_format() -> Rule {
    let prefix = names::BINDING_PREFIX;
    let branch = branch_name(&format!("self.substring({})", prefix.len()));
    Rule::new(format!(
        "self == '{prefix}*' || (self.startsWith('{prefix}') && {branch})"
    ))
    .message(messages::BINDING)
}

/// A field holding a branch name.
pub fn branch() -> Rule {
    Rule::new(branch_name("self")).message(messages::BRANCH)
}

/// A field holding a full commit id.
pub fn sha() -> Rule {
    Rule::new(format!("self.matches('{}')", names::SHA_PATTERN)).message(messages::SHA)
}

/// A field that holds a branch name, bare or as `refs/heads/<name>`.
pub fn branch_ref() -> Rule {
    let full = names::BRANCH_REF_PREFIX;
    Rule::new(format!(
        "self.startsWith('{full}') ? ({}) : ({})",
        branch_name(&format!("self.substring({})", full.len())),
        branch_name("self")
    ))
    .message(messages::BRANCH)
}

/// A field that holds either a full commit id or a branch name.
pub fn sha_or_branch() -> Rule {
    Rule::new(format!(
        "self.matches('{}') || ({})",
        names::SHA_PATTERN,
        branch_name("self")
    ))
    .message(names::messages::DEPLOY_SHA)
}

/// A field holding an image reference pinned by digest.
pub fn image_by_digest() -> Rule {
    Rule::new(format!("self.matches('{}')", names::IMAGE_DIGEST_PATTERN))
        .message(messages::IMAGE_DIGEST)
}

/// On a Deploy's spec: a rewind names both the earlier Deploy and its image, or neither.
pub fn rewind_pair() -> Rule {
    Rule::new("has(self.rewindOf) == has(self.image)").message(messages::REWIND_PAIR)
}

/// On a Deploy's spec: a rewind's sha is the full commit id its image was built from (no branch to resolve).
pub fn rewind_sha() -> Rule {
    Rule::new(format!(
        "!has(self.rewindOf) || (has(self.sha) && self.sha.matches('{}'))",
        names::SHA_PATTERN
    ))
    .message(messages::REWIND_SHA)
    .field_path(".sha")
}

/// A CIDR (IPv4 or IPv6).
pub fn cidr() -> Rule {
    Rule::new("isCIDR(self)").message(messages::CIDR)
}

/// A list of CIDRs of at most `max` entries.
pub fn max_cidrs(max: usize) -> Rule {
    Rule::new(format!("self.size() <= {max}")).message(messages::TOO_MANY_CIDRS)
}

/// A hostname: lowercase IDNA-encoded labels, at least two, no trailing dot.
pub fn domain() -> Rule {
    Rule::new(format!("self.matches('{}')", names::DOMAIN_PATTERN)).message(messages::DOMAIN)
}

/// A field that may not change once set.
pub fn immutable(what: &str) -> Rule {
    Rule::new("self == oldSelf").message(Message::Message(format!("{what} is immutable")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_carry_the_shared_messages() {
        let rule = serde_json::to_value(app_name()).unwrap();
        assert_eq!(rule["message"], messages::APP_NAME);
        assert_eq!(
            rule["rule"],
            "self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z0-9]([a-z0-9-]*[a-z0-9])?$')"
        );
        let rule = serde_json::to_value(app_name_not_reserved()).unwrap();
        assert_eq!(
            rule["rule"],
            "!['git', 'api', 'www', 'admin', 'preview', 'staging'].exists(p, self.metadata.name.startsWith(p))"
        );
    }
}
