//! One validator per kind, each a short list of the cross-object rules of [`slipway_crds::rules`] applied to one object
//! under review, with what it needs read through [`Lookup`].
//!
//! The validators run after the apiserver has applied the CRD's schema and CEL rules, so the fields they read are
//! already well formed; they still re-parse names with `slipway_crds::names` because a parsed name is what the
//! rules take, and so a refusal reads exactly like the REST API's.

pub mod app;
pub mod channel;
pub mod deploy;
pub mod domain;
pub mod forward;

use std::sync::Arc;

use kube::core::admission::Operation;
use slipway_crds::Channel;
use slipway_crds::labels;
use slipway_crds::names::InvalidName;
use slipway_crds::plans::Plan;

use crate::lookup::{Labels, Lookup, LookupError, is_live, is_object};
use slipway_crds::rules::{self, Denial, DenialKind};

/// One object under review, already typed.
#[derive(Debug, Clone)]
pub struct Review<K> {
    /// CREATE or UPDATE (other operations are not validated).
    pub operation: Operation,
    /// The namespace the object lives in.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The object as it would be stored.
    pub object: K,
    /// The object as it is stored now (UPDATE only).
    pub old_object: Option<K>,
}

impl<K> Review<K> {
    /// Whether the object is being created.
    pub fn is_create(&self) -> bool {
        self.operation == Operation::Create
    }
}

/// Why an object is not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A rule refused it; the message is the one the REST API gives.
    #[error(transparent)]
    Denied(#[from] Denial),
    /// What the rules need could not be read, so nothing is admitted (the webhook fails closed).
    #[error("{0}; try again")]
    Unavailable(String),
}

impl From<LookupError> for Refusal {
    fn from(e: LookupError) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<slipway_crds::names::InvalidDomain> for Refusal {
    fn from(e: slipway_crds::names::InvalidDomain) -> Self {
        Self::Denied(e.into())
    }
}

impl From<InvalidName> for Refusal {
    fn from(e: InvalidName) -> Self {
        Self::Denied(e.into())
    }
}

/// The refusal for a reference to an object that is not there.
pub fn missing(kind: &str, name: &str, namespace: &str) -> Denial {
    Denial {
        kind: DenialKind::Missing,
        message: format!("{kind} {name} does not exist in namespace {namespace}"),
    }
}

/// The live Channel `name` in `ns`, or the refusal naming it.
pub async fn require_channel<L: Lookup>(
    lookup: &L,
    ns: &str,
    name: &str,
) -> Result<Arc<Channel>, Refusal> {
    match lookup.channel(ns, name).await? {
        Some(ch) if is_live(ch.as_ref()) => Ok(ch),
        _ => Err(missing("channel", name, ns).into()),
    }
}

/// The labels of the namespace under review (empty when it cannot be found, which the apiserver rules out).
pub async fn namespace_labels<L: Lookup>(lookup: &L, ns: &str) -> Result<Labels, Refusal> {
    Ok(lookup.namespace_labels(ns).await?.unwrap_or_default())
}

/// The plan named by a namespace's `slipway.dev/plan` label; `None` (no cap) when it has none.
pub fn namespace_plan(ns: &str, labels: &Labels) -> Result<Option<&'static Plan>, Denial> {
    let Some(tier) = labels.get(labels::PLAN) else {
        return Ok(None);
    };
    Plan::by_tier(tier).map(Some).ok_or_else(|| Denial {
        kind: DenialKind::Invalid,
        message: format!(
            "namespace {ns} names an unknown plan {tier:?} in its {} label",
            labels::PLAN
        ),
    })
}

/// The first hostname labels of every live channel but `ns`/`name`, platform-wide.
pub fn host_labels_in_use<L: Lookup>(
    lookup: &L,
    except_ns: &str,
    except_name: &str,
) -> Vec<String> {
    let apps = lookup.apps();
    let channels = lookup.channels();
    rules::existing_host_labels(
        apps.iter().map(Arc::as_ref).filter(|a| is_live(*a)),
        channels
            .iter()
            .map(Arc::as_ref)
            .filter(|ch| is_live(*ch) && !is_object(*ch, except_ns, except_name)),
    )
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Objects for the validators' unit tests.

    use std::sync::Arc;

    use kube::core::admission::Operation;
    use serde_json::json;
    use slipway_crds::{App, Channel, Deploy, Domain, Forward};

    use super::{Refusal, Review};
    use crate::lookup::{Labels, Snapshot};
    use slipway_crds::rules::DenialKind;

    pub fn app(ns: &str, name: &str, owner: &str) -> App {
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App",
            "metadata": {"name": name, "namespace": ns}, "spec": {"owner": owner}}))
        .unwrap()
    }

    pub fn channel(ns: &str, app: &str, name: &str, branch: &str) -> Channel {
        serde_json::from_value(
            json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
            "metadata": {"name": format!("{app}.{name}"), "namespace": ns},
            "spec": {"app": app, "gitRefBinding": format!("branch:{branch}")}}),
        )
        .unwrap()
    }

    pub fn domain(ns: &str, channel: &str, domain: &str) -> Domain {
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain",
            "metadata": {"name": domain, "namespace": ns}, "spec": {"channel": channel, "domain": domain}}))
        .unwrap()
    }

    pub fn forward(ns: &str, channel: &str, cidrs: &[&str]) -> Forward {
        serde_json::from_value(json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Forward",
            "metadata": {"name": channel, "namespace": ns}, "spec": {"channel": channel, "allowCidrs": cidrs}}))
        .unwrap()
    }

    pub fn deploy(ns: &str, channel: &str) -> Deploy {
        serde_json::from_value(
            json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": format!("{channel}-1"), "namespace": ns},
            "spec": {"channel": channel, "sha": "master"}}),
        )
        .unwrap()
    }

    pub fn deleting<K: kube::Resource>(mut obj: K) -> K {
        obj.meta_mut().deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        obj
    }

    pub fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A cluster with namespace `ns` (labelled) holding app `blog` of owner `alice` with its prod channel.
    pub fn cluster(ns: &str, ns_labels: &[(&str, &str)]) -> Snapshot {
        let mut s = Snapshot::default();
        s.namespaces.insert(ns.into(), labels(ns_labels));
        s.apps.push(Arc::new(app(ns, "blog", "alice")));
        s.channels
            .push(Arc::new(channel(ns, "blog", "prod", "master")));
        s
    }

    pub fn create<K: kube::ResourceExt>(obj: K) -> Review<K> {
        Review {
            operation: Operation::Create,
            namespace: obj.namespace().unwrap(),
            name: obj.name_any(),
            object: obj,
            old_object: None,
        }
    }

    pub fn update<K: kube::ResourceExt>(old: K, new: K) -> Review<K> {
        Review {
            operation: Operation::Update,
            old_object: Some(old),
            ..create(new)
        }
    }

    /// The message of a refusal, checking its kind.
    #[track_caller]
    pub fn denied(result: Result<(), Refusal>, kind: DenialKind) -> String {
        match result {
            Err(Refusal::Denied(d)) => {
                assert_eq!(d.kind, kind, "{}", d.message);
                d.message
            }
            other => panic!("expected a denial, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn plans_come_from_the_namespace_label() {
        assert_eq!(namespace_plan("ns", &labels(&[])).unwrap(), None);
        assert_eq!(
            namespace_plan("ns", &labels(&[(labels::PLAN, "starter")]))
                .unwrap()
                .unwrap()
                .max_channels,
            3
        );
        let err = namespace_plan("ns", &labels(&[(labels::PLAN, "gold")])).unwrap_err();
        assert_eq!(
            err.message,
            "namespace ns names an unknown plan \"gold\" in its slipway.dev/plan label"
        );
    }

    #[test]
    fn host_labels_skip_the_object_itself_and_what_is_being_deleted() {
        let mut s = cluster("ns1", &[]);
        s.apps.push(Arc::new(app("ns2", "shop", "bob")));
        s.channels
            .push(Arc::new(channel("ns2", "shop", "prod", "master")));
        s.channels
            .push(Arc::new(deleting(channel("ns2", "shop", "next", "next"))));
        // A channel whose app is in another namespace has no owner to name its host.
        s.channels
            .push(Arc::new(channel("ns3", "blog", "prod", "master")));
        let mut got = host_labels_in_use(&s, "ns1", "blog.prod");
        got.sort();
        assert_eq!(got, ["shop-bob"]);
        let mut got = host_labels_in_use(&s, "", "");
        got.sort();
        assert_eq!(got, ["blog-alice", "shop-bob"]);
    }
}
