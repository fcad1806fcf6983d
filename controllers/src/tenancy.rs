//! Grants in tenant namespaces: what the platform's components may do inside a user's namespace comes from
//! RoleBindings this reconciler keeps there, not from cluster-wide rights. No component holds Secret access across
//! the cluster; the operator and the API get it namespace by namespace, only where slipway's tenants live. The same
//! reconciler keeps the tenant's NetworkPolicies there ([`crate::network_policies`]).
//!
//! Each grant binds one ClusterRole (shipped by the chart) to one ServiceAccount in every namespace labelled as a
//! tenant's (`slipway.dev/owner`, managed by slipway). A RoleBinding is owned by its ClusterRole, so removing the
//! platform (the ClusterRoles go with `helm uninstall`) takes the bindings with it through garbage collection.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};
use slipway_crds::labels;

use crate::context::{Context, FIELD_MANAGER};
use crate::error::Error;

/// One ClusterRole bound to one ServiceAccount in every tenant namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantGrant {
    /// The ClusterRole bound (also the RoleBinding's name).
    pub cluster_role: String,
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// Name of the ServiceAccount.
    pub service_account: String,
}

impl std::str::FromStr for TenantGrant {
    type Err = String;

    /// Parses `CLUSTERROLE=NAMESPACE/SERVICEACCOUNT`.
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || format!("'{s}' is not CLUSTERROLE=NAMESPACE/SERVICEACCOUNT");
        let (role, subject) = s.split_once('=').ok_or_else(usage)?;
        let (namespace, account) = subject.split_once('/').ok_or_else(usage)?;
        if [role, namespace, account].iter().any(|p| p.is_empty()) {
            return Err(usage());
        }
        Ok(Self {
            cluster_role: role.to_owned(),
            namespace: namespace.to_owned(),
            service_account: account.to_owned(),
        })
    }
}

/// The label selector of tenant namespaces.
pub fn tenant_selector() -> String {
    format!(
        "{},{}={}",
        labels::OWNER,
        labels::MANAGED_BY,
        labels::MANAGER
    )
}

/// The RoleBinding that carries `grant` into `namespace`, owned by the ClusterRole (whose uid is `role_uid`).
pub fn role_binding(grant: &TenantGrant, namespace: &str, role_uid: &str) -> RoleBinding {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": grant.cluster_role,
            "namespace": namespace,
            "labels": { labels::MANAGED_BY: labels::MANAGER },
            "ownerReferences": [{
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "name": grant.cluster_role,
                "uid": role_uid,
            }],
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": grant.cluster_role,
        },
        "subjects": [{
            "kind": "ServiceAccount",
            "name": grant.service_account,
            "namespace": grant.namespace,
        }],
    }))
    .unwrap_or_else(|e| unreachable!("a RoleBinding literal deserializes: {e}"))
}

/// Applies every grant's RoleBinding and the tenant NetworkPolicies in the tenant namespace `ns`.
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    if ns.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let roles: Api<ClusterRole> = Api::all(ctx.client.clone());
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &name);
    let mut policy_owner = None;
    for grant in &ctx.config.tenant_grants {
        let role = roles.get(&grant.cluster_role).await?;
        let uid = role.uid().unwrap_or_default();
        policy_owner = policy_owner.or_else(|| role.controller_owner_ref(&()));
        bindings
            .patch(
                &grant.cluster_role,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&role_binding(grant, &name, &uid)),
            )
            .await?;
    }
    if let Some(policies) = &ctx.config.tenant_network_policies {
        crate::network_policies::keep(&ctx.client, &name, policies, policy_owner.as_ref()).await?;
    }
    Ok(Action::requeue(Duration::from_secs(3600)))
}

/// The grant controller over tenant namespaces: a namespace is reconciled when it appears or changes, and when one
/// of slipway's RoleBindings or NetworkPolicies in it changes or goes away.
pub fn controller(client: &kube::Client) -> Controller<Namespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let bindings: Api<RoleBinding> = Api::all(client.clone());
    let policies: Api<NetworkPolicy> = Api::all(client.clone());
    let managed = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
    Controller::new(
        namespaces,
        watcher::Config::default().labels(&tenant_selector()),
    )
    .watches(
        bindings,
        watcher::Config::default().labels(&managed),
        |binding: RoleBinding| binding.namespace().map(|ns| ObjectRef::new(&ns)),
    )
    .watches(
        policies,
        watcher::Config::default().labels(&managed),
        |policy: NetworkPolicy| policy.namespace().map(|ns| ObjectRef::new(&ns)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_parses_and_refuses_half_a_subject() {
        let g: TenantGrant = "slipway-operator-tenant=slipway-system/slipway"
            .parse()
            .unwrap();
        assert_eq!(g.cluster_role, "slipway-operator-tenant");
        assert_eq!(g.namespace, "slipway-system");
        assert_eq!(g.service_account, "slipway");
        for bad in ["role", "role=ns", "role=/sa", "=ns/sa", "role=ns/"] {
            assert!(bad.parse::<TenantGrant>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_binding_names_the_role_and_is_owned_by_it() {
        let g: TenantGrant = "r=ns/sa".parse().unwrap();
        let b = role_binding(&g, "slipway-user-ann", "uid-1");
        assert_eq!(b.metadata.namespace.as_deref(), Some("slipway-user-ann"));
        assert_eq!(b.role_ref.name, "r");
        assert_eq!(b.role_ref.kind, "ClusterRole");
        let owner = &b.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ClusterRole", "uid-1")
        );
        let subject = &b.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (subject.namespace.as_deref(), subject.name.as_str()),
            (Some("ns"), "sa")
        );
    }
}
