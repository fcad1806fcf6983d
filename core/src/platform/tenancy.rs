//! Each user's apps live in a namespace of their own, labelled with the owner and plan (the webhook reads the plan
//! for caps) and held to the `restricted` Pod Security level.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use slipway_crds::labels;
use slipway_crds::names::Username;

/// Field manager of everything the API writes.
pub const FIELD_MANAGER: &str = "slipway-api";

/// Creates or updates the user's namespace and returns its name.
pub async fn ensure_user_namespace(
    client: &Client,
    username: &Username,
    plan: &str,
) -> kube::Result<String> {
    let name = labels::user_namespace(username);
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                labels::OWNER: username.as_str(),
                labels::PLAN: plan,
                labels::MANAGED_BY: labels::MANAGER,
                "pod-security.kubernetes.io/enforce": "restricted",
            }
        }
    }))
    .map_err(kube::Error::SerdeError)?;
    Api::<Namespace>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&ns),
        )
        .await?;
    Ok(name)
}

/// Moves the plan label of `username`'s namespace to `plan` in a task of its own (a request that ends does not stop
/// it), retrying for a minute; [`sync_plan_labels`] puts right what it could not.
pub fn relabel_soon(client: Client, username: Username, plan: String) {
    tokio::spawn(async move {
        for attempt in 0..12 {
            match ensure_user_namespace(&client, &username, &plan).await {
                Ok(_) => return,
                Err(e) if attempt == 11 => {
                    tracing::warn!(user = %username, error = %e, "could not move the namespace's plan label; the periodic pass will")
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_secs(5)).await,
            }
        }
    });
}

/// How often the namespaces' plan labels are compared with the platform database.
pub const PLAN_SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Keeps every user namespace's plan label equal to its owner's plan in the platform database, the plan's source
/// of truth: once at start, then every [`PLAN_SYNC_EVERY`]. A label an interrupted plan change left behind is
/// moved here.
pub async fn sync_plan_labels(client: Client, db: sqlx::PgPool) {
    loop {
        if let Err(e) = sync_once(&client, &db).await {
            tracing::warn!(
                error = format!("{e:#}"),
                "could not compare the namespaces' plan labels with the database"
            );
        }
        tokio::time::sleep(PLAN_SYNC_EVERY).await;
    }
}

async fn sync_once(client: &Client, db: &sqlx::PgPool) -> anyhow::Result<()> {
    let selector = format!(
        "{},{}={}",
        labels::OWNER,
        labels::MANAGED_BY,
        labels::MANAGER
    );
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    let owners: Vec<String> = namespaces
        .iter()
        .filter_map(|ns| ns.metadata.labels.as_ref()?.get(labels::OWNER).cloned())
        .collect();
    let plans: std::collections::HashMap<String, String> =
        sqlx::query_as("SELECT username, plan FROM users WHERE username = ANY($1)")
            .bind(&owners)
            .fetch_all(db)
            .await?
            .into_iter()
            .collect();
    for ns in &namespaces {
        let Some(labels) = ns.metadata.labels.as_ref() else {
            continue;
        };
        let (Some(owner), Some(labelled)) = (labels.get(labels::OWNER), labels.get(labels::PLAN))
        else {
            continue;
        };
        let Some(plan) = plans.get(owner) else {
            continue;
        };
        if plan != labelled {
            let username: Username = owner.parse()?;
            ensure_user_namespace(client, &username, plan).await?;
            tracing::info!(user = %owner, from = %labelled, to = %plan, "moved a namespace's plan label to the database's");
        }
    }
    Ok(())
}
