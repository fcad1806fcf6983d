//! NetworkPolicies kept in every tenant namespace: the network half of tenant isolation. A tenant's pods take
//! traffic only from the edge, and reach DNS, the platform's tenant-facing services and the outside, never the
//! cluster's internal ranges, the nodes, the platform's internals or another tenant.
//!
//! The policies themselves come from the installation (the Helm chart renders them into a ConfigMap, because only
//! the chart knows its components' labels, ports and the data server's address); the operator copies them into
//! each tenant namespace, puts back what is edited or deleted there, and removes the ones it no longer ships, so
//! switching isolation off in the chart takes them away. Like the grants' RoleBindings they are owned by the first
//! grant's ClusterRole, so uninstalling the platform takes them away too. They are enforced only where the
//! cluster's network plugin enforces NetworkPolicies.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize as _;
use slipway_crds::labels;

use crate::context::FIELD_MANAGER;
use crate::deletion::delete_if_present;
use crate::error::Error;

/// Reads the policies of every `*.yaml` / `*.yml` file in `dir` (several documents per file allowed). Each must be
/// a `networking.k8s.io/v1` NetworkPolicy with a name; a namespace, if given, is replaced by each tenant's.
pub fn load_dir(dir: &Path) -> Result<Vec<NetworkPolicy>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|x| x.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    let mut policies = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("read {}: {e}", file.display()))?;
        policies.extend(parse(&text).map_err(|e| format!("{}: {e}", file.display()))?);
    }
    let mut names = BTreeSet::new();
    for p in &policies {
        if !names.insert(p.name_any()) {
            return Err(format!("two policies are named {}", p.name_any()));
        }
    }
    Ok(policies)
}

/// The NetworkPolicies of a multi-document YAML text (empty documents skipped).
pub fn parse(text: &str) -> Result<Vec<NetworkPolicy>, String> {
    let mut policies = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| e.to_string())?;
        if value.is_null() {
            continue;
        }
        let kind = (value["apiVersion"].as_str(), value["kind"].as_str());
        if kind != (Some("networking.k8s.io/v1"), Some("NetworkPolicy")) {
            return Err(format!(
                "only networking.k8s.io/v1 NetworkPolicy documents belong here, not {kind:?}"
            ));
        }
        let policy: NetworkPolicy = serde_yaml::from_value(value).map_err(|e| e.to_string())?;
        if policy
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            return Err("a NetworkPolicy without a name".into());
        }
        policies.push(policy);
    }
    Ok(policies)
}

/// `policy` as it is applied in `namespace`: that namespace, slipway's managed-by label, `owner`, nothing
/// server-set.
pub fn for_namespace(
    policy: &NetworkPolicy,
    namespace: &str,
    owner: Option<&OwnerReference>,
) -> NetworkPolicy {
    let mut p = policy.clone();
    p.metadata.namespace = Some(namespace.to_owned());
    p.metadata.owner_references = owner.map(|o| vec![o.clone()]);
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(labels::MANAGED_BY.into(), labels::MANAGER.into());
    p.metadata.resource_version = None;
    p.metadata.uid = None;
    p
}

/// Applies `policies` (owned by `owner`) in `namespace` and deletes slipway's other policies there (ones the
/// installation no longer ships).
pub async fn keep(
    client: &Client,
    namespace: &str,
    policies: &[NetworkPolicy],
    owner: Option<&OwnerReference>,
) -> Result<(), Error> {
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    for policy in policies {
        api.patch(
            &policy.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&for_namespace(policy, namespace, owner)),
        )
        .await?;
    }
    let wanted: BTreeSet<String> = policies.iter().map(ResourceExt::name_any).collect();
    let managed =
        ListParams::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    for stale in api.list(&managed).await? {
        if !wanted.contains(&stale.name_any()) {
            delete_if_present(&api, &stale.name_any()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: slipway-tenant-isolation
  namespace: somewhere
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: slipway-builds
spec:
  podSelector:
    matchLabels: {slipway.dev/build: \"true\"}
  policyTypes: [Egress]
";

    #[test]
    fn documents_parse_and_land_in_the_tenant_s_namespace_marked_as_slipway_s() {
        let policies = parse(TWO).unwrap();
        let names: Vec<String> = policies.iter().map(ResourceExt::name_any).collect();
        assert_eq!(names, ["slipway-tenant-isolation", "slipway-builds"]);
        let owner = OwnerReference {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            name: "slipway-operator-tenant".into(),
            uid: "uid-1".into(),
            ..Default::default()
        };
        let placed = for_namespace(&policies[0], "slipway-user-ann", Some(&owner));
        assert_eq!(
            placed.metadata.namespace.as_deref(),
            Some("slipway-user-ann")
        );
        assert_eq!(placed.owner_references(), [owner]);
        assert_eq!(
            placed.labels().get(labels::MANAGED_BY).map(String::as_str),
            Some(labels::MANAGER)
        );
    }

    #[test]
    fn anything_but_a_named_network_policy_is_refused() {
        let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n";
        assert!(parse(role).unwrap_err().contains("NetworkPolicy"));
        let nameless = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {}\nspec: {podSelector: {}}\n";
        assert!(parse(nameless).unwrap_err().contains("without a name"));
    }

    #[test]
    fn a_directory_with_one_name_twice_is_refused() {
        let dir = std::env::temp_dir().join(format!("slipway-policies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), TWO).unwrap();
        std::fs::write(dir.join("b.yml"), TWO).unwrap();
        std::fs::write(dir.join("README"), "not policies").unwrap();
        assert!(load_dir(&dir).unwrap_err().contains("two policies"));
        std::fs::remove_file(dir.join("b.yml")).unwrap();
        assert_eq!(load_dir(&dir).unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
