//! Channel admission: the app it names exists, one channel per branch within the app, a hostname no other channel
//! holds, and the account's channel cap from the plan on the namespace (the account's channels are the channels in
//! its namespace). The apiserver keeps `<app>.<channel>` names unique.

use std::sync::Arc;

use slipway_crds::names::{self, GitRefBinding, Username};
use slipway_crds::plans::{PLANS, Plan};
use slipway_crds::{App, Channel};

use super::{Refusal, Review, host_labels_in_use, missing, namespace_labels, namespace_plan};
use crate::lookup::{Lookup, is_live, is_object};
use slipway_crds::rules::{self, NewChannel};

/// The cap of a namespace without a plan label: namespaces outside the platform's tenancy (GitOps) are not capped.
const UNCAPPED: Plan = Plan {
    tier: "uncapped",
    max_channels: u32::MAX,
    ..PLANS[PLANS.len() - 1]
};

/// Checks a new Channel, or a change of an existing channel's branch.
pub async fn validate<L: Lookup>(lookup: &L, review: &Review<Channel>) -> Result<(), Refusal> {
    let ns = review.namespace.as_str();
    // An update that keeps the branch (a label, a finalizer) is never held up by other objects.
    let old_binding = review
        .old_object
        .as_ref()
        .map(|o| o.spec.git_ref_binding.as_str());
    if old_binding == Some(review.object.spec.git_ref_binding.as_str()) {
        return Ok(());
    }
    let (app_name, channel_name) = names::parse_channel_resource_name(&review.name)?;
    let binding: GitRefBinding = review.object.spec.git_ref_binding.parse()?;

    if !review.is_create() {
        let siblings = app_channels(lookup, ns, app_name.as_str(), &review.name);
        rules::one_channel_per_branch(
            &binding,
            siblings.iter().map(|(c, b)| (c.as_str(), b.as_str())),
        )?;
        return Ok(());
    }

    let app = live_app(lookup, ns, &review.object.spec.app).await?;
    let owner: Username = app.spec.owner.parse()?;
    let ns_labels = namespace_labels(lookup, ns).await?;
    let plan = namespace_plan(ns, &ns_labels)?.unwrap_or(&UNCAPPED);

    let siblings = app_channels(lookup, ns, app_name.as_str(), &review.name);
    let account_channels = rules::counted_channels(
        ns,
        lookup.apps().iter().map(|a| a.as_ref()),
        lookup
            .channels()
            .iter()
            .map(|c| c.as_ref())
            .filter(|c| !is_object(*c, ns, &review.name)),
    );
    let taken = host_labels_in_use(lookup, ns, &review.name);
    let new = NewChannel {
        app: &app_name,
        name: &channel_name,
        binding: &binding,
        owner: &owner,
    };
    rules::check_new_channel(
        &new,
        plan,
        siblings.iter().map(|(c, b)| (c.as_str(), b.as_str())),
        account_channels,
        taken.iter().map(String::as_str),
    )?;
    Ok(())
}

async fn live_app<L: Lookup>(lookup: &L, ns: &str, name: &str) -> Result<Arc<App>, Refusal> {
    match lookup.app(ns, name).await? {
        Some(app) if is_live(app.as_ref()) => Ok(app),
        _ => Err(missing("app", name, ns).into()),
    }
}

/// The other live channels of `app` as (channel name, binding).
fn app_channels<L: Lookup>(lookup: &L, ns: &str, app: &str, except: &str) -> Vec<(String, String)> {
    lookup
        .channels()
        .iter()
        .filter(|c| {
            is_live(c.as_ref()) && c.metadata.namespace.as_deref() == Some(ns) && c.spec.app == app
        })
        .filter(|c| !is_object(c.as_ref(), ns, except))
        .map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let channel = match names::parse_channel_resource_name(&name) {
                Ok((_, channel)) => channel.to_string(),
                Err(_) => name,
            };
            (channel, c.spec.git_ref_binding.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use slipway_crds::labels;
    use slipway_crds::names::messages;

    use super::*;
    use crate::validate::fixtures::*;
    use slipway_crds::rules::DenialKind;

    #[tokio::test]
    async fn a_channel_on_a_new_branch_is_admitted() {
        let s = cluster("ns", &[(labels::PLAN, "starter")]);
        assert!(
            validate(&s, &create(channel("ns", "blog", "next", "next")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_app_must_exist() {
        let mut s = cluster("ns", &[]);
        let msg = denied(
            validate(&s, &create(channel("ns", "shop", "prod", "master"))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "app shop does not exist in namespace ns");
        // An app in another namespace does not count, nor one being deleted.
        s.apps.push(Arc::new(app("other", "shop", "alice")));
        s.apps.push(Arc::new(deleting(app("ns", "shop", "alice"))));
        let msg = denied(
            validate(&s, &create(channel("ns", "shop", "prod", "master"))).await,
            DenialKind::Missing,
        );
        assert_eq!(msg, "app shop does not exist in namespace ns");
    }

    #[tokio::test]
    async fn one_channel_per_branch() {
        let mut s = cluster("ns", &[]);
        s.channels
            .push(Arc::new(channel("ns", "blog", "next", "dev")));
        let msg = denied(
            validate(&s, &create(channel("ns", "blog", "dev", "dev"))).await,
            DenialKind::Invalid,
        );
        assert_eq!(
            msg,
            "channel next already follows branch:dev; an app has one channel per branch"
        );
        // Another app may follow the same branch.
        s.apps.push(Arc::new(app("ns", "shop", "alice")));
        assert!(
            validate(&s, &create(channel("ns", "shop", "dev", "dev")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn moving_to_a_taken_branch_is_refused_and_staying_is_not() {
        let mut s = cluster("ns", &[]);
        let next = channel("ns", "blog", "next", "next");
        s.channels.push(Arc::new(next.clone()));
        let moved = channel("ns", "blog", "next", "master");
        let msg = denied(
            validate(&s, &update(next.clone(), moved)).await,
            DenialKind::Invalid,
        );
        assert_eq!(
            msg,
            "channel prod already follows branch:master; an app has one channel per branch"
        );
        assert!(
            validate(
                &s,
                &update(next.clone(), channel("ns", "blog", "next", "beta"))
            )
            .await
            .is_ok()
        );
        assert!(validate(&s, &update(next.clone(), next)).await.is_ok());
    }

    #[tokio::test]
    async fn the_plan_caps_channels_per_namespace() {
        let mut s = cluster("ns", &[(labels::PLAN, "starter")]);
        s.channels.push(Arc::new(channel("ns", "blog", "a", "a")));
        // Channels of other accounts and channels being deleted do not count.
        s.channels
            .push(Arc::new(channel("other", "blog", "b", "b")));
        s.channels
            .push(Arc::new(deleting(channel("ns", "blog", "c", "c"))));
        assert!(
            validate(&s, &create(channel("ns", "blog", "d", "d")))
                .await
                .is_ok()
        );
        s.channels.push(Arc::new(channel("ns", "blog", "d", "d")));
        let msg = denied(
            validate(&s, &create(channel("ns", "blog", "e", "e"))).await,
            DenialKind::PlanLimit,
        );
        assert!(
            msg.starts_with("the starter plan allows 3 channels per account"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn no_plan_label_means_no_cap() {
        let mut s = cluster("ns", &[]);
        for i in 0..120 {
            s.channels.push(Arc::new(channel(
                "ns",
                "blog",
                &format!("c{i}"),
                &format!("b{i}"),
            )));
        }
        assert!(
            validate(&s, &create(channel("ns", "blog", "more", "more")))
                .await
                .is_ok()
        );
        s.namespaces
            .insert("ns".into(), labels(&[(labels::PLAN, "platinum")]));
        let msg = denied(
            validate(&s, &create(channel("ns", "blog", "more", "more"))).await,
            DenialKind::Invalid,
        );
        assert!(msg.contains("unknown plan \"platinum\""), "{msg}");
    }

    #[tokio::test]
    async fn hostnames_are_unique() {
        // App a-b's prod channel holds a-b-c; channel a of app b of the same owner would want it too.
        let mut s = cluster("ns1", &[]);
        s.apps.push(Arc::new(app("ns1", "a-b", "c")));
        s.channels
            .push(Arc::new(channel("ns1", "a-b", "prod", "master")));
        s.apps.push(Arc::new(app("ns1", "b", "c")));
        let msg = denied(
            validate(&s, &create(channel("ns1", "b", "a", "a"))).await,
            DenialKind::Invalid,
        );
        assert!(msg.contains("the hostname a-b-c is already used"), "{msg}");
        // next-blog-alice is free even though blog-alice is taken.
        assert!(
            validate(&s, &create(channel("ns1", "blog", "next", "next")))
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_hostname_longer_than_a_dns_label_is_refused() {
        let mut s = cluster("ns", &[]);
        s.apps.push(Arc::new(app("ns", &"a".repeat(30), "alice")));
        let ch = channel("ns", &"a".repeat(30), &"c".repeat(30), "long");
        let msg = denied(validate(&s, &create(ch)).await, DenialKind::Invalid);
        assert_eq!(msg, messages::HOST_LABEL_TOO_LONG);
    }
}
