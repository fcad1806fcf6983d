//! Leader election on a real Lease: one candidate leads while it renews, another takes over when it stops, and a
//! released lease is free at once.

use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use slipway_controllers::leader::LeaderElector;
use slipway_testkit::setup;

const LEASE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn one_candidate_leads_and_another_takes_over() -> Result<()> {
    let (client, ns) = setup("leader").await?;
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    let a = LeaderElector::new(leases.clone(), "slipway-operator", "replica-a", LEASE);
    let b = LeaderElector::new(leases.clone(), "slipway-operator", "replica-b", LEASE);

    a.acquire().await?;
    let a_holding = tokio::spawn({
        let a = a.clone();
        async move { a.hold().await }
    });
    let b_waiting = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await }
    });
    // While A renews, B stays a candidate, for well over one lease duration.
    tokio::time::sleep(LEASE * 3).await;
    assert!(!b_waiting.is_finished(), "B must not lead while A renews");
    let lease = leases.get("slipway-operator").await?;
    assert_eq!(
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("replica-a")
    );

    // A stops renewing (a crashed replica): B takes over once the lease has expired.
    a_holding.abort();
    tokio::time::timeout(Duration::from_secs(30), b_waiting).await???;
    let spec = leases
        .get("slipway-operator")
        .await?
        .spec
        .unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));

    // A clean shutdown releases the lease: A gets it without waiting for expiry.
    b.release().await?;
    tokio::time::timeout(LEASE / 2, a.acquire()).await??;
    let spec = leases
        .get("slipway-operator")
        .await?
        .spec
        .unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    Ok(())
}
