//! Certificates from an ACME CA (instant-acme), validated over HTTP-01: the CA fetches
//! `http://<domain>/.well-known/acme-challenge/<token>`, which every edge replica answers from the Domain's
//! status. Only the operator's leader runs this, so a domain has one issuer however many edges serve it.
//!
//! The ACME account is made on first use and kept in a Secret in the certificate namespace, so every operator
//! replica (and every restart) uses the same account.

use std::path::PathBuf;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use slipway_crds::Http01Challenge;
use tokio::sync::Mutex;

use super::certificate::Issued;
use crate::context::FIELD_MANAGER;
use slipway_crds::labels::ACME_ACCOUNT_SECRET;

const ACCOUNT_KEY: &str = "credentials.json";
/// The longest an order may take once its challenge is published (validation, finalization, download).
const ORDER_TIMEOUT: Duration = Duration::from_secs(90);

/// Where certificates come from.
#[derive(Debug, Clone)]
pub struct AcmeConfig {
    /// The CA's directory URL.
    pub directory_url: String,
    /// Contact address registered with the account (optional).
    pub email: Option<String>,
    /// A PEM root to trust for the CA's own HTTPS (a test CA's); the system roots when `None`.
    pub root_ca: Option<PathBuf>,
    /// How long to wait after publishing a challenge before asking the CA to validate it, so every edge replica
    /// has seen it.
    pub challenge_grace: Duration,
}

/// Why an issuance failed.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// The CA refused or failed (its problem document or the transport error).
    #[error("ACME: {0}")]
    Acme(#[from] instant_acme::Error),
    /// The order ended in a state other than ready.
    #[error("the ACME order ended {0}")]
    Order(String),
    /// Reading or writing the account Secret, or publishing the challenge, failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Anything else (stored credentials that do not parse, ...).
    #[error("{0}")]
    Other(String),
}

/// Where an HTTP-01 challenge is published for the edges to answer.
pub trait Publish: Send + Sync {
    /// Publishes `challenge`, or withdraws the published one with `None`.
    fn publish(
        &self,
        challenge: Option<Http01Challenge>,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// Issues certificates with one ACME account.
pub struct Issuer {
    config: AcmeConfig,
    secrets: Api<Secret>,
    account: Mutex<Option<Account>>,
}

impl Issuer {
    /// An issuer keeping its account in `namespace`.
    pub fn new(config: AcmeConfig, client: kube::Client, namespace: &str) -> Self {
        Self {
            config,
            secrets: Api::namespaced(client, namespace),
            account: Mutex::new(None),
        }
    }

    /// The directory URL, as the Secrets' issuer name.
    pub fn directory_url(&self) -> &str {
        &self.config.directory_url
    }

    fn builder(&self) -> Result<instant_acme::AccountBuilder, IssueError> {
        Ok(match &self.config.root_ca {
            Some(root) => Account::builder_with_root(root)?,
            None => Account::builder()?,
        })
    }

    /// The account: loaded from its Secret, or created and stored there.
    async fn account(&self) -> Result<Account, IssueError> {
        let mut cached = self.account.lock().await;
        if let Some(account) = cached.as_ref() {
            return Ok(account.clone());
        }
        let stored = self
            .secrets
            .get_opt(ACME_ACCOUNT_SECRET)
            .await?
            .and_then(|s| {
                s.data
                    .and_then(|d| d.get(ACCOUNT_KEY).cloned())
                    .map(|b| b.0)
            });
        let account = match stored {
            Some(bytes) => {
                let credentials: AccountCredentials = serde_json::from_slice(&bytes)
                    .map_err(|e| IssueError::Other(format!("the stored ACME account: {e}")))?;
                self.builder()?.from_credentials(credentials).await?
            }
            None => self.create().await?,
        };
        *cached = Some(account.clone());
        Ok(account)
    }

    async fn create(&self) -> Result<Account, IssueError> {
        let contact = self.config.email.as_ref().map(|e| format!("mailto:{e}"));
        let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
        let (account, credentials) = self
            .builder()?
            .create(
                &NewAccount {
                    contact: &contacts,
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                self.config.directory_url.clone(),
                None,
            )
            .await?;
        let json = serde_json::to_vec(&credentials)
            .map_err(|e| IssueError::Other(format!("encode the ACME account: {e}")))?;
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(ACME_ACCOUNT_SECRET.into()),
                labels: Some(
                    [(
                        slipway_crds::labels::MANAGED_BY.to_owned(),
                        slipway_crds::labels::MANAGER.to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            data: Some([(ACCOUNT_KEY.to_owned(), ByteString(json))].into()),
            ..Default::default()
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match self.secrets.create(&params, &secret).await {
            Ok(_) => Ok(account),
            // Another replica stored one first (a leadership change mid-way): use that one.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let stored = self.secrets.get(ACME_ACCOUNT_SECRET).await?;
                let bytes = stored
                    .data
                    .and_then(|d| d.get(ACCOUNT_KEY).cloned())
                    .ok_or_else(|| IssueError::Other("the ACME account Secret is empty".into()))?;
                let credentials: AccountCredentials = serde_json::from_slice(&bytes.0)
                    .map_err(|e| IssueError::Other(format!("the stored ACME account: {e}")))?;
                Ok(self.builder()?.from_credentials(credentials).await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Orders a certificate for `domain`. `publish` is called with the HTTP-01 challenge before the CA is told to
    /// validate, and with `None` once the order is over (whatever its outcome).
    pub async fn issue(&self, domain: &str, publish: &impl Publish) -> Result<Issued, IssueError> {
        let account = self.account().await?;
        let outcome = tokio::time::timeout(ORDER_TIMEOUT, self.order(&account, domain, publish))
            .await
            .unwrap_or_else(|_| {
                Err(IssueError::Order(format!(
                    "unfinished after {ORDER_TIMEOUT:?}"
                )))
            });
        if let Err(e) = publish.publish(None).await {
            tracing::warn!(domain, error = %e, "could not clear the HTTP-01 challenge");
        }
        outcome
    }

    async fn order(
        &self,
        account: &Account,
        domain: &str,
        publish: &impl Publish,
    ) -> Result<Issued, IssueError> {
        let identifiers = [Identifier::Dns(domain.to_owned())];
        let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            match authz.status {
                AuthorizationStatus::Valid => continue,
                AuthorizationStatus::Pending => {}
                other => return Err(IssueError::Order(format!("authorization {other:?}"))),
            }
            let mut challenge = authz
                .challenge(ChallengeType::Http01)
                .ok_or_else(|| IssueError::Other("the CA offers no HTTP-01 challenge".into()))?;
            publish
                .publish(Some(Http01Challenge {
                    token: challenge.token.clone(),
                    key_authorization: challenge.key_authorization().as_str().to_owned(),
                }))
                .await?;
            tokio::time::sleep(self.config.challenge_grace).await;
            challenge.set_ready().await?;
        }
        let retries = RetryPolicy::new()
            .initial_delay(Duration::from_millis(250))
            .timeout(Duration::from_secs(60));
        match order.poll_ready(&retries).await? {
            OrderStatus::Ready => {}
            other => return Err(IssueError::Order(format!("{other:?}"))),
        }
        let key_pem = order.finalize().await?;
        let chain_pem = order.poll_certificate(&retries).await?;
        Ok(Issued { chain_pem, key_pem })
    }
}
