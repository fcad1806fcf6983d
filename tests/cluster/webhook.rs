//! The admission webhook behind a real kube-apiserver: `slipway_webhooks::serve` runs in the test process on
//! 127.0.0.1 with a certificate from a CA made for the test, a ValidatingWebhookConfiguration with that CA as its
//! caBundle points the apiserver at it, and objects created through the apiserver (with kube and with kubectl) are
//! refused with exactly the messages of the shared rules, the ones the REST API gives.
//!
//! Each test registers its own configuration, scoped by a namespace selector to namespaces that carry a label value
//! of its own, so other tests (and other test binaries on the same control plane) never reach its webhook. The
//! webhook answers uniqueness and counting rules from watch caches; a test waits until the webhook has seen the
//! objects a rule depends on before it creates the object that rule must refuse.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::FutureExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use slipway_crds::labels;
use slipway_crds::names::{DomainName, GitRefBinding, messages};
use slipway_crds::plans::Plan;
use slipway_crds::{App, Channel, Deploy, Domain, rules};
use slipway_testkit::TestNamespace;
use slipway_testkit::tls::{TempDir, TestPki, https_request};
use slipway_webhooks::lookup::Lookup;
use slipway_webhooks::{Caches, TlsFiles};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Namespace label that routes a test's namespaces to its own webhook registration.
const SELECTOR: &str = "slipway.dev/webhook-test";
/// The webhook's name in every registration (what the apiserver quotes in a denial).
const WEBHOOK: &str = "validate.slipway.dev";
/// The platform domain the webhook is told (custom domains under it are refused).
const APP_DOMAIN: &str = "apps.slipway.test";

/// A short random hex string, for names that must not collide with other tests on the same control plane.
fn random() -> String {
    let n = std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now());
    format!("{:08x}", n as u32)
}

/// A webhook served from this process and registered with the apiserver; unregistered when dropped.
struct Webhook {
    id: String,
    addr: SocketAddr,
    ca_pem: String,
    caches: Caches,
    /// What the replica's Domain list shows, when it is one that lags.
    lagging: Option<Arc<Lagging>>,
    /// Whether dropping it deletes its registration (the first replica of a registration holds it).
    registered: bool,
    stop: Option<oneshot::Sender<()>>,
    _dir: TempDir,
}

/// A replica whose watch of Domains lags: its list of Domains is the one [`Lagging::catch_up`] last took, as a
/// replica's cache is until the watch event of a deletion reaches it; everything else is its real caches'.
struct Lagging {
    caches: Caches,
    domains: std::sync::Mutex<Vec<Arc<Domain>>>,
}

impl Lagging {
    /// Takes the Domains the caches hold now as the list the replica shows from here on.
    fn catch_up(&self) {
        *self
            .domains
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.caches.domains();
    }
}

impl Lookup for Lagging {
    async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<slipway_webhooks::lookup::Labels>, slipway_webhooks::lookup::LookupError>
    {
        self.caches.namespace_labels(name).await
    }

    async fn app(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<App>>, slipway_webhooks::lookup::LookupError> {
        self.caches.app(ns, name).await
    }

    async fn channel(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<Channel>>, slipway_webhooks::lookup::LookupError> {
        self.caches.channel(ns, name).await
    }

    fn readiness(&self) -> slipway_webhooks::lookup::Readiness {
        self.caches.readiness()
    }

    fn apps(&self) -> Vec<Arc<App>> {
        self.caches.apps()
    }

    fn channels(&self) -> Vec<Arc<Channel>> {
        self.caches.channels()
    }

    fn domains(&self) -> Vec<Arc<Domain>> {
        self.domains
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    async fn read_domains(
        &self,
        domain: &str,
        ns: &str,
        channel: &str,
    ) -> Result<Vec<Arc<Domain>>, slipway_webhooks::lookup::LookupError> {
        self.caches.read_domains(domain, ns, channel).await
    }

    fn app_domain(&self) -> Option<&str> {
        self.caches.app_domain()
    }
}

impl Webhook {
    /// Starts the webhook and waits until its caches are loaded. Registers nothing.
    async fn serve(client: &Client) -> Result<Self> {
        Self::start(client, false).await
    }

    /// Starts the webhook (one whose Domain list lags, with `lagging`) and waits until its caches are loaded.
    async fn start(client: &Client, lagging: bool) -> Result<Self> {
        slipway_testkit::ensure_crds(client).await?;
        let dir = TempDir::new("webhook")?;
        let pki = TestPki::new()?;
        let (cert, key) = pki.serving_cert(&["127.0.0.1"])?.write_to(dir.path())?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let caches = Caches::start(client.clone(), Some(APP_DOMAIN.into()));
        let (stop, stopped) = oneshot::channel::<()>();
        let tls = TlsFiles { cert, key };
        let reload = Duration::from_secs(1);
        let shutdown = async {
            let _ = stopped.await;
        };
        let lagging = lagging.then(|| {
            Arc::new(Lagging {
                caches: caches.clone(),
                domains: Default::default(),
            })
        });
        let served = match &lagging {
            Some(lagging) => slipway_webhooks::serve_lookup(
                listener,
                tls,
                reload,
                lagging.clone(),
                Default::default(),
                shutdown,
            )
            .boxed(),
            None => slipway_webhooks::serve(
                listener,
                tls,
                reload,
                caches.clone(),
                Default::default(),
                shutdown,
            )
            .boxed(),
        };
        tokio::spawn(async move {
            if let Err(e) = served.await {
                eprintln!("webhook stopped: {e:#}");
            }
        });
        let readiness = caches.wait_until_ready(Duration::from_secs(30)).await;
        ensure!(
            readiness == slipway_webhooks::lookup::Readiness::Ready,
            "webhook caches: {readiness:?}"
        );
        if let Some(lagging) = &lagging {
            lagging.catch_up();
        }
        Ok(Self {
            id: random(),
            addr,
            ca_pem: pki.ca_pem().to_owned(),
            caches,
            lagging,
            registered: false,
            stop: Some(stop),
            _dir: dir,
        })
    }

    /// Starts the webhook and registers it for namespaces labelled with this webhook's id.
    async fn register(client: &Client) -> Result<Self> {
        let mut webhook = Self::serve(client).await?;
        webhook.register_with(client, &[]).await?;
        Ok(webhook)
    }

    /// Starts two replicas, the second one lagging, and registers both, as two webhooks of one registration: the
    /// apiserver asks each, so an object is admitted only when both admit it (and either refusing is what a
    /// refusal from one replica of two would be, half of the time).
    async fn register_replicas(client: &Client) -> Result<(Self, Self)> {
        let mut first = Self::serve(client).await?;
        let lagging = Self::start(client, true).await?;
        first.register_with(client, &[&lagging]).await?;
        Ok((first, lagging))
    }

    /// Registers this webhook and `others` in one registration named after this one, for namespaces labelled with
    /// this one's id.
    async fn register_with(&mut self, client: &Client, others: &[&Webhook]) -> Result<()> {
        let hooks: Vec<Value> = std::iter::once(&*self)
            .chain(others.iter().copied())
            .enumerate()
            .map(|(i, hook)| {
                json!({
                    "name": if i == 0 { WEBHOOK.to_owned() } else { format!("replica{i}.{WEBHOOK}") },
                    "clientConfig": {"url": format!("https://{}/validate", hook.addr)},
                    "rules": [{
                        "apiGroups": ["slipway.dev"], "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["apps", "channels", "deploys", "domains", "forwards"],
                        "scope": "Namespaced",
                    }],
                    "namespaceSelector": {"matchLabels": {SELECTOR: self.id}},
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                })
            })
            .collect();
        let mut config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.config_name()},
            "webhooks": hooks,
        }))?;
        let bundles = std::iter::once(&*self).chain(others.iter().copied());
        for (hook, server) in config.webhooks.iter_mut().flatten().zip(bundles) {
            hook.client_config.ca_bundle = Some(ByteString(server.ca_pem.as_bytes().to_vec()));
        }
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &config)
            .await
            .context("register the webhook")?;
        self.registered = true;
        Ok(())
    }

    fn config_name(&self) -> String {
        format!("slipway-webhook-test-{}", self.id)
    }

    /// A namespace routed to this webhook, with `labels` besides. Returns once the apiserver calls the webhook for
    /// it (a registration takes a moment to reach the apiserver's admission chain).
    async fn namespace(
        &self,
        client: &Client,
        prefix: &str,
        labels: &[(&str, &str)],
    ) -> Result<TestNamespace> {
        let mut all = vec![(SELECTOR, self.id.as_str())];
        all.extend_from_slice(labels);
        let ns = TestNamespace::create_with_labels(client, prefix, &all).await?;
        let probe: Deploy = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy",
            "metadata": {"name": "probe"}, "spec": {"channel": "probe.prod", "sha": "master"}
        }))?;
        let api: Api<Deploy> = Api::namespaced(client.clone(), ns.name());
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        slipway_testkit::wait_until(Duration::from_secs(30), || {
            let (api, probe, dry_run) = (api.clone(), probe.clone(), dry_run.clone());
            async move {
                match api.create(&dry_run, &probe).await {
                    Ok(_) => Ok(false),
                    Err(kube::Error::Api(s)) if s.message.contains(WEBHOOK) => Ok(true),
                    Err(e) => Err(e.into()),
                }
            }
        })
        .await
        .context("the apiserver never called the registered webhook")?;
        Ok(ns)
    }

    /// Waits until the webhook's caches hold every App, Channel and Domain of `ns` that the apiserver lists.
    async fn settle(&self, client: &Client, ns: &str) -> Result<()> {
        let want_apps = names::<App>(client, ns).await?;
        let want_channels = names::<Channel>(client, ns).await?;
        let want_domains = names::<Domain>(client, ns).await?;
        slipway_testkit::wait_until(Duration::from_secs(20), || {
            let done = want_apps.is_subset(&cached_names(self.caches.apps(), ns))
                && want_channels.is_subset(&cached_names(self.caches.channels(), ns))
                && want_domains.is_subset(&cached_names(self.caches.domains(), ns));
            async move { Ok(done) }
        })
        .await
        .with_context(|| format!("the webhook's caches never caught up with namespace {ns}"))?;
        Ok(())
    }
}

fn cached_names<K: Resource>(objs: Vec<std::sync::Arc<K>>, ns: &str) -> BTreeSet<String> {
    objs.iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

async fn names<K>(client: &Client, ns: &str) -> Result<BTreeSet<String>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|o| o.meta().name.clone())
        .collect())
}

impl Drop for Webhook {
    /// Stops the server and deletes the registration from a thread with a client of its own (the test's runtime
    /// may be the one dropping us).
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if !self.registered {
            return;
        }
        let name = self.config_name();
        let deleted = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = slipway_testkit::client().await?;
                Api::<ValidatingWebhookConfiguration>::all(client)
                    .delete(&name, &DeleteParams::default())
                    .await?;
                Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) | Err(e) =
            deleted.map_err(|_| anyhow::anyhow!("webhook cleanup panicked"))
        {
            eprintln!("warning: could not delete the webhook registration: {e:#}");
        }
    }
}

fn app(name: &str, owner: &str) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "App", "metadata": {"name": name},
           "spec": {"owner": owner}})
}

fn channel(app: &str, channel: &str, branch: &str) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Channel", "metadata": {"name": format!("{app}.{channel}")},
           "spec": {"app": app, "gitRefBinding": format!("branch:{branch}")}})
}

fn domain(channel: &str, domain: &str) -> Value {
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain", "metadata": {"name": domain},
           "spec": {"channel": channel, "domain": domain}})
}

/// Creates `obj` in `ns` through the apiserver.
async fn create<K>(client: &Client, ns: &str, obj: Value) -> Result<K, kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
}

/// The status code and the rule's message of a webhook denial; fails on anything else.
fn denial<K: std::fmt::Debug>(result: Result<K, kube::Error>) -> Result<(u16, String)> {
    let prefix = format!("admission webhook \"{WEBHOOK}\" denied the request: ");
    match result {
        Ok(obj) => bail!("admitted: {obj:?}"),
        Err(kube::Error::Api(status)) => match status.message.strip_prefix(&prefix) {
            Some(message) => Ok((status.code, message.to_owned())),
            None => bail!("not a denial of the webhook: {status:?}"),
        },
        Err(e) => bail!("request failed: {e}"),
    }
}

#[tokio::test]
async fn a_second_channel_on_a_branch_is_refused_and_a_new_branch_admitted() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    let owner = format!("u{}", random());
    let ns = webhook
        .namespace(&client, "wh-branch", &[(labels::OWNER, &owner)])
        .await?;
    let ns = ns.name();
    create::<App>(&client, ns, app("blog", &owner)).await?;
    create::<Channel>(&client, ns, channel("blog", "prod", "master")).await?;
    create::<Channel>(&client, ns, channel("blog", "next", "next")).await?;
    webhook.settle(&client, ns).await?;

    let (code, message) =
        denial(create::<Channel>(&client, ns, channel("blog", "main", "master")).await)?;
    let expected =
        rules::one_channel_per_branch(&GitRefBinding::prod(), [("prod", "branch:master")])
            .unwrap_err()
            .message;
    assert_eq!(message, expected);
    assert_eq!(code, 400);

    // kubectl apply gets the same words.
    let yaml = "apiVersion: slipway.dev/v1alpha1\nkind: Channel\nmetadata: {name: blog.main}\nspec: {app: blog, gitRefBinding: 'branch:master'}\n";
    let (ok, out) = kubectl_apply(ns, yaml).await?;
    assert!(!ok, "kubectl apply succeeded: {out}");
    assert!(out.contains(&expected), "kubectl said: {out}");

    // Moving an existing channel onto a followed branch is refused the same way.
    let api: Api<Channel> = Api::namespaced(client.clone(), ns);
    let patch = json!({"spec": {"gitRefBinding": "branch:master"}});
    let moved = api
        .patch(
            "blog.next",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await;
    assert_eq!(denial(moved)?.1, expected);

    create::<Channel>(&client, ns, channel("blog", "dev", "dev")).await?;
    Ok(())
}

#[tokio::test]
async fn a_channel_over_the_plan_cap_is_refused() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    let owner = format!("u{}", random());
    let ns = webhook
        .namespace(
            &client,
            "wh-cap",
            &[(labels::OWNER, &owner), (labels::PLAN, "starter")],
        )
        .await?;
    let ns = ns.name();
    create::<App>(&client, ns, app("blog", &owner)).await?;
    create::<Channel>(&client, ns, channel("blog", "prod", "master")).await?;
    create::<App>(&client, ns, app("shop", &owner)).await?;
    create::<Channel>(&client, ns, channel("shop", "prod", "master")).await?;
    create::<Channel>(&client, ns, channel("shop", "next", "next")).await?;
    webhook.settle(&client, ns).await?;

    let (code, message) =
        denial(create::<Channel>(&client, ns, channel("blog", "next", "next")).await)?;
    let starter = Plan::by_tier("starter").context("starter plan")?;
    assert_eq!(
        message,
        rules::within_channel_cap(starter, 3).unwrap_err().message
    );
    assert_eq!(code, 403);
    Ok(())
}

#[tokio::test]
async fn references_to_missing_objects_are_refused() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    let ns = webhook.namespace(&client, "wh-missing", &[]).await?;
    let ns = ns.name();

    let (code, message) =
        denial(create::<Channel>(&client, ns, channel("ghost", "prod", "master")).await)?;
    assert_eq!(
        message,
        format!("app ghost does not exist in namespace {ns}")
    );
    assert_eq!(code, 404);
    let (_, message) =
        denial(create::<Domain>(&client, ns, domain("ghost.prod", "ghost.example.com")).await)?;
    assert_eq!(
        message,
        format!("channel ghost.prod does not exist in namespace {ns}")
    );

    // An App and its Channel created back to back (as `kubectl apply -f` of one file does) are both admitted:
    // the webhook confirms a cache miss with the apiserver before refusing.
    let owner = format!("u{}", random());
    create::<App>(&client, ns, app("blog", &owner)).await?;
    create::<Channel>(&client, ns, channel("blog", "prod", "master")).await?;
    create::<Deploy>(
        &client,
        ns,
        json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Deploy", "metadata": {"name": "blog.prod-1"},
               "spec": {"channel": "blog.prod", "sha": "master"}}),
    )
    .await?;
    Ok(())
}

/// Runs `kubectl apply -n ns -f -` with `yaml` on stdin; returns (success, stdout + stderr). Async, because the
/// webhook the apiserver calls meanwhile runs on this test's runtime.
async fn kubectl_apply(ns: &str, yaml: &str) -> Result<(bool, String)> {
    let mut child = tokio::process::Command::new(slipway_testkit::kubectl())
        .args(["apply", "-n", ns, "-f", "-"])
        .env("KUBECONFIG", slipway_testkit::kubeconfig_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("run kubectl (make test puts the control plane's kubectl on PATH, or set SLIPWAY_KUBECTL)")?;
    let mut stdin = child.stdin.take().context("kubectl stdin")?;
    stdin.write_all(yaml.as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

#[tokio::test]
async fn kubectl_apply_of_an_app_for_another_owner_gets_the_api_message() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    let owner = format!("u{}", random());
    let ns = webhook
        .namespace(&client, "wh-owner", &[(labels::OWNER, &owner)])
        .await?;
    let ns = ns.name();

    let yaml = "apiVersion: slipway.dev/v1alpha1\nkind: App\nmetadata:\n  name: blog\nspec:\n  owner: mallory\n";
    let (ok, out) = kubectl_apply(ns, yaml).await?;
    let message = format!("the owner of an app in namespace {ns} must be {owner}, not mallory");
    assert!(!ok, "kubectl apply succeeded: {out}");
    assert!(
        out.contains(&format!(
            "admission webhook \"{WEBHOOK}\" denied the request: {message}"
        )),
        "{out}"
    );
    assert_eq!(
        denial(create::<App>(&client, ns, app("blog", "mallory")).await)?.1,
        message
    );

    let (ok, out) = kubectl_apply(ns, &yaml.replace("mallory", &owner)).await?;
    assert!(ok, "{out}");
    assert!(out.contains("app.slipway.dev/blog created"), "{out}");
    Ok(())
}

#[tokio::test]
async fn hostnames_are_unique_and_no_owner_forms_anothers() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    // Channel a of app b and app a-b, both of owner c<r>, want the hostname a-b-c<r>: the second is refused.
    let r = random();
    let owner = format!("c{r}");
    let first = webhook
        .namespace(&client, "wh-host1", &[(labels::OWNER, &owner)])
        .await?;
    create::<App>(&client, first.name(), app("b", &owner)).await?;
    create::<Channel>(&client, first.name(), channel("b", "a", "a")).await?;
    webhook.settle(&client, first.name()).await?;
    let (code, message) = denial(create::<App>(&client, first.name(), app("a-b", &owner)).await)?;
    let label = format!("a-b-c{r}");
    assert_eq!(message, rules::hostname_taken(&label).message);
    assert_eq!(code, 400);

    // Across owners it cannot happen: owner b-c<r>, whose app a would want a-b-c<r>, is refused by the
    // apiserver's own rule before any hostname is looked at.
    let squatter = format!("b-c{r}");
    let second = webhook
        .namespace(&client, "wh-host2", &[(labels::OWNER, &squatter)])
        .await?;
    match create::<App>(&client, second.name(), app("a", &squatter)).await {
        Err(kube::Error::Api(status)) => {
            assert!(status.message.contains(messages::USERNAME), "{status:?}");
        }
        other => bail!("owner {squatter} was not refused: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_domain_is_attached_once_platform_wide() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::register(&client).await?;
    let hostname = format!("www.d{}.example.com", random());
    let mut namespaces = Vec::new();
    for i in 0..2 {
        let owner = format!("u{}", random());
        let ns = webhook
            .namespace(
                &client,
                &format!("wh-domain{i}"),
                &[(labels::OWNER, &owner)],
            )
            .await?;
        create::<App>(&client, ns.name(), app("blog", &owner)).await?;
        create::<Channel>(&client, ns.name(), channel("blog", "prod", "master")).await?;
        namespaces.push(ns);
    }
    create::<Domain>(
        &client,
        namespaces[0].name(),
        domain("blog.prod", &hostname),
    )
    .await?;
    webhook.settle(&client, namespaces[0].name()).await?;

    let (code, message) = denial(
        create::<Domain>(
            &client,
            namespaces[1].name(),
            domain("blog.prod", &hostname),
        )
        .await,
    )?;
    let parsed: DomainName = hostname.parse()?;
    assert_eq!(
        message,
        rules::domain_free(&parsed, [hostname.as_str()])
            .unwrap_err()
            .message
    );
    assert_eq!(code, 409);

    // The REST API's name rules hold for kubectl too: nothing under the platform's own domain.
    let platform = format!("shop{}.{APP_DOMAIN}", random());
    let (code, message) = denial(
        create::<Domain>(
            &client,
            namespaces[1].name(),
            domain("blog.prod", &platform),
        )
        .await,
    )?;
    assert_eq!(code, 400);
    assert!(
        message.starts_with("invalid domain: platform_domain_forbidden"),
        "{message}"
    );
    Ok(())
}

/// A finalizer of the test's: a Domain holding it stays, on its way out, until the test lets go.
const HOLD: &str = "test.slipway.dev/hold";

/// A Domain named `name` of `hostname` on `channel`, holding [`HOLD`] when `held`.
fn named_domain(name: &str, channel: &str, hostname: &str, held: bool) -> Value {
    let finalizers: Vec<&str> = if held { vec![HOLD] } else { vec![] };
    json!({"apiVersion": "slipway.dev/v1alpha1", "kind": "Domain",
           "metadata": {"name": name, "finalizers": finalizers},
           "spec": {"channel": channel, "domain": hostname}})
}

/// Lets go of the Domain `name` of `ns` that [`HOLD`] kept.
async fn let_go(client: &Client, ns: &str, name: &str) -> Result<()> {
    Api::<Domain>::namespaced(client.clone(), ns)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_deleted_domain_frees_its_name_at_once_though_a_replica_has_not_seen_it_go() -> Result<()>
{
    let client = slipway_testkit::client().await?;
    let (webhook, lagging) = Webhook::register_replicas(&client).await?;
    let view = lagging
        .lagging
        .clone()
        .context("the lagging replica's view")?;
    let mut namespaces = Vec::new();
    for i in 0..2 {
        let owner = format!("u{}", random());
        let ns = webhook
            .namespace(&client, &format!("wh-race{i}"), &[(labels::OWNER, &owner)])
            .await?;
        create::<App>(&client, ns.name(), app("blog", &owner)).await?;
        create::<Channel>(&client, ns.name(), channel("blog", "prod", "master")).await?;
        create::<Channel>(&client, ns.name(), channel("blog", "next", "next")).await?;
        namespaces.push(ns);
    }
    let names: Vec<&str> = namespaces.iter().map(TestNamespace::name).collect();

    // One name moves from channel to channel and from namespace to namespace. Each Domain is deleted once both
    // replicas hold it, and the next is written at once: the lagging replica still lists the deleted one, every
    // other time still there on its way out (a finalizer holds it) and otherwise gone.
    let hostname = format!("www.race{}.example.com", random());
    let spots = [
        (names[0], "blog.prod"),
        (names[0], "blog.next"),
        (names[1], "blog.prod"),
        (names[1], "blog.next"),
    ];
    let mut held_back: Option<(&str, String)> = None;
    for round in 0..5 {
        for (i, (ns, channel)) in spots.into_iter().enumerate() {
            let name = format!("d{round}-{i}");
            let held = (round + i) % 2 == 0;
            create::<Domain>(&client, ns, named_domain(&name, channel, &hostname, held))
                .await
                .with_context(|| format!("round {round}: {hostname} on {channel} of {ns}"))?;
            if let Some((ns, name)) = held_back.take() {
                let_go(&client, ns, &name).await?;
            }
            webhook.settle(&client, ns).await?;
            lagging.settle(&client, ns).await?;
            view.catch_up();
            Api::<Domain>::namespaced(client.clone(), ns)
                .delete(&name, &DeleteParams::background())
                .await?;
            if held {
                held_back = Some((ns, name));
            }
        }
    }
    if let Some((ns, name)) = held_back {
        let_go(&client, ns, &name).await?;
    }

    // A channel one of whose five domains was just detached takes another.
    let ns = names[0];
    let r = random();
    for i in 0..5 {
        let hostname = format!("d{i}.limit{r}.example.com");
        create::<Domain>(&client, ns, domain("blog.prod", &hostname)).await?;
    }
    webhook.settle(&client, ns).await?;
    lagging.settle(&client, ns).await?;
    view.catch_up();
    Api::<Domain>::namespaced(client.clone(), ns)
        .delete(
            &format!("d0.limit{r}.example.com"),
            &DeleteParams::background(),
        )
        .await?;
    create::<Domain>(
        &client,
        ns,
        domain("blog.prod", &format!("d5.limit{r}.example.com")),
    )
    .await?;
    // Refusals still hold where the apiserver agrees (either replica may be the one that answers first).
    let refused = |created: Result<Domain, kube::Error>| match created {
        Err(kube::Error::Api(s)) if s.message.contains("denied the request") => Ok(s.code),
        other => Err(anyhow::anyhow!("not refused by a webhook: {other:?}")),
    };
    let over = format!("d6.limit{r}.example.com");
    assert_eq!(
        refused(create(&client, ns, domain("blog.prod", &over)).await)?,
        400
    );
    let taken = format!("d1.limit{r}.example.com");
    assert_eq!(
        refused(create(&client, names[1], domain("blog.prod", &taken)).await)?,
        409
    );
    Ok(())
}

#[tokio::test]
async fn garbage_and_unknown_kinds_get_a_clean_denial() -> Result<()> {
    let client = slipway_testkit::client().await?;
    let webhook = Webhook::serve(&client).await?;
    let (addr, ca) = (webhook.addr, webhook.ca_pem.as_str());

    for garbage in [
        &b"garbage"[..],
        b"",
        b"{\"request\": 1}",
        &[0xde, 0xad, 0xbe, 0xef],
    ] {
        let res = https_request(addr, ca, "POST", "/validate", garbage).await?;
        assert_eq!(res.status, 400, "{garbage:?}");
        let review: Value = serde_json::from_slice(&res.body)?;
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["allowed"], false);
        assert!(
            !review["response"]["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{review}"
        );
    }

    let unknown = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "3b0f5a9e-1111-4222-8333-444455556666",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "c", "namespace": "default", "operation": "CREATE", "userInfo": {"username": "x"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}});
    let res = https_request(
        addr,
        ca,
        "POST",
        "/validate",
        &serde_json::to_vec(&unknown)?,
    )
    .await?;
    assert_eq!(res.status, 200);
    let review: Value = serde_json::from_slice(&res.body)?;
    assert_eq!(
        review["response"]["uid"],
        "3b0f5a9e-1111-4222-8333-444455556666"
    );
    assert_eq!(review["response"]["allowed"], false);
    assert!(
        review["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("not ConfigMap"),
        "{review}"
    );

    // Still alive and ready.
    let res = https_request(addr, ca, "GET", "/readyz", b"").await?;
    assert_eq!((res.status, res.body.as_slice()), (200, &b"ok"[..]));
    Ok(())
}
