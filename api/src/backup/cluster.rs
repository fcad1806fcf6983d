//! The cluster objects a backup holds: every App, Channel, Domain, Forward and Deploy with its status, and the
//! Secrets that hold state no database row does (the env keyring, end-user sign-in's keys, the certificates and the
//! ACME account, and the env Secrets that Apps and Channels name). They are read and written with the caller's own
//! credentials: the api's ServiceAccount may not read these Secrets, and a backup does not widen it.
//!
//! An object is kept as the user wrote it plus its status, without what the apiserver assigns (uid, versions,
//! timestamps, managed fields) or finalizers (the operator puts its own back). Owner references name the owner's
//! old uid; a restore creates owners first and rewrites each reference to the owner's new uid.

use std::collections::HashMap;

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use slipway_crds::{app::App, channel::Channel, deploy::Deploy, domain::Domain, forward::Forward};
use uuid::Uuid;

/// Field manager of what a restore writes.
pub const FIELD_MANAGER: &str = "slipway-restore";

/// The kinds a backup holds, owners before what they own.
fn kinds() -> [ApiResource; 5] {
    [
        ApiResource::erase::<App>(&()),
        ApiResource::erase::<Channel>(&()),
        ApiResource::erase::<Domain>(&()),
        ApiResource::erase::<Forward>(&()),
        ApiResource::erase::<Deploy>(&()),
    ]
}

/// Every object of the backed-up kinds, owners first, in the form a restore creates.
pub async fn objects(client: &Client) -> anyhow::Result<Vec<Value>> {
    let mut all = Vec::new();
    for kind in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        for object in api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("list {}", kind.plural))?
        {
            if object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let mut value = serde_json::to_value(&object)?;
            value["apiVersion"] = json!(kind.api_version);
            value["kind"] = json!(kind.kind);
            all.push(value);
        }
    }
    Ok(all)
}

/// How many of `objects` are of each backed-up kind, owners first.
pub fn counts(objects: &[Value]) -> Vec<(String, usize)> {
    kinds()
        .iter()
        .map(|kind| {
            let n = objects
                .iter()
                .filter(|o| o["kind"] == kind.kind.as_str())
                .count();
            (kind.kind.clone(), n)
        })
        .collect()
}

/// The env Secrets that Apps and Channels name in `spec.envSecret`, each in its object's namespace.
pub async fn env_secrets(client: &Client, objects: &[Value]) -> anyhow::Result<Vec<Value>> {
    let mut secrets = Vec::new();
    for object in objects {
        let (Some(namespace), Some(name)) = (
            object["metadata"]["namespace"].as_str(),
            object["spec"]["envSecret"].as_str(),
        ) else {
            continue;
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        if let Some(secret) = api.get_opt(name).await? {
            secrets.push(serde_json::to_value(secret)?);
        }
    }
    Ok(secrets)
}

/// `value` without what the apiserver assigns, ready to be created again.
pub fn portable(mut value: Value) -> Value {
    if let Some(metadata) = value["metadata"].as_object_mut() {
        for assigned in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "finalizers",
            "selfLink",
            "generateName",
        ] {
            metadata.remove(assigned);
        }
    }
    value
}

/// Writes `secret` (as backed up) into `namespace` as `name`, replacing what is there: a fresh install generated
/// its own keyring and sign-in keys, which the backup's take the place of.
pub async fn put_secret(
    client: &Client,
    secret: &Value,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secret = portable(secret.clone());
    secret["metadata"]["namespace"] = json!(namespace);
    secret["metadata"]["name"] = json!(name);
    match api.get_opt(name).await? {
        Some(existing) => {
            // The data only: the chart's labels and Helm's ownership of its own Secret stay.
            let data = secret.get("data").cloned().unwrap_or(json!({}));
            let mut merged = serde_json::to_value(&existing)?;
            merged["data"] = data;
            merged.as_object_mut().map(|m| m.remove("stringData"));
            let merged: Secret = serde_json::from_value(merged)?;
            api.replace(name, &PostParams::default(), &merged)
                .await
                .with_context(|| format!("replace Secret {namespace}/{name}"))?;
        }
        None => {
            let secret: Secret = serde_json::from_value(secret)?;
            api.create(&PostParams::default(), &secret)
                .await
                .with_context(|| format!("create Secret {namespace}/{name}"))?;
        }
    }
    Ok(())
}

/// Creates `objects` (owners first, as [`objects`] lists them), then puts each status back. An object gets a new
/// uid, which is also its id in the API and the platform database: every old uid in the objects (owner
/// references, labels, specs and statuses) is rewritten to the new one, the statuses once every object exists.
/// Returns how many of each kind, and the new uid of each old one.
pub async fn create(
    client: &Client,
    objects: &[Value],
) -> anyhow::Result<(Vec<(String, usize)>, HashMap<Uuid, Uuid>)> {
    let kinds = kinds();
    let mut new_uids: HashMap<Uuid, Uuid> = HashMap::new();
    let mut counts: Vec<(String, usize)> = kinds.iter().map(|k| (k.kind.clone(), 0)).collect();
    let mut statuses = Vec::new();
    for object in objects {
        let kind_name = object["kind"].as_str().unwrap_or_default();
        let Some(index) = kinds.iter().position(|k| k.kind == kind_name) else {
            anyhow::bail!("the backup holds a {kind_name}, which a restore does not know");
        };
        let kind = &kinds[index];
        let old_uid: Option<Uuid> = object["metadata"]["uid"]
            .as_str()
            .and_then(|u| u.parse().ok());
        let mut value = portable(object.clone());
        let status = value.as_object_mut().and_then(|o| o.remove("status"));
        // An owner not in the backup (it was being deleted) is not named.
        if let Some(owners) = value["metadata"]["ownerReferences"].as_array_mut() {
            owners.retain(|owner| {
                owner["uid"]
                    .as_str()
                    .and_then(|u| u.parse::<Uuid>().ok())
                    .is_some_and(|u| new_uids.contains_key(&u))
            });
        }
        rewrite_uuids(&mut value, &new_uids);
        let namespace = value["metadata"]["namespace"]
            .as_str()
            .context("an object without a namespace")?
            .to_owned();
        let name = value["metadata"]["name"]
            .as_str()
            .context("an object without a name")?
            .to_owned();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, kind);
        let object: DynamicObject = serde_json::from_value(value)?;
        let created = api
            .create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PostParams::default()
                },
                &object,
            )
            .await
            .with_context(|| format!("create {} {namespace}/{name}", kind.kind))?;
        let new_uid: Option<Uuid> = created.meta().uid.as_deref().and_then(|u| u.parse().ok());
        if let (Some(old), Some(new)) = (old_uid, new_uid) {
            new_uids.insert(old, new);
        }
        if let Some(status) = status {
            statuses.push((api, namespace, name, kind.kind.clone(), status));
        }
        counts[index].1 += 1;
    }
    for (api, namespace, name, kind, mut status) in statuses {
        rewrite_uuids(&mut status, &new_uids);
        api.patch_status(
            &name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("put back the status of {kind} {namespace}/{name}"))?;
    }
    Ok((counts, new_uids))
}

/// Queues, for every app or docker channel that was live, a deploy that runs its live version's image again
/// (a rewind of the live Deploy, no build): running workloads are not in a backup, and the operator starts a
/// channel's pods only as a deploy's step. Returns how many were queued.
pub async fn redeploy_live(client: &Client, objects: &[Value]) -> anyhow::Result<usize> {
    fn of_kind<'a>(objects: &'a [Value], kind: &'static str) -> impl Iterator<Item = &'a Value> {
        objects.iter().filter(move |o| o["kind"] == kind)
    }
    let mut queued = 0;
    for channel in of_kind(objects, "Channel") {
        let namespace = channel["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = channel["metadata"]["name"].as_str().unwrap_or_default();
        let Some(current) = channel["status"]["currentSha"].as_str() else {
            continue;
        };
        let dynamic = of_kind(objects, "App").any(|app| {
            app["metadata"]["namespace"] == namespace
                && app["metadata"]["name"] == channel["spec"]["app"]
                && matches!(app["spec"]["template"].as_str(), Some("app" | "docker"))
        });
        if !dynamic {
            continue;
        }
        let live = of_kind(objects, "Deploy")
            .filter(|d| {
                d["metadata"]["namespace"] == namespace
                    && d["spec"]["channel"] == name
                    && d["status"]["phase"] == "success"
                    && d["status"]["resolvedSha"] == current
                    && d["status"]["image"]["reference"].is_string()
            })
            .max_by_key(|d| {
                d["status"]["finishedAt"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            });
        let Some(live) = live else {
            continue;
        };
        let live_name = live["metadata"]["name"].as_str().unwrap_or_default();
        let deploys: Api<Deploy> = Api::namespaced(client.clone(), namespace);
        let restored = deploys
            .get(live_name)
            .await
            .with_context(|| format!("read the restored Deploy {namespace}/{live_name}"))?;
        let millis = chrono::Utc::now().timestamp_millis();
        let suffix = &Uuid::new_v4().simple().to_string()[..6];
        let mut again = Deploy::new(
            &format!("{name}.{millis}-{suffix}"),
            slipway_crds::DeploySpec {
                channel: name.to_owned(),
                sha: Some(current.to_owned()),
                git_ref: None,
                rewind_of: Some(live_name.to_owned()),
                image: live["status"]["image"]["reference"]
                    .as_str()
                    .map(str::to_owned),
            },
        );
        again.metadata.labels = restored.metadata.labels.clone();
        again.metadata.owner_references = restored.metadata.owner_references.clone();
        deploys
            .create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PostParams::default()
                },
                &again,
            )
            .await
            .with_context(|| format!("queue the restored live version of {namespace}/{name}"))?;
        queued += 1;
    }
    Ok(queued)
}

/// Replaces every uuid in `value`'s strings that `ids` names (a whole string, or a part of one such as a
/// `deploy-<uid>` label) with its new one.
pub fn rewrite_uuids(value: &mut Value, ids: &HashMap<Uuid, Uuid>) {
    match value {
        Value::String(text) => {
            if text.len() < 36 {
                return;
            }
            let mut out = String::with_capacity(text.len());
            let mut rest = text.as_str();
            let mut changed = false;
            while rest.len() >= 36 {
                let candidate = rest.get(..36).and_then(|c| c.parse::<Uuid>().ok());
                match candidate.and_then(|c| ids.get(&c)) {
                    Some(new) if rest.as_bytes()[8] == b'-' => {
                        out.push_str(&new.hyphenated().to_string());
                        rest = &rest[36..];
                        changed = true;
                    }
                    _ => {
                        let next = rest.chars().next().map_or(1, char::len_utf8);
                        out.push_str(&rest[..next]);
                        rest = &rest[next..];
                    }
                }
            }
            if changed {
                out.push_str(rest);
                *text = out;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rewrite_uuids(v, ids)),
        Value::Object(map) => map.values_mut().for_each(|v| rewrite_uuids(v, ids)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_apiserver_assigns_is_left_out() {
        let value = portable(json!({
            "apiVersion": "slipway.dev/v1alpha1",
            "kind": "App",
            "metadata": {
                "name": "shop", "namespace": "slipway-user-alice", "uid": "u1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [],
                "finalizers": ["slipway.dev/blob"], "labels": {"a": "b"},
                "ownerReferences": [{"uid": "u0", "kind": "App", "name": "x", "apiVersion": "v"}]
            },
            "spec": {"kind": "static"},
            "status": {"phase": "live"}
        }));
        assert_eq!(
            value["metadata"],
            json!({
                "name": "shop", "namespace": "slipway-user-alice", "labels": {"a": "b"},
                "ownerReferences": [{"uid": "u0", "kind": "App", "name": "x", "apiVersion": "v"}]
            })
        );
        assert_eq!(value["status"], json!({"phase": "live"}));
    }

    #[test]
    fn old_uids_become_new_ones_wherever_a_string_holds_them() {
        let old: Uuid = "0b5f3c1e-8d2a-4c6b-9e7f-1a2b3c4d5e6f".parse().unwrap();
        let new: Uuid = "11111111-2222-4333-8444-555555555555".parse().unwrap();
        let other = "99999999-2222-4333-8444-555555555555";
        let ids = HashMap::from([(old, new)]);
        let mut value = json!({
            "liveDeploy": old.to_string(),
            "labels": {"slipway.dev/deploy": format!("deploy-{old}"), "x": other},
            "list": [old.to_string(), "short", "é".repeat(40)]
        });
        rewrite_uuids(&mut value, &ids);
        assert_eq!(
            value,
            json!({
                "liveDeploy": new.to_string(),
                "labels": {"slipway.dev/deploy": format!("deploy-{new}"), "x": other},
                "list": [new.to_string(), "short", "é".repeat(40)]
            })
        );
    }

    #[test]
    fn owners_come_before_what_they_own() {
        let order: Vec<String> = kinds().iter().map(|k| k.kind.clone()).collect();
        assert_eq!(order, ["App", "Channel", "Domain", "Forward", "Deploy"]);
    }
}
