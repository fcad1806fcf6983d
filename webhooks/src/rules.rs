//! The rules one object cannot check alone, as pure functions over what the caller already knows (its reflector
//! caches). The admission webhook and the REST API both call them, so `kubectl apply` and the API refuse the same
//! thing with the same message; the per-object rules they build on live in `slipway_crds::names`.

use slipway_crds::names::{self, AppName, ChannelName, GitRefBinding, Username};
use slipway_crds::plans::Plan;
use slipway_crds::{App, Channel};

/// How a refusal maps onto the hosting API's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// Invalid input: `400 bad_request`.
    Invalid,
    /// Over a plan limit: `403 plan_limit_exceeded`.
    PlanLimit,
    /// A referenced object does not exist.
    Missing,
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
        Self { kind: DenialKind::Invalid, message: message.into() }
    }
}

impl From<names::InvalidName> for Denial {
    fn from(e: names::InvalidName) -> Self {
        Self::invalid(e.0)
    }
}

/// An app name is unique within its owner's namespace.
pub fn app_name_free<'a>(name: &AppName, existing: impl IntoIterator<Item = &'a str>) -> Result<(), Denial> {
    if existing.into_iter().any(|n| n == name.as_str()) {
        return Err(Denial::invalid(format!("an app named {name} already exists")));
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
        return Err(Denial {
            kind: DenialKind::PlanLimit,
            message: format!(
                "the {} plan allows {} channels per account (each app's prod channel counts); delete a channel or upgrade",
                plan.tier, plan.max_channels
            ),
        });
    }
    Ok(())
}

/// Channel hostnames are unique across the platform: `<app>-<owner>` of one account can equal
/// `<channel>-<app>-<owner>` of another. `taken` holds the first labels of every other channel's hostname.
pub fn hostname_free<'a>(label: &str, taken: impl IntoIterator<Item = &'a str>) -> Result<(), Denial> {
    if taken.into_iter().any(|t| t == label) {
        return Err(Denial::invalid(format!(
            "the hostname {label} is already used by another channel; choose another app or channel name"
        )));
    }
    Ok(())
}

/// The first hostname label of an existing channel, from its App (which names the owner). `None` when the channel
/// or its app is not well formed or the app is not among `apps`.
pub fn existing_host_label<'a>(channel: &Channel, apps: impl IntoIterator<Item = &'a App>) -> Option<String> {
    let name = channel.metadata.name.as_deref()?;
    let (app, channel_name) = names::parse_channel_resource_name(name).ok()?;
    let ns = channel.metadata.namespace.as_deref();
    let owner = apps
        .into_iter()
        .find(|a| a.metadata.name.as_deref() == Some(app.as_str()) && a.metadata.namespace.as_deref() == ns)?
        .spec
        .owner
        .parse::<Username>()
        .ok()?;
    names::channel_host_label(&app, &channel_name, &owner).ok()
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
        assert_eq!(err.message, "channel next already follows branch:dev; an app has one channel per branch");
        assert!(one_channel_per_branch(&"branch:main".parse().unwrap(), existing).is_ok());
    }

    #[test]
    fn the_cap_counts_prod_channels() {
        assert!(within_channel_cap(plan("starter"), 2).is_ok());
        let err = within_channel_cap(plan("starter"), 3).unwrap_err();
        assert_eq!(err.kind, DenialKind::PlanLimit);
        assert!(err.message.starts_with("the starter plan allows 3 channels per account"));
    }

    #[test]
    fn hostnames_collide_across_accounts() {
        // app "a-b" of owner "c" and app "a" of owner "b-c" both want a-b-c.
        let app: AppName = "a".parse().unwrap();
        let owner: Username = "b-c".parse().unwrap();
        let binding = GitRefBinding::prod();
        let new = NewChannel { app: &app, name: &ChannelName::prod(), binding: &binding, owner: &owner };
        let err = check_new_channel(&new, plan("basic"), [], 0, ["a-b-c"]).unwrap_err();
        assert!(err.message.contains("a-b-c is already used"), "{}", err.message);
        assert_eq!(check_new_channel(&new, plan("basic"), [], 0, ["x"]).unwrap(), "a-b-c");
    }

    #[test]
    fn app_names_are_unique_per_namespace() {
        let name: AppName = "blog".parse().unwrap();
        assert_eq!(app_name_free(&name, ["blog"]).unwrap_err().message, "an app named blog already exists");
        assert!(app_name_free(&name, ["shop"]).is_ok());
    }
}
