//! A real S3 backend per test: versitygw (built by `hack/s3.sh build`, which `make test` runs) with its posix
//! backend and bucket versioning on, on a free loopback port and a directory of its own, stopped and wiped when
//! the test ends. A test may stop and start it again (same port, same data) to see how the platform behaves
//! while its backend is down.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Where `hack/s3.sh build` puts versitygw, unless `SLIPWAY_VERSITYGW` names it.
pub fn versitygw() -> PathBuf {
    if let Some(path) = std::env::var_os("SLIPWAY_VERSITYGW") {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("SLIPWAY_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/slipway")
        });
    cache.join("versitygw-v1.8.0/bin/versitygw")
}

/// A running versitygw of one test.
pub struct TestS3 {
    child: Option<Child>,
    dir: PathBuf,
    /// `host:port` it listens on.
    pub addr: String,
    /// Its base URL.
    pub url: String,
    /// The root access key id.
    pub access_key_id: String,
    /// The root secret access key.
    pub secret_access_key: String,
}

impl TestS3 {
    /// Starts a backend on a free port of `host` (`127.0.0.1` unless pods must reach it).
    pub async fn start_on(host: &str) -> Result<Self> {
        let port = {
            let probe = std::net::TcpListener::bind((host, 0))?;
            probe.local_addr()?.port()
        };
        let dir =
            std::env::temp_dir().join(format!("slipway-test-s3-{}", uuid::Uuid::new_v4().simple()));
        for sub in ["data", "versions", "iam"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let mut s3 = Self {
            child: None,
            addr: format!("{host}:{port}"),
            url: format!("http://{host}:{port}"),
            access_key_id: format!("root{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            secret_access_key: uuid::Uuid::new_v4().simple().to_string(),
            dir,
        };
        s3.resume().await?;
        Ok(s3)
    }

    /// Starts a backend on loopback.
    pub async fn start() -> Result<Self> {
        Self::start_on("127.0.0.1").await
    }

    /// The folder of `bucket`'s current objects (versitygw's posix backend: one file per key, its metadata in
    /// extended attributes), for a test that damages what the backend holds.
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.dir.join("data").join(bucket)
    }

    /// Stops the backend, keeping its data.
    pub fn pause(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the backend again after [`TestS3::pause`] (or for the first time), on the same port and data.
    pub async fn resume(&mut self) -> Result<()> {
        let binary = versitygw();
        if !binary.exists() {
            bail!(
                "no versitygw at {} — build it with `hack/s3.sh build` (make test does)",
                binary.display()
            );
        }
        let log = std::fs::File::create(self.dir.join("versitygw.log"))?;
        let child = Command::new(&binary)
            .args(["--port", &self.addr, "--iam-dir"])
            .arg(self.dir.join("iam"))
            .args(["--keep-alive", "--quiet", "posix", "--versioning-dir"])
            .arg(self.dir.join("versions"))
            .arg(self.dir.join("data"))
            .env("ROOT_ACCESS_KEY_ID", &self.access_key_id)
            .env("ROOT_SECRET_ACCESS_KEY", &self.secret_access_key)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", binary.display()))?;
        self.child = Some(child);
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&self.addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let log = std::fs::read_to_string(self.dir.join("versitygw.log")).unwrap_or_default();
        bail!(
            "versitygw did not listen on {} within 5 s:\n{log}",
            self.addr
        )
    }
}

impl Drop for TestS3 {
    fn drop(&mut self) {
        self.pause();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
