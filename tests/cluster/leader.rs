//! Leader election on a real Lease: one candidate leads while it renews, another takes over when it stops, a
//! released lease is free at once, and a leader whose renewals the apiserver stalls stops before another can take
//! over. The tests watch the Lease and assert on what it records (holders, renewal and acquisition times,
//! transitions) and on when each candidate led; deadlines only stop a test that would otherwise wait forever.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use slipway_controllers::leader::LeaderElector;
use slipway_testkit::setup;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

const LEASE_SECS: u64 = 2;
const LEASE: Duration = Duration::from_secs(LEASE_SECS);
const NAME: &str = "slipway-operator";
/// How long any one observation may take before the test fails.
const GUARD: Duration = Duration::from_secs(60);

/// One version of the Lease as the watch delivered it.
#[derive(Debug, Clone)]
struct Seen {
    holder: Option<String>,
    acquired: Option<Timestamp>,
    renewed: Option<Timestamp>,
    transitions: i32,
}

/// Every version of the Lease since the test started, in order.
struct Observer {
    versions: mpsc::UnboundedReceiver<Seen>,
    log: Vec<Seen>,
}

impl Observer {
    fn start(leases: Api<Lease>) -> Self {
        let (tx, versions) = mpsc::unbounded_channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
        tokio::spawn(async move {
            let mut stream = watcher(leases, config).applied_objects().boxed();
            while let Some(Ok(lease)) = stream.next().await {
                let spec = lease.spec.unwrap_or_default();
                let seen = Seen {
                    holder: spec.holder_identity.filter(|h| !h.is_empty()),
                    acquired: spec.acquire_time.map(|t| t.0),
                    renewed: spec.renew_time.map(|t| t.0),
                    transitions: spec.lease_transitions.unwrap_or(0),
                };
                if tx.send(seen).is_err() {
                    break;
                }
            }
        });
        Self {
            versions,
            log: Vec::new(),
        }
    }

    /// Waits until `done` holds for the versions seen so far, and returns them.
    async fn until(&mut self, what: &str, done: impl Fn(&[Seen]) -> bool) -> Result<&[Seen]> {
        let wait = async {
            while !done(&self.log) {
                let seen = self.versions.recv().await.context("the watch ended")?;
                self.log.push(seen);
            }
            anyhow::Ok(())
        };
        tokio::time::timeout(GUARD, wait)
            .await
            .with_context(|| format!("never saw {what}; saw {:#?}", self.log))??;
        Ok(&self.log)
    }
}

fn held_by(seen: &Seen, who: &str) -> bool {
    seen.holder.as_deref() == Some(who)
}

fn lease_duration() -> SignedDuration {
    SignedDuration::from_secs(LEASE_SECS as i64)
}

#[tokio::test]
async fn one_candidate_leads_and_another_takes_over() -> Result<()> {
    let (client, ns) = setup("leader").await?;
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    let mut observer = Observer::start(leases.clone());
    let a = LeaderElector::new(leases.clone(), NAME, "replica-a", LEASE);
    let b = LeaderElector::new(leases.clone(), NAME, "replica-b", LEASE);

    a.acquire().await?;
    let a_holding = tokio::spawn({
        let a = a.clone();
        async move { a.hold().await }
    });
    let b_waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await }
    });
    // While A renews, B stays a candidate: wait until A's renewals observed after B began span more than a whole
    // lease (so B looked at a lease that would have expired without them), and no version ever named B.
    let b_began = Timestamp::now();
    let log = observer
        .until("A renewing for more than a lease duration", |log| {
            let renewals: Vec<Timestamp> = log
                .iter()
                .filter(|s| held_by(s, "replica-a"))
                .filter_map(|s| s.renewed)
                .filter(|t| *t >= b_began)
                .collect();
            renewals.len() >= 2
                && renewals[renewals.len() - 1].duration_since(renewals[0]) > lease_duration()
        })
        .await?;
    assert!(
        log.iter().all(|s| held_by(s, "replica-a")),
        "only A held the lease: {log:#?}"
    );
    assert!(!b_waiting.is_finished(), "B must not lead while A renews");

    // A stops renewing (a crashed replica): B takes over, and only once A's last renewal has expired.
    a_holding.abort();
    let log = observer
        .until("B taking over", |log| {
            log.iter().any(|s| held_by(s, "replica-b"))
        })
        .await?;
    let takeover = log
        .iter()
        .position(|s| held_by(s, "replica-b"))
        .expect("seen");
    let last_a = log[..takeover]
        .iter()
        .rev()
        .find_map(|s| s.renewed)
        .expect("A renewed");
    let b_took = log[takeover].acquired.expect("acquire time");
    assert!(
        b_took >= last_a + lease_duration(),
        "B took the lease at {b_took}, before A's renewal of {last_a} expired"
    );
    assert_eq!(log[takeover].transitions, 1);
    tokio::time::timeout(GUARD, b_waiting).await???;

    // A clean shutdown releases the lease: A gets it without waiting for it to expire.
    b.release().await?;
    tokio::time::timeout(GUARD, a.acquire()).await??;
    let log = observer
        .until("A leading again", |log| {
            log.last()
                .is_some_and(|s| held_by(s, "replica-a") && s.transitions == 2)
        })
        .await?;
    let back = log.len() - 1;
    let last_b = log[..back]
        .iter()
        .rev()
        .filter(|s| held_by(s, "replica-b"))
        .find_map(|s| s.renewed)
        .expect("B renewed");
    let a_took = log[back].acquired.expect("acquire time");
    assert!(
        a_took < last_b + lease_duration(),
        "A waited for B's lease to expire ({a_took} vs {last_b}) although B released it"
    );
    // The holders, in order: A, B, nobody (released), A.
    let mut holders: Vec<Option<&str>> = log.iter().map(|s| s.holder.as_deref()).collect();
    holders.dedup();
    assert_eq!(
        holders,
        [
            Some("replica-a"),
            Some("replica-b"),
            None,
            Some("replica-a")
        ]
    );
    Ok(())
}

/// A TCP relay to the apiserver that can stall: while stalled it passes no byte either way on any connection, old
/// or new, as an apiserver does that hangs without closing anything.
struct StallingRelay {
    url: String,
    stalled: watch::Sender<bool>,
}

impl StallingRelay {
    async fn start(upstream: String) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("https://{}", listener.local_addr()?);
        let (stalled, watching) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let watching = watching.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pass(client_read, server_write, watching.clone()),
                        pass(server_read, client_write, watching),
                    );
                });
            }
        });
        Ok(Self { url, stalled })
    }

    fn stall(&self, on: bool) {
        self.stalled.send_replace(on);
    }
}

/// Copies `from` to `to`, holding each chunk while the relay is stalled.
async fn pass(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0; 64 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0
            || stalled.wait_for(|s| !s).await.is_err()
            || to.write_all(&buf[..n]).await.is_err()
        {
            return;
        }
    }
}

#[tokio::test]
async fn a_leader_whose_renewals_stall_stops_before_another_takes_over() -> Result<()> {
    let (client, ns) = setup("leader-stall").await?;
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    // A reaches the apiserver through the relay, B directly.
    let mut config = slipway_testkit::config().await?;
    let upstream = config
        .cluster_url
        .authority()
        .context("the apiserver's address")?
        .to_string();
    let relay = StallingRelay::start(upstream).await?;
    config.cluster_url = relay.url.parse()?;
    let through_relay: Api<Lease> = Api::namespaced(kube::Client::try_from(config)?, ns.name());
    let a = LeaderElector::new(through_relay, NAME, "replica-a", LEASE);
    let b = LeaderElector::new(leases.clone(), NAME, "replica-b", LEASE);
    let mut observer = Observer::start(leases);

    a.acquire().await?;
    // A leads from here until `hold` returns; its end is taken the moment it does.
    let a_leading = tokio::spawn({
        let a = a.clone();
        async move {
            let why = a.hold().await;
            (Instant::now(), why)
        }
    });
    let b_leading = tokio::spawn({
        let b = b.clone();
        async move {
            b.acquire().await?;
            anyhow::Ok(Instant::now())
        }
    });
    // B has looked at A's renewals for a while (two of A's renewals seen), then the apiserver stops answering A:
    // its renewals hang rather than fail.
    observer
        .until("A renewing twice", |log| {
            log.iter().filter(|s| held_by(s, "replica-a")).count() >= 3
        })
        .await?;
    relay.stall(true);
    let stalled_at = Instant::now();

    // A gives up although no renewal ever came back to fail (each is cut off at its renew deadline), and B leads
    // only after A has stopped.
    let (a_ended, why) = tokio::time::timeout(GUARD, a_leading).await??;
    assert!(why.contains("could not renew"), "{why}");
    let b_began = tokio::time::timeout(GUARD, b_leading).await???;
    assert!(
        a_ended < b_began,
        "B began leading {:?} after the stall, before A stopped ({:?} after it)",
        b_began - stalled_at,
        a_ended - stalled_at
    );
    let log = observer
        .until("B holding the lease", |log| {
            log.iter().any(|s| held_by(s, "replica-b"))
        })
        .await?;
    let takeover = log
        .iter()
        .position(|s| held_by(s, "replica-b"))
        .expect("seen");
    assert_eq!(log[takeover].transitions, 1, "{log:#?}");
    relay.stall(false);
    Ok(())
}
