//! What the validators may know about other objects, behind one small trait.
//!
//! The webhook answers from reflector caches ([`crate::caches::Caches`]); unit tests answer from a [`Snapshot`] of
//! fixtures. Keeping the validators on this trait is what lets every rule be tested without a cluster.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;
use slipway_crds::{App, Channel, Domain};

/// Labels of a namespace.
pub type Labels = BTreeMap<String, String>;

/// A lookup the apiserver could not answer.
#[derive(Debug, thiserror::Error)]
#[error("could not read {what}: {source}")]
pub struct LookupError {
    /// What was being read, for the message.
    pub what: String,
    /// Why it failed.
    #[source]
    pub source: kube::Error,
}

/// Whether a lookup can be trusted yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The first lists have not all arrived.
    Starting,
    /// Every list is in and followed.
    Ready,
    /// A watch stopped for good; the process should be restarted.
    Failed(String),
}

/// The objects the cross-object rules look at.
///
/// Lists may be a little behind the apiserver (they come from watches); the single-object reads confirm a miss
/// with the apiserver, so an object created a moment before the one that names it is found. Implementations may
/// return objects that are being deleted; the validators leave those out (see [`is_live`]).
pub trait Lookup: Send + Sync {
    /// The labels of namespace `name`, or `None` when it does not exist.
    fn namespace_labels(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Labels>, LookupError>> + Send;

    /// The App `name` in namespace `ns`.
    fn app(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<App>>, LookupError>> + Send;

    /// The Channel `name` (`<app>.<channel>`) in namespace `ns`.
    fn channel(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Arc<Channel>>, LookupError>> + Send;

    /// Whether the lists are complete. A fixed set of objects always is.
    fn readiness(&self) -> Readiness {
        Readiness::Ready
    }

    /// Every App, in every namespace.
    fn apps(&self) -> Vec<Arc<App>>;

    /// Every Channel, in every namespace.
    fn channels(&self) -> Vec<Arc<Channel>>;

    /// Every Domain, in every namespace.
    fn domains(&self) -> Vec<Arc<Domain>>;

    /// The Domains a domain rule looks at, read from the apiserver itself (a consistent read, not a cache): every
    /// Domain of `domain`, in any namespace, and every Domain of the Channel `channel` in `ns`. A refusal the lists
    /// above would give is confirmed against these before it is given: a list may still hold a Domain deleted a
    /// moment ago, and a name a detach has freed must not be refused.
    fn read_domains(
        &self,
        domain: &str,
        ns: &str,
        channel: &str,
    ) -> impl Future<Output = Result<Vec<Arc<Domain>>, LookupError>> + Send;

    /// The platform's own domain ({app_domain}), under which no custom domain may be attached; `None` when the
    /// webhook was not told it.
    fn app_domain(&self) -> Option<&str> {
        None
    }
}

/// Whether an object counts: objects on their way out (a deletion timestamp is set) hold no names and use no quota.
pub fn is_live<K: ResourceExt>(obj: &K) -> bool {
    obj.meta().deletion_timestamp.is_none()
}

/// Whether `obj` is the object `ns`/`name` (so a rule can leave the object under review out of its own checks).
pub fn is_object<K: ResourceExt>(obj: &K, ns: &str, name: &str) -> bool {
    obj.namespace().as_deref() == Some(ns) && obj.name_any() == name
}

/// A fixed set of objects: what unit tests (of this crate and of the REST API) validate against.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Namespaces by name, with their labels.
    pub namespaces: BTreeMap<String, Labels>,
    /// Apps, in any namespace.
    pub apps: Vec<Arc<App>>,
    /// Channels, in any namespace.
    pub channels: Vec<Arc<Channel>>,
    /// Domains, in any namespace, as the lists show them.
    pub domains: Vec<Arc<Domain>>,
    /// Domains as a consistent read shows them, when the lists are behind it; `None`: the same as `domains`.
    pub read_domains: Option<Vec<Arc<Domain>>>,
    /// The platform's own domain.
    pub app_domain: Option<String>,
}

fn find<K: ResourceExt>(objs: &[Arc<K>], ns: &str, name: &str) -> Option<Arc<K>> {
    objs.iter()
        .find(|o| is_object(o.as_ref(), ns, name))
        .cloned()
}

impl Lookup for Snapshot {
    async fn namespace_labels(&self, name: &str) -> Result<Option<Labels>, LookupError> {
        Ok(self.namespaces.get(name).cloned())
    }

    async fn app(&self, ns: &str, name: &str) -> Result<Option<Arc<App>>, LookupError> {
        Ok(find(&self.apps, ns, name))
    }

    async fn channel(&self, ns: &str, name: &str) -> Result<Option<Arc<Channel>>, LookupError> {
        Ok(find(&self.channels, ns, name))
    }

    fn apps(&self) -> Vec<Arc<App>> {
        self.apps.clone()
    }

    fn channels(&self) -> Vec<Arc<Channel>> {
        self.channels.clone()
    }

    fn domains(&self) -> Vec<Arc<Domain>> {
        self.domains.clone()
    }

    async fn read_domains(
        &self,
        domain: &str,
        ns: &str,
        channel: &str,
    ) -> Result<Vec<Arc<Domain>>, LookupError> {
        let read = self.read_domains.as_ref().unwrap_or(&self.domains);
        Ok(read
            .iter()
            .filter(|d| {
                d.spec.domain == domain
                    || (d.namespace().as_deref() == Some(ns) && d.spec.channel == channel)
            })
            .cloned()
            .collect())
    }

    fn app_domain(&self) -> Option<&str> {
        self.app_domain.as_deref()
    }
}
