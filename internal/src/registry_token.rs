//! slipway as the token issuer of the cluster registry (the `token` auth of distribution, Docker's registry token
//! specification): the registry trusts one ES256 key, and only slipway holds its private half.
//!
//! Who gets what:
//!
//! - **Nodes pulling an app's image** present the pull credential kept in the workload's namespace (an
//!   `imagePullSecret`): username the repository (`<namespace>/<workload>`), password an HMAC of it under a secret
//!   derived from the signing key. The API's token endpoint checks it by recomputing, so nothing is stored, and
//!   grants `pull` on that one repository and nothing else, whatever the request asks.
//! - **A build** gets a token minted by the operator for its Job: `pull` and `push` on its deploy's repository,
//!   valid for the build's time limit, handed to BuildKit as a ready registry token.
//! - **The operator** mints its own tokens for what only the platform does: reading manifests and deleting images.
//!
//! Nobody is ever granted the catalog (`registry:catalog:*`), and no credential a tenant holds carries `delete`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use hmac::{KeyInit, Mac};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::source_url::unix_now;

/// How long a token granted to a node's pull lasts (the registry asks again after).
pub const PULL_TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// The key id the registry's JWKS names slipway's key with, unless told otherwise.
pub const DEFAULT_KEY_ID: &str = "slipway";

/// The `iss` of slipway's tokens (the registry's `auth.token.issuer`), unless told otherwise.
pub const DEFAULT_ISSUER: &str = "slipway";

/// The `aud` of slipway's tokens (the registry's `auth.token.service`), unless told otherwise.
pub const DEFAULT_SERVICE: &str = "slipway-registry";

/// A signing key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file cannot be read.
    #[error("read the registry token key from {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file holds no P-256 private key in PEM.
    #[error("the registry token key {path} is not a P-256 private key in PEM (PKCS#8): {source}")]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: jsonwebtoken::errors::Error,
    },
}

/// One grant of a token: `actions` on the resource `kind` named `name` (`repository`, `<namespace>/<workload>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// The resource type: `repository`, or `registry` for the catalog.
    #[serde(rename = "type")]
    pub kind: String,
    /// The resource: a repository's name, or `catalog`.
    pub name: String,
    /// What may be done: `pull`, `push`, `delete`, `*`.
    pub actions: Vec<String>,
}

impl Access {
    /// `actions` on the repository `name`.
    pub fn repository(name: &str, actions: &[&str]) -> Self {
        Self {
            kind: "repository".into(),
            name: name.into(),
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// A `scope` parameter of a token request (`repository:ns/app:pull,push`, `registry:catalog:*`); `None` when
    /// it is not one.
    pub fn parse_scope(scope: &str) -> Option<Self> {
        let (kind, rest) = scope.split_once(':')?;
        let (name, actions) = rest.rsplit_once(':')?;
        if kind.is_empty() || name.is_empty() {
            return None;
        }
        Some(Self {
            kind: kind.into(),
            name: name.into(),
            actions: actions
                .split(',')
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    exp: u64,
    nbf: u64,
    iat: u64,
    jti: String,
    access: &'a [Access],
}

/// The issuer: the signing key, its id, and the names the registry expects. Its `Debug` does not show the key.
#[derive(Clone)]
pub struct RegistryTokens {
    key: EncodingKey,
    key_id: String,
    issuer: String,
    service: String,
    /// The secret pull credentials are an HMAC under, derived from the signing key.
    pull_secret: [u8; 32],
}

impl std::fmt::Debug for RegistryTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryTokens")
            .field("key_id", &self.key_id)
            .field("issuer", &self.issuer)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl RegistryTokens {
    /// An issuer signing with the P-256 key in `pem` (PKCS#8).
    pub fn from_pem(
        pem: &[u8],
        key_id: &str,
        issuer: &str,
        service: &str,
    ) -> Result<Self, jsonwebtoken::errors::Error> {
        let key = EncodingKey::from_ec_pem(pem)?;
        let mut derive = sha2::Sha256::new();
        derive.update(b"slipway registry pull credentials\0");
        derive.update(pem.trim_ascii());
        Ok(Self {
            key,
            key_id: key_id.into(),
            issuer: issuer.into(),
            service: service.into(),
            pull_secret: derive.finalize().into(),
        })
    }

    /// Reads the key from a file.
    pub fn load(path: &Path, key_id: &str, issuer: &str, service: &str) -> Result<Self, KeyError> {
        let pem = std::fs::read(path).map_err(|source| KeyError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_pem(&pem, key_id, issuer, service).map_err(|source| KeyError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// The `service` a token request names (the registry's `auth.token.service`).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// A token for `subject` granting `access`, valid for `lifetime` from now.
    pub fn mint(&self, subject: &str, access: &[Access], lifetime: Duration) -> String {
        let now = unix_now();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key_id.clone());
        let claims = Claims {
            iss: &self.issuer,
            sub: subject,
            aud: &self.service,
            exp: now + lifetime.as_secs(),
            nbf: now.saturating_sub(1),
            iat: now,
            jti: hex::encode(rand::RngExt::random::<[u8; 16]>(&mut rand::rng())),
            access,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
            .unwrap_or_else(|e| unreachable!("an ES256 key loaded at start signs any claims: {e}"))
    }

    fn pull_mac(&self, repository: &str) -> hmac::Hmac<sha2::Sha256> {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.pull_secret)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(b"pull:");
        mac.update(repository.as_bytes());
        mac
    }

    /// The password of the pull credential of `repository` (its username is the repository itself).
    pub fn pull_password(&self, repository: &str) -> String {
        hex::encode(self.pull_mac(repository).finalize().into_bytes())
    }

    /// What a token request with the credential `username`/`password` gets of `requested`: `pull` on the
    /// repository the credential is for, when asked, and nothing else. `None`: the credential is not one slipway
    /// made (compared in constant time).
    pub fn grant(
        &self,
        username: &str,
        password: &str,
        requested: &[Access],
    ) -> Option<Vec<Access>> {
        let given = hex::decode(password).ok()?;
        self.pull_mac(username).verify_slice(&given).ok()?;
        Some(
            requested
                .iter()
                .filter(|a| a.kind == "repository" && a.name == username)
                .filter(|a| a.actions.iter().any(|x| x == "pull" || x == "*"))
                .map(|a| Access::repository(&a.name, &["pull"]))
                .collect(),
        )
    }
}

/// The flags that make slipway the registry's token issuer, shared by the API (which answers the registry's token
/// requests) and the operator (which mints build and platform tokens): both read the same key.
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

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{DecodingKey, Validation};

    fn key() -> (Vec<u8>, DecodingKey) {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let point = pair.public_key_raw();
        let (x, y) = point[1..].split_at(32);
        let decoding =
            DecodingKey::from_ec_components(&URL_SAFE_NO_PAD.encode(x), &URL_SAFE_NO_PAD.encode(y))
                .unwrap();
        (pair.serialize_pem().into_bytes(), decoding)
    }

    #[test]
    fn a_minted_token_is_what_distribution_verifies() {
        let (pem, decoding) = key();
        let tokens = RegistryTokens::from_pem(&pem, "k1", "slipway", "registry").unwrap();
        let access = [Access::repository("ns/web", &["pull", "push"])];
        let token = tokens.mint("build:d1", &access, Duration::from_secs(60));
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(
            (header.alg, header.kid.as_deref()),
            (Algorithm::ES256, Some("k1"))
        );
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&["registry"]);
        validation.set_issuer(&["slipway"]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(&token, &decoding, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["sub"], "build:d1");
        assert_eq!(
            claims["access"],
            serde_json::json!([{"type": "repository", "name": "ns/web", "actions": ["pull", "push"]}])
        );
    }

    #[test]
    fn a_pull_credential_opens_pull_on_its_own_repository_only() {
        let (pem, _) = key();
        let tokens = RegistryTokens::from_pem(&pem, "k", "i", "s").unwrap();
        let password = tokens.pull_password("a/web");
        let asked = [
            Access::parse_scope("repository:a/web:pull,push,delete").unwrap(),
            Access::parse_scope("repository:b/web:pull").unwrap(),
            Access::parse_scope("repository:a/web-2:pull").unwrap(),
            Access::parse_scope("registry:catalog:*").unwrap(),
        ];
        assert_eq!(
            tokens.grant("a/web", &password, &asked),
            Some(vec![Access::repository("a/web", &["pull"])])
        );
        assert_eq!(
            tokens.grant("b/web", &password, &asked),
            None,
            "another repository's name"
        );
        assert_eq!(
            tokens.grant("a/web", "00", &asked),
            None,
            "a wrong password"
        );
        assert_eq!(tokens.grant("a/web", "not hex", &asked), None);
        let (other, _) = key();
        let other = RegistryTokens::from_pem(&other, "k", "i", "s").unwrap();
        assert_ne!(
            other.pull_password("a/web"),
            password,
            "the secret follows the key"
        );
    }

    #[test]
    fn scopes_parse_as_the_registry_sends_them() {
        assert_eq!(
            Access::parse_scope("repository:ns/app:pull,push"),
            Some(Access::repository("ns/app", &["pull", "push"]))
        );
        let plugin = Access::parse_scope("repository(plugin):ns/app:pull").unwrap();
        assert_eq!(plugin.kind, "repository(plugin)");
        assert_eq!(Access::parse_scope("repository:ns/app"), None);
        assert_eq!(Access::parse_scope("nonsense"), None);
        assert_eq!(Access::parse_scope(":x:pull"), None);
    }

    #[test]
    fn a_key_that_is_not_p256_pem_is_refused() {
        assert!(RegistryTokens::from_pem(b"not a key", "k", "i", "s").is_err());
    }
}
