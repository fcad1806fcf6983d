//! Letting custom domains go. `DELETE .../domains/{domain}` detaches one; deleting a channel or an app through the
//! API detaches every Domain it held, before the route answers (garbage collection would remove them too, through
//! their owner reference to the Channel, but later, and it leaves their claims to lapse). Either way the Domains are
//! deleted (their finalizer still removes their certificates), this process's cache is waited on until it no longer
//! counts them, and their claims are released: once the route has answered, the names are free on any channel.
//!
//! A Domain on its way out holds nothing: the cache leaves it out, a claim lapses without it, the webhook admits
//! over it. Only its name lingers in its own namespace until its finalizer is done, which attaching the same name
//! there waits out (`domains.rs`).

use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use slipway_crds::Domain;
use slipway_crds::names::AppName;

use slipway_core::claims;
use slipway_core::error::ApiError;
use slipway_core::state::AppState;
use slipway_store::db::domain_claims;

/// What held the Domains that go.
#[derive(Debug, Clone, Copy)]
pub enum Holder<'a> {
    /// The Channel resource of this name (`<app>.<channel>`).
    Channel(&'a str),
    /// Every channel of this app.
    App(&'a AppName),
}

impl Holder<'_> {
    /// Whether the Channel resource `channel` is (one of) the holder's.
    fn holds(&self, channel: &str) -> bool {
        match self {
            Holder::Channel(name) => channel == *name,
            Holder::App(app) => channel
                .strip_prefix(app.as_str())
                .is_some_and(|rest| rest.starts_with('.')),
        }
    }
}

/// Detaches `domain` from its channel in `namespace`.
pub async fn detach(state: &AppState, namespace: &str, domain: &Domain) -> Result<(), ApiError> {
    delete(state, namespace, std::slice::from_ref(domain)).await?;
    claims::release_domain(state, namespace, &domain.spec.domain).await
}

/// Detaches every Domain of `holder` in `namespace` and releases its claims, those still in flight included.
pub async fn detach_all(
    state: &AppState,
    namespace: &str,
    holder: Holder<'_>,
) -> Result<(), ApiError> {
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), namespace);
    // From the apiserver rather than the cache: a Domain attached a moment ago goes too.
    let listed = match holder {
        Holder::Channel(channel) => {
            api.list(&ListParams::default().fields(&format!("spec.channel={channel}")))
                .await?
        }
        Holder::App(_) => api.list(&ListParams::default()).await?,
    };
    let held: Vec<Domain> = listed
        .items
        .into_iter()
        .filter(|d| holder.holds(&d.spec.channel))
        .collect();
    delete(state, namespace, &held).await?;
    match holder {
        Holder::Channel(channel) => {
            domain_claims::release_channel(state.db(), namespace, channel).await?;
        }
        Holder::App(app) => domain_claims::release_app(state.db(), namespace, app.as_str()).await?,
    }
    Ok(())
}

/// Deletes `domains` (each by uid: a newer Domain of the same name stays) and waits until the cache no longer
/// counts them. One already gone is fine.
async fn delete(state: &AppState, namespace: &str, domains: &[Domain]) -> Result<(), ApiError> {
    let api: Api<Domain> = Api::namespaced(state.kube().clone(), namespace);
    for domain in domains {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: domain.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        let name = domain.metadata.name.as_deref().unwrap_or_default();
        match api.delete(name, &params).await {
            // 409: the precondition failed, so the Domain of that uid is gone already.
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for domain in domains {
        state
            .cache()
            .domain_gone(domain.metadata.uid.as_deref().unwrap_or_default())
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_app_holds_the_channels_named_after_it_and_no_others() {
        let app: AppName = "blog".parse().unwrap();
        let holder = Holder::App(&app);
        assert!(holder.holds("blog.prod"));
        assert!(holder.holds("blog.next"));
        assert!(!holder.holds("blogs.prod"));
        assert!(!holder.holds("blog"));
        let channel = Holder::Channel("blog.next");
        assert!(channel.holds("blog.next"));
        assert!(!channel.holds("blog.prod"));
    }
}
