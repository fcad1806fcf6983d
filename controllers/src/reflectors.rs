//! One watch of the apiserver per kind that several controllers follow (App, Channel, Deploy, Domain), as the
//! kube-runtime shared-reflector examples do: its store is every controller's and cache's view of that kind, and
//! each controller that a change of the kind wakes subscribes to it. At start the operator lists each kind once,
//! not once per controller that cares (three LISTs of every Channel at 10,000 channels, before).
//!
//! Subscribers see objects as they are applied, not deletions; the Deploy reflector also hands its deletions to
//! [`Reflectors::deleted_deploys`], since a deploy deleted in flight must wake its channel.

use std::sync::Arc;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use kube::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use slipway_crds::{App, Channel, Deploy, Domain};

use crate::caches::trim_managed_fields;
use crate::context::Context;
use crate::run::scoped;

/// Changes a subscriber may fall behind by before the watch waits for it (the controllers drain theirs at once;
/// a first listing of 10,000 objects goes through in pieces).
const BUFFER: usize = 1024;

/// The shared watch of one kind: its store, and the writer that fills it and tells the subscribers.
pub struct Shared<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    /// Every object of the kind, without managed fields.
    pub store: Store<K>,
    writer: Writer<K>,
}

impl<K> Shared<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    fn new(api: Api<K>) -> Self {
        let (store, writer) = reflector::store_shared(BUFFER);
        Self { api, store, writer }
    }

    /// The objects of the kind as they change, for one controller (the writer is a shared one, so it always
    /// takes subscribers).
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static + use<K> {
        futures::stream::iter(self.writer.subscribe()).flatten()
    }

    /// Watches until the process stops, filling the store and feeding the subscribers; deletions go to `deleted`.
    async fn run(self, deleted: Option<mpsc::UnboundedSender<K>>) {
        let kind = K::kind(&());
        watcher(self.api, watcher::Config::default())
            .default_backoff()
            .modify(trim_managed_fields::<K>)
            .reflect_shared(self.writer)
            .for_each(|event| {
                match event {
                    Ok(watcher::Event::Delete(object)) => {
                        if let Some(deleted) = &deleted {
                            let _ = deleted.unbounded_send(object);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%kind, error = %e, "watch failed; retrying"),
                }
                futures::future::ready(())
            })
            .await
    }
}

/// The shared watches of the kinds several controllers follow.
pub struct Reflectors {
    /// Apps: the App controller's, the Channel controller's (an app's toggles) and the Forward controller's.
    pub apps: Shared<App>,
    /// Channels: the Channel controller's, the App controller's (it owns them) and the Domain controller's.
    pub channels: Shared<Channel>,
    /// Deploys: the Deploy controller's (its own and its queue's) and the Channel controller's (deletions).
    pub deploys: Shared<Deploy>,
    /// Domains: the Domain controller's and the Channel controller's (verified hosts go on its Ingress).
    pub domains: Shared<Domain>,
    deleted_deploys: (
        mpsc::UnboundedSender<Deploy>,
        Option<mpsc::UnboundedReceiver<Deploy>>,
    ),
}

impl Reflectors {
    /// The watches of `ctx`'s scope, not started.
    pub fn new(ctx: &Context) -> Self {
        let (tx, rx) = mpsc::unbounded();
        Self {
            apps: Shared::new(scoped(ctx)),
            channels: Shared::new(scoped(ctx)),
            deploys: Shared::new(scoped(ctx)),
            domains: Shared::new(scoped(ctx)),
            deleted_deploys: (tx, Some(rx)),
        }
    }

    /// The Deploys as the watch sees them deleted (a deletion missed while the watch restarted is not among them);
    /// one taker.
    pub fn deleted_deploys(
        &mut self,
    ) -> Option<impl Stream<Item = Result<Deploy, watcher::Error>> + Send + 'static + use<>> {
        self.deleted_deploys.1.take().map(|rx| rx.map(Ok))
    }

    /// Runs the watches until the process stops.
    pub async fn run(self) {
        let deleted = self.deleted_deploys.0;
        tokio::join!(
            self.apps.run(None),
            self.channels.run(None),
            self.deploys.run(Some(deleted)),
            self.domains.run(None),
        );
    }
}
