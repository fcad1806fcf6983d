//! Environment variables and secrets: sealed storage, the resolution a deploy receives, and the per-deploy
//! snapshot of what it received. Changes take effect at the next deploy only, because a deploy gets its values from
//! [`resolve`] once, at deploy time, and never reads the rows again.

pub mod crypto;
pub mod gitops;
pub mod resolve;
pub mod snapshot;
pub mod store;

/// Largest value: 16 KiB of UTF-8.
pub const MAX_VALUE_BYTES: usize = 16 * 1024;

/// Whether a variable may be shown in lists.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A plain variable: lists show its value.
    Env,
    /// A secret: lists show null; only the reveal route returns it.
    Secret,
}

impl Kind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Env => "env",
            Kind::Secret => "secret",
        }
    }

    /// Parses the stored or requested name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "env" => Some(Kind::Env),
            "secret" => Some(Kind::Secret),
            _ => None,
        }
    }
}

/// Where a resolved value comes from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The app default.
    App,
    /// The channel's override.
    Channel,
}

impl Scope {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::App => "app",
            Scope::Channel => "channel",
        }
    }
}

/// Where a channel's env comes from: the app and channel ids and the Secrets their resources name.
#[derive(Debug, Clone)]
pub struct EnvSources<'a> {
    /// The app's id.
    pub app_id: uuid::Uuid,
    /// The namespace of the app.
    pub namespace: &'a str,
    /// The App's `spec.envSecret`.
    pub app_secret: Option<&'a str>,
    /// The channel's id and `spec.envSecret`, for the resolved view of a channel; None for the app level alone.
    pub channel: Option<(uuid::Uuid, Option<&'a str>)>,
}

/// Resolves the env of a channel (or of the app level alone): every layer opened and merged, weakest first. Returns
/// the entries and warnings about Secret keys that were left out.
pub async fn resolve_sources(
    db: &sqlx::PgPool,
    kube: &kube::Client,
    ring: &crypto::Keyring,
    sources: &EnvSources<'_>,
) -> anyhow::Result<(Vec<resolve::Entry>, Vec<String>)> {
    let rows = store::rows(db, sources.app_id).await?;
    let mut warnings = Vec::new();
    let layer_of_rows = |channel: Option<uuid::Uuid>| -> anyhow::Result<Vec<resolve::Entry>> {
        rows.iter()
            .filter(|r| r.channel_id == channel)
            .map(|r| {
                Ok(resolve::Entry {
                    key: r.key.clone(),
                    kind: r.kind,
                    scope: if channel.is_some() {
                        Scope::Channel
                    } else {
                        Scope::App
                    },
                    channel_id: r.channel_id,
                    updated_at: r.updated_at,
                    value: r.open(ring, sources.app_id)?,
                })
            })
            .collect()
    };
    let mut layers = Vec::new();
    if let Some(name) = sources.app_secret {
        let (entries, w) =
            gitops::secret_layer(kube, sources.namespace, name, Scope::App, None).await?;
        layers.push(entries);
        warnings.extend(w);
    }
    layers.push(layer_of_rows(None)?);
    if let Some((channel_id, secret)) = sources.channel {
        if let Some(name) = secret {
            let (entries, w) = gitops::secret_layer(
                kube,
                sources.namespace,
                name,
                Scope::Channel,
                Some(channel_id),
            )
            .await?;
            layers.push(entries);
            warnings.extend(w);
        }
        layers.push(layer_of_rows(Some(channel_id))?);
    }
    Ok((resolve::resolve(layers), warnings))
}
