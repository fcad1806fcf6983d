//! The bench's side of the platform: accounts made with the project's own functions (as `slipway admin
//! create-user` makes them: a row, a namespace, a token), and JSON calls to the REST API over a real socket.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use slipway_auth::{scopes, token};
use slipway_store::db::tokens::NewToken;

/// An account and a token of it with the default scopes.
#[derive(Debug, Clone)]
pub struct User {
    pub username: String,
    pub namespace: String,
    pub token: String,
}

/// Creates the account `username` on `plan` with its namespace and a token.
pub async fn create_user(
    db: &sqlx::PgPool,
    kube: &kube::Client,
    username: &str,
    plan: &str,
) -> Result<User> {
    let name: slipway_crds::names::Username = username.parse()?;
    let row = slipway_store::db::users::create(db, &name, plan)
        .await?
        .with_context(|| format!("the account {username} exists already"))?;
    let namespace =
        slipway_core::platform::tenancy::ensure_user_namespace(kube, &name, plan).await?;
    let plaintext = token::generate();
    let scopes = scopes::default_scopes();
    slipway_store::db::tokens::insert(
        db,
        &NewToken {
            user_id: row.id,
            hash: token::hash(&plaintext),
            label: Some("scale bench"),
            scopes: &scopes,
            is_agent: false,
            expires_at: None,
            parent_id: None,
            only_path: None,
            audience: None,
        },
    )
    .await?;
    Ok(User {
        username: username.to_owned(),
        namespace,
        token: plaintext,
    })
}

/// The REST API at a base URL.
#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    base: String,
}

impl Rest {
    pub fn new(base: &str) -> Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
            base: base.to_owned(),
        })
    }

    /// `POST path` with a JSON body as `user`; the answer's JSON, or an error naming the status and body.
    pub async fn post(&self, user: &User, path: &str, body: Value) -> Result<Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&user.token)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        let status = res.status();
        let text = res.text().await?;
        if !status.is_success() {
            bail!("POST {path} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// `GET url` on another server (the edge) with a `Host` header; the status and body.
    pub async fn get_host(&self, url: &str, host: &str) -> Result<(u16, String)> {
        let res = self.http.get(url).header("host", host).send().await?;
        Ok((res.status().as_u16(), res.text().await?))
    }
}

/// A string field of a JSON answer.
pub fn field<'a>(v: &'a Value, pointer: &str) -> Result<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .with_context(|| format!("no {pointer} in {v}"))
}
