use std::collections::BTreeMap;

use serde_json::{Value, json};
use slipway_crds::plans::Plan;
use slipway_crds::{App, Channel, Deploy};

use super::*;

const DEPLOY_UID: &str = "1a2b3c4d-0000-4000-8000-000000000001";
const CHANNEL_UID: &str = "c0000000-0000-4000-8000-00000000000c";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

struct Fixture {
    deploy: Deploy,
    app: App,
    channel: Channel,
    env: BTreeMap<String, String>,
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("fixture parses")
}

fn fixture(template: &str) -> Fixture {
    Fixture {
        deploy: from(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": "blog-next-1", "namespace": "slipway-user-alice", "uid": DEPLOY_UID},
            "spec": {"channel": "blog.next", "sha": SHA}
        })),
        app: from(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "blog", "namespace": "slipway-user-alice", "uid": "a0000000-0000-4000-8000-00000000000a"},
            "spec": {"owner": "alice", "template": template}
        })),
        channel: from(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Channel",
            "metadata": {"name": "blog.next", "namespace": "slipway-user-alice", "uid": CHANNEL_UID},
            "spec": {"app": "blog", "gitRefBinding": "branch:next"}
        })),
        env: BTreeMap::from([
            ("GREETING".to_owned(), "hello".to_owned()),
            ("PORT".to_owned(), "3000".to_owned()),
            ("SVC_READY_FILE".to_owned(), "/tmp/mine".to_owned()),
        ]),
    }
}

fn release(f: &Fixture) -> Release<'_> {
    Release {
        deploy: &f.deploy,
        app: &f.app,
        channel: &f.channel,
        sha: SHA,
        image: "registry.local/alice/blog@sha256:abc",
        env: &f.env,
        plan: Plan::by_tier("starter").expect("starter plan"),
        cpu_request_percent: 100,
    }
}

fn to_json(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).expect("serializes")
}

#[test]
fn names_derive_from_the_channel_and_the_first_eight_hex_of_the_deploy() {
    let f = fixture("app");
    let names = Names::of(&f.deploy).expect("names");
    assert_eq!(names.namespace, "slipway-user-alice");
    assert_eq!(names.service, "blog-next");
    assert_eq!(names.deployment, "blog-next-1a2b3c4d");
    assert_eq!(names.env_secret, "blog-next-1a2b3c4d-env");
    assert_eq!(names.ready_file, "/tmp/.svc-ready-1a2b3c4d");
}

#[test]
fn a_deploy_without_uid_or_namespace_has_no_names() {
    let mut f = fixture("app");
    f.deploy.metadata.uid = None;
    assert!(matches!(
        Names::of(&f.deploy),
        Err(Error::Incomplete("uid"))
    ));
    f.deploy.metadata.uid = Some("xyz".into());
    assert!(matches!(
        Names::of(&f.deploy),
        Err(Error::Incomplete("uid"))
    ));
    f.deploy.metadata.uid = Some(DEPLOY_UID.into());
    f.deploy.metadata.namespace = None;
    assert!(matches!(
        Names::of(&f.deploy),
        Err(Error::Incomplete("namespace"))
    ));
}

#[test]
fn the_env_secret_is_immutable_and_system_keys_win_over_user_keys() {
    let f = fixture("app");
    let release = release(&f);
    let names = Names::of(&f.deploy).expect("names");
    let secret = env_secret(&release, &names).expect("secret");
    assert_eq!(secret.immutable, Some(true));
    let data: BTreeMap<String, String> = secret
        .data
        .clone()
        .expect("data")
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).expect("utf-8")))
        .collect();
    assert_eq!(
        data,
        BTreeMap::from(
            [
                ("GREETING", "hello"),
                ("PORT", "8080"),
                ("SVC_HTTP_PORT", "8080"),
                ("SVC_FORWARD_PORT", "7000"),
                ("SVC_READY_FILE", "/tmp/.svc-ready-1a2b3c4d"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        )
    );
    for key in super::super::SYSTEM_ENV_KEYS {
        assert!(data.contains_key(key), "{key} is injected");
    }
    let meta = to_json(&secret.metadata);
    assert_eq!(meta["labels"]["slipway.dev/deploy"], DEPLOY_UID);
    assert_eq!(meta["labels"]["app.kubernetes.io/component"], "deploy-env");
    assert_eq!(meta["ownerReferences"][0]["uid"], CHANNEL_UID);
    assert_eq!(meta["ownerReferences"][0]["kind"], "Channel");
}

#[test]
fn the_deployment_runs_one_restricted_pod_labelled_with_user_and_sha() {
    let f = fixture("docker");
    let release = release(&f);
    let names = Names::of(&f.deploy).expect("names");
    let d = to_json(&deployment(&release, &names, "busybox:test", false).expect("deployment"));
    assert_eq!(d["metadata"]["name"], "blog-next-1a2b3c4d");
    assert_eq!(d["metadata"]["ownerReferences"][0]["uid"], CHANNEL_UID);
    assert_eq!(d["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["selector"]["matchLabels"],
        json!({"slipway.dev/deploy": DEPLOY_UID})
    );
    let template = &d["spec"]["template"];
    assert_eq!(
        template["metadata"]["labels"],
        json!({
            "slipway.dev/app": "blog", "slipway.dev/channel": "next", "slipway.dev/deploy": DEPLOY_UID,
            "slipway.dev/user": "alice", "slipway.dev/sha": SHA,
            "app.kubernetes.io/managed-by": "slipway", "app.kubernetes.io/component": "run"
        })
    );
    let pod = &template["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(
        pod["shareProcessNamespace"], true,
        "the sandbox is PID 1, so a SIGTERM the app does not handle stops it"
    );
    assert_eq!(
        pod["securityContext"],
        json!({"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": true,
               "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        pod["volumes"][0],
        json!({"name": "tmp", "emptyDir": {"sizeLimit": "512Mi"}}),
        "/tmp is an emptyDir on disk holding at most 4 x the starter plan's 128 MiB"
    );

    let app = &pod["containers"][0];
    assert_eq!(app["name"], "app");
    assert_eq!(app["image"], "registry.local/alice/blog@sha256:abc");
    assert!(
        app.get("command").is_none() && app.get("args").is_none(),
        "the image's own ENTRYPOINT/CMD runs"
    );
    assert_eq!(
        app["envFrom"],
        json!([{"secretRef": {"name": "blog-next-1a2b3c4d-env", "optional": false}}])
    );
    assert!(app.get("env").is_none(), "no SVC_USER or SVC_SHA variables");
    assert_eq!(
        app["ports"],
        json!([
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "forward", "containerPort": 7000, "protocol": "TCP"}
        ])
    );
    assert_eq!(
        app["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true,
               "runAsUser": 10001, "runAsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert_eq!(
        app["resources"],
        json!({"requests": {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "128Mi"},
               "limits": {"cpu": "2000m", "memory": "128Mi", "ephemeral-storage": "512Mi"}})
    );
    assert_eq!(
        app["volumeMounts"],
        json!([{"name": "tmp", "mountPath": "/tmp"}])
    );

    let sidecar = &pod["containers"][1];
    assert_eq!(sidecar["name"], "readiness");
    assert_eq!(
        sidecar["resources"]["limits"]["ephemeral-storage"], "16Mi",
        "every container has an ephemeral-storage limit, so the pod's total is bounded"
    );
    assert_eq!(sidecar["image"], "busybox:test");
    assert_eq!(
        sidecar["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true,
               "runAsUser": 10002, "runAsGroup": 10002, "seccompProfile": {"type": "RuntimeDefault"}}),
        "restricted like the app, as a user of its own: the app sees its processes but cannot touch them"
    );
    assert_eq!(
        sidecar["volumeMounts"][0],
        json!({"name": "tmp", "mountPath": "/tmp", "readOnly": true})
    );
    let env = &sidecar["env"];
    assert_eq!(env[0]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(
        env[2],
        json!({"name": "SVC_READY_FILE", "value": "/tmp/.svc-ready-1a2b3c4d"})
    );
    assert!(sidecar["startupProbe"]["exec"].is_object());
}

#[test]
fn both_runnable_templates_get_the_same_pod_and_static_gets_none() {
    let names = Names::of(&fixture("app").deploy).expect("names");
    let pod_of = |template: &str| {
        let f = fixture(template);
        deployment(&release(&f), &names, "busybox", false).map(|d| to_json(&d.spec))
    };
    assert_eq!(
        pod_of("app").expect("app"),
        pod_of("docker").expect("docker")
    );
    assert!(matches!(pod_of("static"), Err(Error::InvalidSpec(_))));
}

#[test]
fn resources_follow_the_plan() {
    let pro = app_resources(Plan::by_tier("pro").expect("pro"), 100);
    assert_eq!(
        to_json(&pro),
        json!({"requests": {"cpu": "4000m", "memory": "4096Mi", "ephemeral-storage": "4096Mi"},
               "limits": {"cpu": "8000m", "memory": "4096Mi", "ephemeral-storage": "16384Mi"}})
    );
    for plan in slipway_crds::plans::PLANS {
        assert_eq!(
            ephemeral_storage_mib(&plan),
            plan.mem_limit_mb * 4,
            "{}",
            plan.tier
        );
    }
    let basic = app_resources(Plan::by_tier("basic").expect("basic"), 100);
    assert_eq!(to_json(&basic)["requests"]["cpu"], "250m");
}

#[test]
fn an_overcommitting_platform_requests_part_of_the_cpu_share_and_keeps_the_rest_of_the_plan() {
    let basic = Plan::by_tier("basic").expect("basic");
    let full = to_json(&app_resources(basic, 100));
    let fifth = to_json(&app_resources(basic, 20));
    assert_eq!(fifth["requests"]["cpu"], "50m");
    assert_eq!(
        fifth["limits"], full["limits"],
        "the burst, memory and disk stay the plan's"
    );
    assert_eq!(fifth["requests"]["memory"], full["requests"]["memory"]);
    let starter = Plan::by_tier("starter").expect("starter");
    assert_eq!(
        to_json(&app_resources(starter, 1))["requests"]["cpu"],
        "1m",
        "one percent of the smallest share is still a whole millicore"
    );
}

#[test]
fn the_service_maps_port_80_to_the_app_port_and_7000_to_the_forward_port_on_the_deploys_pods() {
    let f = fixture("app");
    let names = Names::of(&f.deploy).expect("names");
    let svc = to_json(&service(&release(&f), &names).expect("service"));
    assert_eq!(svc["metadata"]["name"], "blog-next");
    assert_eq!(svc["metadata"]["ownerReferences"][0]["uid"], CHANNEL_UID);
    assert_eq!(
        svc["spec"],
        json!({
            "selector": {"slipway.dev/deploy": DEPLOY_UID},
            "ports": [
                {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
                {"name": "forward", "port": 7000, "targetPort": "forward", "protocol": "TCP"}
            ]
        })
    );
    assert_eq!(svc["apiVersion"], "v1", "ready for server-side apply");
}

#[test]
fn the_budget_holds_the_deploys_one_serving_pod_and_lets_an_unready_one_go() {
    let f = fixture("app");
    let names = Names::of(&f.deploy).expect("names");
    let mut deployment = deployment(&release(&f), &names, "busybox", false).expect("deployment");
    assert!(
        disruption_budget(&deployment).is_err(),
        "a budget needs its Deployment as the cluster holds it, with a uid to be owned by"
    );
    deployment.metadata.uid = Some("5f0c1d2e-0000-4000-8000-00000000d301".to_owned());
    let budget = to_json(&disruption_budget(&deployment).expect("budget"));
    assert_eq!(budget["metadata"]["name"], names.deployment.as_str());
    assert_eq!(
        budget["metadata"]["ownerReferences"][0]["uid"],
        "5f0c1d2e-0000-4000-8000-00000000d301"
    );
    assert_eq!(
        budget["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    assert_eq!(
        budget["metadata"]["labels"]["app.kubernetes.io/component"],
        "run"
    );
    assert_eq!(
        budget["spec"],
        json!({
            "minAvailable": 1,
            "selector": {"matchLabels": {"slipway.dev/deploy": DEPLOY_UID}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow"
        })
    );
}

#[test]
fn superseded_objects_are_the_channels_others_of_one_component() {
    let f = fixture("app");
    let names = Names::of(&f.deploy).expect("names");
    assert_eq!(
        superseded_selector(&f.channel, &names, "run"),
        format!(
            "slipway.dev/app=blog,slipway.dev/channel=next,app.kubernetes.io/component=run,\
             slipway.dev/deploy,slipway.dev/deploy!={DEPLOY_UID}"
        )
    );
}

#[test]
fn a_registry_that_takes_tokens_gets_the_channel_s_pull_secret_named_in_the_pod() {
    let f = fixture("docker");
    let release = release(&f);
    let names = Names::of(&f.deploy).expect("names");
    let with = to_json(&deployment(&release, &names, "busybox", true).expect("deployment"));
    assert_eq!(
        with["spec"]["template"]["spec"]["imagePullSecrets"],
        json!([{"name": "blog-next-registry"}])
    );
    let without = to_json(&deployment(&release, &names, "busybox", false).expect("deployment"));
    assert!(without["spec"]["template"]["spec"]["imagePullSecrets"].is_null());

    let secret = to_json(
        &pull_secret(&release, &names, "reg:5001", "ns/blog-next", "f00d").expect("secret"),
    );
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson");
    assert_eq!(secret["metadata"]["name"], "blog-next-registry");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], CHANNEL_UID);
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    let config: Value = serde_json::from_slice(
        &engine
            .decode(secret["data"][".dockerconfigjson"].as_str().expect("data"))
            .expect("base64"),
    )
    .expect("json");
    let entry = &config["auths"]["reg:5001"];
    assert_eq!(
        (entry["username"].as_str(), entry["password"].as_str()),
        (Some("ns/blog-next"), Some("f00d"))
    );
    assert_eq!(entry["auth"], engine.encode("ns/blog-next:f00d"));
}
