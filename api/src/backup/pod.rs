//! The parts of a backup that only the api pod can reach: the platform database (its URL is the api's) and the
//! repositories with the SSH host key (the data volume's, or with `--git-storage object-store` the packs' copies
//! in the git bucket, see [`packs`]). `slipway admin backup` runs these in the api pod and
//! takes their output over the pod's exec stream; `slipway admin restore` feeds them back the same way. They speak
//! on stdout and stdin only, and say what they did on stderr.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;

mod packs;

use crate::serve::GitStorage;
use anyhow::{Context, bail};
use sqlx::postgres::PgConnectOptions;
use tokio::io::AsyncWriteExt;

/// One pod-side part of a backup.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Part {
    /// The platform database, as `pg_dump --format=custom`.
    Database,
    /// The repositories and the SSH host key, as a tar: `ssh/host_key`, then `repos/<owner>/<app>.git/...` from the
    /// data volume or `git/<key>` for each pack in the git bucket.
    Data,
    /// The restored objects' new ids, with the backup's keyring (JSON; restore only).
    Ids,
}

/// Where the api pod keeps what the parts read and write: the api's own settings, read from its environment.
#[derive(Debug, clap::Args)]
pub struct PodSources {
    /// Postgres URL of the platform database.
    #[arg(long, env = "SLIPWAY_DATABASE_URL")]
    pub database_url: String,
    /// Directory of the bare repositories.
    #[arg(
        long,
        env = "SLIPWAY_REPOS_DIR",
        default_value = "/var/lib/slipway/repos"
    )]
    pub repos_dir: PathBuf,
    /// The SSH host key.
    #[arg(
        long,
        env = "SLIPWAY_SSH_HOST_KEY",
        default_value = "/var/lib/slipway/ssh/ssh_host_ed25519_key"
    )]
    pub ssh_host_key: PathBuf,
    /// The Secret every replica reads the SSH host key from (see [`crate::host_key`]); a restored key goes there too.
    #[arg(long, env = "SLIPWAY_SSH_HOST_KEY_SECRET")]
    pub ssh_host_key_secret: Option<crate::host_key::SecretName>,
    /// Where the api keeps the repositories.
    #[arg(long, env = "SLIPWAY_GIT_STORAGE", value_enum, default_value_t = GitStorage::Volume)]
    pub git_storage: GitStorage,
    /// The object store, whose git bucket holds the repositories' packs with `--git-storage object-store`.
    #[command(flatten)]
    pub object_store: slipway_backends::args::S3BackendArgs,
}

/// The name of the SSH host key in the data part.
const HOST_KEY: &str = "ssh/host_key";
/// The name of the data part's last entry: its [`DataCounts`].
const DATA_END: &str = "end.json";

/// Writes `part` to stdout, for as long as the backup that asked for it reads it.
///
/// The backup holds this process's stdin open and never writes to it; its end means the backup is gone (killed, its
/// connection lost). The exec stream would not tell otherwise: a process blocked writing to a stream nobody reads
/// stays blocked, holding a `pg_dump` or a walk over the repositories. So the part stops (its `pg_dump` killed) and
/// the process exits.
pub async fn send(part: Part, sources: PodSources) -> anyhow::Result<()> {
    let gone = end_of_stdin();
    let sent = tokio::select! {
        sent = send_part(part, sources) => Some(sent),
        _ = gone => None,
    };
    match sent {
        Some(sent) => sent,
        None => {
            eprintln!("the backup reading this part is gone: stopped");
            // Not a return: the data part's copy runs on a blocking thread, which the runtime's shutdown would
            // wait for.
            std::process::exit(1)
        }
    }
}

/// Resolves when stdin ends. Read on a thread of its own: tokio's stdin reads on its blocking pool, whose shutdown
/// would wait for a read nobody ends.
fn end_of_stdin() -> tokio::sync::oneshot::Receiver<()> {
    let (ended, end) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 512];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = ended.send(());
    });
    end
}

async fn send_part(part: Part, sources: PodSources) -> anyhow::Result<()> {
    match part {
        Part::Database => {
            let mut dump = pg_command("pg_dump", &sources.database_url)?;
            dump.args([
                "--format=custom",
                "--compress=6",
                "--no-owner",
                "--no-privileges",
            ])
            .stdout(Stdio::inherit());
            run(dump, "pg_dump").await
        }
        Part::Data if sources.git_storage == GitStorage::ObjectStore => {
            let counts = packs::send(&sources).await?;
            eprintln!(
                "data: {} repositories in object storage, {} files, {} bytes",
                counts.repositories, counts.files, counts.bytes
            );
            Ok(())
        }
        Part::Data => {
            let counts = tokio::task::spawn_blocking(move || {
                let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout());
                let counts = write_data(&mut out, &sources.repos_dir, &sources.ssh_host_key)?;
                out.flush()?;
                anyhow::Ok(counts)
            })
            .await??;
            eprintln!(
                "data: {} repositories, {} files, {} bytes",
                counts.repositories, counts.files, counts.bytes
            );
            Ok(())
        }
        Part::Ids => bail!("the ids are a restore's only"),
    }
}

/// Fails unless the install is fresh: no user in the platform database, no repository on the volume or in the git
/// bucket. A restore runs this before it changes anything.
pub async fn check_fresh(sources: &PodSources) -> anyhow::Result<()> {
    no_users(&sources.database_url).await?;
    if sources.git_storage == GitStorage::ObjectStore {
        if packs::bucket(sources).await?.holds_any().await? {
            bail!(
                "the git bucket already holds repositories: a backup is restored into a fresh install only"
            );
        }
        return Ok(());
    }
    let repos_dir = sources.repos_dir.clone();
    tokio::task::spawn_blocking(move || no_repositories(&repos_dir)).await?
}

/// The platform database, as the install's api has migrated it (a restore changes no schema of its own).
async fn connect(url: &str) -> anyhow::Result<sqlx::PgPool> {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect_options(url)?)
        .await
        .context("connect to the platform database")
}

async fn no_users(url: &str) -> anyhow::Result<()> {
    let db = connect(url).await?;
    let users: i64 = sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(&db)
        .await?;
    db.close().await;
    if users > 0 {
        bail!(
            "the platform database already has {users} users: a backup is restored into a fresh install only"
        );
    }
    Ok(())
}

fn no_repositories(repos_dir: &Path) -> anyhow::Result<()> {
    let existing = sorted_dir(repos_dir)?
        .into_iter()
        .filter(|owner| owner.is_dir() && !hidden(owner))
        .flat_map(|owner| sorted_dir(&owner).unwrap_or_default())
        .count();
    if existing > 0 {
        bail!(
            "{} already holds {existing} repositories: a backup is restored into a fresh install only",
            repos_dir.display()
        );
    }
    Ok(())
}

/// Reads `part` from stdin into a fresh install; refuses to overwrite an install that has users or repositories.
pub async fn receive(part: Part, sources: PodSources) -> anyhow::Result<()> {
    match part {
        Part::Database => {
            no_users(&sources.database_url).await?;
            restore_database(&sources.database_url, Stdio::inherit()).await?;
            let db = connect(&sources.database_url).await?;
            let users: Vec<(String, String)> =
                sqlx::query_as("SELECT username, plan FROM users ORDER BY username")
                    .fetch_all(&db)
                    .await?;
            let kube = kube::Client::try_default()
                .await
                .context("connect to Kubernetes")?;
            for (username, plan) in &users {
                slipway_core::platform::tenancy::ensure_user_namespace(
                    &kube,
                    &username.parse()?,
                    plan,
                )
                .await
                .with_context(|| format!("make {username}'s namespace"))?;
            }
            eprintln!("database: restored; {} users' namespaces made", users.len());
            Ok(())
        }
        Part::Data => {
            let input = std::io::BufReader::with_capacity(1 << 20, std::io::stdin());
            if sources.git_storage == GitStorage::ObjectStore {
                let counts = packs::receive(input, &sources).await?;
                eprintln!(
                    "data: {} repositories' packs put back into object storage ({} bytes)",
                    counts.repositories, counts.bytes
                );
            } else {
                let (repos_dir, key_file) =
                    (sources.repos_dir.clone(), sources.ssh_host_key.clone());
                let restored =
                    tokio::task::spawn_blocking(move || read_data(input, &repos_dir, &key_file))
                        .await??;
                eprintln!("data: {restored} repositories restored");
            }
            // The replicas read the host key from the Secret at start: the backup's key goes there too.
            if let (Some(secret), Some(key)) = (
                &sources.ssh_host_key_secret,
                slipway_git::ssh::read_host_key(&sources.ssh_host_key)?,
            ) {
                let client = kube::Client::try_default()
                    .await
                    .context("reach the cluster to restore the SSH host key")?;
                crate::host_key::store(&client, secret, &key).await?;
                eprintln!("data: SSH host key put into the Secret {secret}");
            }
            Ok(())
        }
        Part::Ids => {
            let input = tokio::task::spawn_blocking(|| {
                let mut input = Vec::new();
                std::io::stdin().read_to_end(&mut input).map(|_| input)
            })
            .await??;
            let moves: super::rekey::Moves = serde_json::from_slice(&input)?;
            let db = connect(&sources.database_url).await?;
            let resealed = super::rekey::apply(&db, &moves).await?;
            eprintln!(
                "ids: {} objects' rows moved to their new ids, {resealed} sealed values sealed again",
                moves.ids.len()
            );
            Ok(())
        }
    }
}

/// `program` set up to reach the database at `url`: address, user, password and TLS mode in its environment
/// (`PG*`), never in its arguments.
fn pg_command(program: &str, url: &str) -> anyhow::Result<tokio::process::Command> {
    let parsed = url::Url::parse(url).context("the database URL is not a URL")?;
    let options = connect_options(url)?;
    let mut command = tokio::process::Command::new(program);
    command
        .env("PGHOST", options.get_host())
        .env("PGPORT", options.get_port().to_string())
        .env("PGUSER", options.get_username())
        .env("PGDATABASE", options.get_database().unwrap_or("postgres"))
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSFILE")
        .env_remove("PGSERVICE")
        .arg("--no-password")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    match parsed.password() {
        Some(password) => command.env(
            "PGPASSWORD",
            percent_encoding::percent_decode_str(password)
                .decode_utf8_lossy()
                .into_owned(),
        ),
        None => command.env_remove("PGPASSWORD"),
    };
    if let Some((_, mode)) = parsed.query_pairs().find(|(k, _)| k == "sslmode") {
        command.env("PGSSLMODE", mode.as_ref());
        if mode.starts_with("verify") {
            // As the api does: the server's certificate is checked against the system's roots.
            command.env("PGSSLROOTCERT", "system");
        }
    }
    Ok(command)
}

/// What a restore runs first, in its transaction: drops every table, sequence and function of the current schema
/// that no extension owns. A restore goes into a fresh install, whose schema may be newer than the backup's: left
/// in place, a table a later migration added would stay beside the backup's migration records, and the api would
/// fail to create it again when it migrates the restored database forward.
const CLEAR_SCHEMA: &str = r#"SET LOCAL client_min_messages = warning;
DO $clear$
DECLARE dropping text;
BEGIN
  FOR dropping IN
    SELECT format('DROP TABLE IF EXISTS %I.%I CASCADE', n.nspname, c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
    UNION ALL
    SELECT format('DROP SEQUENCE IF EXISTS %I.%I CASCADE', n.nspname, c.relname)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = current_schema() AND c.relkind = 'S'
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
    UNION ALL
    SELECT format('DROP FUNCTION IF EXISTS %s CASCADE', p.oid::regprocedure)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = current_schema()
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
  LOOP
    EXECUTE dropping;
  END LOOP;
END
$clear$;
"#;

/// Restores the `pg_dump --format=custom` read from `dump` into the platform database at `url`, all or nothing:
/// [`CLEAR_SCHEMA`], then pg_restore's script (emptying the dump's tables first) in one psql transaction, without
/// the settings the server is too old for (the client tools may be newer than the server), committed only once
/// pg_restore has read the whole dump.
pub async fn restore_database(url: &str, dump: Stdio) -> anyhow::Result<()> {
    let db = connect(url).await?;
    let server_version: i32 =
        sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
            .fetch_one(&db)
            .await?;
    db.close().await;
    let mut pg_restore = pg_command("pg_restore", url)?;
    pg_restore
        .args([
            "--clean",
            "--if-exists",
            "--no-owner",
            "--no-privileges",
            "--file=-",
        ])
        .stdin(dump)
        .stdout(Stdio::piped());
    let mut psql = pg_command("psql", url)?;
    psql.args(["--no-psqlrc", "--quiet", "-v", "ON_ERROR_STOP=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let mut pg_restore = pg_restore.spawn().context("start pg_restore")?;
    let mut psql = psql.spawn().context("start psql")?;
    let (Some(script), Some(mut into_psql)) = (pg_restore.stdout.take(), psql.stdin.take()) else {
        bail!("pg_restore and psql are not piped");
    };
    // Not psql's --single-transaction, which commits at the end of its input however that came: a dump cut short
    // (the backup's reader gone, a damaged file) ends pg_restore's script early too. `COMMIT` is sent only once
    // pg_restore has read the whole dump; otherwise psql is killed with the transaction open.
    let copied = async {
        into_psql.write_all(b"BEGIN;\n").await?;
        into_psql.write_all(CLEAR_SCHEMA.as_bytes()).await?;
        slipway_postgres::restore::copy_for_server(script, &mut into_psql, server_version).await?;
        anyhow::Ok(())
    }
    .await;
    let restored = pg_restore.wait().await?;
    if copied.is_err() || !restored.success() {
        // psql stops first on a failing statement, and pg_restore then fails writing to it.
        let stopped = psql.try_wait()?;
        slipway_postgres::restore::abandon(psql).await;
        match (stopped, copied) {
            (Some(status), _) if !status.success() => {
                bail!("psql failed ({status}): the dump did not apply; nothing was changed")
            }
            (_, Err(e)) => {
                bail!("the dump's script did not reach psql: {e:#}; nothing was changed")
            }
            _ => bail!(
                "pg_restore failed ({restored}): the dump could not be read whole; nothing was changed"
            ),
        }
    }
    into_psql.write_all(b"COMMIT;\n").await?;
    into_psql.shutdown().await?;
    drop(into_psql);
    let applied = psql.wait().await?;
    if !applied.success() {
        bail!("psql failed ({applied}): the dump did not apply; nothing was changed");
    }
    Ok(())
}

async fn run(mut command: tokio::process::Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .await
        .with_context(|| format!("start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn connect_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    url.parse().context("the database URL is not valid")
}

/// What the data part held. It is also the part's last entry ([`DATA_END`]), which a restore checks what it
/// unpacked against: a part cut short anywhere, even between two entries, is refused.
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DataCounts {
    /// Repositories copied.
    pub repositories: u64,
    /// Files copied (the host key's among them).
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
}

impl DataCounts {
    /// Fails unless a data part that unpacked to these counts ended with `end`, the counts it was written with.
    fn matches(&self, end: Option<DataCounts>) -> anyhow::Result<()> {
        let Some(end) = end else {
            bail!(
                "the data part ends early (after {} files): it was cut short; no repository was restored",
                self.files
            );
        };
        if end != *self {
            bail!(
                "the data part holds {self:?}, not the {end:?} it was written with; no repository was restored"
            );
        }
        Ok(())
    }
}

/// Writes the SSH host key and every repository as a tar to `out`. A repository is copied while it may take pushes,
/// so each one's refs go first and its objects after: git writes an object before any ref names it, so every ref
/// copied names objects that are copied too (a push that lands in between only adds objects no copied ref names).
/// Lock files and the quarantine of a push in progress are left out; a file a `git gc` removed between the listing
/// and the copy is skipped, since the pack that replaced it is copied too.
pub fn write_data(
    out: impl Write,
    repos_dir: &Path,
    host_key: &Path,
) -> anyhow::Result<DataCounts> {
    let mut tar = tar::Builder::new(out);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut counts = DataCounts::default();
    if host_key.exists() {
        append_file(&mut tar, host_key, HOST_KEY, &mut counts)?;
    }
    for owner in sorted_dir(repos_dir)? {
        if !owner.is_dir() || hidden(&owner) {
            continue;
        }
        for repo in sorted_dir(&owner)? {
            if !repo.is_dir() || repo.extension().is_none_or(|e| e != "git") {
                continue;
            }
            let name = format!(
                "repos/{}/{}",
                owner.file_name().unwrap_or_default().to_string_lossy(),
                repo.file_name().unwrap_or_default().to_string_lossy()
            );
            append_tree(
                &mut tar,
                &repo.join("packed-refs"),
                &format!("{name}/packed-refs"),
                &mut counts,
            )?;
            append_tree(
                &mut tar,
                &repo.join("refs"),
                &format!("{name}/refs"),
                &mut counts,
            )?;
            for entry in sorted_dir(&repo)? {
                let file_name = entry
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if file_name == "refs" || file_name == "packed-refs" {
                    continue;
                }
                append_tree(
                    &mut tar,
                    &entry,
                    &format!("{name}/{file_name}"),
                    &mut counts,
                )?;
            }
            counts.repositories += 1;
        }
    }
    let end = serde_json::to_vec(&counts)?;
    append_regular(&mut tar, DATA_END, end.len() as u64, &end[..])?;
    tar.into_inner()?.flush()?;
    Ok(counts)
}

fn hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

fn sorted_dir(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<Vec<_>>>()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("list {}", dir.display())),
    };
    entries.sort();
    Ok(entries)
}

/// Appends `path` (a file, or a directory with everything under it) as `name`; what vanished meanwhile is skipped.
fn append_tree<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    name: &str,
    counts: &mut DataCounts,
) -> anyhow::Result<()> {
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    if file_name.ends_with(".lock")
        || file_name.starts_with("tmp_objdir")
        || file_name.starts_with("incoming-")
    {
        return Ok(());
    }
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    if metadata.is_dir() {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        tar.append_data(&mut header, format!("{name}/"), std::io::empty())?;
        for entry in sorted_dir(path)? {
            let child = entry
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            append_tree(tar, &entry, &format!("{name}/{child}"), counts)?;
        }
        Ok(())
    } else if metadata.is_file() {
        append_file(tar, path, name, counts)
    } else {
        Ok(())
    }
}

/// Appends a regular file `name` of `size` bytes, owner-only, read from `body`.
fn append_regular<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    size: u64,
    body: impl Read,
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_size(size);
    tar.append_data(&mut header, name, body)
}

fn append_file<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &Path,
    name: &str,
    counts: &mut DataCounts,
) -> anyhow::Result<()> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("open {}", path.display())),
    };
    let size = file.metadata()?.len();
    append_regular(tar, name, size, file.take(size))
        .with_context(|| format!("copy {}", path.display()))?;
    counts.files += 1;
    counts.bytes += size;
    Ok(())
}

/// Unpacks a data part: the repositories into `repos_dir`, which must hold none yet, and the SSH host key over the
/// one a fresh install made. Repositories are unpacked beside `repos_dir` first and moved in once all of them are
/// whole, so a restore cut short leaves no half repository the api would serve. Returns how many there were.
pub fn read_data(input: impl Read, repos_dir: &Path, host_key: &Path) -> anyhow::Result<u64> {
    no_repositories(repos_dir)?;
    let staging = repos_dir
        .parent()
        .context("the repositories' directory has no parent")?
        .join(".repos-restoring");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)
            .with_context(|| format!("remove {}", staging.display()))?;
    }
    std::fs::create_dir_all(&staging)?;
    let mut archive = tar::Archive::new(input);
    let mut key = None;
    let mut unpacked = DataCounts::default();
    let mut end = None;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        if end.is_some() {
            bail!("{} follows the data part's end", path.display());
        }
        if path == Path::new(DATA_END) {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            end =
                Some(serde_json::from_slice::<DataCounts>(&bytes).context("the data part's end")?);
            continue;
        }
        if entry.header().entry_type().is_file() {
            unpacked.files += 1;
            unpacked.bytes += entry.header().size()?;
        }
        let parts: Vec<&std::ffi::OsStr> = path
            .components()
            .map(|c| match c {
                Component::Normal(part) => Ok(part),
                _ => Err(anyhow::anyhow!(
                    "{} is not a plain relative path",
                    path.display()
                )),
            })
            .collect::<anyhow::Result<_>>()?;
        if path == Path::new(HOST_KEY) {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            key = Some(bytes);
            continue;
        }
        if parts.first().is_none_or(|p| *p != "repos") || parts.len() < 3 {
            bail!("{} does not belong in a data part", path.display());
        }
        let target = staging.join(&path);
        if entry.header().entry_type().is_dir() {
            std::fs::create_dir_all(&target)?;
        } else if entry.header().entry_type().is_file() {
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir)?;
            }
            entry
                .unpack(&target)
                .with_context(|| format!("unpack {}", path.display()))?;
        } else {
            bail!("{} is neither a file nor a directory", path.display());
        }
    }
    let owners = sorted_dir(&staging.join("repos"))?;
    for owner in &owners {
        unpacked.repositories += sorted_dir(owner)?.len() as u64;
    }
    unpacked.matches(end)?;
    std::fs::create_dir_all(repos_dir)?;
    for owner in owners {
        let target = repos_dir.join(owner.file_name().unwrap_or_default());
        std::fs::rename(&owner, &target)
            .with_context(|| format!("move {} into place", target.display()))?;
    }
    if let Some(key) = key {
        put_host_key(host_key, &key)?;
    }
    std::fs::remove_dir_all(&staging)?;
    Ok(unpacked.repositories)
}

/// Writes the backup's SSH host key over the file `host_key`, owner-only, whole or not at all.
fn put_host_key(host_key: &Path, key: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = host_key.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let fresh = host_key.with_extension("restoring");
    std::fs::write(&fresh, key)?;
    std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    std::fs::rename(&fresh, host_key)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("slipway-data-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A volume with one repository (one pushed commit, packed refs, a lock file left over) and a host key: its
    /// directory and the key's path.
    fn a_volume() -> (PathBuf, PathBuf) {
        let from = scratch();
        let repo = from.join("repos/alice/shop.git");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "--bare", "-q", "-b", "main"]);
        let work = from.join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("index.html"), "hello").unwrap();
        git(&work, &["add", "."]);
        git(
            &work,
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=a@b",
                "commit",
                "-qm",
                "one",
            ],
        );
        git(&work, &["push", "-q", repo.to_str().unwrap(), "main"]);
        git(&repo, &["pack-refs", "--all"]);
        std::fs::write(repo.join("refs/heads/left.lock"), "x").unwrap();
        let key = from.join("ssh/key");
        std::fs::create_dir_all(key.parent().unwrap()).unwrap();
        std::fs::write(&key, "secret key").unwrap();
        (from, key)
    }

    #[test]
    fn repositories_and_the_host_key_come_back_whole_and_a_second_restore_is_refused() {
        let (from, key) = a_volume();
        let repo = from.join("repos/alice/shop.git");
        let mut tar = Vec::new();
        let counts = write_data(&mut tar, &from.join("repos"), &key).unwrap();
        assert_eq!(counts.repositories, 1);

        let to = scratch();
        let to_key = to.join("ssh/key");
        std::fs::create_dir_all(to_key.parent().unwrap()).unwrap();
        std::fs::write(&to_key, "a fresh install's key").unwrap();
        assert_eq!(read_data(&tar[..], &to.join("repos"), &to_key).unwrap(), 1);
        let restored = to.join("repos/alice/shop.git");
        assert_eq!(
            git(&restored, &["rev-parse", "main"]),
            git(&repo, &["rev-parse", "main"])
        );
        git(&restored, &["fsck", "--strict"]);
        assert!(!restored.join("refs/heads/left.lock").exists());
        assert_eq!(std::fs::read_to_string(&to_key).unwrap(), "secret key");
        assert!(!to.join(".repos-restoring").exists());

        let again = read_data(&tar[..], &to.join("repos"), &to_key).unwrap_err();
        assert!(format!("{again}").contains("fresh install only"), "{again}");
    }

    #[test]
    fn a_data_part_cut_between_any_two_entries_restores_nothing() {
        let (from, key) = a_volume();
        let mut tar = Vec::new();
        write_data(&mut tar, &from.join("repos"), &key).unwrap();
        // At each entry's header, the last (the part's end) among them: a tar reader sees a clean end there.
        let cuts: Vec<usize> = tar::Archive::new(&tar[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().raw_header_position() as usize)
            .collect();
        assert!(cuts.len() > 10, "{cuts:?}");
        for cut in cuts {
            let to = scratch();
            let to_key = to.join("ssh/key");
            std::fs::create_dir_all(to_key.parent().unwrap()).unwrap();
            std::fs::write(&to_key, "a fresh install's key").unwrap();
            let refused = read_data(&tar[..cut], &to.join("repos"), &to_key).unwrap_err();
            assert!(
                format!("{refused:#}").contains("cut short"),
                "cut at {cut}: {refused:#}"
            );
            assert!(sorted_dir(&to.join("repos")).unwrap().is_empty());
            assert_eq!(
                std::fs::read_to_string(&to_key).unwrap(),
                "a fresh install's key"
            );
        }
    }

    #[test]
    fn a_data_part_with_a_path_out_of_place_is_refused() {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, "etc/passwd", &b"x"[..])
            .unwrap();
        let bytes = tar.into_inner().unwrap();
        let to = scratch();
        let error = read_data(&bytes[..], &to.join("repos"), &to.join("key")).unwrap_err();
        assert!(format!("{error}").contains("does not belong"), "{error}");
        assert!(!to.join("repos").exists() || sorted_dir(&to.join("repos")).unwrap().is_empty());
    }
}
