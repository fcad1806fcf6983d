//! The external repository of a git mirror: Debian's sshd with git-shell on loopback, started by
//! `hack/git-peer.sh` in a directory of the test's own, on a port from `$SLIPWAY_TEST_SSHD_PORT` (22200 by
//! default; each peer takes the next free one). Commits are made in a scratch clone and pushed to the peer's
//! repositories by path; the mirror fetches them over SSH like from any forge.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};

use anyhow::{Context, Result, bail};

use super::git::Workspace;

/// Ports handed out so far in this test binary.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A running SSH git server.
pub struct GitPeer {
    /// Its directory: config, host key, `authorized_keys`, `repos/`.
    pub dir: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The user a key logs in as.
    pub user: String,
    /// Where commits are made before they are pushed to the peer.
    pub work: Workspace,
}

fn script() -> PathBuf {
    super::platform::root().join("hack/git-peer.sh")
}

/// A port of this run's range that nothing listens on now.
fn free_port() -> Result<u16> {
    let base: u16 = std::env::var("SLIPWAY_TEST_SSHD_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(22200);
    for _ in 0..100 {
        let port = base + NEXT_PORT.fetch_add(1, Ordering::SeqCst) % 100;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in {base}..{}", base + 100)
}

impl GitPeer {
    /// Starts a peer with a fresh host key.
    pub async fn start() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "slipway-git-peer-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        let mut peer = Self {
            dir,
            port: free_port()?,
            user: String::new(),
            work: Workspace::new()?,
        };
        peer.user = peer.run_script().await?;
        Ok(peer)
    }

    async fn run_script(&self) -> Result<String> {
        let out = tokio::process::Command::new(script())
            .arg("start")
            .arg(&self.dir)
            .arg(self.port.to_string())
            .output()
            .await
            .context("run hack/git-peer.sh")?;
        if !out.status.success() {
            bail!(
                "hack/git-peer.sh start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Restarts the server on the same address with a new host key (what a server replaced, or an attacker in
    /// the middle, looks like).
    pub async fn restart_with_new_host_key(&self) -> Result<()> {
        std::fs::remove_file(self.dir.join("host_ed25519"))?;
        std::fs::remove_file(self.dir.join("host_ed25519.pub"))?;
        self.run_script().await?;
        Ok(())
    }

    /// The repository `name` on disk.
    pub fn repo_path(&self, name: &str) -> PathBuf {
        self.dir.join("repos").join(format!("{name}.git"))
    }

    /// The SSH URL of the repository `name`.
    pub fn url(&self, name: &str) -> String {
        self.url_via("127.0.0.1", name)
    }

    /// The SSH URL of the repository `name` with `host` (a name the test resolves to 127.0.0.1) for the server.
    pub fn url_via(&self, host: &str, name: &str) -> String {
        format!(
            "ssh://{}@{host}:{}{}",
            self.user,
            self.port,
            self.repo_path(name).display()
        )
    }

    /// Creates an empty bare repository `name` and a scratch clone of it to commit in.
    pub async fn create_repo(&self, name: &str) -> Result<()> {
        let path = self.repo_path(name);
        let path = path.to_str().context("path")?;
        self.work
            .git(
                ".",
                &["init", "-q", "--bare", "--initial-branch=master", path],
            )
            .await?;
        self.work
            .git(".", &["init", "-q", "--initial-branch=master", name])
            .await?;
        Ok(())
    }

    /// Lets `public_key` (an OpenSSH line) log in, with nothing but git's commands.
    pub fn authorize(&self, public_key: &str) -> Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("authorized_keys"))?;
        writeln!(file, "restrict {}", public_key.trim())?;
        Ok(())
    }

    /// Commits `files` (path, content) on `branch` of the scratch clone and pushes the branch to the peer;
    /// `amend` replaces the branch's last commit instead (pushed with force, as a rewrite upstream is). Returns
    /// the new commit.
    pub async fn commit(
        &self,
        name: &str,
        branch: &str,
        files: &[(&str, &str)],
        amend: bool,
    ) -> Result<String> {
        for (path, content) in files {
            self.work.write(&format!("{name}/{path}"), content)?;
        }
        let exists = self
            .work
            .try_git(
                name,
                &[
                    "rev-parse",
                    "--verify",
                    "-q",
                    &format!("refs/heads/{branch}"),
                ],
            )
            .await?
            .ok;
        if exists {
            self.work.git(name, &["checkout", "-q", branch]).await?;
        } else {
            // A new branch starts from the files at hand (an unborn master included).
            self.work
                .git(
                    name,
                    &["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")],
                )
                .await?;
        }
        self.work.git(name, &["add", "-A"]).await?;
        let mut commit = vec!["commit", "-q", "-m", "upstream change"];
        if amend {
            commit.push("--amend");
        }
        self.work.git(name, &commit).await?;
        let repo = self.repo_path(name);
        let refspec = format!("HEAD:refs/heads/{branch}");
        self.work
            .git(
                name,
                &[
                    "push",
                    "-q",
                    "--force",
                    repo.to_str().context("path")?,
                    &refspec,
                ],
            )
            .await?;
        Ok(self
            .work
            .git(name, &["rev-parse", "HEAD"])
            .await?
            .trim()
            .to_owned())
    }
}

impl GitPeer {
    /// Stops the server (its repositories stay).
    pub fn stop(&self) {
        let _ = std::process::Command::new(script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

impl Drop for GitPeer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
