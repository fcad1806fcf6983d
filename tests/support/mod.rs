//! A REST API wired to the real parts for tests: a fresh platform database on the test Postgres, the test control
//! plane with the CRDs, repositories in a temporary directory. Requests go through the router without a socket.
//!
//! The internal listener checks callers the way it does in a cluster: each `TestApi` has a namespace of its own
//! with two ServiceAccounts named `operator` and `edge` that play those roles, and real tokens of theirs (minted by
//! the apiserver for the internal audience) are what the in-process operator and edge present.

// Test support: a panic is the right answer to a broken fixture, and not every test uses every helper.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

pub mod agent;
pub mod answer;
pub mod blob;
pub mod browser;
pub mod chromium;
pub mod console;
pub mod deploys;
pub mod dns;
pub mod git;
pub mod git_peer;
pub mod https;
pub mod mcp;
pub mod platform;
pub mod postgres;
pub mod s3_calls;

use std::path::PathBuf;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::DeleteParams;
use serde_json::Value;
use slipway_auth::{scopes, token};
use slipway_core::internal_access::InternalAccess;
use slipway_core::platform::cache::Cache;
use slipway_core::state::{AppState, PublicNames};
use slipway_git_store::Repos;
use slipway_internal::review::{DEFAULT_AUDIENCE, DEFAULT_TTL};
use slipway_internal::{
    CallerSpec, Callers, Identity, InternalEndpoint, Role, SourceKey, TokenSource,
};
use slipway_store::db::tokens::NewToken;
use slipway_store::env::crypto::Keyring;
use slipway_testkit::TestNamespace;
use slipway_testkit::postgres::TestDatabase;
use tower::ServiceExt;

/// The app domain tests use.
pub const APP_DOMAIN: &str = "apps.slipway.test";
/// The git host tests use.
pub const GIT_HOST: &str = "git.slipway.test";
/// The address custom domains are told to point at (`a_values`); tests bind edges on loopback addresses.
pub const EDGE_ADDRESS: &str = "127.0.0.1";
/// Where the test platform says clients reach external SQL access.
pub const SQL_ADDRESS: &str = "db.slipway.test:5432";

/// A running API and what it stands on.
pub struct TestApi {
    pub state: AppState,
    /// The public routes.
    pub router: axum::Router,
    /// The internal listener's routes.
    pub internal_router: axum::Router,
    pub kube: kube::Client,
    pub repos_dir: PathBuf,
    /// The keyring line the API seals env values with.
    pub keyring_line: String,
    /// A token of the ServiceAccount that plays the operator on the internal listener.
    pub operator_token: String,
    /// A token of the ServiceAccount that plays the edge on the internal listener.
    pub edge_token: String,
    /// The namespace of those two ServiceAccounts.
    pub callers_namespace: TestNamespace,
    namespaces: std::sync::Mutex<Vec<String>>,
    /// What its sockets serve: the public and the internal routes as they are now.
    served: (LiveRouter, LiveRouter),
    /// The API's job runner, stopped with the API.
    _jobs: tokio_util::task::AbortOnDropHandle<()>,
    _db: TestDatabase,
}

/// A user and a token of theirs.
#[derive(Debug, Clone)]
pub struct User {
    pub id: uuid::Uuid,
    pub username: String,
    pub token: String,
    pub namespace: String,
}

/// An answer: status, headers and JSON body (Null when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Asserts the status and, for errors, the envelope's code; returns the body.
    #[track_caller]
    pub fn expect(self, status: u16, code: Option<&str>) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.body
        );
        if let Some(code) = code {
            assert_eq!(
                self.body["error"]["code"], code,
                "error code; body: {}",
                self.body
            );
            assert!(
                self.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "error message; body: {}",
                self.body
            );
        }
        self.body
    }

    /// The error message.
    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }
}

/// Sends a request with an optional bearer and JSON body to `router` (an API, or a replica of it).
pub async fn call_on(
    router: &axum::Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Reply {
    send_to(router, request(method, path, token, body)).await
}

/// Sends a prepared request to `router`.
pub async fn send_to(router: &axum::Router, req: Request<Body>) -> Reply {
    let res = router
        .clone()
        .oneshot(req)
        .await
        .expect("router is infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), 64 * 1024 * 1024)
        .await
        .expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Reply {
        status,
        headers,
        body,
    }
}

/// Asks for a deploy's pre-deploy checkpoint the way the operator does, again while it runs, until it is done (or
/// a minute has passed); its last answer.
pub async fn pre_deploy_checkpoint(
    client: &slipway_internal::InternalClient,
    deploy_id: &str,
    request: &slipway_internal::protocol::PreDeploySnapshotRequest,
) -> Result<slipway_internal::protocol::PreDeploySnapshot> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = Box::pin(client.pre_deploy_snapshot(deploy_id, request)).await?;
        if !matches!(
            answer,
            slipway_internal::protocol::PreDeploySnapshot::Running { .. }
        ) || tokio::time::Instant::now() > deadline
        {
            return Ok(answer);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The test APIs' job runner: leases that lapse within a test, and an answer to a caller within a second, so a
/// checkpoint of a few hundred MB outlasts a request the way a large one does in production.
pub const JOB_TIMING: slipway_jobs::Timing = slipway_jobs::Timing {
    lease: std::time::Duration::from_secs(3),
    heartbeat: std::time::Duration::from_millis(500),
    poll: std::time::Duration::from_millis(500),
    answer_within: std::time::Duration::from_secs(1),
};

/// An API process's state on the database at `db_url` and the repositories under `repos_dir`, with a cache of its
/// own, checking internal callers against the `operator` and `edge` ServiceAccounts of `callers_namespace`.
async fn api_state(
    db_url: &str,
    kube: &kube::Client,
    repos_dir: &std::path::Path,
    keyring_line: &str,
    callers_namespace: &str,
) -> Result<AppState> {
    let pool = slipway_store::db::connect(db_url).await?;
    let (cache, _tasks) = Cache::start(kube.clone()).await?;
    let names = PublicNames {
        app_domain: APP_DOMAIN.into(),
        git_host: GIT_HOST.into(),
        edge_addresses: vec![EDGE_ADDRESS.into()],
        sql_address: Some(SQL_ADDRESS.into()),
    };
    Ok(AppState::new(
        pool,
        kube.clone(),
        cache,
        Repos::new(repos_dir),
        names,
        Keyring::parse(keyring_line)?,
        internal_access(kube, callers_namespace)?,
    )
    .with_mirrors(mirror_config(None)))
}

/// Mirror settings for tests: loopback is allowed (the SSH git server of the tests listens there), git's SSH
/// command is the slipway binary built for these tests, and names are resolved by `dns` only. Without one, the
/// resolver asks a closed port on loopback, so no test ever sends a query beyond this machine.
pub fn mirror_config(dns: Option<std::net::SocketAddr>) -> slipway_mirror_fetch::MirrorConfig {
    slipway_mirror_fetch::MirrorConfig {
        allow: vec!["127.0.0.1/32".parse().expect("cidr")],
        deny: Vec::new(),
        dns_server: Some(dns.unwrap_or_else(|| "127.0.0.1:9".parse().expect("addr"))),
        relay_program: env!("CARGO_BIN_EXE_slipway").into(),
        timeout: std::time::Duration::from_secs(60),
    }
}

/// The internal listener's checks: the `operator` and `edge` ServiceAccounts of `namespace` in their roles, and a
/// fresh source-URL key.
fn internal_access(kube: &kube::Client, namespace: &str) -> Result<InternalAccess> {
    let callers = Callers::new([
        CallerSpec {
            role: Role::Operator,
            identity: Identity::service_account(namespace, "operator"),
        },
        CallerSpec {
            role: Role::Edge,
            identity: Identity::service_account(namespace, "edge"),
        },
    ])
    .map_err(anyhow::Error::msg)?;
    Ok(InternalAccess::new(
        kube.clone(),
        DEFAULT_AUDIENCE,
        DEFAULT_TTL,
        callers,
        TestApi::source_key(),
    ))
}

/// A fresh database with the platform's schema: a copy of a template the migrations ran on once per server and
/// set of migrations (named after their checksums). Running two dozen migrations for each of a hundred tests kept
/// the server busy for seconds of the cluster tier; a copy takes a tenth of that.
pub async fn migrated_database() -> Result<TestDatabase> {
    use sha2::Digest;
    static TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let template = TEMPLATE
        .get_or_try_init(|| async {
            let mut migrations = sha2::Sha256::new();
            for migration in slipway_store::db::MIGRATOR.iter() {
                migrations.update(migration.version.to_be_bytes());
                migrations.update(&migration.checksum);
            }
            let name = format!("schema_{}", &hex::encode(migrations.finalize())[..16]);
            slipway_testkit::postgres::ensure_template(&name, |url| async move {
                slipway_store::db::connect(&url).await?.close().await;
                Ok(())
            })
            .await?;
            anyhow::Ok(name)
        })
        .await?;
    TestDatabase::copy_of(template).await
}

impl TestApi {
    /// Starts an API on a fresh database.
    pub async fn start() -> Result<Self> {
        Self::on(migrated_database().await?).await
    }

    /// Starts an API on `db`.
    pub async fn on(db: TestDatabase) -> Result<Self> {
        let kube = slipway_testkit::client().await?;
        slipway_testkit::ensure_crds(&kube).await?;
        let repos_dir = std::env::temp_dir().join(format!(
            "slipway-test-repos-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let keyring_line = Keyring::generate_line("test");
        let callers_namespace = TestNamespace::create(&kube, "internal").await?;
        let ns = callers_namespace.name();
        let (operator_token, edge_token) = tokio::try_join!(
            slipway_testkit::service_accounts::token_for(&kube, ns, "operator", DEFAULT_AUDIENCE),
            slipway_testkit::service_accounts::token_for(&kube, ns, "edge", DEFAULT_AUDIENCE),
        )?;
        let state = api_state(db.url(), &kube, &repos_dir, &keyring_line, ns)
            .await?
            .with_job_timing(JOB_TIMING);
        let jobs = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            slipway_api::job_kinds::run(state.clone()),
        ));
        let router = slipway_api::routes::public(state.clone());
        let internal_router = slipway_rest::internal_router(state.clone());
        Ok(Self {
            served: (
                LiveRouter::new(router.clone()),
                LiveRouter::new(internal_router.clone()),
            ),
            state,
            router,
            internal_router,
            kube,
            repos_dir,
            keyring_line,
            operator_token,
            edge_token,
            callers_namespace,
            namespaces: Default::default(),
            _jobs: jobs,
            _db: db,
        })
    }

    /// A fresh random key for signed source URLs.
    pub fn source_key() -> SourceKey {
        let random = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        SourceKey::new(random).expect("64 bytes")
    }

    /// The operator's view of the internal listener at `url`: its ServiceAccount token.
    pub fn operator_endpoint(&self, url: &str) -> InternalEndpoint {
        InternalEndpoint {
            url: url.to_owned(),
            token: TokenSource::fixed(self.operator_token.as_str()),
        }
    }

    /// The edge's view of the internal listener at `url`: its ServiceAccount token.
    pub fn edge_endpoint(&self, url: &str) -> InternalEndpoint {
        InternalEndpoint {
            url: url.to_owned(),
            token: TokenSource::fixed(self.edge_token.as_str()),
        }
    }

    /// The same API under other limits (a fresh router with fresh request budgets).
    pub fn with_limits(mut self, limits: slipway_core::state::Limits) -> Self {
        self.rebuild(|state| state.with_limits(limits));
        self
    }

    /// The same API with its repositories kept by `repos` (a fresh router).
    pub fn with_repos(mut self, repos: Repos) -> Self {
        self.rebuild(|state| state.with_repos(repos));
        self
    }

    /// The same API with other mirror settings (a fresh router).
    pub fn with_mirrors(mut self, config: slipway_mirror_fetch::MirrorConfig) -> Self {
        self.rebuild(|state| state.with_mirrors(config));
        self
    }

    /// Turns features on (or off) as a start with other flags would: `change` edits the features the API runs
    /// with.
    pub fn enable(&mut self, change: impl FnOnce(&mut slipway_core::state::Features)) {
        let mut features = self.state.features().clone();
        change(&mut features);
        self.rebuild(|state| state.with_features(features));
    }

    /// The API on the state `change` makes of its own: fresh routers, and the job runner started again on it (the
    /// old loop is aborted as its handle is replaced; jobs work with the state their loop was started with).
    fn rebuild(&mut self, change: impl FnOnce(AppState) -> AppState) {
        self.state = change(self.state.clone());
        self.router = slipway_api::routes::public(self.state.clone());
        self.internal_router = slipway_rest::internal_router(self.state.clone());
        self.served.0.replace(self.router.clone());
        self.served.1.replace(self.internal_router.clone());
        self._jobs = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            slipway_api::job_kinds::run(self.state.clone()),
        ));
    }

    /// Another API process on the same database and repositories, with a cache of its own: a second replica.
    pub async fn replica(&self) -> Result<axum::Router> {
        Ok(slipway_api::routes::public(self.replica_state().await?))
    }

    /// The state of another API process on the same database and cluster, as [`TestApi::replica`] serves it.
    pub async fn replica_state(&self) -> Result<AppState> {
        Ok(api_state(
            self.db_url(),
            &self.kube,
            &self.repos_dir,
            &self.keyring_line,
            self.callers_namespace.name(),
        )
        .await?
        .with_features(self.state.features().clone()))
    }

    /// Creates a user with a unique name starting with `prefix` (letters and digits, as usernames are) on `plan`,
    /// with a token of the nine default scopes.
    pub async fn user(&self, prefix: &str, plan: &str) -> Result<User> {
        let username = format!(
            "{prefix}{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let row = slipway_store::db::users::create(self.state.db(), &username.parse()?, plan)
            .await?
            .expect("new username");
        let namespace = slipway_core::platform::tenancy::ensure_user_namespace(
            &self.kube,
            &username.parse()?,
            plan,
        )
        .await?;
        self.forget_namespace_later(&namespace);
        let token = self
            .token(row.id, &scopes::default_scopes(), false, None)
            .await?;
        Ok(User {
            id: row.id,
            username,
            token,
            namespace,
        })
    }

    /// URL of the API's database.
    pub fn db_url(&self) -> &str {
        self._db.url()
    }

    /// Deletes `namespace` when the API is dropped.
    pub fn forget_namespace_later(&self, namespace: &str) {
        self.namespaces
            .lock()
            .expect("lock")
            .push(namespace.to_owned());
    }

    /// Stores a token for `user` directly, as registration or the console would.
    pub async fn token(
        &self,
        user: uuid::Uuid,
        scopes: &[String],
        is_agent: bool,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<String> {
        let plaintext = token::generate();
        let new = NewToken {
            user_id: user,
            hash: token::hash(&plaintext),
            label: None,
            scopes,
            is_agent,
            expires_at,
            parent_id: None,
            only_path: None,
            audience: None,
        };
        slipway_store::db::tokens::insert(self.state.db(), &new).await?;
        Ok(plaintext)
    }

    /// Sends a request with an optional bearer and JSON body to the public routes.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        call_on(&self.router, method, path, token, body).await
    }

    /// Sends a request with an optional bearer and JSON body to the internal listener's routes.
    pub async fn internal_call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        call_on(&self.internal_router, method, path, token, body).await
    }

    /// Sends a prepared request to the public routes.
    pub async fn send(&self, req: Request<Body>) -> Reply {
        send_to(&self.router, req).await
    }

    /// Sends `GET path` with `token` until it answers `status`, for at most `within`: for a change made by another
    /// process (the admin CLI, another API), which reaches this one as the database's announcement.
    pub async fn get_until(
        &self,
        path: &str,
        token: &str,
        status: u16,
        within: std::time::Duration,
    ) -> Result<Reply> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let reply = self.call(Method::GET, path, Some(token), None).await;
            if reply.status == status {
                return Ok(reply);
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "GET {path} still answers {} ({}) after {within:?}",
                reply.status,
                reply.body
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub async fn get(&self, path: &str, user: &User) -> Reply {
        self.call(Method::GET, path, Some(&user.token), None).await
    }

    pub async fn post(&self, path: &str, user: &User, body: Value) -> Reply {
        self.call(Method::POST, path, Some(&user.token), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, user: &User) -> Reply {
        self.call(Method::DELETE, path, Some(&user.token), None)
            .await
    }

    /// Serves the public router on a real socket on 127.0.0.1 (for the git CLI) and returns its base URL. The
    /// server lives as long as the test's runtime.
    pub async fn serve(&self) -> Result<String> {
        serve_on(&self.served.0, "127.0.0.1").await
    }

    /// Serves the internal router on 127.0.0.1 and returns its base URL.
    pub async fn serve_internal(&self) -> Result<String> {
        serve_on(&self.served.1, "127.0.0.1").await
    }

    /// Serves the internal router where pods on the test node reach it (the host's end of the node's link, from
    /// `hack/node.sh env`): build pods fetch their sources there. Returns its base URL, good for this process too.
    pub async fn serve_internal_for_pods(&self) -> Result<String> {
        let host_ip = std::env::var("SLIPWAY_NODE_HOST_IP").map_err(|_| {
            anyhow::anyhow!("SLIPWAY_NODE_HOST_IP is not set; run under `hack/test.sh e2e`")
        })?;
        serve_on(&self.served.1, &host_ip).await
    }

    /// An edge's settings for `namespace`, reading static sites from this API's internal listener with the edge's
    /// token.
    pub async fn edge_config(
        &self,
        namespace: &str,
        access_log: bool,
    ) -> Result<slipway_edge::EdgeConfig> {
        let url = self.serve_internal().await?;
        Ok(slipway_edge::EdgeConfig {
            namespace: Some(namespace.into()),
            internal: self.edge_endpoint(&url),
            access_log,
            sites: slipway_edge::site_cache::SiteCacheConfig {
                memory_bytes: 256 << 20,
                max_site_bytes: 64 << 20,
                disk: None,
            },
            proxy: slipway_edge::proxy::ProxyConfig::default(),
            object_store: None,
            tls: Default::default(),
            forward_listen: None,
            sign_in: None,
        })
    }

    /// The operator's settings against the test node, scoped to `namespace`, talking to this API's internal
    /// listener served with [`TestApi::serve_internal_for_pods`].
    pub async fn node_operator_config(
        &self,
        namespace: &str,
    ) -> Result<slipway_controllers::OperatorConfig> {
        let url = self.serve_internal_for_pods().await?;
        let var = |name: &str| {
            std::env::var(name)
                .map_err(|_| anyhow::anyhow!("{name} is not set; run under `hack/test.sh e2e`"))
        };
        Ok(slipway_controllers::OperatorConfig {
            app_domain: APP_DOMAIN.into(),
            namespace: Some(namespace.into()),
            internal: self.operator_endpoint(&url),
            pod_internal_url: url,
            registry: var("SLIPWAY_REGISTRY")?,
            bases_registry: None,
            buildkit_addr: var("SLIPWAY_BUILDKIT_ADDR")?,
            buildkit_ca: slipway_controllers::build::buildkit_tls::BuildkitCa::from_env()
                .map_err(anyhow::Error::msg)?,
            probe_image: var("SLIPWAY_PROBE_IMAGE")?,
            builder_image: var("SLIPWAY_BUILDER_IMAGE")?,
            tenant_grants: Vec::new(),
            tenant_network_policies: None,
            readiness_window: slipway_controllers::workload::READINESS_WINDOW,
            deploy_deadline: slipway_controllers::deploy::DEPLOY_DEADLINE,
            cpu_request_percent: slipway_testkit::node::cpu_request_percent()?,
            app_disruption_budgets: true,
            domains: Default::default(),
        })
    }

    /// The operator's context against the test node (reconcile steps can be called with it directly).
    pub async fn operator_context(
        &self,
        namespace: &str,
    ) -> Result<std::sync::Arc<slipway_controllers::Context>> {
        let config = self.node_operator_config(namespace).await?;
        Ok(self.context(config))
    }

    /// Runs the operator against the test node for the rest of the test, scoped to `namespace`.
    pub async fn start_operator(&self, namespace: &str) -> Result<tokio::task::JoinHandle<()>> {
        let config = self.node_operator_config(namespace).await?;
        Ok(self.run_operator(config))
    }

    /// [`TestApi::start_operator`] with a readiness window of its own: a test of a version that never becomes ready
    /// waits the window out, and the shipped two minutes (which a unit test holds) made it the tier's longest.
    pub async fn start_operator_with_readiness_window(
        &self,
        namespace: &str,
        readiness_window: std::time::Duration,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let config = slipway_controllers::OperatorConfig {
            readiness_window,
            ..self.node_operator_config(namespace).await?
        };
        Ok(self.run_operator(config))
    }

    /// Runs the operator on a control plane without a node (the cluster tier), scoped to `namespace`: enough for
    /// static deploys, which run no pod. Nothing can build or run there, so those addresses lead nowhere.
    pub async fn start_operator_without_node(
        &self,
        namespace: &str,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_nodeless_operator(namespace, Default::default(), None)
            .await
    }

    /// [`TestApi::start_operator_without_node`], with object storage when `blob` is given.
    pub async fn start_operator_without_node_with(
        &self,
        namespace: &str,
        blob: Option<slipway_controllers::blob::BlobSettings>,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_nodeless_operator(namespace, Default::default(), blob)
            .await
    }

    /// [`TestApi::start_operator_without_node`] with custom-domain settings (resolver, ACME).
    pub async fn start_operator_with_domains(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_nodeless_operator(namespace, domains, None).await
    }

    /// [`TestApi::start_operator_without_node`] with custom-domain settings and, when `blob` is given, object
    /// storage.
    pub async fn start_nodeless_operator(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
        blob: Option<slipway_controllers::blob::BlobSettings>,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let config = self.nodeless_config(namespace, domains).await?;
        Ok(self.run_operator_with(config, blob))
    }

    /// [`TestApi::start_operator_without_node`] with channel databases on the data server of `postgres`.
    pub async fn start_operator_with_postgres(
        &self,
        namespace: &str,
        postgres: slipway_controllers::postgres::PostgresSettings,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_nodeless_operator_with_postgres(namespace, Default::default(), None, postgres)
            .await
    }

    /// [`TestApi::start_nodeless_operator`] with channel databases on the data server of `postgres` too.
    pub async fn start_nodeless_operator_with_postgres(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
        blob: Option<slipway_controllers::blob::BlobSettings>,
        postgres: slipway_controllers::postgres::PostgresSettings,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_nodeless_operator_with_postgres_configured(
            namespace,
            domains,
            blob,
            postgres,
            |_| {},
        )
        .await
    }

    /// [`TestApi::start_nodeless_operator_with_postgres`] with the operator's settings changed by `configure` (a
    /// deploy deadline a test can wait out, say).
    pub async fn start_nodeless_operator_with_postgres_configured(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
        blob: Option<slipway_controllers::blob::BlobSettings>,
        postgres: slipway_controllers::postgres::PostgresSettings,
        configure: impl FnOnce(&mut slipway_controllers::OperatorConfig),
    ) -> Result<tokio::task::JoinHandle<()>> {
        let mut config = self.nodeless_config(namespace, domains).await?;
        configure(&mut config);
        let ctx = self.context_extended(config, |ctx| {
            let ctx = match blob {
                Some(blob) => ctx.with_blob(blob),
                None => ctx,
            };
            ctx.with_postgres(postgres)
        });
        Ok(Self::spawn_operator(ctx))
    }

    /// [`TestApi::start_operator_without_node`] with the operator's context extended by `extend` (channel
    /// databases, forward ports, object storage, in any combination).
    pub async fn start_nodeless_operator_extended(
        &self,
        namespace: &str,
        extend: impl FnOnce(slipway_controllers::Context) -> slipway_controllers::Context,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_operator_with_domains_extended(namespace, Default::default(), extend)
            .await
    }

    /// [`TestApi::start_operator_with_domains`] with the operator's context extended by `extend`.
    pub async fn start_operator_with_domains_extended(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
        extend: impl FnOnce(slipway_controllers::Context) -> slipway_controllers::Context,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let config = self.nodeless_config(namespace, domains).await?;
        Ok(Self::spawn_operator(self.context_extended(config, extend)))
    }

    /// The operator's settings on a control plane without a node: the addresses of builds lead nowhere.
    async fn nodeless_config(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
    ) -> Result<slipway_controllers::OperatorConfig> {
        let url = self.serve_internal().await?;
        Ok(slipway_controllers::OperatorConfig {
            app_domain: APP_DOMAIN.into(),
            namespace: Some(namespace.into()),
            internal: self.operator_endpoint(&url),
            pod_internal_url: url,
            registry: "127.0.0.1:9".into(),
            bases_registry: None,
            buildkit_addr: "tcp://127.0.0.1:9".into(),
            buildkit_ca: None,
            probe_image: "127.0.0.1:9/unused".into(),
            builder_image: "127.0.0.1:9/unused".into(),
            tenant_grants: Vec::new(),
            tenant_network_policies: None,
            readiness_window: slipway_controllers::workload::READINESS_WINDOW,
            deploy_deadline: slipway_controllers::deploy::DEPLOY_DEADLINE,
            cpu_request_percent: slipway_controllers::workload::FULL_CPU_REQUEST_PERCENT,
            app_disruption_budgets: true,
            domains,
        })
    }

    /// Runs the operator against the test node for the rest of the test, scoped to `namespace`, with object
    /// storage.
    pub async fn start_operator_with_blob(
        &self,
        namespace: &str,
        blob: slipway_controllers::blob::BlobSettings,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let config = self.node_operator_config(namespace).await?;
        Ok(self.run_operator_with(config, Some(blob)))
    }

    fn context(
        &self,
        config: slipway_controllers::OperatorConfig,
    ) -> std::sync::Arc<slipway_controllers::Context> {
        self.context_with(config, None)
    }

    fn context_with(
        &self,
        config: slipway_controllers::OperatorConfig,
        blob: Option<slipway_controllers::blob::BlobSettings>,
    ) -> std::sync::Arc<slipway_controllers::Context> {
        self.context_extended(config, |ctx| match blob {
            Some(blob) => ctx.with_blob(blob),
            None => ctx,
        })
    }

    fn context_extended(
        &self,
        config: slipway_controllers::OperatorConfig,
        extend: impl FnOnce(slipway_controllers::Context) -> slipway_controllers::Context,
    ) -> std::sync::Arc<slipway_controllers::Context> {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = slipway_controllers::metrics::Metrics::register(&mut registry);
        let ctx = slipway_controllers::Context::new(self.kube.clone(), config, metrics);
        std::sync::Arc::new(extend(ctx))
    }

    fn run_operator(
        &self,
        config: slipway_controllers::OperatorConfig,
    ) -> tokio::task::JoinHandle<()> {
        self.run_operator_with(config, None)
    }

    fn run_operator_with(
        &self,
        config: slipway_controllers::OperatorConfig,
        blob: Option<slipway_controllers::blob::BlobSettings>,
    ) -> tokio::task::JoinHandle<()> {
        Self::spawn_operator(self.context_with(config, blob))
    }

    /// Runs the operator on a control plane without a node (as [`TestApi::start_operator_without_node`]), scoped to
    /// `namespace`, allocating forward ports of `ports`.
    pub async fn start_operator_with_forwards(
        &self,
        namespace: &str,
        ports: slipway_controllers::forward::ForwardPorts,
    ) -> Result<tokio::task::JoinHandle<()>> {
        Ok(Self::spawn_operator(
            self.forward_context(namespace, ports).await?,
        ))
    }

    /// The context of a nodeless operator scoped to `namespace` that allocates forwards from `ports`, for a test
    /// that calls a reconciler itself.
    pub async fn forward_context(
        &self,
        namespace: &str,
        ports: slipway_controllers::forward::ForwardPorts,
    ) -> Result<std::sync::Arc<slipway_controllers::Context>> {
        let config = self.nodeless_config(namespace, Default::default()).await?;
        Ok(self.context_extended(config, |ctx| ctx.with_forwards(ports)))
    }

    fn spawn_operator(
        ctx: std::sync::Arc<slipway_controllers::Context>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            if let Err(e) = slipway_controllers::run::run(ctx).await {
                panic!("operator stopped: {e:#}");
            }
        })
    }

    /// Commits `files` (path -> content) on master through the changeset route; returns the new sha.
    pub async fn commit(&self, user: &User, app_id: &str, files: Value) -> String {
        let reply = self
            .post(
                &format!("/apps/{app_id}/changeset"),
                user,
                serde_json::json!({"message": "test commit", "changes": files}),
            )
            .await
            .expect(200, None);
        reply["sha"].as_str().unwrap_or_default().to_owned()
    }

    /// Deploys `body` ({sha} or {ref}) to the channel and returns the deploy id.
    pub async fn deploy(&self, user: &User, app_id: &str, channel_id: &str, body: Value) -> String {
        let reply = self
            .post(
                &format!("/apps/{app_id}/channels/{channel_id}/deploy"),
                user,
                body,
            )
            .await
            .expect(200, None);
        assert_eq!(reply["status"], "queued");
        reply["deploy_id"].as_str().unwrap_or_default().to_owned()
    }

    /// The Deploy resource whose uid is the deploy id `id`, in `namespace`.
    pub async fn deploy_resource(&self, namespace: &str, id: &str) -> Result<slipway_crds::Deploy> {
        let deploys: kube::Api<slipway_crds::Deploy> =
            kube::Api::namespaced(self.kube.clone(), namespace);
        deploys
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .find(|d| d.metadata.uid.as_deref() == Some(id))
            .ok_or_else(|| anyhow::anyhow!("no Deploy {id} in {namespace}"))
    }

    /// Polls the deploy's log until the deploy finished (success or failed) and returns the last log reply.
    pub async fn finished_deploy(
        &self,
        user: &User,
        app_id: &str,
        channel_id: &str,
        deploy_id: &str,
        within: std::time::Duration,
    ) -> Result<Value> {
        let url = format!(
            "/apps/{app_id}/channels/{channel_id}/logs?deploy={deploy_id}&max_bytes=262144"
        );
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let log = self.get(&url, user).await.expect(200, None);
            if log["status"] == "success" || log["status"] == "failed" {
                return Ok(log);
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "deploy {deploy_id} still {} after {within:?}; log so far:\n{}",
                log["status"],
                log["log"].as_str().unwrap_or_default()
            );
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// Serves git over SSH on 127.0.0.1 with a fresh host key; returns the port.
    pub async fn serve_ssh(&self) -> Result<u16> {
        let key = slipway_git::ssh::load_or_create_host_key(
            &self.repos_dir.join("ssh").join("ssh_host_ed25519_key"),
        )?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = self.state.clone();
        tokio::spawn(async move { slipway_git::ssh::serve(state, listener, key).await });
        Ok(port)
    }

    /// Creates an app and returns its JSON.
    pub async fn create_app(&self, user: &User, name: &str, template: &str) -> Value {
        self.post(
            "/apps",
            user,
            serde_json::json!({"name": name, "template": template}),
        )
        .await
        .expect(200, None)
    }
}

impl Drop for TestApi {
    fn drop(&mut self) {
        let namespaces = std::mem::take(&mut *self.namespaces.lock().expect("lock"));
        let _ = std::fs::remove_dir_all(&self.repos_dir);
        if slipway_testkit::namespaces_outlive_tests() {
            return;
        }
        let _ = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = slipway_testkit::client().await?;
                for ns in namespaces {
                    let _ = kube::Api::<Namespace>::all(client.clone())
                        .delete(&ns, &DeleteParams::background())
                        .await;
                }
                Ok(())
            })
        })
        .join();
    }
}

/// A request with an optional bearer and JSON body.
fn request(method: Method, path: &str, token: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    req.body(body).expect("request")
}

/// Serves `router` on `ip` (any port) for the rest of the test's runtime; returns its base URL.
/// Serves `router` on a real socket on 127.0.0.1 (another replica's, for the git CLI) and returns its base URL.
pub async fn serve_router(router: axum::Router) -> Result<String> {
    serve_on(&LiveRouter::new(router), "127.0.0.1").await
}

async fn serve_on(router: &LiveRouter, ip: &str) -> Result<String> {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    let live = router.clone();
    let router = axum::Router::new().fallback_service(tower::service_fn(
        move |req: axum::extract::Request| live.current().oneshot(req),
    ));
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    Ok(format!("http://{addr}"))
}

/// A router a served socket reads per request: when the API is rebuilt with other features, the sockets it already
/// serves on answer with the new one, as a restart with other flags on the same port would.
#[derive(Clone)]
struct LiveRouter(std::sync::Arc<std::sync::RwLock<axum::Router>>);

impl LiveRouter {
    fn new(router: axum::Router) -> Self {
        Self(std::sync::Arc::new(std::sync::RwLock::new(router)))
    }

    fn current(&self) -> axum::Router {
        self.0.read().expect("router lock").clone()
    }

    fn replace(&self, router: axum::Router) {
        *self.0.write().expect("router lock") = router;
    }
}

/// This machine's address on the interface its default route leaves by (no packet is sent to find it). Test
/// servers standing in for pods listen there: an EndpointSlice may not name loopback.
pub fn own_address() -> Result<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0")?;
    probe.connect("192.0.2.1:9")?;
    Ok(probe.local_addr()?.ip())
}

/// A Service `service` in `namespace` without selector, with one port named `port_name`, and the EndpointSlice of
/// one ready "pod" at `pod`, labelled as the EndpointSlice controller labels the slices it makes (what it writes on
/// a node; this tier has none).
pub async fn service_with_pod(
    kube: &kube::Client,
    namespace: &str,
    service: &str,
    port_name: &str,
    pod: std::net::SocketAddr,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{Api, PostParams};
    let services: Api<Service> = Api::namespaced(kube.clone(), namespace);
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": service},
                "spec": {"ports": [{"name": port_name, "port": 7000, "protocol": "TCP"}]},
            }))?,
        )
        .await?;
    add_pod_slice(kube, namespace, service, port_name, "pods", pod).await
}

/// One more EndpointSlice `<service>-<suffix>` of Service `service`, of one ready "pod" at `pod`, labelled as the
/// EndpointSlice controller's.
pub async fn add_pod_slice(
    kube: &kube::Client,
    namespace: &str,
    service: &str,
    port_name: &str,
    suffix: &str,
    pod: std::net::SocketAddr,
) -> Result<()> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, PostParams};
    let slices: Api<EndpointSlice> = Api::namespaced(kube.clone(), namespace);
    slices
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{service}-{suffix}"), "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                }},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [pod.ip().to_string()], "conditions": {"ready": true}}],
                "ports": [{"name": port_name, "port": pod.port(), "protocol": "TCP"}],
            }))?,
        )
        .await?;
    Ok(())
}

/// The regular files of a tar archive (gzipped when `gzip`), by path: what a code or bucket download holds.
pub fn untar(bytes: &[u8], gzip: bool) -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let reader: Box<dyn Read> = if gzip {
        Box::new(flate2::read::GzDecoder::new(bytes))
    } else {
        Box::new(bytes)
    };
    let mut archive = tar::Archive::new(reader);
    let mut files = std::collections::BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path().unwrap().display().to_string();
        let mut body = String::new();
        entry.read_to_string(&mut body).unwrap();
        files.insert(path, body);
    }
    files
}
