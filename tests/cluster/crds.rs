//! The generated CRDs against a real kube-apiserver: they install and become Established, every kind
//! round-trips, and the apiserver itself refuses invalid objects through the CEL rules, with the same messages the
//! REST API uses (both come from `slipway_crds::names::messages`).

use anyhow::Result;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use slipway_crds::names::messages;
use slipway_crds::{App, Channel, Deploy, Domain, Forward};
use slipway_testkit::setup;

#[tokio::test]
async fn the_apiserver_is_the_pinned_release() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let version = client.apiserver_version().await?;
    eprintln!("kube-apiserver {}", version.git_version);
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "34")
    );
    Ok(())
}

#[tokio::test]
async fn crds_install_and_become_established() -> Result<()> {
    let client = slipway_testkit::client().await?;
    slipway_testkit::ensure_crds(&client).await?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for want in slipway_crds::crds() {
        let name = want.metadata.name.clone().unwrap_or_default();
        let have = api.get(&name).await?;
        let conditions = have.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name} is not Established"
        );
        assert_eq!(
            have.spec.versions[0].additional_printer_columns,
            want.spec.versions[0].additional_printer_columns,
            "{name}: printer columns"
        );
    }
    Ok(())
}

/// Creates `obj`, reads it back, finds it in a list, patches its status, deletes it.
async fn round_trip<K>(client: &Client, ns: &str, obj: Value, status: Value) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + serde::Serialize,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let obj: K = serde_json::from_value(obj)?;
    let name = obj.meta().name.clone().unwrap_or_default();
    let created = api.create(&PostParams::default(), &obj).await?;
    assert_eq!(created.meta().generation, Some(1));

    let fetched = serde_json::to_value(api.get(&name).await?)?;
    assert_eq!(
        fetched["spec"],
        serde_json::to_value(&obj)?["spec"],
        "{name}: spec round-trips"
    );

    let listed = api.list(&ListParams::default()).await?;
    assert!(
        listed
            .items
            .iter()
            .any(|o| o.meta().name.as_deref() == Some(name.as_str())),
        "{name} is listed"
    );

    let patched = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    let patched = serde_json::to_value(patched)?;
    for (key, value) in status.as_object().into_iter().flatten() {
        assert_eq!(
            &patched["status"][key], value,
            "{name}: status.{key} after patch"
        );
    }
    assert_eq!(
        patched["metadata"]["generation"], 1,
        "{name}: a status patch leaves the generation alone"
    );

    api.delete(&name, &DeleteParams::default()).await?;
    slipway_testkit::wait_until(std::time::Duration::from_secs(10), || {
        let api = api.clone();
        let name = name.clone();
        async move { Ok(api.get_opt(&name).await?.is_none()) }
    })
    .await?;
    Ok(())
}

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn ready(status: &str) -> Value {
    json!([{
        "type": "Ready", "status": status, "reason": "Reconciled", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
    }])
}

#[tokio::test]
async fn every_kind_round_trips() -> Result<()> {
    let (client, ns) = setup("roundtrip").await?;
    let ns = ns.name();
    round_trip::<App>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": "blog"},
               "spec": {"template": "app", "owner": "alice", "portForwardingEnabled": true,
                        "agentProtectedActionsEnabled": false, "externalDbAccessEnabled": false,
                        "externalBlobAccessEnabled": false}}),
        json!({"observedGeneration": 1, "repoUrl": "https://git.example.test/alice/blog.git", "conditions": ready("True")}),
    )
    .await?;
    round_trip::<Channel>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "metadata": {"name": "blog.staging"},
               "spec": {"app": "blog", "gitRefBinding": "branch:staging"}}),
        json!({"phase": "running", "hostname": "staging-blog-alice.apps.example.test", "currentSha": SHA,
               "pendingDeploy": {"deployId": "5f0c3c5e-8a43-4f5e-9a59-2f0f8f1f7f2a", "deployName": "blog.staging-1",
                                 "sha": SHA, "status": "running"},
               "conditions": ready("True")}),
    )
    .await?;
    round_trip::<Deploy>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy", "metadata": {"name": "blog.staging-1"},
               "spec": {"channel": "blog.staging", "sha": "master"}}),
        json!({"phase": "success", "resolvedSha": SHA, "startedAt": "2026-01-01T00:00:00Z",
               "finishedAt": "2026-01-01T00:01:00Z"}),
    )
    .await?;
    round_trip::<Domain>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "metadata": {"name": "www.example.com"},
               "spec": {"channel": "blog.prod", "domain": "www.example.com"}}),
        json!({"phase": "pending", "reason": "txt_nxdomain",
               "dnsRecords": {"txtHost": "_svc.www.example.com", "txtValue": "svc-verify-abc",
                              "cnameTarget": "blog-alice.apps.example.test", "aValues": ["192.0.2.10"]}}),
    )
    .await?;
    round_trip::<Forward>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Forward", "metadata": {"name": "blog.prod"},
               "spec": {"channel": "blog.prod", "allowCidrs": ["203.0.113.0/24", "2001:db8::/32"]}}),
        json!({"host": "forward.example.test", "port": 30007, "active": true}),
    )
    .await?;
    Ok(())
}

/// Applies `obj` and returns the apiserver's refusal message; fails when the object is accepted.
async fn refused(client: &Client, ns: &str, obj: Value) -> Result<String> {
    let kind = obj["kind"].as_str().unwrap_or_default().to_owned();
    let resource = kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "slipway.dev",
        "v1alpha1",
        &kind,
    ));
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let obj: kube::api::DynamicObject = serde_json::from_value(obj)?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => anyhow::bail!("{kind} {:?} was accepted", o.metadata.name),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "refusals are 422 Invalid: {status:?}");
            Ok(status.message)
        }
        Err(e) => Err(e.into()),
    }
}

fn app(name: &str) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": name},
           "spec": {"owner": "alice"}})
}

fn channel(name: &str, app: &str, binding: &str) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "metadata": {"name": name},
           "spec": {"app": app, "gitRefBinding": binding}})
}

fn forward(cidrs: Vec<String>) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Forward", "metadata": {"name": "blog.prod"},
           "spec": {"channel": "blog.prod", "allowCidrs": cidrs}})
}

#[tokio::test]
async fn the_apiserver_refuses_invalid_objects_with_the_rule_messages() -> Result<()> {
    let (client, ns) = setup("cel").await?;
    let ns = ns.name();
    let deploy = |spec: Value| json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy", "metadata": {"name": "d1"}, "spec": spec});
    let domain = |d: &str| json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "metadata": {"name": "d1"}, "spec": {"channel": "blog.prod", "domain": d}});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("app name with a dot", app("my.blog"), messages::APP_NAME),
        (
            "app name of 41 characters",
            app(&"a".repeat(41)),
            messages::APP_NAME,
        ),
        (
            "reserved prefix api",
            app("api-gateway"),
            messages::APP_NAME_RESERVED,
        ),
        (
            "reserved prefix staging",
            app("staging"),
            messages::APP_NAME_RESERVED,
        ),
        (
            "bad owner",
            json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": "blog"}, "spec": {"owner": "Alice"}}),
            messages::USERNAME,
        ),
        (
            "owner with a hyphen (it would squat other owners' hostnames)",
            json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": "a"}, "spec": {"owner": "b-c"}}),
            messages::USERNAME,
        ),
        (
            "wildcard binding",
            channel("blog.all", "blog", "branch:*"),
            messages::BINDING_WILDCARD,
        ),
        (
            "binding without branch:",
            channel("blog.dev", "blog", "dev"),
            messages::BINDING,
        ),
        (
            "binding with ..",
            channel("blog.dev", "blog", "branch:a..b"),
            messages::BINDING,
        ),
        (
            "channel of another app",
            channel("shop.dev", "blog", "branch:dev"),
            "a Channel is named <app>.<channel>",
        ),
        (
            "channel name too long",
            channel(&format!("blog.{}", "c".repeat(41)), "blog", "branch:dev"),
            messages::CHANNEL_NAME,
        ),
        (
            "prod on another branch",
            channel("blog.prod", "blog", "branch:main"),
            messages::PROD_BINDING,
        ),
        (
            "17 CIDRs",
            forward((0..17).map(|i| format!("10.0.{i}.0/24")).collect()),
            messages::TOO_MANY_CIDRS,
        ),
        (
            "not a CIDR",
            forward(vec!["10.0.0.0/33".into()]),
            messages::CIDR,
        ),
        (
            "deploy without sha or ref",
            deploy(json!({"channel": "blog.prod"})),
            "a deploy needs sha or ref",
        ),
        (
            "deploy with a bad sha",
            deploy(json!({"channel": "blog.prod", "sha": "not a sha"})),
            "sha must be a 40-character hexadecimal commit id or a branch name",
        ),
        (
            "deploy with a bad ref",
            deploy(json!({"channel": "blog.prod", "ref": "refs/heads/-x"})),
            messages::BRANCH,
        ),
        (
            "domain with one label",
            domain("localhost"),
            messages::DOMAIN,
        ),
        (
            "domain with a trailing dot",
            domain("example.com."),
            messages::DOMAIN,
        ),
    ];
    for (what, obj, message) in cases {
        let got = refused(&client, ns, obj)
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        assert!(
            got.contains(message),
            "{what}: expected {message:?} in {got:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_apiserver_and_the_rust_parser_agree_on_app_names() -> Result<()> {
    let (client, ns) = setup("agree").await?;
    let api: Api<App> = Api::namespaced(client, ns.name());
    let names = [
        "a",
        "blog",
        "my-app",
        "a1b2",
        "gi",
        "gitx",
        "github",
        "apis",
        "apple",
        "adminx",
        "wwwx",
        "previewer",
        "stagingx",
        "x-www",
        "0",
        "9lives",
        &"b".repeat(40),
        &"b".repeat(41),
        "a.b",
        "web.app",
    ];
    for name in names {
        let rust_accepts = name.parse::<slipway_crds::names::AppName>().is_ok();
        let obj: App = serde_json::from_value(app(name))?;
        let apiserver_accepts = api.create(&PostParams::default(), &obj).await.is_ok();
        assert_eq!(
            apiserver_accepts, rust_accepts,
            "{name}: apiserver and AppName::parse disagree"
        );
    }
    Ok(())
}

#[tokio::test]
async fn immutable_fields_stay_put() -> Result<()> {
    let (client, ns) = setup("immutable").await?;
    let apps: Api<App> = Api::namespaced(client.clone(), ns.name());
    apps.create(
        &PostParams::default(),
        &serde_json::from_value(app("blog"))?,
    )
    .await?;
    let created = apps.get("blog").await?;
    assert_eq!(
        created.spec.template,
        slipway_crds::Template::Static,
        "template defaults to static"
    );

    let change = |patch: Value| Patch::Merge(patch);
    let err = apps
        .patch(
            "blog",
            &PatchParams::default(),
            &change(json!({"spec": {"template": "docker"}})),
        )
        .await;
    assert_refused(err, "template is immutable");
    let err = apps
        .patch(
            "blog",
            &PatchParams::default(),
            &change(json!({"spec": {"owner": "bob"}})),
        )
        .await;
    assert_refused(err, "owner is immutable");
    // Mutable toggles still change.
    apps.patch(
        "blog",
        &PatchParams::default(),
        &change(json!({"spec": {"portForwardingEnabled": true}})),
    )
    .await?;

    let channels: Api<Channel> = Api::namespaced(client.clone(), ns.name());
    channels
        .create(
            &PostParams::default(),
            &serde_json::from_value(channel("blog.dev", "blog", "branch:dev"))?,
        )
        .await?;
    let err = channels
        .patch(
            "blog.dev",
            &PatchParams::default(),
            &change(json!({"spec": {"app": "shop"}})),
        )
        .await;
    assert_refused(err, "app is immutable");

    let deploys: Api<Deploy> = Api::namespaced(client, ns.name());
    let d = json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy", "metadata": {"name": "d1"}, "spec": {"channel": "blog.dev", "ref": "dev"}});
    deploys
        .create(&PostParams::default(), &serde_json::from_value(d)?)
        .await?;
    let err = deploys
        .patch(
            "d1",
            &PatchParams::default(),
            &change(json!({"spec": {"ref": "main"}})),
        )
        .await;
    assert_refused(err, "a Deploy's spec is immutable");
    Ok(())
}

fn assert_refused<T: std::fmt::Debug>(result: kube::Result<T>, message: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert!(
                status.message.contains(message),
                "expected {message:?} in {:?}",
                status.message
            )
        }
        other => panic!("expected a refusal with {message:?}, got {other:?}"),
    }
}
