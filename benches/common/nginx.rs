//! A private nginx for a benchmark's comparison: its own prefix directory and configuration (written by the
//! benchmark), never the machine's service. Stopped (master and workers) and its directory removed when dropped.
//! Shared by `blob` and `forward`. Included with `#[path]`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};

/// A running nginx.
pub struct Nginx {
    dir: PathBuf,
    _child: tokio::process::Child,
}

impl Nginx {
    /// Starts nginx in `dir` (created) with `conf` (its workers, events and servers) after the settings this
    /// helper owns (in the foreground, its pid file and error log in `dir`), run under `prefix` (e.g. `taskset -c
    /// 1`; empty: nginx itself); ready once `ready` accepts a connection.
    pub async fn start(dir: &Path, conf: &str, prefix: &[&str], ready: SocketAddr) -> Result<Self> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        let d = dir.display().to_string();
        std::fs::write(
            dir.join("nginx.conf"),
            format!("daemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n{conf}"),
        )?;
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut command = tokio::process::Command::new(program);
                command.args(args).arg("nginx");
                command
            }
            None => tokio::process::Command::new("nginx"),
        };
        let child = command
            .args(["-p", &d, "-c", &format!("{d}/nginx.conf")])
            .kill_on_drop(true)
            .spawn()
            .context(
                "start nginx (hack/install-deps.sh installs nginx-light and libnginx-mod-stream)",
            )?;
        let nginx = Nginx {
            dir: dir.to_owned(),
            _child: child,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(ready).await.is_ok() {
                return Ok(nginx);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!("nginx did not listen on {ready} (see {d}/error.log)")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let d = self.dir.display().to_string();
        let _ = std::process::Command::new("nginx")
            .args(["-p", &d, "-c", &format!("{d}/nginx.conf"), "-s", "stop"])
            .stderr(std::process::Stdio::null())
            .status();
        // The master stops its workers and removes its pid file; only then may it be killed (a worker whose master
        // was killed keeps the ports).
        let pid_file = self.dir.join("nginx.pid");
        for _ in 0..100 {
            if !pid_file.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
