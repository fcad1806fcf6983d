//! The flags that make slipway the cluster registry's token issuer, shared by the API (which answers the
//! registry's token requests) and the operator (which mints build and platform tokens). Both read the same key.

use std::path::PathBuf;

use anyhow::Context as _;
use slipway_internal::registry_token::{
    DEFAULT_ISSUER, DEFAULT_KEY_ID, DEFAULT_SERVICE, RegistryTokens,
};

/// The registry's `token` auth, as slipway's side of it.
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryTokenArgs {
    /// The P-256 private key (PEM, PKCS#8) whose public half the registry trusts (`auth.token.jwks`). Unset: the
    /// registry takes no tokens from slipway (it must then be reachable only by the nodes and BuildKit).
    #[arg(long, env = "SLIPWAY_REGISTRY_TOKEN_KEY_FILE")]
    pub registry_token_key_file: Option<PathBuf>,
    /// The key id the registry's JWKS gives that key (`kid`).
    #[arg(long, env = "SLIPWAY_REGISTRY_TOKEN_KEY_ID", default_value = DEFAULT_KEY_ID)]
    pub registry_token_key_id: String,
    /// The token issuer the registry trusts (`auth.token.issuer`).
    #[arg(long, env = "SLIPWAY_REGISTRY_TOKEN_ISSUER", default_value = DEFAULT_ISSUER)]
    pub registry_token_issuer: String,
    /// The registry's service name (`auth.token.service`), the tokens' audience.
    #[arg(long, env = "SLIPWAY_REGISTRY_TOKEN_SERVICE", default_value = DEFAULT_SERVICE)]
    pub registry_token_service: String,
}

impl RegistryTokenArgs {
    /// The issuer, when a key is configured.
    pub fn tokens(&self) -> anyhow::Result<Option<RegistryTokens>> {
        self.registry_token_key_file
            .as_deref()
            .map(|path| {
                RegistryTokens::load(
                    path,
                    &self.registry_token_key_id,
                    &self.registry_token_issuer,
                    &self.registry_token_service,
                )
                .context("--registry-token-key-file")
            })
            .transpose()
    }
}
