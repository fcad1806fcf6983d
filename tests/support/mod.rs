//! A REST API wired to the real parts for tests: a fresh platform database on the test Postgres, the test control
//! plane with the CRDs, repositories in a temporary directory. Requests go through the router without a socket.

// Test support: a panic is the right answer to a broken fixture, and not every test uses every helper.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

pub mod git;
pub mod https;
pub mod platform;

use std::path::PathBuf;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::DeleteParams;
use serde_json::Value;
use slipway::api::state::{AppState, PublicNames};
use slipway::auth::{scopes, token};
use slipway::db::tokens::NewToken;
use slipway::env::crypto::Keyring;
use slipway::platform::cache::Cache;
use slipway::platform::repos::Repos;
use slipway_testkit::postgres::TestDatabase;
use tower::ServiceExt;

/// The app domain tests use.
pub const APP_DOMAIN: &str = "apps.slipway.test";
/// The git host tests use.
pub const GIT_HOST: &str = "git.slipway.test";
/// The address custom domains are told to point at (`a_values`); tests bind edges on loopback addresses.
pub const EDGE_ADDRESS: &str = "127.0.0.1";
/// The internal token of the test API (the operator and the edge in tests use it too).
pub const INTERNAL_TOKEN: &str = "test-internal-token-0123456789abcdef0123456789";

/// A running API and what it stands on.
pub struct TestApi {
    pub state: AppState,
    pub router: axum::Router,
    pub kube: kube::Client,
    pub repos_dir: PathBuf,
    /// The keyring line the API seals env values with.
    pub keyring_line: String,
    namespaces: std::sync::Mutex<Vec<String>>,
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

/// An answer: status and JSON body (Null when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
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

impl TestApi {
    /// Starts an API on a fresh database.
    pub async fn start() -> Result<Self> {
        Self::on(TestDatabase::create().await?).await
    }

    /// Starts an API on `db`.
    pub async fn on(db: TestDatabase) -> Result<Self> {
        let pool = slipway::db::connect(db.url()).await?;
        let kube = slipway_testkit::client().await?;
        slipway_testkit::ensure_crds(&kube).await?;
        let (cache, _tasks) = Cache::start(kube.clone()).await?;
        let repos_dir = std::env::temp_dir().join(format!(
            "slipway-test-repos-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let names = PublicNames {
            app_domain: APP_DOMAIN.into(),
            git_host: GIT_HOST.into(),
            edge_addresses: vec![EDGE_ADDRESS.into()],
        };
        let keyring_line = Keyring::generate_line("test");
        let keyring = Keyring::parse(&keyring_line)?;
        let state = AppState::new(
            pool,
            kube.clone(),
            cache,
            Repos::new(&repos_dir),
            names,
            keyring,
            INTERNAL_TOKEN.into(),
        );
        let router = slipway::api::router(state.clone());
        Ok(Self {
            state,
            router,
            kube,
            repos_dir,
            keyring_line,
            namespaces: Default::default(),
            _db: db,
        })
    }

    /// Creates a user with a unique name starting with `prefix` on `plan`, with a token of the nine default scopes.
    pub async fn user(&self, prefix: &str, plan: &str) -> Result<User> {
        let username = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let row = slipway::db::users::create(self.state.db(), &username, plan)
            .await?
            .expect("new username");
        let namespace =
            slipway::platform::tenancy::ensure_user_namespace(&self.kube, &username.parse()?, plan)
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
        };
        slipway::db::tokens::insert(self.state.db(), &new).await?;
        Ok(plaintext)
    }

    /// Sends a request with an optional bearer and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
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
        self.send(req.body(body).expect("request")).await
    }

    /// Sends a prepared request.
    pub async fn send(&self, req: Request<Body>) -> Reply {
        let res = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("router is infallible");
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 64 * 1024 * 1024)
            .await
            .expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Reply { status, body }
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

    /// Serves the router on a real socket on 127.0.0.1 (for the git CLI) and returns its base URL. The server
    /// lives as long as the test's runtime.
    pub async fn serve(&self) -> Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let router = self.router.clone();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(format!("http://{addr}"))
    }

    /// Serves the router where pods on the test node reach it (the host's end of the node's link, from
    /// `hack/node.sh env`) and returns (the URL the test process uses, the URL pods use).
    pub async fn serve_for_pods(&self) -> Result<(String, String)> {
        let host_ip = std::env::var("SLIPWAY_NODE_HOST_IP").map_err(|_| {
            anyhow::anyhow!("SLIPWAY_NODE_HOST_IP is not set; run under `hack/test.sh e2e`")
        })?;
        let listener = tokio::net::TcpListener::bind((host_ip.as_str(), 0)).await?;
        let addr = listener.local_addr()?;
        let router = self.router.clone();
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok((format!("http://{addr}"), format!("http://{addr}")))
    }

    /// The operator's settings against the test node, scoped to `namespace`, talking to this API served with
    /// [`TestApi::serve_for_pods`].
    pub async fn node_operator_config(
        &self,
        namespace: &str,
    ) -> Result<slipway_controllers::OperatorConfig> {
        let (api_url, pod_api_url) = self.serve_for_pods().await?;
        let var = |name: &str| {
            std::env::var(name)
                .map_err(|_| anyhow::anyhow!("{name} is not set; run under `hack/test.sh e2e`"))
        };
        Ok(slipway_controllers::OperatorConfig {
            app_domain: APP_DOMAIN.into(),
            namespace: Some(namespace.into()),
            platform: slipway_controllers::platform_api::PlatformEndpoints {
                api_url,
                pod_api_url,
                internal_token: INTERNAL_TOKEN.into(),
            },
            registry: var("SLIPWAY_REGISTRY")?,
            buildkit_addr: var("SLIPWAY_BUILDKIT_ADDR")?,
            probe_image: var("SLIPWAY_PROBE_IMAGE")?,
            builder_image: var("SLIPWAY_BUILDER_IMAGE")?,
            tenant_grants: Vec::new(),
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

    /// Runs the operator on a control plane without a node (the cluster tier), scoped to `namespace`: enough for
    /// static deploys, which run no pod. Nothing can build or run there, so those addresses lead nowhere.
    pub async fn start_operator_without_node(
        &self,
        namespace: &str,
    ) -> Result<tokio::task::JoinHandle<()>> {
        self.start_operator_with_domains(namespace, Default::default())
            .await
    }

    /// [`TestApi::start_operator_without_node`] with custom-domain settings (resolver, ACME).
    pub async fn start_operator_with_domains(
        &self,
        namespace: &str,
        domains: slipway_controllers::domain::DomainsConfig,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let api_url = self.serve().await?;
        let config = slipway_controllers::OperatorConfig {
            app_domain: APP_DOMAIN.into(),
            namespace: Some(namespace.into()),
            platform: slipway_controllers::platform_api::PlatformEndpoints {
                pod_api_url: api_url.clone(),
                api_url,
                internal_token: INTERNAL_TOKEN.into(),
            },
            registry: "127.0.0.1:9".into(),
            buildkit_addr: "tcp://127.0.0.1:9".into(),
            probe_image: "127.0.0.1:9/unused".into(),
            builder_image: "127.0.0.1:9/unused".into(),
            tenant_grants: Vec::new(),
            domains,
        };
        Ok(self.run_operator(config))
    }

    fn context(
        &self,
        config: slipway_controllers::OperatorConfig,
    ) -> std::sync::Arc<slipway_controllers::Context> {
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = slipway_controllers::run::Metrics::register(&mut registry);
        std::sync::Arc::new(slipway_controllers::Context::new(
            self.kube.clone(),
            config,
            metrics,
        ))
    }

    fn run_operator(
        &self,
        config: slipway_controllers::OperatorConfig,
    ) -> tokio::task::JoinHandle<()> {
        let ctx = self.context(config);
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
        let key = slipway::git::ssh::load_or_create_host_key(
            &self.repos_dir.join("ssh").join("ssh_host_ed25519_key"),
        )?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = self.state.clone();
        tokio::spawn(async move { slipway::git::ssh::serve(state, listener, key).await });
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
