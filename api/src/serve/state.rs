//! Building the API's state from its flags: the platform database (migrated), the kube client and the synced
//! caches, the repositories, and what internal callers are checked against.

use super::ApiArgs;
use slipway_internal::{Callers, SourceKey};

use slipway_core::internal_access::InternalAccess;
use slipway_core::platform::cache::Cache;
use slipway_core::state::{AppState, PublicNames};
use slipway_git_store::Repos;

/// Builds the API's state: database (migrated), kube client, synced caches.
pub async fn state(
    args: &ApiArgs,
    kube: kube::Client,
) -> anyhow::Result<(AppState, Vec<tokio::task::JoinHandle<()>>)> {
    let keyring = slipway_store::env::crypto::Keyring::load(&args.env_keys_file)?;
    let source_key = SourceKey::load(&args.build_source_key_file)?;
    let callers =
        Callers::new(args.internal_callers.iter().cloned()).map_err(anyhow::Error::msg)?;
    if args.internal_callers.is_empty() {
        tracing::warn!(
            "no --internal-caller is set: the internal listener will refuse every token"
        );
    }
    let internal = InternalAccess::new(
        kube.clone(),
        &args.internal_audience,
        slipway_internal::review::DEFAULT_TTL,
        callers,
        source_key,
    );
    let db = slipway_store::db::connect(&args.database_url).await?;
    let repos = match args.git_storage {
        super::args::GitStorage::Volume => Repos::new(&args.repos_dir),
        super::args::GitStorage::ObjectStore => {
            let endpoint = args.snapshot_store.endpoint()?.ok_or_else(|| {
                anyhow::anyhow!(
                    "--git-storage object-store needs the object store (--s3-backend-url)"
                )
            })?;
            let bucket = slipway_git_store::bucket::name(&args.snapshot_store.s3_bucket_prefix);
            Repos::in_object_store(
                &args.repos_dir,
                db.clone(),
                &endpoint,
                &bucket,
                &std::env::current_exe()?,
            )
            .await?
        }
    };
    let (cache, tasks) = Cache::start(kube.clone()).await?;
    let names = PublicNames {
        app_domain: args.app_domain.clone(),
        git_host: args.git_host.clone(),
        edge_addresses: args.edge_addresses.clone(),
        sql_address: args.sql_proxy.public_address(&args.git_host),
    };
    Ok((
        AppState::new(db, kube, cache, repos, names, keyring, internal)
            .with_limits(args.limits())
            .with_mirrors(args.mirrors()),
        tasks,
    ))
}
