//! Env for resources written with kubectl: an App or Channel may name a Secret in its namespace
//! (`spec.envSecret`) whose keys become that app's defaults or that channel's overrides, as secrets. Keys that are
//! not valid variable names, or that the platform reserves, are left out with a warning.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use slipway_crds::names::EnvKey;
use uuid::Uuid;

use super::resolve::Entry;
use super::{Kind, Scope};

/// The entries of Secret `name` in `namespace` at `scope`, and warnings about what was left out.
pub async fn secret_layer(
    kube: &Client,
    namespace: &str,
    name: &str,
    scope: Scope,
    channel_id: Option<Uuid>,
) -> anyhow::Result<(Vec<Entry>, Vec<String>)> {
    let Some(secret) = Api::<Secret>::namespaced(kube.clone(), namespace)
        .get_opt(name)
        .await?
    else {
        return Ok((
            Vec::new(),
            vec![format!(
                "envSecret {name} does not exist in namespace {namespace}"
            )],
        ));
    };
    let updated_at = secret
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or_default();
    let mut entries = Vec::new();
    let mut warnings = Vec::new();
    for (key, value) in secret.data.unwrap_or_default() {
        if let Err(e) = key.parse::<EnvKey>() {
            warnings.push(format!("envSecret {name}: key {key} left out: {e}"));
            continue;
        }
        match String::from_utf8(value.0) {
            Ok(value) if value.len() <= super::MAX_VALUE_BYTES => {
                entries.push(Entry {
                    key,
                    kind: Kind::Secret,
                    scope,
                    channel_id,
                    updated_at,
                    value,
                });
            }
            _ => warnings.push(format!(
                "envSecret {name}: key {key} left out: the value must be UTF-8 of at most 16 KiB"
            )),
        }
    }
    Ok((entries, warnings))
}
