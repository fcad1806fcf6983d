//! ServiceAccounts and their tokens, minted by the apiserver through the TokenRequest API (`serviceaccounts/token`)
//! exactly as the kubelet mints the projected tokens pods present: tests call the platform's internal listener
//! with real identities instead of a shared secret.

use anyhow::{Context, Result};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// Lifetime of the tokens [`token_for`] mints: longer than any test, and the apiserver's minimum is 10 minutes.
pub const TOKEN_SECONDS: i64 = 3600;

/// Creates ServiceAccount `name` in `namespace` (unless it exists) and returns a new token of it for `audience`.
pub async fn token_for(
    client: &Client,
    namespace: &str,
    name: &str,
    audience: &str,
) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => {
            return Err(e).with_context(|| format!("create ServiceAccount {namespace}/{name}"));
        }
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(TOKEN_SECONDS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let minted = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("mint a token of {namespace}/{name} for {audience}"))?;
    minted
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .with_context(|| format!("the token request of {namespace}/{name} answered no token"))
}
