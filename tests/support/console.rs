//! The web console for tests: served over TLS on loopback under the name `console.slipway.test` (a certificate
//! from a CA made for the test), in front of a `TestApi`, with the run's SMTP server as its mail relay and the run's
//! upstream OpenID Connect provider (hack/oidc.sh) as its identity provider.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use slipway::console::Console;
use slipway::sign_in::UpstreamConfig;

use super::TestApi;

/// The console's host name in tests.
pub const HOST: &str = "console.slipway.test";

/// A console served for a test.
pub struct TestConsole {
    /// `https://console.slipway.test:<port>`.
    pub origin: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The CA its certificate is signed by (PEM).
    pub ca_pem: String,
    /// The mail relay's Maildir.
    pub maildir: PathBuf,
    /// The upstream provider's issuer.
    pub issuer: String,
}

impl TestConsole {
    /// Serves a console in front of `api` for the rest of the test.
    pub async fn start(api: &TestApi) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let smtp =
            std::env::var("SLIPWAY_TEST_SMTP_URL").context("SLIPWAY_TEST_SMTP_URL is not set")?;
        let maildir =
            std::env::var("SLIPWAY_TEST_MAILDIR").context("SLIPWAY_TEST_MAILDIR is not set")?;
        let issuer = std::env::var("SLIPWAY_TEST_OIDC_ISSUER")
            .context("SLIPWAY_TEST_OIDC_ISSUER is not set")?;
        api.state
            .set_mailer(slipway::registration::mailer::Mailer::new(
                &smtp,
                "slipway <noreply@slipway.test>",
            )?);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let origin = format!("https://{HOST}:{}", addr.port());
        let pki = slipway_testkit::tls::TestPki::new()?;
        let cert = pki.serving_cert(&[HOST])?;
        let dir = slipway_testkit::tls::TempDir::new("console-tls")?;
        let (cert_path, key_path) = cert.write_to(dir.path())?;
        let args = slipway::console::ConsoleArgs {
            console_listen: Some(addr),
            console_url: Some(origin.clone()),
            console_secret_file: None,
            console_tls_cert: Some(cert_path),
            console_tls_key: Some(key_path),
            console_sign_in_issuer: None,
            console_sign_in_client_id: None,
            console_sign_in_client_secret_file: None,
        };
        let tls = args.tls()?;
        let console = Console::new(
            &origin,
            uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .repeat(2)
                .as_bytes(),
            Some(UpstreamConfig {
                issuer: issuer.clone(),
                client_id: "slipway-console".into(),
                client_secret: "console-secret".into(),
            }),
            api.router.clone(),
            api.state.clone(),
        )?;
        tokio::spawn(async move {
            let _dir = dir;
            if let Err(e) =
                slipway::console::serve(listener, tls, Arc::new(console), std::future::pending())
                    .await
            {
                panic!("the console stopped: {e:#}");
            }
        });
        Ok(Self {
            origin,
            addr,
            ca_pem: pki.ca_pem().to_owned(),
            maildir: maildir.into(),
            issuer,
        })
    }

    /// `origin` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    /// A client keeping the console's cookies, trusting its CA, reaching its name at its address.
    pub fn client(&self) -> Result<super::browser::Browser> {
        super::browser::Browser::new(&self.ca_pem, &[HOST], self.addr)
    }

    /// The host rule that makes Chromium reach the console's name at its address.
    pub fn host_rule(&self) -> String {
        format!("MAP {HOST} 127.0.0.1")
    }
}

/// The newest console sign-in code mailed to `to`.
pub fn sign_in_code_mailed_to(maildir: &Path, to: &str) -> Result<String> {
    let mut newest: Option<((std::time::SystemTime, String), String)> = None;
    for entry in std::fs::read_dir(maildir.join("new"))? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        let addressed = text
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("to:") && l.contains(to));
        let is_sign_in = text
            .lines()
            .any(|l| l.starts_with("Subject: Your sign-in code: "));
        let order = (
            entry.metadata()?.modified()?,
            entry.file_name().to_string_lossy().into_owned(),
        );
        if addressed && is_sign_in && newest.as_ref().is_none_or(|(at, _)| order >= *at) {
            newest = Some((order, text));
        }
    }
    let Some((_, text)) = newest else {
        bail!("no sign-in code mailed to {to} in {}", maildir.display());
    };
    let code = text
        .lines()
        .find_map(|l| l.strip_prefix("Subject: Your sign-in code: "))
        .context("no code in the mail")?;
    Ok(code.trim().to_owned())
}

/// Where the test run leaves its screenshots of the console: `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("console-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}
