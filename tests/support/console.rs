//! The web console for tests: served over TLS on loopback under the name `console.slipway.test` (a certificate
//! from a CA made for the test), in front of a `TestApi`, with the run's SMTP server as its mail relay and the run's
//! upstream OpenID Connect provider (hack/oidc.sh) as its identity provider.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use slipway_console::Console;
use slipway_identity::UpstreamConfig;

use super::TestApi;

/// The console's host name in tests.
pub const HOST: &str = "console.slipway.test";
/// The port the console's links to apps name (apps answer HTTPS there in the platform it stands for).
pub const APPS_PORT: u16 = 30443;

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
    pub async fn start(api: &mut TestApi) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let smtp =
            std::env::var("SLIPWAY_TEST_SMTP_URL").context("SLIPWAY_TEST_SMTP_URL is not set")?;
        let maildir =
            std::env::var("SLIPWAY_TEST_MAILDIR").context("SLIPWAY_TEST_MAILDIR is not set")?;
        let issuer = std::env::var("SLIPWAY_TEST_OIDC_ISSUER")
            .context("SLIPWAY_TEST_OIDC_ISSUER is not set")?;
        let mailer = slipway_core::registration::mailer::Mailer::new(
            &smtp,
            "slipway <noreply@slipway.test>",
        )?;
        api.enable(|features| features.mailer = Some(mailer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let origin = format!("https://{HOST}:{}", addr.port());
        let pki = slipway_testkit::tls::TestPki::new()?;
        let cert = pki.serving_cert(&[HOST])?;
        let dir = slipway_testkit::tls::TempDir::new("console-tls")?;
        let (cert_path, key_path) = cert.write_to(dir.path())?;
        let args = slipway_console::ConsoleArgs {
            console_listen: Some(addr),
            console_url: Some(origin.clone()),
            console_secret_file: None,
            console_tls_cert: Some(cert_path),
            console_tls_key: Some(key_path),
            console_sign_in_issuer: None,
            console_sign_in_client_id: None,
            console_sign_in_client_secret_file: None,
            console_apps_port: APPS_PORT,
        };
        let tls = args.tls()?;
        let mut console = Console::new(
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
        console.apps_port = args.console_apps_port;
        tokio::spawn(async move {
            let _dir = dir;
            if let Err(e) =
                slipway_console::serve(listener, tls, Arc::new(console), std::future::pending())
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

    /// Signs `client` in by a code mailed to `address` and returns the session cookie's `Set-Cookie` line.
    pub async fn sign_in_by_code(
        &self,
        client: &super::browser::Browser,
        address: &str,
    ) -> Result<String> {
        sign_in_by_code(client, &self.origin, &self.maildir, address).await
    }

    /// The host rule that makes Chromium reach the console's name at its address.
    pub fn host_rule(&self) -> String {
        format!("MAP {HOST} 127.0.0.1")
    }
}

/// The CSRF token in a page's forms.
pub fn csrf_in(html: &str) -> String {
    let start = html
        .find(r#"name="csrf" value=""#)
        .expect("a form with a CSRF token")
        + 19;
    html[start..start + 48].to_owned()
}

/// Signs `client` in to the console at `origin` by a code mailed to `address` (delivered to `maildir`), and
/// returns the session cookie's `Set-Cookie` line.
pub async fn sign_in_by_code(
    client: &super::browser::Browser,
    origin: &str,
    maildir: &Path,
    address: &str,
) -> Result<String> {
    let page = client.get(&format!("{origin}/sign-in")).await?;
    let pre = csrf_in(&page.text);
    let seen = sign_in_codes_mailed_to(maildir, address)?.len();
    let ask = format!("{origin}/sign-in/email");
    let form = [("csrf", pre.as_str()), ("email", address)];
    // The per-address spacing of codes is a minute: wait out the earlier code of this address.
    let mut sent = client.post_form(&ask, &form).await?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(75);
    while sent.status == 429 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        sent = client.post_form(&ask, &form).await?;
    }
    ensure!(sent.status == 200, "mail a code: {}", sent.status);
    let code = next_sign_in_code(maildir, address, seen).await?;
    let signed = client
        .post_form(
            &format!("{origin}/sign-in/code"),
            &[("csrf", &pre), ("code", &code)],
        )
        .await?;
    ensure!(signed.status == 303, "type the code: {}", signed.status);
    signed
        .set_cookies
        .iter()
        .find(|c| c.starts_with("__Host-slipway_session="))
        .cloned()
        .context("no session cookie")
}

/// The sign-in codes mailed to `to` so far, oldest first.
pub fn sign_in_codes_mailed_to(maildir: &Path, to: &str) -> Result<Vec<String>> {
    let mut mails = Vec::new();
    for entry in std::fs::read_dir(maildir.join("new"))? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        let addressed = text
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("to:") && l.contains(to));
        let code = text
            .lines()
            .find_map(|l| l.strip_prefix("Subject: Your sign-in code: "));
        if let (true, Some(code)) = (addressed, code) {
            let order = (
                entry.metadata()?.modified()?,
                entry.file_name().to_string_lossy().into_owned(),
            );
            mails.push((order, code.trim().to_owned()));
        }
    }
    mails.sort();
    Ok(mails.into_iter().map(|(_, code)| code).collect())
}

/// The code of the next sign-in mail to `to` once `seen` of them have arrived: the console sends its mail in a
/// task the request does not wait for, so the mail may land a moment after the answer.
pub async fn next_sign_in_code(maildir: &Path, to: &str, seen: usize) -> Result<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let codes = sign_in_codes_mailed_to(maildir, to)?;
        if codes.len() > seen {
            return codes.last().cloned().context("a code");
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "no new sign-in code mailed to {to} in {}",
                maildir.display()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Where the test run leaves its screenshots of the console: `target/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = super::platform::root()
        .join("target")
        .join("console-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}
