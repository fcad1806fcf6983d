//! Running the real git (and ssh) command-line clients against a served API, isolated from the machine's own
//! configuration: a scratch HOME, no system config, no prompts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// How long a git command may run before the test fails as hung.
pub const GIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// A scratch directory with its own HOME for git.
pub struct Workspace {
    pub dir: PathBuf,
    pub ssh_command: Option<String>,
}

/// What a command printed.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Workspace {
    pub fn new() -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("slipway-git-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("home"))?;
        Ok(Self {
            dir,
            ssh_command: None,
        })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `git args...` in `cwd` (relative to the workspace); does not fail on a non-zero exit.
    pub async fn try_git(&self, cwd: &str, args: &[&str]) -> Result<Run> {
        self.try_git_within(cwd, args, GIT_LIMIT).await
    }

    /// [`Self::try_git`] given `limit` instead of [`GIT_LIMIT`]: for moving hundreds of megabytes, which on a
    /// busy 2-core machine may take longer than a hung command would.
    pub async fn try_git_within(
        &self,
        cwd: &str,
        args: &[&str],
        limit: std::time::Duration,
    ) -> Result<Run> {
        let mut cmd = self.command(cwd, args);
        let out = tokio::time::timeout(limit, cmd.output())
            .await
            .with_context(|| format!("git {args:?} did not finish within {limit:?}"))??;
        Ok(Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// The command `git args...` in `cwd` (relative to the workspace), as [`Self::try_git`] runs it: for a test that
    /// reads git's output while it runs.
    pub fn command(&self, cwd: &str, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("git");
        cmd.args(args)
            .current_dir(self.dir.join(cwd))
            .env("HOME", self.dir.join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.test")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.test")
            .env_remove("GIT_DIR")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            .kill_on_drop(true);
        if let Some(ssh) = &self.ssh_command {
            cmd.env("GIT_SSH_COMMAND", ssh);
        }
        cmd
    }

    /// `git args...`, failing the test on a non-zero exit; returns stdout.
    pub async fn git(&self, cwd: &str, args: &[&str]) -> Result<String> {
        self.git_within(cwd, args, GIT_LIMIT).await
    }

    /// [`Self::git`] given `limit` (see [`Self::try_git_within`]).
    pub async fn git_within(
        &self,
        cwd: &str,
        args: &[&str],
        limit: std::time::Duration,
    ) -> Result<String> {
        let run = self.try_git_within(cwd, args, limit).await?;
        if !run.ok {
            bail!("git {args:?} failed: {}{}", run.stdout, run.stderr);
        }
        Ok(run.stdout)
    }

    /// What `git count-objects -v` says of the repository whose git directory is `git_dir`.
    pub async fn object_counts(&self, git_dir: &std::path::Path) -> Result<ObjectCounts> {
        let stats = self
            .git(
                ".",
                &[
                    "--git-dir",
                    &git_dir.to_string_lossy(),
                    "count-objects",
                    "-v",
                ],
            )
            .await?;
        let field = |name: &str| -> Result<usize> {
            let value = stats
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                .with_context(|| format!("count-objects printed no {name}:\n{stats}"))?;
            Ok(value.parse()?)
        };
        Ok(ObjectCounts {
            loose: field("count")?,
            in_pack: field("in-pack")?,
            packs: field("packs")?,
            pack_kib: field("size-pack")?,
        })
    }

    /// Commits everything in the repository `cwd` with `message` and pushes it to `remote`'s master; returns the
    /// commit.
    pub async fn commit_and_push(&self, cwd: &str, message: &str, remote: &str) -> Result<String> {
        self.git(cwd, &["add", "."]).await?;
        self.git(cwd, &["commit", "-q", "-m", message]).await?;
        self.git(cwd, &["push", "-q", remote, "HEAD:master"])
            .await?;
        Ok(self
            .git(cwd, &["rev-parse", "HEAD"])
            .await?
            .trim()
            .to_owned())
    }

    /// Writes a file below the workspace.
    pub fn write(&self, path: &str, content: impl AsRef<[u8]>) -> Result<()> {
        let path = self.dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, content)?;
        Ok(())
    }

    pub fn read(&self, path: &str) -> Result<Vec<u8>> {
        Ok(std::fs::read(self.dir.join(path))?)
    }

    /// Generates an ed25519 key pair at `name` (and `name.pub`); returns the public key line.
    pub async fn ssh_key(&self, name: &str) -> Result<String> {
        let path = self.dir.join(name);
        let out = tokio::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&path)
            .output()
            .await?;
        if !out.status.success() {
            bail!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(std::fs::read_to_string(path.with_extension("pub"))?
            .trim()
            .to_owned())
    }

    /// The `ssh` command line that uses key `name` against `port` on 127.0.0.1.
    pub fn ssh_command_for(&self, name: &str, port: u16) -> String {
        format!(
            "ssh -i {} -o IdentitiesOnly=yes -o IdentityAgent=none -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes -p {port}",
            self.dir.join(name).display()
        )
    }

    /// Runs `ssh` (as built by [`Self::ssh_command_for`]) with extra arguments.
    pub async fn ssh(&self, name: &str, port: u16, args: &[&str]) -> Result<Run> {
        let line = self.ssh_command_for(name, port);
        let mut parts = line.split(' ');
        let program = parts.next().unwrap_or("ssh");
        let out = tokio::process::Command::new(program)
            .args(parts)
            .args(args)
            .env("HOME", self.dir.join("home"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await?;
        Ok(Run {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The HTTP remote URL of `owner/app` with `token` as the password.
pub fn http_remote(base: &str, token: &str, owner: &str, app: &str) -> String {
    let host = base.trim_start_matches("http://");
    format!("http://git:{token}@{host}/{owner}/{app}.git")
}

/// Whether `dir` looks like a git work tree.
pub fn is_work_tree(dir: &Path) -> bool {
    dir.join(".git").is_dir()
}

/// One round of two pushes racing to `master` of one repository: each of the work trees `dirs` takes the branch as
/// its remote in `fetch_from` has it, commits something of its own and pushes through its remote in `push_to`, both
/// at once. (Fetching with another token than pushing keeps long races inside one token's request budget.)
/// Asserts that exactly one push won and the other was declined as git declines a stale push: by the server, when
/// both reached it before either had moved the branch, or by the client, when the loser's ref advertisement already
/// showed the winner's commit.
async fn race_round(
    ws: &std::sync::Arc<Workspace>,
    dirs: [&str; 2],
    fetch_from: &[String; 2],
    push_to: &[String; 2],
    round: usize,
) -> Result<RaceRound> {
    let mut shas = Vec::new();
    for (dir, remote) in dirs.iter().zip(fetch_from) {
        ws.git(dir, &["fetch", "-q", remote, "master"]).await?;
        ws.git(dir, &["reset", "-q", "--hard", "FETCH_HEAD"])
            .await?;
        ws.write(&format!("{dir}/{dir}.txt"), format!("{round}\n"))?;
        ws.git(dir, &["add", "."]).await?;
        ws.git(dir, &["commit", "-qm", &format!("{dir} round {round}")])
            .await?;
        shas.push(ws.git(dir, &["rev-parse", "HEAD"]).await?.trim().to_owned());
    }
    let pushes = dirs.iter().zip(push_to).map(|(dir, remote)| {
        let (ws, remote) = (ws.clone(), remote.clone());
        async move { ws.try_git(dir, &["push", &remote, "HEAD:master"]).await }
    });
    let results = futures::future::try_join_all(pushes).await?;
    let won: Vec<usize> = (0..2).filter(|&i| results[i].ok).collect();
    anyhow::ensure!(
        won.len() == 1,
        "round {round}: {} pushes won: {:?}",
        won.len(),
        results
            .iter()
            .map(|r| (r.ok, &r.stderr))
            .collect::<Vec<_>>()
    );
    let loser = &results[1 - won[0]].stderr;
    let at_server =
        loser.contains("[remote rejected]") && loser.contains("was updated by someone else");
    let by_client = loser.contains("[rejected]") && loser.contains("(fetch first)");
    anyhow::ensure!(
        at_server || by_client,
        "round {round}: the losing push said {loser}"
    );
    Ok(RaceRound {
        winner: shas[won[0]].clone(),
        at_server,
    })
}

/// How a round of [`race_round`] ended.
struct RaceRound {
    /// The winner's commit.
    winner: String,
    /// Whether the server declined the loser (both pushes reached it before either moved the branch), rather than
    /// the loser's own client, which saw the winner's commit advertised.
    at_server: bool,
}

/// Runs `rounds` of [`race_round`]; returns the winners in order and how many rounds raced at the server, and
/// fails unless at least one did (a run whose pushes never overlapped shows nothing about the race).
pub async fn race_rounds(
    ws: &std::sync::Arc<Workspace>,
    dirs: [&str; 2],
    fetch_from: &[String; 2],
    push_to: &[String; 2],
    rounds: usize,
) -> Result<(Vec<String>, usize)> {
    let (mut winners, mut at_server) = (Vec::new(), 0);
    for round in 0..rounds {
        let ended = race_round(ws, dirs, fetch_from, push_to, round).await?;
        winners.push(ended.winner);
        at_server += usize::from(ended.at_server);
    }
    anyhow::ensure!(
        at_server > 0,
        "no round of {rounds} had both pushes reach the server before either moved the branch"
    );
    Ok((winners, at_server))
}

/// A new work tree `dir` with three commits on `master`, an annotated tag `v1` and a branch `old` one commit
/// behind, all pushed to `remote`: a repository with more than one kind of ref.
pub async fn push_refs_of_three_kinds(ws: &Workspace, dir: &str, remote: &str) -> Result<()> {
    ws.git(".", &["init", "-q", "-b", "master", dir]).await?;
    for i in 0..3 {
        ws.write(&format!("{dir}/{i}.txt"), format!("{i}\n"))?;
        ws.git(dir, &["add", "."]).await?;
        ws.git(dir, &["commit", "-qm", &format!("c{i}")]).await?;
    }
    ws.git(dir, &["tag", "-a", "v1", "-m", "v1"]).await?;
    let refs = ["HEAD:master", "HEAD~1:refs/heads/old", "v1"];
    ws.git(dir, &[&["push", "-q", remote][..], &refs[..]].concat())
        .await?;
    Ok(())
}

/// A repository's objects as `git count-objects -v` counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectCounts {
    /// Loose objects.
    pub loose: usize,
    /// Objects in packs (one held by two packs counts twice).
    pub in_pack: usize,
    /// Packs.
    pub packs: usize,
    /// KiB the packs take.
    pub pack_kib: usize,
}
