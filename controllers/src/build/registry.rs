//! The operator's client of the cluster registry's HTTP API (distribution v2, plain HTTP inside the cluster):
//! manifests for sizes and warm-base matching, tags and deletes for cleanup. When the registry takes slipway's
//! tokens, each request carries one the operator mints for just that repository and action.

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use serde::Deserialize;

use super::dockerfile::WARM_BASES;
use super::image::{Blob, Image, WarmBase};
use crate::context::Context;
use crate::error::Error;
use slipway_internal::registry_token::{Access, RegistryTokens};

/// How long the operator's own registry tokens last (one request each).
const OPERATOR_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

/// Every manifest kind a push or a warm base may have.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// The registry at `host` (host:port).
pub struct Registry<'a> {
    host: &'a str,
    tokens: Option<&'a RegistryTokens>,
}

#[derive(Debug, Deserialize)]
struct Descriptor {
    digest: String,
    size: u64,
    #[serde(default)]
    platform: Option<Platform>,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

/// A manifest or an index.
#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
struct TagList {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .no_proxy()
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Registry(format!("{what}: {e}"))
}

/// `library/node` and `22-slim` for `node:22-slim`: where `hack/node.sh` and a Docker Hub mirror keep it.
fn hub_repository(base: &str) -> (String, &str) {
    let (name, tag) = base.split_once(':').unwrap_or((base, "latest"));
    (format!("library/{name}"), tag)
}

impl<'a> Registry<'a> {
    /// The registry at `host`, with tokens from `tokens` when it takes them.
    pub fn new(host: &'a str, tokens: Option<&'a RegistryTokens>) -> Self {
        Self { host, tokens }
    }

    /// The registry builds push to and nodes pull from.
    pub fn of(ctx: &'a Context) -> Self {
        Self::new(&ctx.config.registry, ctx.registry_tokens.as_ref())
    }

    /// The registry that keeps the warm bases.
    pub fn bases(ctx: &'a Context) -> Self {
        let host = ctx
            .config
            .bases_registry
            .as_deref()
            .unwrap_or(&ctx.config.registry);
        Self::new(host, ctx.registry_tokens.as_ref())
    }

    /// A request to `path` of `repository`, carrying a token for `action` on it when the registry takes tokens.
    fn request(
        &self,
        method: reqwest::Method,
        repository: &str,
        path: &str,
        action: &str,
    ) -> (String, reqwest::RequestBuilder) {
        let url = format!("http://{}/v2/{repository}/{path}", self.host);
        let mut request = http().request(method, &url);
        if let Some(tokens) = self.tokens {
            let access = [Access::repository(repository, &[action])];
            request = request.bearer_auth(tokens.mint(
                "slipway-operator",
                &access,
                OPERATOR_TOKEN_LIFETIME,
            ));
        }
        (url, request)
    }

    async fn get_manifest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<Manifest>, Error> {
        let Some((url, res)) = self
            .manifest(reqwest::Method::GET, repository, reference)
            .await?
        else {
            return Ok(None);
        };
        let manifest = res.json().await.map_err(|e| failed(&url, e))?;
        Ok(Some(manifest))
    }

    /// A manifest request (GET or HEAD) accepting every manifest type; `None` when the registry has no such
    /// manifest.
    async fn manifest(
        &self,
        method: reqwest::Method,
        repository: &str,
        reference: &str,
    ) -> Result<Option<(String, reqwest::Response)>, Error> {
        let (url, request) = self.request(
            method,
            repository,
            &format!("manifests/{reference}"),
            "pull",
        );
        let res = request
            .header(ACCEPT, MANIFEST_TYPES)
            .send()
            .await
            .map_err(|e| failed(&url, e))?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let res = res.error_for_status().map_err(|e| failed(&url, e))?;
        Ok(Some((url, res)))
    }

    /// The image `reference` (a tag or digest) names in `repository`; an index resolves to its linux/amd64 image.
    pub async fn image(&self, repository: &str, reference: &str) -> Result<Option<Image>, Error> {
        let Some(mut manifest) = self.get_manifest(repository, reference).await? else {
            return Ok(None);
        };
        if !manifest.manifests.is_empty() {
            let chosen = manifest
                .manifests
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .or_else(|| {
                    manifest
                        .manifests
                        .iter()
                        .find(|m| !m.annotations.contains_key("vnd.docker.reference.type"))
                });
            let Some(chosen) = chosen else {
                return Ok(None);
            };
            let digest = chosen.digest.clone();
            let Some(inner) = self.get_manifest(repository, &digest).await? else {
                return Ok(None);
            };
            manifest = inner;
        }
        let blob = |d: &Descriptor| Blob {
            digest: d.digest.clone(),
            size: d.size,
        };
        Ok(manifest.config.as_ref().map(|config| Image {
            config: blob(config),
            layers: manifest.layers.iter().map(blob).collect(),
        }))
    }

    /// The warm bases the registry holds.
    pub async fn warm_bases(&self) -> Result<Vec<WarmBase>, Error> {
        let mut bases = Vec::new();
        for name in WARM_BASES {
            let (repository, tag) = hub_repository(name);
            if let Some(image) = self.image(&repository, tag).await? {
                bases.push(WarmBase {
                    name,
                    layers: image.layers,
                });
            }
        }
        Ok(bases)
    }

    /// The tags of `repository` (none when it does not exist).
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>, Error> {
        let (url, request) = self.request(reqwest::Method::GET, repository, "tags/list", "pull");
        let res = request.send().await.map_err(|e| failed(&url, e))?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        let res = res.error_for_status().map_err(|e| failed(&url, e))?;
        let list: TagList = res.json().await.map_err(|e| failed(&url, e))?;
        Ok(list.tags.unwrap_or_default())
    }

    /// The digest of the manifest `reference` names, if it exists.
    pub async fn digest(&self, repository: &str, reference: &str) -> Result<Option<String>, Error> {
        let Some((_, res)) = self
            .manifest(reqwest::Method::HEAD, repository, reference)
            .await?
        else {
            return Ok(None);
        };
        Ok(res
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned))
    }

    /// Deletes the manifest `digest` and every tag on it (already gone is fine).
    pub async fn delete(&self, repository: &str, digest: &str) -> Result<(), Error> {
        let (url, request) = self.request(
            reqwest::Method::DELETE,
            repository,
            &format!("manifests/{digest}"),
            "delete",
        );
        let res = request.send().await.map_err(|e| failed(&url, e))?;
        if res.status() == StatusCode::NOT_FOUND {
            return Ok(());
        }
        res.error_for_status().map_err(|e| failed(&url, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_bases_live_where_a_docker_hub_mirror_keeps_them() {
        assert_eq!(
            hub_repository("node:22-slim"),
            ("library/node".into(), "22-slim")
        );
        assert_eq!(
            hub_repository("debian:trixie-slim"),
            ("library/debian".into(), "trixie-slim")
        );
    }

    #[test]
    fn an_index_and_a_manifest_both_parse() {
        let index: Manifest = serde_json::from_str(
            r#"{"schemaVersion":2,"manifests":[
                {"digest":"sha256:a","size":10,"platform":{"architecture":"amd64","os":"linux"}},
                {"digest":"sha256:b","size":5,"annotations":{"vnd.docker.reference.type":"attestation-manifest"}}]}"#,
        )
        .unwrap();
        assert_eq!(index.manifests.len(), 2);
        assert!(index.config.is_none());
        let manifest: Manifest = serde_json::from_str(
            r#"{"schemaVersion":2,"config":{"digest":"sha256:c","size":3},"layers":[{"digest":"sha256:l","size":7}]}"#,
        )
        .unwrap();
        assert_eq!(manifest.layers[0].size, 7);
    }
}
