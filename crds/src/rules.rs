//! The rules one object cannot check alone, as pure functions over what the caller already knows (its reflector
//! caches). The admission webhook and the REST API both call them, so `kubectl apply` and the API refuse the same
//! thing with the same message; the per-object rules they build on live in [`crate::names`].

use std::collections::HashMap;

use crate::names::{self, AppName, ChannelName, DomainName, GitRefBinding, Username};
use crate::plans::Plan;
use crate::{App, Channel};

/// How a refusal maps onto the hosting API's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// Invalid input: `400 bad_request`.
    Invalid,
    /// Over a plan limit: `403 plan_limit_exceeded`.
    PlanLimit,
    /// A referenced object does not exist.
    Missing,
    /// Another object already holds the name: `409` (`domain_taken` for domains).
    Taken,
    /// A per-object limit that is not a plan limit: `400` (`domain_limit_reached` for domains).
    LimitReached,
}

/// Why an object was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Denial {
    /// How the API reports it.
    pub kind: DenialKind,
    /// What the person reads.
    pub message: String,
}

impl Denial {
    fn invalid(message: impl Into<String>) -> Self {
        Self {
            kind: DenialKind::Invalid,
            message: message.into(),
        }
    }
}

impl From<names::InvalidDomain> for Denial {
    fn from(e: names::InvalidDomain) -> Self {
        Self::invalid(e.to_string())
    }
}

impl From<names::InvalidName> for Denial {
    fn from(e: names::InvalidName) -> Self {
        Self::invalid(e.0)
    }
}

/// An app name is unique within its owner's namespace.
pub fn app_name_free<'a>(
    name: &AppName,
    existing: impl IntoIterator<Item = &'a str>,
) -> Result<(), Denial> {
    if existing.into_iter().any(|n| n == name.as_str()) {
        return Err(Denial::invalid(format!(
            "an app named {name} already exists"
        )));
    }
    Ok(())
}

/// One channel per branch within an app. `existing` holds the app's other channels as (channel name, binding).
pub fn one_channel_per_branch<'a>(
    binding: &GitRefBinding,
    existing: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), Denial> {
    let wanted = binding.to_string();
    match existing.into_iter().find(|(_, b)| *b == wanted) {
        Some((channel, _)) => Err(Denial::invalid(format!(
            "channel {channel} already follows {wanted}; an app has one channel per branch"
        ))),
        None => Ok(()),
    }
}

/// The plan caps channels per account; `existing` counts every channel of the account, prod channels included.
pub fn within_channel_cap(plan: &Plan, existing: usize) -> Result<(), Denial> {
    if existing >= plan.max_channels as usize {
        return Err(channel_cap_reached(plan));
    }
    Ok(())
}

/// The refusal of a channel over the plan's cap.
pub fn channel_cap_reached(plan: &Plan) -> Denial {
    Denial {
        kind: DenialKind::PlanLimit,
        message: format!(
            "the {} plan allows {} channels per account (each app's prod channel counts); delete a channel or upgrade",
            plan.tier, plan.max_channels
        ),
    }
}

/// Channel hostnames are unique across the platform. Within one account `<app>-<owner>` can equal
/// `<channel>-<app>-<owner>` (app `a-b`, and channel `a` of app `b`); across accounts they cannot, since usernames
/// have no `-`. `taken` holds the first labels of every other channel's hostname.
pub fn hostname_free<'a>(
    label: &str,
    taken: impl IntoIterator<Item = &'a str>,
) -> Result<(), Denial> {
    if taken.into_iter().any(|t| t == label) {
        return Err(hostname_taken(label));
    }
    Ok(())
}

/// The refusal of a channel whose hostname another channel holds.
pub fn hostname_taken(label: &str) -> Denial {
    Denial::invalid(format!(
        "the hostname {label} is already used by another channel; choose another app or channel name"
    ))
}

/// The first hostname labels of existing `channels`, each from its App among `apps` (which names the owner). A
/// channel that is not well formed, or whose app is not among `apps` or is not well formed, has none. One pass over
/// each (the apps by namespace and name first): a platform holds thousands of both, and every new channel asks.
pub fn existing_host_labels<'a>(
    apps: impl IntoIterator<Item = &'a App>,
    channels: impl IntoIterator<Item = &'a Channel>,
) -> Vec<String> {
    let owners: HashMap<(Option<&str>, &str), &str> = apps
        .into_iter()
        .filter_map(|a| {
            let key = (a.metadata.namespace.as_deref(), a.metadata.name.as_deref()?);
            Some((key, a.spec.owner.as_str()))
        })
        .collect();
    channels
        .into_iter()
        .filter_map(|channel| {
            let name = channel.metadata.name.as_deref()?;
            let (app, channel_name) = names::parse_channel_resource_name(name).ok()?;
            let owner = owners
                .get(&(channel.metadata.namespace.as_deref(), app.as_str()))?
                .parse::<Username>()
                .ok()?;
            names::channel_host_label(&app, &channel_name, &owner).ok()
        })
        .collect()
}

/// Most custom domains one channel may have (the hosting API's limit).
pub const MAX_DOMAINS_PER_CHANNEL: usize = 5;

/// A custom domain belongs to one channel platform-wide. `existing` holds the canonical hostnames of every other
/// Domain (see [`DomainName`]).
pub fn domain_free<'a>(
    domain: &DomainName,
    existing: impl IntoIterator<Item = &'a str>,
) -> Result<(), Denial> {
    if existing.into_iter().any(|d| d == domain.as_str()) {
        return Err(domain_taken(domain));
    }
    Ok(())
}

/// The denial of a domain another channel holds.
pub fn domain_taken(domain: &DomainName) -> Denial {
    Denial {
        kind: DenialKind::Taken,
        message: format!("the domain {domain} is already attached to another channel"),
    }
}

/// A channel has at most [`MAX_DOMAINS_PER_CHANNEL`] custom domains; `existing` counts the ones it has.
pub fn within_domain_limit(existing: usize) -> Result<(), Denial> {
    if existing >= MAX_DOMAINS_PER_CHANNEL {
        return Err(domain_limit_reached());
    }
    Ok(())
}

/// The denial of one domain more than a channel may have.
pub fn domain_limit_reached() -> Denial {
    Denial {
        kind: DenialKind::LimitReached,
        message: format!(
            "a channel has at most {MAX_DOMAINS_PER_CHANNEL} custom domains; detach one before adding another"
        ),
    }
}

/// How many channels count against the cap of the account whose namespace is `namespace`: live channels whose App
/// is live too. The channels of a deleted app only wait for garbage collection; their slots are free at once.
pub fn counted_channels<'a>(
    namespace: &str,
    apps: impl IntoIterator<Item = &'a App>,
    channels: impl IntoIterator<Item = &'a Channel>,
) -> usize {
    channels_counting(namespace, apps, channels).len()
}

/// The channels [`counted_channels`] counts.
pub fn channels_counting<'a>(
    namespace: &str,
    apps: impl IntoIterator<Item = &'a App>,
    channels: impl IntoIterator<Item = &'a Channel>,
) -> Vec<&'a Channel> {
    let live = |m: &kube::api::ObjectMeta| {
        m.deletion_timestamp.is_none() && m.namespace.as_deref() == Some(namespace)
    };
    let apps: Vec<&str> = apps
        .into_iter()
        .filter(|a| live(&a.metadata))
        .filter_map(|a| a.metadata.name.as_deref())
        .collect();
    channels
        .into_iter()
        .filter(|c| live(&c.metadata) && apps.contains(&c.spec.app.as_str()))
        .collect()
}

/// Everything a new channel must satisfy that its own fields cannot show.
pub struct NewChannel<'a> {
    /// The app it belongs to.
    pub app: &'a AppName,
    /// Its name within the app.
    pub name: &'a ChannelName,
    /// Its binding.
    pub binding: &'a GitRefBinding,
    /// The app's owner.
    pub owner: &'a Username,
}

/// Checks a new channel against the app's channels, every channel of the account, and the hostnames in use.
pub fn check_new_channel<'a>(
    new: &NewChannel<'_>,
    plan: &Plan,
    app_channels: impl IntoIterator<Item = (&'a str, &'a str)>,
    account_channel_count: usize,
    taken_host_labels: impl IntoIterator<Item = &'a str>,
) -> Result<String, Denial> {
    let label = names::channel_host_label(new.app, new.name, new.owner)?;
    let app_channels: Vec<(&str, &str)> = app_channels.into_iter().collect();
    if app_channels
        .iter()
        .any(|(name, _)| *name == new.name.as_str())
    {
        return Err(Denial::invalid(format!(
            "app {} already has a channel named {}",
            new.app, new.name
        )));
    }
    one_channel_per_branch(new.binding, app_channels)?;
    hostname_free(&label, taken_host_labels)?;
    within_channel_cap(plan, account_channel_count)?;
    Ok(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(tier: &str) -> &'static Plan {
        Plan::by_tier(tier).unwrap()
    }

    #[test]
    fn a_branch_has_one_channel() {
        let dev: GitRefBinding = "branch:dev".parse().unwrap();
        let existing = [("prod", "branch:master"), ("next", "branch:dev")];
        let err = one_channel_per_branch(&dev, existing).unwrap_err();
        assert_eq!(
            err.message,
            "channel next already follows branch:dev; an app has one channel per branch"
        );
        assert!(one_channel_per_branch(&"branch:main".parse().unwrap(), existing).is_ok());
    }

    #[test]
    fn the_cap_counts_prod_channels() {
        assert!(within_channel_cap(plan("starter"), 2).is_ok());
        let err = within_channel_cap(plan("starter"), 3).unwrap_err();
        assert_eq!(err.kind, DenialKind::PlanLimit);
        assert!(
            err.message
                .starts_with("the starter plan allows 3 channels per account")
        );
    }

    #[test]
    fn hostnames_collide_within_an_account() {
        // App "a-b" and channel "a" of app "b" both want a-b-c. Across accounts this cannot happen: a username has
        // no '-', so the owner is always the last part of the label (user "b-c", the squatter of a-b-c, is refused).
        assert!("b-c".parse::<Username>().is_err());
        let app: AppName = "b".parse().unwrap();
        let owner: Username = "c".parse().unwrap();
        let binding: GitRefBinding = "branch:a".parse().unwrap();
        let new = NewChannel {
            app: &app,
            name: &"a".parse().unwrap(),
            binding: &binding,
            owner: &owner,
        };
        let err = check_new_channel(&new, plan("basic"), [], 0, ["a-b-c"]).unwrap_err();
        assert!(
            err.message.contains("a-b-c is already used"),
            "{}",
            err.message
        );
        assert_eq!(
            check_new_channel(&new, plan("basic"), [], 0, ["x"]).unwrap(),
            "a-b-c"
        );
    }

    #[test]
    fn existing_labels_take_each_channels_owner_from_its_own_app() {
        let app = |ns: &str, name: &str, owner: &str| -> App {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "App",
                "metadata": {"name": name, "namespace": ns}, "spec": {"owner": owner}}))
            .unwrap()
        };
        let channel = |ns: &str, app: &str, name: &str, branch: &str| -> Channel {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
                "metadata": {"name": format!("{app}.{name}"), "namespace": ns},
                "spec": {"app": app, "gitRefBinding": format!("branch:{branch}")}}))
            .unwrap()
        };
        // Two accounts with an app of the same name; a channel whose app is elsewhere (or gone) has no label.
        let apps = [app("u-ann", "blog", "ann"), app("u-bob", "blog", "bob")];
        let channels = [
            channel("u-ann", "blog", "prod", "master"),
            channel("u-bob", "blog", "prod", "master"),
            channel("u-bob", "blog", "next", "dev"),
            channel("u-cat", "blog", "prod", "master"),
            channel("u-ann", "shop", "prod", "master"),
        ];
        assert_eq!(
            existing_host_labels(&apps, &channels),
            ["blog-ann", "blog-bob", "next-blog-bob"]
        );
    }

    #[test]
    fn a_domain_belongs_to_one_channel() {
        let domain: DomainName = "WWW.Example.com.".parse().unwrap();
        let err = domain_free(&domain, ["shop.example.com", "www.example.com"]).unwrap_err();
        assert_eq!(err.kind, DenialKind::Taken);
        assert_eq!(
            err.message,
            "the domain www.example.com is already attached to another channel"
        );
        assert!(domain_free(&domain, ["example.com", "www.example.org"]).is_ok());
    }

    #[test]
    fn a_channel_has_at_most_five_domains() {
        assert!(within_domain_limit(4).is_ok());
        let err = within_domain_limit(5).unwrap_err();
        assert_eq!(err.kind, DenialKind::LimitReached);
        assert!(
            err.message
                .starts_with("a channel has at most 5 custom domains"),
            "{}",
            err.message
        );
    }

    #[test]
    fn app_names_are_unique_per_namespace() {
        let name: AppName = "blog".parse().unwrap();
        assert_eq!(
            app_name_free(&name, ["blog"]).unwrap_err().message,
            "an app named blog already exists"
        );
        assert!(app_name_free(&name, ["shop"]).is_ok());
    }

    #[test]
    fn deleted_apps_free_their_channel_slots() {
        let app = |name: &str, deleting: bool| -> App {
            let mut a: App = serde_json::from_value(
                serde_json::json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {"owner": "alice"}}),
            )
            .unwrap();
            if deleting {
                a.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            a
        };
        let channel = |app: &str, ns: &str| -> Channel {
            serde_json::from_value(serde_json::json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
                "metadata": {"name": format!("{app}.prod"), "namespace": ns}, "spec": {"app": app, "gitRefBinding": "branch:master"}})).unwrap()
        };
        let apps = [app("blog", false), app("shop", true)];
        let channels = [
            channel("blog", "ns"),
            channel("shop", "ns"),
            channel("ghost", "ns"),
            channel("blog", "other"),
        ];
        assert_eq!(counted_channels("ns", apps.iter(), channels.iter()), 1);
    }
}
