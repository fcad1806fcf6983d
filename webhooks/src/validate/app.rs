//! App admission: a valid app name, an owner that matches the namespace it is created in, and a prod hostname no
//! other channel holds. The apiserver itself keeps app names unique per namespace (they are resource names).

use slipway_crds::App;
use slipway_crds::labels;
use slipway_crds::names::{self, AppName, ChannelName, Username};

use super::{Refusal, Review, host_labels_in_use, namespace_labels};
use crate::lookup::Lookup;
use slipway_crds::rules::{self, Denial, DenialKind};

/// Checks a new App. Nothing the rules look at can change on update (name and owner are immutable).
pub async fn validate<L: Lookup>(lookup: &L, review: &Review<App>) -> Result<(), Refusal> {
    if !review.is_create() {
        return Ok(());
    }
    let app: AppName = review.name.parse()?;
    let owner: Username = review.object.spec.owner.parse()?;

    let ns_labels = namespace_labels(lookup, &review.namespace).await?;
    if let Some(ns_owner) = ns_labels.get(labels::OWNER)
        && ns_owner != owner.as_str()
    {
        return Err(Denial {
            kind: DenialKind::Invalid,
            message: format!(
                "the owner of an app in namespace {} must be {ns_owner}, not {owner}",
                review.namespace
            ),
        }
        .into());
    }

    let label = names::channel_host_label(&app, &ChannelName::prod(), &owner)?;
    let taken = host_labels_in_use(lookup, &review.namespace, "");
    rules::hostname_free(&label, taken.iter().map(String::as_str))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use slipway_crds::names::messages;

    use super::*;
    use crate::validate::fixtures::*;

    #[tokio::test]
    async fn a_valid_app_is_admitted() {
        let s = cluster("ns", &[(labels::OWNER, "alice")]);
        assert!(
            validate(&s, &create(app("ns", "shop", "alice")))
                .await
                .is_ok()
        );
        // A namespace without an owner label (GitOps outside the platform's tenancy) takes any owner.
        let s = cluster("ns", &[]);
        assert!(
            validate(&s, &create(app("ns", "shop", "bob")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn names_are_checked_with_the_api_messages() {
        let s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(app("ns", "api-gateway", "alice"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(msg, messages::APP_NAME_RESERVED);
        let msg = denied(
            validate(&s, &create(app("ns", "Shop", "alice"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(msg, messages::APP_NAME);
        for owner in ["Alice", "b-c"] {
            let msg = denied(
                validate(&s, &create(app("ns", "shop", owner))).await,
                DenialKind::Invalid,
            );
            assert_eq!(msg, messages::USERNAME, "{owner}");
        }
    }

    #[tokio::test]
    async fn the_owner_must_own_the_namespace() {
        let s = cluster("ns", &[(labels::OWNER, "alice")]);
        let msg = denied(
            validate(&s, &create(app("ns", "shop", "mallory"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(
            msg,
            "the owner of an app in namespace ns must be alice, not mallory"
        );
    }

    #[tokio::test]
    async fn the_prod_hostname_must_be_free_platform_wide() {
        // Channel a of app b of owner c holds a-b-c; app a-b of c would want the same hostname. (Across owners
        // hostnames cannot collide: a username has no '-', so owner b-c, which would want a-b-c for its app a,
        // is refused.)
        let mut s = cluster("ns1", &[]);
        s.apps.push(Arc::new(app("ns1", "b", "c")));
        s.channels.push(Arc::new(channel("ns1", "b", "a", "a")));
        let msg = denied(
            validate(&s, &create(app("ns1", "a-b", "c"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(
            msg,
            "the hostname a-b-c is already used by another channel; choose another app or channel name"
        );
        s.namespaces
            .insert("ns2".into(), labels(&[(labels::OWNER, "b-c")]));
        let msg = denied(
            validate(&s, &create(app("ns2", "a", "b-c"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(msg, messages::USERNAME);
        // Once that channel is on its way out, the hostname is free again.
        s.channels
            .retain(|c| c.metadata.name.as_deref() != Some("b.a"));
        s.channels
            .push(Arc::new(deleting(channel("ns1", "b", "a", "a"))));
        assert!(validate(&s, &create(app("ns1", "a-b", "c"))).await.is_ok());
    }

    #[tokio::test]
    async fn a_hostname_longer_than_a_dns_label_is_refused() {
        let s = cluster("ns", &[]);
        let long_owner = "o".repeat(40);
        let app = app("ns", &"a".repeat(30), &long_owner);
        let msg = denied(validate(&s, &create(app)).await, DenialKind::Invalid);
        assert_eq!(msg, messages::HOST_LABEL_TOO_LONG);
    }

    #[tokio::test]
    async fn updates_are_admitted() {
        let s = cluster("ns", &[(labels::OWNER, "alice")]);
        let old = app("ns", "blog", "alice");
        let mut new = old.clone();
        new.spec.port_forwarding_enabled = true;
        assert!(validate(&s, &update(old, new)).await.is_ok());
    }
}
