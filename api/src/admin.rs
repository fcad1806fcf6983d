//! `slipway admin`: operator tasks that have no route, such as creating the first user of a fresh install.

use anyhow::{Context, bail};
use slipway_crds::names::Username;
use slipway_crds::plans::Plan;

use slipway_auth::{scopes, token};
use slipway_store::db::tokens::NewToken;

/// Administrative commands.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Create a user and print a token with the nine default scopes (on stdout, shown once).
    CreateUser {
        /// Username: 1-40 lowercase letters and digits, no '-' (it ends every hostname of the user's apps).
        #[arg(long)]
        username: String,
        /// Plan tier (see GET /plans).
        #[arg(long, default_value = "basic")]
        plan: String,
        /// The person's email address, taken as verified: it signs them in to the web console (through the
        /// upstream identity provider, or by a code mailed to it).
        #[arg(long)]
        email: Option<String>,
        /// Postgres URL of the platform database.
        #[arg(long, env = "SLIPWAY_DATABASE_URL")]
        database_url: String,
    },
    /// Move a user to another plan. The new limits reach their running apps in the background (the operator
    /// resizes them); channel caps and quotas follow at once.
    SetPlan {
        /// The user.
        #[arg(long)]
        username: String,
        /// Plan tier (see GET /plans).
        #[arg(long)]
        plan: String,
        /// Postgres URL of the platform database.
        #[arg(long, env = "SLIPWAY_DATABASE_URL")]
        database_url: String,
    },
    /// Deactivate a user: their SSH keys are removed and every token of theirs is revoked at once (external SQL
    /// sessions end with them). Their apps are left as they are.
    DeactivateUser {
        /// The user.
        #[arg(long)]
        username: String,
        /// Postgres URL of the platform database.
        #[arg(long, env = "SLIPWAY_DATABASE_URL")]
        database_url: String,
    },
    /// Print a new line for the env keyring: `<id> <base64 of 32 random bytes>`.
    NewEnvKey {
        /// Id of the key (for example the date it was made).
        #[arg(long)]
        id: String,
    },
    /// Re-seal every env value and deploy snapshot with the keyring's first key, so older keys can be removed.
    ResealEnv {
        /// Postgres URL of the platform database.
        #[arg(long, env = "SLIPWAY_DATABASE_URL")]
        database_url: String,
        /// The keyring (its first line seals; every line opens).
        #[arg(
            long,
            env = "SLIPWAY_ENV_KEYS_FILE",
            default_value = "/etc/slipway/env-keys/keys"
        )]
        env_keys_file: std::path::PathBuf,
    },
    /// Write a backup of the platform's own state to one file.
    ///
    /// It holds the platform database, the env keyring, every app's repository and the SSH host key, the Apps,
    /// Channels, Domains, Forwards and Deploys, and the Secrets of sign-in, certificates and env. Runs with your
    /// kubeconfig's credentials, which must read those Secrets; what only the api pod reaches is taken through it.
    /// Channel databases and bucket contents are not included: back them up with your data server's and object
    /// store's own tools.
    Backup {
        /// The file to write (it must not exist). It is written as FILE.partial and renamed once whole.
        #[arg(long)]
        output: std::path::PathBuf,
        /// Namespace of the release.
        #[arg(long, default_value = "slipway-system")]
        namespace: String,
        /// Name of the Helm release.
        #[arg(long, default_value = "slipway")]
        release: String,
    },
    /// Bring a backup back into a release just installed (an empty platform database, no apps).
    ///
    /// Refuses a cluster with apps, a database with users or a volume with repositories. Holds the operator while
    /// the state goes in, restarts the api and edge, queues a rewind of every live app version (its image again),
    /// and lets the operator bring every channel back. Apps, channels and deploys get new ids.
    Restore {
        /// The backup file.
        #[arg(long)]
        input: std::path::PathBuf,
        /// Namespace of the release.
        #[arg(long, default_value = "slipway-system")]
        namespace: String,
        /// Name of the Helm release.
        #[arg(long, default_value = "slipway")]
        release: String,
    },
    /// Bring every app's repository from a volume into object storage, for an installation moving to
    /// `--git-storage object-store` (and more than one api replica).
    ///
    /// Reads `<from>/<owner>/<app>.git` for each App in the cluster, publishes every ref and HEAD to the platform
    /// database and the packs to the `<prefix>git` bucket, then checks every ref against the source. Running it
    /// again changes nothing; an app without a repository under FROM is listed and left.
    GitImport {
        /// The directory holding the volume's repositories (`--repos-dir` of the single-replica api), read only.
        #[arg(long)]
        from: std::path::PathBuf,
        /// A directory for the repositories' working copies during the import (emptied as it goes).
        #[arg(long, default_value = "/tmp/slipway-git-import")]
        cache: std::path::PathBuf,
        /// Postgres URL of the platform database.
        #[arg(long, env = "SLIPWAY_DATABASE_URL")]
        database_url: String,
        /// The object store.
        #[command(flatten)]
        store: slipway_backends::args::S3BackendArgs,
    },
    /// The api pod's side of a backup: writes one part to stdout.
    #[command(hide = true)]
    BackupPart {
        /// Which part.
        part: crate::backup::pod::Part,
        /// Where the api keeps it.
        #[command(flatten)]
        sources: crate::backup::pod::PodSources,
    },
    /// The api pod's side of a restore's first step: fails unless the install is fresh.
    #[command(hide = true)]
    RestoreCheck {
        /// Where the api keeps its state.
        #[command(flatten)]
        sources: crate::backup::pod::PodSources,
    },
    /// The api pod's side of a restore: reads one part from stdin.
    #[command(hide = true)]
    RestorePart {
        /// Which part.
        part: crate::backup::pod::Part,
        /// Where the api keeps it.
        #[command(flatten)]
        sources: crate::backup::pod::PodSources,
    },
}

/// Runs an admin command.
pub async fn run(command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::CreateUser {
            username,
            plan,
            email,
            database_url,
        } => {
            let email = match email {
                Some(address) => Some(
                    slipway_core::registration::mailer::plain_address(&address)
                        .with_context(|| format!("{address} is not one plain email address"))?
                        .email
                        .to_string(),
                ),
                None => None,
            };
            let token = create_user(&database_url, &username, &plan, email.as_deref()).await?;
            eprintln!("created user {username} on the {plan} plan; their token (shown once):");
            println!("{token}");
            Ok(())
        }
        AdminCommand::SetPlan {
            username,
            plan,
            database_url,
        } => {
            let Some(plan) = Plan::by_tier(&plan) else {
                bail!(
                    "unknown plan {plan}; one of {}",
                    slipway_crds::plans::PLANS.map(|p| p.tier).join(", ")
                );
            };
            let db = slipway_store::db::connect(&database_url).await?;
            let kube = kube::Client::try_default()
                .await
                .context("connect to Kubernetes")?;
            let name: Username = username.parse()?;
            slipway_store::db::users::set_plan(&db, &name, plan.tier)
                .await?
                .then_some(())
                .with_context(|| format!("there is no user named {username}"))?;
            slipway_core::platform::tenancy::ensure_user_namespace(&kube, &name, plan.tier).await?;
            eprintln!(
                "{username} is on the {} plan; their running apps are being resized",
                plan.tier
            );
            Ok(())
        }
        AdminCommand::DeactivateUser {
            username,
            database_url,
        } => {
            let db = slipway_store::db::connect(&database_url).await?;
            if !slipway_store::db::registrations::deactivate(&db, &username).await? {
                bail!("there is no active user named {username}");
            }
            eprintln!("deactivated {username}: SSH keys removed, tokens revoked");
            Ok(())
        }
        AdminCommand::NewEnvKey { id } => {
            anyhow::ensure!(
                !id.is_empty() && !id.contains(char::is_whitespace),
                "the key id must be one word"
            );
            println!(
                "{}",
                slipway_store::env::crypto::Keyring::generate_line(&id)
            );
            Ok(())
        }
        AdminCommand::Backup {
            output,
            namespace,
            release,
        } => {
            crate::backup::backup(&kube().await?, &namespace, &release, &output).await?;
            Ok(())
        }
        AdminCommand::Restore {
            input,
            namespace,
            release,
        } => {
            crate::backup::restore(&kube().await?, &namespace, &release, &input).await?;
            Ok(())
        }
        AdminCommand::GitImport {
            from,
            cache,
            database_url,
            store,
        } => {
            let endpoint = store
                .endpoint()?
                .context("the object store is needed (--s3-backend-url)")?;
            let db = slipway_store::db::connect(&database_url).await?;
            let repos = slipway_git_store::Repos::in_object_store(
                &cache,
                db,
                &endpoint,
                &slipway_git_store::bucket::name(&store.s3_bucket_prefix),
                &std::env::current_exe()?,
            )
            .await?;
            crate::git_import::import_all(&kube().await?, &repos, &from).await
        }
        AdminCommand::BackupPart { part, sources } => crate::backup::pod::send(part, sources).await,
        AdminCommand::RestoreCheck { sources } => crate::backup::pod::check_fresh(&sources).await,
        AdminCommand::RestorePart { part, sources } => {
            crate::backup::pod::receive(part, sources).await
        }
        AdminCommand::ResealEnv {
            database_url,
            env_keys_file,
        } => {
            let ring = slipway_store::env::crypto::Keyring::load(&env_keys_file)?;
            let db = slipway_store::db::connect(&database_url).await?;
            let rows = slipway_store::env::store::reseal_all(&db, &ring).await?;
            let snapshots = slipway_store::env::snapshot::reseal_all(&db, &ring).await?;
            let stores = slipway_blob::store::reseal_all(&db, &ring).await?;
            let mirror_keys = slipway_mirror_fetch::keys::reseal_all(&db, &ring).await?;
            let databases = slipway_postgres::store::reseal_all(&db, &ring).await?;
            eprintln!(
                "resealed {rows} env values, {snapshots} deploy snapshots, {stores} object-store keys, {mirror_keys} mirror deploy keys and {databases} channel databases' passwords with key {}",
                ring.active_id()
            );
            Ok(())
        }
    }
}

/// A client of the cluster the kubeconfig (or the pod's ServiceAccount) names.
async fn kube() -> anyhow::Result<kube::Client> {
    kube::Client::try_default()
        .await
        .context("connect to Kubernetes")
}

/// Creates the account (with `email` as its verified address, when given), its namespace and a token with the
/// nine default scopes; returns the token.
pub async fn create_user(
    database_url: &str,
    username: &str,
    plan: &str,
    email: Option<&str>,
) -> anyhow::Result<String> {
    let username: Username = username.parse()?;
    let Some(plan) = Plan::by_tier(plan) else {
        bail!(
            "unknown plan {plan}; one of {}",
            slipway_crds::plans::PLANS.map(|p| p.tier).join(", ")
        );
    };
    let db = slipway_store::db::connect(database_url).await?;
    let kube = kube::Client::try_default()
        .await
        .context("connect to Kubernetes")?;
    let user = slipway_store::db::users::create(&db, &username, plan.tier)
        .await?
        .with_context(|| format!("a user named {username} already exists"))?;
    if let Some(email) = email {
        slipway_store::db::users::set_verified_email(&db, &username, email)
            .await
            .with_context(|| format!("{email} is the verified address of another account"))?;
    }
    slipway_core::platform::tenancy::ensure_user_namespace(&kube, &username, plan.tier).await?;
    let plaintext = token::generate();
    let scopes = scopes::default_scopes();
    let new = NewToken {
        user_id: user.id,
        hash: token::hash(&plaintext),
        label: Some("created by slipway admin create-user"),
        scopes: &scopes,
        is_agent: false,
        expires_at: None,
        parent_id: None,
        only_path: None,
        audience: None,
    };
    slipway_store::db::tokens::insert(&db, &new).await?;
    Ok(plaintext)
}
