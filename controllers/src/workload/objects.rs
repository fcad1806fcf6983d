//! The objects a deploy runs as, built as pure functions of a [`Release`] so they are tested without a cluster:
//! the deploy's immutable env Secret, its Deployment (the app container beside the readiness sidecar), the
//! Deployment's PodDisruptionBudget and the channel's Service.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource, Lifecycle,
    LifecycleHandler, LocalObjectReference, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, Secret, SecretEnvSource, SecurityContext, Service,
    ServicePort, ServiceSpec, SleepAction, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use slipway_crds::labels;
use slipway_crds::names::workload_name;
use slipway_crds::{Channel, Deploy, Template};

use super::{Release, probe};
use crate::error::Error;

/// The port the platform gives the app (`SVC_HTTP_PORT` and `PORT`).
pub const HTTP_PORT: u16 = 8080;
pub use slipway_crds::forward::{FORWARD_PORT, FORWARD_PORT_NAME};
/// The uid (and gid) apps run as, as the hosting API fixes for `app` and slipway applies to `docker` too.
pub const APP_UID: i64 = 10001;
/// Name of the container running the user's image.
pub const APP_CONTAINER: &str = "app";
/// Name of the container port (and the Service's target port) the app serves HTTP on.
const HTTP_PORT_NAME: &str = "http";
/// The volume mounted at `/tmp`, shared by the app and the readiness sidecar (where the ready file appears).
const TMP_VOLUME: &str = "tmp";

/// Where a deploy's objects live and what they are called; everything derives from the channel's resource name
/// and the deploy's uid, so a restarted operator finds them again.
#[derive(Debug, Clone, PartialEq)]
pub struct Names {
    /// Namespace of the deploy (the owner's).
    pub namespace: String,
    /// The deploy's uid (its id in the API).
    pub deploy_uid: String,
    /// The channel's Service, and the prefix of its Deployments.
    pub service: String,
    /// This deploy's Deployment: `<service>-<first 8 hex of the uid>`.
    pub deployment: String,
    /// This deploy's env Secret.
    pub env_secret: String,
    /// The channel's registry pull credential (a `kubernetes.io/dockerconfigjson` Secret).
    pub pull_secret: String,
    /// `SVC_READY_FILE`: directly under `/tmp`, minted per deploy.
    pub ready_file: String,
}

impl Names {
    /// The names of `deploy`'s objects.
    pub fn of(deploy: &Deploy) -> Result<Self, Error> {
        let namespace = deploy.namespace().ok_or(Error::Incomplete("namespace"))?;
        let deploy_uid = deploy.uid().ok_or(Error::Incomplete("uid"))?;
        let short: String = deploy_uid
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(8)
            .collect::<String>()
            .to_ascii_lowercase();
        if short.len() < 8 {
            return Err(Error::Incomplete("uid"));
        }
        let service = workload_name(&deploy.spec.channel);
        let deployment = format!("{service}-{short}");
        Ok(Self {
            env_secret: format!("{deployment}-env"),
            pull_secret: format!("{service}-registry"),
            ready_file: format!("/tmp/.svc-ready-{short}"),
            namespace,
            deploy_uid,
            service,
            deployment,
        })
    }
}

/// The environment the app container receives: the deploy's user env, then the system keys, which win.
pub fn container_env(release: &Release<'_>, names: &Names) -> BTreeMap<String, String> {
    let mut env = release.env.clone();
    let port = HTTP_PORT.to_string();
    for (key, value) in [
        ("SVC_HTTP_PORT", port.clone()),
        ("PORT", port),
        ("SVC_FORWARD_PORT", FORWARD_PORT.to_string()),
        ("SVC_READY_FILE", names.ready_file.clone()),
    ] {
        env.insert(key.to_owned(), value);
    }
    env
}

/// Labels shared by every object of a channel: its app, its channel, and who manages it.
fn channel_labels(channel: &Channel) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::APP.to_owned(), channel.spec.app.clone()),
        (
            labels::CHANNEL.to_owned(),
            channel.channel_name().to_owned(),
        ),
        (labels::MANAGED_BY.to_owned(), labels::MANAGER.to_owned()),
    ])
}

/// Labels of a deploy's objects: the channel's, the deploy's uid and the part the object plays.
fn deploy_labels(
    release: &Release<'_>,
    names: &Names,
    component: &str,
) -> BTreeMap<String, String> {
    let mut all = channel_labels(release.channel);
    all.insert(labels::DEPLOY.to_owned(), names.deploy_uid.clone());
    all.insert(labels::COMPONENT.to_owned(), component.to_owned());
    all
}

/// The label selector of the pods of one deploy: what the channel's Service points at once the deploy is live.
pub fn deploy_selector(names: &Names) -> BTreeMap<String, String> {
    BTreeMap::from([(labels::DEPLOY.to_owned(), names.deploy_uid.clone())])
}

/// The Channel as the owner of what it runs, so deleting the channel (or its app) stops its workloads.
fn owned_by_channel(channel: &Channel) -> Result<Vec<OwnerReference>, Error> {
    Ok(vec![
        channel
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?,
    ])
}

/// The deploy's env Secret: immutable, so what a deploy received never changes under it; a changed env needs a
/// new deploy, as the hosting API says.
pub fn env_secret(release: &Release<'_>, names: &Names) -> Result<Secret, Error> {
    let data = container_env(release, names)
        .into_iter()
        .map(|(k, v)| (k, ByteString(v.into_bytes())))
        .collect();
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(names.env_secret.clone()),
            namespace: Some(names.namespace.clone()),
            labels: Some(deploy_labels(release, names, labels::COMPONENT_ENV)),
            owner_references: Some(owned_by_channel(release.channel)?),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    })
}

/// The channel's pull credential for the cluster registry: username the channel's `repository`, password what
/// slipway's token endpoint recognises for it (`password`), so a node pulling this channel's images gets a token
/// for that repository and no other. Owned by the channel.
pub fn pull_secret(
    release: &Release<'_>,
    names: &Names,
    registry: &str,
    repository: &str,
    password: &str,
) -> Result<Secret, Error> {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{repository}:{password}"));
    let config = serde_json::json!({
        "auths": {registry: {"username": repository, "password": password, "auth": auth}}
    });
    let mut labels = channel_labels(release.channel);
    labels.insert(
        labels::COMPONENT.to_owned(),
        labels::COMPONENT_PULL.to_owned(),
    );
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(names.pull_secret.clone()),
            namespace: Some(names.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(owned_by_channel(release.channel)?),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(config.to_string().into_bytes()),
        )])),
        type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
        ..Secret::default()
    })
}

/// CPU in millicores, the form the apiserver keeps.
fn cpu(cores: f64) -> Quantity {
    // Plans give CPU in tenths of a core at the finest; whole millicores are exact for them.
    let millis = (cores * 1000.0).round() as i64;
    Quantity(format!("{millis}m"))
}

/// The share of a plan's CPU (`cpu_soft_cores`) an app's pod requests from the scheduler when the operator is not
/// told otherwise: all of it, so every running app holds its whole share of a node.
pub const FULL_CPU_REQUEST_PERCENT: u8 = 100;

/// The CPU an app pod requests: `percent` of the plan's soft share, at least one millicore. Below 100 the platform
/// overcommits its nodes' CPU (the operator's `--cpu-request-percent`): an idle app holds less of a node, and a
/// busy one still bursts to the plan's limit, but only the requested part is guaranteed under contention.
fn cpu_request(plan: &slipway_crds::plans::Plan, percent: u8) -> Quantity {
    let millis = (plan.cpu_soft_cores * 10.0 * f64::from(percent)).round() as i64;
    Quantity(format!("{}m", millis.max(1)))
}

/// How many times the plan's memory an app pod may write to disk: `/tmp`, `/app`, `$HOME` and its logs together.
pub const EPHEMERAL_PER_MEMORY: u32 = 4;

/// The disk an app pod may fill, in MiB: [`EPHEMERAL_PER_MEMORY`] times the plan's memory (512 MiB on starter,
/// 16 GiB on pro). Past it the kubelet evicts the pod, so one app cannot fill the node's disk.
pub fn ephemeral_storage_mib(plan: &slipway_crds::plans::Plan) -> u32 {
    plan.mem_limit_mb.saturating_mul(EPHEMERAL_PER_MEMORY)
}

/// The app container's resources from the plan: memory is limited (and reserved) at the plan's limit, CPU is
/// guaranteed at `cpu_request_percent` of the soft share ([`FULL_CPU_REQUEST_PERCENT`] unless the platform
/// overcommits) and may burst to the plan's burst, and ephemeral storage (its writable layer and logs; `/tmp` has
/// the same cap of its own) is limited to [`ephemeral_storage_mib`], with the plan's memory reserved.
pub fn app_resources(
    plan: &slipway_crds::plans::Plan,
    cpu_request_percent: u8,
) -> ResourceRequirements {
    let memory = Quantity(format!("{}Mi", plan.mem_limit_mb));
    let disk = Quantity(format!("{}Mi", ephemeral_storage_mib(plan)));
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), cpu_request(plan, cpu_request_percent)),
            ("memory".to_owned(), memory.clone()),
            ("ephemeral-storage".to_owned(), memory.clone()),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_owned(), cpu(plan.cpu_burst)),
            ("memory".to_owned(), memory),
            ("ephemeral-storage".to_owned(), disk),
        ])),
        ..ResourceRequirements::default()
    }
}

/// What every container of a deploy's pod runs under: no privilege escalation, no capabilities, the runtime's
/// default seccomp profile, and `uid` (the app's is also the pod's; repeated so each container says it alone).
pub fn restricted_container(uid: i64) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..SecurityContext::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        localhost_profile: None,
    }
}

/// `/tmp` of a container: the pod's shared, writable scratch directory.
pub fn tmp_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: TMP_VOLUME.to_owned(),
        mount_path: "/tmp".to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// Where an empty directory volume keeps its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// The node's disk.
    Disk,
    /// Memory (tmpfs), counted against the pod's memory.
    Memory,
}

/// An empty directory volume named `name` on `medium`, holding at most `size_limit` (a quantity such as `1Mi`).
pub fn empty_dir(name: &str, medium: Medium, size_limit: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: (medium == Medium::Memory).then(|| "Memory".to_owned()),
            size_limit: Some(Quantity(size_limit.to_owned())),
        }),
        ..Volume::default()
    }
}

/// The app's `/tmp`: on disk, at most [`ephemeral_storage_mib`].
pub fn tmp_volume(plan: &slipway_crds::plans::Plan) -> Volume {
    empty_dir(
        TMP_VOLUME,
        Medium::Disk,
        &format!("{}Mi", ephemeral_storage_mib(plan)),
    )
}

/// The user's image. Both templates run the image's own entrypoint and command: for `app` the build makes
/// `launch.sh` the image's command, for `docker` it is the Dockerfile's `ENTRYPOINT`/`CMD`. Either way it runs as
/// uid 10001 whatever the image's `USER` says, with `/tmp` writable.
fn app_container(release: &Release<'_>, names: &Names) -> Container {
    Container {
        name: APP_CONTAINER.to_owned(),
        image: Some(release.image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: names.env_secret.clone(),
                optional: Some(false),
            }),
            ..EnvFromSource::default()
        }]),
        ports: Some(vec![
            ContainerPort {
                name: Some(HTTP_PORT_NAME.to_owned()),
                container_port: i32::from(HTTP_PORT),
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some(FORWARD_PORT_NAME.to_owned()),
                container_port: i32::from(FORWARD_PORT),
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            },
        ]),
        resources: Some(app_resources(release.plan, release.cpu_request_percent)),
        security_context: Some(restricted_container(APP_UID)),
        volume_mounts: Some(vec![tmp_mount(false)]),
        // A replaced version keeps serving for a moment after it leaves the Service's endpoints, until every edge
        // has stopped sending it requests; only then is the process told to stop.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: DRAIN_SECONDS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        ..Container::default()
    }
}

/// Seconds a replaced app container keeps serving before it is stopped (see [`app_container`]).
pub const DRAIN_SECONDS: i64 = 5;

/// The deploy's Deployment: one replica of the user's image beside the readiness sidecar, labelled with the
/// deploy so the channel's Service can be pointed at it once it is ready, and owned by the channel.
pub fn deployment(
    release: &Release<'_>,
    names: &Names,
    probe_image: &str,
    pulls_with_secret: bool,
) -> Result<Deployment, Error> {
    if !matches!(release.app.spec.template, Template::App | Template::Docker) {
        return Err(Error::InvalidSpec(format!(
            "a {} app runs no workload",
            release.app.spec.template.as_str()
        )));
    }
    let mut pod_labels = deploy_labels(release, names, labels::COMPONENT_RUN);
    pod_labels.insert(labels::USER.to_owned(), release.app.spec.owner.clone());
    pod_labels.insert(labels::SHA.to_owned(), release.sha.to_owned());
    let annotations = BTreeMap::from([(
        "kubectl.kubernetes.io/default-container".to_owned(),
        APP_CONTAINER.to_owned(),
    )]);
    let pod = PodSpec {
        containers: vec![
            app_container(release, names),
            probe::container(probe_image, names),
        ],
        volumes: Some(vec![tmp_volume(release.plan), probe::state_volume()]),
        image_pull_secrets: pulls_with_secret.then(|| {
            vec![LocalObjectReference {
                name: names.pull_secret.clone(),
            }]
        }),
        automount_service_account_token: Some(false),
        // The pod's sandbox holds PID 1 (it reaps orphans), so the app's process is an ordinary one: a SIGTERM it
        // has no handler for stops it, as it would on a laptop, instead of being ignored the way the kernel ignores
        // unhandled signals to PID 1 (which would hold every replaced version for the whole grace period). The
        // containers see each other's processes but run as different users, so neither can signal or read the
        // other's.
        share_process_namespace: Some(true),
        // The app's environment is exactly what the deploy recorded: no variables for other Services.
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_user: Some(APP_UID),
            run_as_group: Some(APP_UID),
            run_as_non_root: Some(true),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..PodSecurityContext::default()
        }),
        ..PodSpec::default()
    };
    Ok(Deployment {
        metadata: run_metadata(release, names)?,
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            // The pod template never changes (a new version is a new Deployment), so there is nothing to roll
            // back to; a replaced pod is replaced whole.
            revision_history_limit: Some(0),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(deploy_selector(names)),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// The budget that keeps a node drain from evicting a deploy's one pod while it serves: the eviction is refused
/// until [`crate::evacuate`] has rolled the pod over to another node (a new pod ready beside it first). A pod that
/// is not ready may always be evicted, so a crashing app never holds a drain up. It is made from the deploy's
/// Deployment as the cluster holds it (its name, labels and pod selector), and owned by it: a budget goes with its
/// Deployment, and one missing beside a running Deployment can be made from it alone.
pub fn disruption_budget(deployment: &Deployment) -> Result<PodDisruptionBudget, Error> {
    let meta = &deployment.metadata;
    Ok(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            labels: meta.labels.clone(),
            owner_references: Some(vec![
                deployment.owner_ref(&()).ok_or(Error::Incomplete("uid"))?,
            ]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: deployment.spec.as_ref().map(|spec| spec.selector.clone()),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}

/// The name, labels and owner of a deploy's Deployment.
fn run_metadata(release: &Release<'_>, names: &Names) -> Result<ObjectMeta, Error> {
    Ok(ObjectMeta {
        name: Some(names.deployment.clone()),
        namespace: Some(names.namespace.clone()),
        labels: Some(deploy_labels(release, names, labels::COMPONENT_RUN)),
        owner_references: Some(owned_by_channel(release.channel)?),
        ..ObjectMeta::default()
    })
}

/// The channel's Service: port 80 (`http`) to the app's `SVC_HTTP_PORT` and port 7000 (`forward`) to its
/// `SVC_FORWARD_PORT`, on the pods of the deploy that is live. The edge reads the `forward` endpoints of an
/// exposed channel from it (raw TCP forwarding).
pub fn service(release: &Release<'_>, names: &Names) -> Result<Service, Error> {
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(names.service.clone()),
            namespace: Some(names.namespace.clone()),
            labels: Some(channel_labels(release.channel)),
            owner_references: Some(owned_by_channel(release.channel)?),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(deploy_selector(names)),
            ports: Some(vec![
                ServicePort {
                    name: Some(HTTP_PORT_NAME.to_owned()),
                    port: 80,
                    target_port: Some(IntOrString::String(HTTP_PORT_NAME.to_owned())),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                },
                ServicePort {
                    name: Some(FORWARD_PORT_NAME.to_owned()),
                    port: i32::from(FORWARD_PORT),
                    target_port: Some(IntOrString::String(FORWARD_PORT_NAME.to_owned())),
                    protocol: Some("TCP".to_owned()),
                    ..ServicePort::default()
                },
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// The label selector of a channel's objects of one `component` that belong to another deploy than `names`'.
pub fn superseded_selector(channel: &Channel, names: &Names, component: &str) -> String {
    format!(
        "{}={},{}={},{}={},{},{}!={}",
        labels::APP,
        channel.spec.app,
        labels::CHANNEL,
        channel.channel_name(),
        labels::COMPONENT,
        component,
        labels::DEPLOY,
        labels::DEPLOY,
        names.deploy_uid
    )
}

#[cfg(test)]
mod tests;
