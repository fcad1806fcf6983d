//! The platform database as the arbiter of plan caps, hostnames and custom domains on the API path (see
//! [`slipway_store::db::claims`] and [`slipway_store::db::domain_claims`]). The cache answers first, for a clear message without a
//! round trip; the claim decides, so parallel requests cannot beat the cap or the domain limit, or share a hostname
//! or a domain. A claim is released when the write to the cluster fails and when the API deletes the channel, its
//! app or the domain.

use std::collections::BTreeSet;

use slipway_crds::names::{self, AppName, ChannelName, DomainName, Username};
use slipway_crds::plans::Plan;
use slipway_crds::rules;
use uuid::Uuid;

use super::access::VisibleApp;
use super::error::ApiError;
use super::state::AppState;
use crate::platform::cache::Cache;
use slipway_store::db::claims::{self, Claim, Cluster, Refused};
use slipway_store::db::domain_claims::{self, DomainClaim, DomainRefused};

/// The cluster as the API's cache sees it.
struct Cached<'a>(&'a Cache);

impl Cluster for Cached<'_> {
    fn has_channel(&self, namespace: &str, channel: &str) -> bool {
        self.0
            .channels_in(namespace)
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(channel))
    }

    fn counted_channels(&self, namespace: &str) -> BTreeSet<String> {
        let apps = self.0.apps();
        let channels = self.0.channels_in(namespace);
        rules::channels_counting(
            namespace,
            apps.iter().map(|a| &**a),
            channels.iter().map(|c| &**c),
        )
        .into_iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect()
    }
}

/// A channel about to be created, and whose account it counts against.
pub struct NewChannel<'a> {
    /// The owner's account id.
    pub owner_id: Uuid,
    /// The owner.
    pub owner: &'a Username,
    /// The owner's namespace.
    pub namespace: &'a str,
    /// The app.
    pub app: &'a AppName,
    /// The channel.
    pub channel: &'a ChannelName,
    /// The owner's plan.
    pub plan: &'a Plan,
}

/// Claims the channel's slot and hostname, or answers the spec's error: 403 `plan_limit_exceeded` over the cap,
/// 400 when the hostname or the channel is taken.
pub async fn claim(state: &AppState, new: &NewChannel<'_>) -> Result<(), ApiError> {
    let host_label = names::channel_host_label(new.app, new.channel, new.owner)?;
    let channel = names::channel_resource_name(new.app, new.channel);
    let claim = Claim {
        user_id: new.owner_id,
        namespace: new.namespace,
        app: new.app.as_str(),
        channel: &channel,
        host_label: &host_label,
    };
    let outcome = claims::claim(
        state.db(),
        &claim,
        new.plan.max_channels,
        &Cached(state.cache()),
    )
    .await?;
    match outcome {
        Ok(()) => Ok(()),
        Err(Refused::PlanLimit) => Err(rules::channel_cap_reached(new.plan).into()),
        Err(Refused::HostTaken) => Err(rules::hostname_taken(&host_label).into()),
        Err(Refused::SameChannel) if new.channel.is_prod() => Err(ApiError::BadRequest(format!(
            "an app named {} already exists",
            new.app
        ))),
        Err(Refused::SameChannel) => Err(ApiError::BadRequest(format!(
            "app {} already has a channel named {}",
            new.app, new.channel
        ))),
    }
}

/// Releases the claim of one channel.
pub async fn release(
    state: &AppState,
    namespace: &str,
    app: &AppName,
    channel: &ChannelName,
) -> Result<(), ApiError> {
    let resource = names::channel_resource_name(app, channel);
    Ok(claims::release(state.db(), namespace, &resource).await?)
}

/// Releases the claims of every channel of an app.
pub async fn release_app(state: &AppState, namespace: &str, app: &AppName) -> Result<(), ApiError> {
    Ok(claims::release_app(state.db(), namespace, app.as_str()).await?)
}

/// Claims `domain` for the Channel resource `channel` of `app`: 409 `domain_taken` when another channel holds it,
/// 400 `domain_limit_reached` when the channel holds the most it may.
pub async fn claim_domain(
    state: &AppState,
    app: &VisibleApp,
    channel: &str,
    domain: &DomainName,
) -> Result<(), ApiError> {
    let owner = slipway_store::db::users::by_username(state.db(), app.owner.as_str())
        .await?
        .ok_or_else(|| anyhow::anyhow!("owner {} has no account", app.owner))?;
    let claim = DomainClaim {
        user_id: owner.id,
        namespace: &app.namespace,
        channel,
        domain: domain.as_str(),
    };
    let outcome = domain_claims::claim(
        state.db(),
        &claim,
        rules::MAX_DOMAINS_PER_CHANNEL,
        state.cache(),
    )
    .await?;
    match outcome {
        Ok(()) => Ok(()),
        Err(DomainRefused::Taken) => Err(rules::domain_taken(domain).into()),
        Err(DomainRefused::LimitReached) => Err(rules::domain_limit_reached().into()),
    }
}

/// Releases the claim of `domain` in `namespace` (its Domain's creation failed, or it was detached).
pub async fn release_domain(
    state: &AppState,
    namespace: &str,
    domain: &str,
) -> Result<(), ApiError> {
    Ok(domain_claims::release(state.db(), namespace, domain).await?)
}
