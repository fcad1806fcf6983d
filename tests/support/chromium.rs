//! A real headless Chromium for tests (Debian's `chromium` and `chromium-driver`, installed by
//! hack/install-deps.sh), driven over WebDriver by fantoccini. Its chromedriver runs in a process group of its own,
//! which is killed with the browser in it when the test ends, however it ends.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

/// A chromedriver and one browser session of it.
pub struct Chromium {
    driver: Child,
    pub client: fantoccini::Client,
    _profile: TempDir,
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Chromium {
    /// Starts chromedriver and a headless browser whose resolver maps every name `host_rules` names (Chromium's
    /// `--host-resolver-rules`, e.g. `MAP *.apps.example 10.0.0.2`); certificates of the platform's local CA are
    /// accepted (the browser has no way to be given a root here).
    pub async fn start(host_rules: &str) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let profile = TempDir(std::env::temp_dir().join(format!(
            "slipway-chromium-{}",
            uuid::Uuid::new_v4().simple()
        )));
        std::fs::create_dir_all(&profile.0)?;
        let driver = {
            use std::os::unix::process::CommandExt as _;
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .env("TMPDIR", &profile.0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .context("start chromedriver (hack/install-deps.sh installs chromium-driver)")?
        };
        Ok(Self {
            client: connect(port, host_rules, &profile.0).await?,
            driver,
            _profile: profile,
        })
    }

    /// Ends the session and the browser.
    pub async fn close(self) -> Result<()> {
        self.client.clone().close().await?;
        Ok(())
    }
}

async fn connect(
    port: u16,
    host_rules: &str,
    profile: &std::path::Path,
) -> Result<fantoccini::Client> {
    let caps = serde_json::json!({
        "browserName": "chrome",
        "acceptInsecureCerts": true,
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                format!("--host-resolver-rules={host_rules}"),
                format!("--user-data-dir={}", profile.join("profile").display()),
            ],
        },
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!("a JSON object literal")
    };
    let url = format!("http://127.0.0.1:{port}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = fantoccini::ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(caps.clone())
        .connect(&url)
        .await;
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "chromedriver not ready yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("open a Chromium session"),
        }
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // The whole group: chromedriver and the browser it started.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.wait();
    }
}
