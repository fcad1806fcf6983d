//! A plan change reaches the apps that are already running. The owner's plan is the `slipway.dev/plan` label of
//! their namespace (the API moves it with the account, for example when an email address is verified); this
//! controller follows those labels and resizes every running app Deployment of the namespace to the plan's memory,
//! CPU and disk. A resized Deployment rolls over without a gap: the new pod starts beside the old one and the old
//! one goes once the new one is ready. Channel caps (the webhook) and object-store quotas (the gateway) read the
//! plan at each request, so they need nothing here. The same pass over a namespace's running apps, at start and
//! every ten minutes, makes the disruption budget an app lacks, or removes the budgets when they are turned off
//! ([`crate::evacuate::settle_budgets`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, ResourceRequirements, Volume};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use slipway_crds::labels;
use slipway_crds::plans::Plan;

use crate::context::Context;
use crate::error::Error;
use crate::workload::{APP_CONTAINER, app_resources, tmp_volume};

/// How often a namespace's running apps are looked at again, besides when its plan label moves.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Field manager of the resize patches.
const FIELD_MANAGER: &str = "slipway-operator-plan";

/// The plan controller over tenant namespaces (or over the one namespace a namespaced operator runs in).
pub fn controller(client: &kube::Client, namespace: Option<&str>) -> Controller<Namespace> {
    let config = match namespace {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default().labels(&crate::tenancy::tenant_selector()),
    };
    Controller::new(Api::<Namespace>::all(client.clone()), config)
}

/// Resizes the namespace's running app Deployments that do not have its plan's resources yet, and brings their
/// disruption budgets in line with the operator's setting ([`crate::evacuate::settle_budgets`]).
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = ns.name_any();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = crate::deploy::triggers::run_pod_selector();
    let listed = deployments
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    resize(&ctx, &ns, &deployments, &listed).await?;
    // A namespaced operator makes no budgets (it does not watch Nodes, so it could not move an app first), and a
    // namespace being deleted needs none. A budget that cannot be settled now is settled at the next pass; it
    // holds no resize up.
    if ctx.config.namespace.is_none() && ns.metadata.deletion_timestamp.is_none() {
        let settled = crate::evacuate::settle_budgets(&ctx, &namespace, &listed).await;
        if let Err(e) = settled {
            tracing::warn!(namespace = %namespace, error = %e, "could not settle the apps' disruption budgets");
        }
    }
    // Deployments made after this pass are made with the plan already; a periodic pass catches one that was
    // being created while the label moved.
    Ok(Action::requeue(SWEEP_EVERY))
}

/// Resizes the Deployments `listed` of namespace `ns` that do not have its plan's resources yet.
async fn resize(
    ctx: &Context,
    ns: &Namespace,
    deployments: &Api<Deployment>,
    listed: &[Deployment],
) -> Result<(), Error> {
    let namespace = ns.name_any();
    let Some(tier) = ns.labels().get(labels::PLAN) else {
        return Ok(());
    };
    let plan = Plan::by_tier(tier).ok_or_else(|| {
        Error::InvalidSpec(format!(
            "namespace {namespace} names the unknown plan {tier}"
        ))
    })?;
    let wanted = app_resources(plan, ctx.config.cpu_request_percent);
    let tmp = tmp_volume(plan);
    for deployment in listed {
        if sized_for(deployment, &wanted, &tmp) {
            continue;
        }
        deployments
            .patch(
                &deployment.name_any(),
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Strategic(resize_patch(&wanted, &tmp)),
            )
            .await?;
        tracing::info!(
            namespace = %namespace,
            deployment = %deployment.name_any(),
            plan = plan.tier,
            "resized a running app to its owner's plan"
        );
    }
    Ok(())
}

/// Whether the Deployment's app container and `/tmp` already have the plan's sizes.
fn sized_for(deployment: &Deployment, wanted: &ResourceRequirements, tmp: &Volume) -> bool {
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
    else {
        return true;
    };
    let container_ok = pod
        .containers
        .iter()
        .find(|c| c.name == APP_CONTAINER)
        .is_none_or(|c| c.resources.as_ref() == Some(wanted));
    let tmp_ok = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == tmp.name)
        .is_none_or(|v| v.empty_dir == tmp.empty_dir);
    container_ok && tmp_ok
}

/// A strategic merge patch that sets the app container's resources and `/tmp`'s size and rolls the pod over
/// with a surge (no moment without a ready pod).
fn resize_patch(wanted: &ResourceRequirements, tmp: &Volume) -> serde_json::Value {
    serde_json::json!({
        "spec": {
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"spec": {
                "containers": [{"name": APP_CONTAINER, "resources": wanted}],
                "volumes": [tmp],
            }},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

    fn deployment(plan: &Plan) -> Deployment {
        Deployment {
            spec: Some(DeploymentSpec {
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: APP_CONTAINER.into(),
                            resources: Some(app_resources(plan, 100)),
                            ..Container::default()
                        }],
                        volumes: Some(vec![tmp_volume(plan)]),
                        ..PodSpec::default()
                    }),
                    ..PodTemplateSpec::default()
                },
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    #[test]
    fn a_deployment_of_another_plan_is_resized_and_one_of_this_plan_is_left() {
        let (starter, basic) = (
            Plan::by_tier("starter").unwrap(),
            Plan::by_tier("basic").unwrap(),
        );
        let running = deployment(starter);
        assert!(sized_for(
            &running,
            &app_resources(starter, 100),
            &tmp_volume(starter)
        ));
        assert!(!sized_for(
            &running,
            &app_resources(basic, 100),
            &tmp_volume(basic)
        ));
        let patch = resize_patch(&app_resources(basic, 100), &tmp_volume(basic));
        let container = &patch["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["name"], APP_CONTAINER);
        assert_eq!(container["resources"]["limits"]["memory"], "256Mi");
        assert_eq!(
            patch["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"],
            "1024Mi"
        );
        assert_eq!(
            patch["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
            0
        );
    }
}
