//! The Forward reconciler: gives each exposed channel a public address (the edge's forward host and a port of the
//! configured range), records it in the Forward's status, and says whether it serves (`active`: the app is not
//! static, its owner's plan includes port forwarding, and the app's toggle is on). The edge listens on the
//! allocated port of every active Forward and checks each connection against its allowlist.
//!
//! Allocation: a port stays a Forward's for its whole life (an allowlist change, a toggle going off and on, an
//! operator restart keep it); a new Forward takes the next free port after the last one handed out, wrapping
//! around the range, so an unexpose followed by an expose gets a new address rather than the one clients of the
//! old endpoint may still try. The operator is the only writer (one leader), and allocations are serialised and
//! checked against every Forward the apiserver holds.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use slipway_crds::conditions::{self, reasons};
use slipway_crds::{App, Channel, Forward, ForwardStatus, Template};
use tokio::sync::Mutex;

use crate::context::Context;
use crate::error::Error;

/// How often an exposed channel is looked at again without a change (the owner's plan is not watched).
const RESYNC: Duration = Duration::from_secs(300);

/// Where forwards are reachable: the host clients connect to and the edge's port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardPorts {
    /// The public host (a name or an address) of the edge's forward listeners.
    pub host: String,
    /// The first port of the range.
    pub first: u16,
    /// How many ports the range holds.
    pub count: u16,
}

impl std::str::FromStr for ForwardPorts {
    type Err = String;

    /// `host:first-last`, for example `forward.example.com:31000-31099`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("expected host:first-last (e.g. forward.example.com:31000-31099), got {s:?}")
        };
        let (host, range) = s.rsplit_once(':').ok_or_else(bad)?;
        let (first, last) = range.split_once('-').ok_or_else(bad)?;
        let (first, last): (u16, u16) = (
            first.parse().map_err(|_| bad())?,
            last.parse().map_err(|_| bad())?,
        );
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || first == 0 || last < first {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_owned(),
            first,
            count: last - first + 1,
        })
    }
}

/// Hands out ports of the range, one at a time.
pub struct Allocator {
    ports: ForwardPorts,
    /// The port to try first for the next Forward; learnt from the newest allocation at the first one.
    next: Mutex<Option<u16>>,
}

impl Allocator {
    /// An allocator over `ports`.
    pub fn new(ports: ForwardPorts) -> Self {
        Self {
            ports,
            next: Mutex::new(None),
        }
    }

    /// The public host.
    pub fn host(&self) -> &str {
        &self.ports.host
    }

    /// Allocates a port for `forward` and records it in its status through `record`, which runs under the
    /// allocation lock, so no other Forward can take the same port meanwhile.
    async fn allocate<F, Fut>(&self, all: &Api<Forward>, uid: &str, record: F) -> Result<u16, Error>
    where
        F: FnOnce(u16) -> Fut,
        Fut: std::future::Future<Output = Result<(), Error>>,
    {
        let mut next = self.next.lock().await;
        let forwards = all.list(&ListParams::default()).await?.items;
        // A reconcile working from a cache that has not yet seen this Forward's allocation must not make another.
        if let Some(port) = forwards
            .iter()
            .find(|f| f.metadata.uid.as_deref() == Some(uid))
            .and_then(allocated_port)
        {
            // Allocated by an attempt whose answer was lost: the next Forward still starts after the newest.
            if next.is_none() {
                *next = newest_allocation(&forwards).map(|newest| self.after(newest));
            }
            return Ok(port);
        }
        let used: HashSet<u16> = forwards.iter().filter_map(allocated_port).collect();
        let start = match *next {
            Some(port) => port,
            None => newest_allocation(&forwards).map_or(self.ports.first, |port| self.after(port)),
        };
        let port = pick(&self.ports, start, &used).ok_or_else(|| {
            Error::Incomplete(
                "every port of the forward range is taken; unexpose a channel or widen the range",
            )
        })?;
        // The hint moves on even when recording fails: the write may have been applied all the same, and a port
        // skipped costs nothing, while a port handed out twice in a row breaks "a later expose gets a new address".
        let recorded = record(port).await;
        *next = Some(self.after(port));
        recorded?;
        Ok(port)
    }

    fn after(&self, port: u16) -> u16 {
        let offset = port.saturating_sub(self.ports.first).saturating_add(1) % self.ports.count;
        self.ports.first + offset
    }
}

/// The first port of the range, from `start` on and wrapping around, that no Forward holds.
fn pick(ports: &ForwardPorts, start: u16, used: &HashSet<u16>) -> Option<u16> {
    let start = start.clamp(ports.first, ports.first + (ports.count - 1));
    (0..ports.count)
        .map(|i| ports.first + (start - ports.first + i) % ports.count)
        .find(|port| !used.contains(port))
}

fn allocated_port(forward: &Forward) -> Option<u16> {
    forward
        .status
        .as_ref()
        .and_then(|s| s.port)
        .and_then(|p| u16::try_from(p).ok())
}

/// The port of the most recently created Forward that holds one.
fn newest_allocation(forwards: &[Forward]) -> Option<u16> {
    forwards
        .iter()
        .filter_map(|f| Some((f.metadata.creation_timestamp.clone()?, allocated_port(f)?)))
        .max_by(|a, b| a.0.0.cmp(&b.0.0))
        .map(|(_, port)| port)
}

/// Why an allocated Forward does not serve, if it does not.
fn inactive_because(app: &App, plan: &slipway_crds::plans::Plan) -> Option<String> {
    if app.spec.template == Template::Static {
        Some("a static channel runs no process to forward to".into())
    } else if !plan.port_forwarding {
        Some(format!(
            "the {} plan does not include port forwarding",
            plan.tier
        ))
    } else if !app.spec.port_forwarding_enabled {
        Some(format!("port forwarding is off for app {}", app.name_any()))
    } else {
        None
    }
}

/// Reconciles one Forward. Every write is guarded by the resourceVersion of the copy it was computed from, so a
/// copy that went stale (the Forward changed, or was unexposed and exposed again under the same name) writes
/// nothing: the newer object's own event reconciles it.
pub async fn reconcile(forward: Arc<Forward>, ctx: Arc<Context>) -> Result<Action, Error> {
    match reconcile_copy(forward, &ctx).await {
        Err(Error::Kube(e)) if crate::status::is_conflict(&e) => {
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        other => other,
    }
}

async fn reconcile_copy(forward: Arc<Forward>, ctx: &Context) -> Result<Action, Error> {
    let namespace = forward.namespace().ok_or(Error::Incomplete("namespace"))?;
    let forwards: Api<Forward> = Api::namespaced(ctx.client.clone(), &namespace);
    let generation = forward.metadata.generation;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut status = forward.status.clone().unwrap_or_default();
    status.observed_generation = generation;

    let channels: Api<Channel> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(channel) = channels.get_opt(&forward.spec.channel).await? else {
        status.active = false;
        let message = format!(
            "channel {} does not exist in this namespace",
            forward.spec.channel
        );
        set_ready(
            &mut status,
            false,
            reasons::REFERENCE_NOT_FOUND,
            &message,
            generation,
            now,
        );
        write_status(&forwards, &forward, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(60)));
    };
    let forward = adopt(&forwards, forward, &channel).await?;
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    let app = apps.get(&channel.spec.app).await?;
    let plan = crate::deploy::owner_plan(ctx, &namespace).await?;

    let Some(allocator) = &ctx.forwards else {
        status.active = false;
        set_ready(
            &mut status,
            false,
            reasons::NOT_CONFIGURED,
            "this platform has no forward port range configured (the operator's --forward-ports)",
            generation,
            now,
        );
        write_status(&forwards, &forward, &status).await?;
        return Ok(Action::await_change());
    };
    let inactive = inactive_because(&app, plan);
    status.active = inactive.is_none();
    match &inactive {
        Some(why) => set_ready(&mut status, false, reasons::INACTIVE, why, generation, now),
        None => set_ready(&mut status, true, reasons::RECONCILED, "", generation, now),
    }
    if status.port.is_some() {
        status.host = Some(allocator.host().to_owned());
        write_status(&forwards, &forward, &status).await?;
    } else {
        let all: Api<Forward> = match &ctx.config.namespace {
            Some(ns) => Api::namespaced(ctx.client.clone(), ns),
            None => Api::all(ctx.client.clone()),
        };
        let (api, object) = (&forwards, forward.as_ref());
        let port = allocator
            .allocate(&all, &forward.uid().unwrap_or_default(), |port| {
                let mut status = status.clone();
                status.host = Some(allocator.host().to_owned());
                status.port = Some(i32::from(port));
                async move { write_status(api, object, &status).await }
            })
            .await?;
        tracing::info!(forward = %forward.name_any(), %namespace, port, "forward allocated");
    }
    Ok(Action::requeue(RESYNC))
}

fn set_ready(
    status: &mut ForwardStatus,
    ready: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Time,
) {
    conditions::set_condition(
        &mut status.conditions,
        conditions::condition(conditions::READY, ready, reason, message, generation, now),
    );
}

async fn write_status(
    api: &Api<Forward>,
    forward: &Forward,
    status: &ForwardStatus,
) -> Result<(), Error> {
    crate::status::patch_if_changed_at_version(api, forward, forward.status.as_ref(), status)
        .await?;
    Ok(())
}

/// Makes the Channel the Forward's owner (a Forward written with kubectl may lack it), so it goes with the channel;
/// answers the Forward as it now stands.
async fn adopt(
    api: &Api<Forward>,
    forward: Arc<Forward>,
    channel: &Channel,
) -> Result<Arc<Forward>, Error> {
    let Some(uid) = channel.meta().uid.as_deref() else {
        return Err(Error::Incomplete("channel uid"));
    };
    if forward.owner_references().iter().any(|o| o.uid == uid) {
        return Ok(forward);
    }
    let owner = crate::adopt::reference::<Channel>(&channel.name_any(), uid);
    Ok(Arc::new(
        crate::adopt::add_owner(api, &forward, owner).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> ForwardPorts {
        "edge.example:31000-31004".parse().unwrap()
    }

    #[test]
    fn the_range_is_written_as_host_first_last() {
        assert_eq!(
            range(),
            ForwardPorts {
                host: "edge.example".into(),
                first: 31000,
                count: 5
            }
        );
        let v6: ForwardPorts = "[2001:db8::1]:20000-20000".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.count), ("2001:db8::1", 1));
        for bad in [
            "edge:31000",
            "edge:31004-31000",
            ":1-2",
            "edge:0-9",
            "edge:a-b",
        ] {
            assert!(bad.parse::<ForwardPorts>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_pick_takes_the_next_free_port_and_wraps_around() {
        let ports = range();
        let used: HashSet<u16> = [31003, 31004].into();
        assert_eq!(pick(&ports, 31003, &used), Some(31000));
        assert_eq!(pick(&ports, 31001, &used), Some(31001));
        let full: HashSet<u16> = (31000..=31004).collect();
        assert_eq!(pick(&ports, 31000, &full), None);
    }

    #[test]
    fn the_cursor_moves_past_each_allocation_and_wraps() {
        let allocator = Allocator::new(range());
        assert_eq!(allocator.after(31000), 31001);
        assert_eq!(allocator.after(31004), 31000);
    }
}
