//! An agent's side of registration: a key made by `ssh-keygen`, messages signed by `ssh-keygen -Y sign` exactly as
//! the hosting API tells agents to, registration with them, and the mail that carries an email verification code
//! (sent through the SMTP server of `hack/smtp.sh` and read from its Maildir).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};
use slipway_testkit::tls::TempDir;

use super::TestApi;

/// A key pair in a directory of its own.
pub struct AgentKey {
    dir: TempDir,
    key: PathBuf,
    /// The public key line (`ssh-ed25519 AAAA... comment`).
    pub public: String,
    /// `SHA256:...`, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
}

fn run(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("run {command:?}"))?;
    ensure!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

impl AgentKey {
    /// A new `ed25519` key (or another `ssh-keygen -t` type).
    pub fn new(kind: &str) -> Result<Self> {
        let dir = TempDir::new("agent-key")?;
        let key = dir.path().join("id");
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", kind, "-N", "", "-C", "agent@test", "-f"])
            .arg(&key))?;
        let public = std::fs::read_to_string(key.with_extension("pub"))?
            .trim()
            .to_owned();
        let listing = run(Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(key.with_extension("pub")))?;
        let fingerprint = listing
            .split_whitespace()
            .nth(1)
            .context("ssh-keygen -l printed no fingerprint")?
            .to_owned();
        Ok(Self {
            dir,
            key,
            public,
            fingerprint,
        })
    }

    /// `ssh-keygen -Y sign -n <namespace>` over `message`: the armored signature.
    pub fn sign(&self, namespace: &str, message: &str) -> Result<String> {
        let file = self
            .dir
            .path()
            .join(format!("msg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::write(&file, message)?;
        run(Command::new("ssh-keygen")
            .args(["-Y", "sign", "-n", namespace, "-f"])
            .arg(&self.key)
            .arg(&file))?;
        Ok(std::fs::read_to_string(format!("{}.sig", file.display()))?)
    }

    /// A registration body for `username` (none: the platform picks one) at Unix time `timestamp`, signed in
    /// namespace `namespace` over the spec's message for `signed_username`.
    pub fn registration_signed(
        &self,
        namespace: &str,
        signed_username: &str,
        username: Option<&str>,
        timestamp: i64,
    ) -> Result<Value> {
        let message = format!("svc-register\n{signed_username}\n{timestamp}\n");
        let mut body = json!({
            "public_key": self.public,
            "timestamp": timestamp,
            "signature": self.sign(namespace, &message)?,
        });
        if let Some(name) = username {
            body["username"] = json!(name);
        }
        Ok(body)
    }

    /// A correct registration body for `username` at `timestamp`.
    pub fn registration(&self, username: Option<&str>, timestamp: i64) -> Result<Value> {
        self.registration_signed("svc-register", username.unwrap_or(""), username, timestamp)
    }

    /// A correct SSH-login body at `timestamp`.
    pub fn login(&self, timestamp: i64) -> Result<Value> {
        let message = format!("svc-login\n{}\n{timestamp}\n", self.fingerprint);
        Ok(json!({
            "public_key": self.public,
            "timestamp": timestamp,
            "signature": self.sign("svc-login", &message)?,
        }))
    }
}

/// The Unix time now.
pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The verification code in the newest message to `to` in `maildir` (aiosmtpd's Mailbox handler writes each
/// message as a file under `new/` before it answers the SMTP transaction, so it is there once the API answered).
pub fn code_mailed_to(maildir: &Path, to: &str) -> Result<String> {
    // Maildir names begin with the delivery time (seconds, then microseconds): with the file's time they order
    // deliveries.
    let mut newest: Option<((std::time::SystemTime, String), String)> = None;
    for entry in std::fs::read_dir(maildir.join("new"))? {
        let entry = entry?;
        let text = std::fs::read_to_string(entry.path())?;
        let addressed = text
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("to:") && l.contains(to));
        let order = (
            entry.metadata()?.modified()?,
            entry.file_name().to_string_lossy().into_owned(),
        );
        if addressed && newest.as_ref().is_none_or(|(at, _)| order >= *at) {
            newest = Some((order, text));
        }
    }
    let Some((_, text)) = newest else {
        bail!("no mail to {to} in {}", maildir.display());
    };
    let subject = text
        .lines()
        .find_map(|l| l.strip_prefix("Subject: Your verification code: "))
        .with_context(|| format!("no code in the mail to {to}:\n{text}"))?;
    Ok(subject.trim().to_owned())
}

/// How many messages went to `to`.
pub fn mails_to(maildir: &Path, to: &str) -> Result<usize> {
    let mut count = 0;
    for entry in std::fs::read_dir(maildir.join("new"))? {
        let text = std::fs::read_to_string(entry?.path())?;
        if text
            .lines()
            .any(|l| l.to_ascii_lowercase().starts_with("to:") && l.contains(to))
        {
            count += 1;
        }
    }
    Ok(count)
}

/// A fresh agent username.
pub fn agent_name() -> String {
    format!("agent{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// Registers a new agent with a new key on `api`; returns the key and the registration's answer (`token`,
/// `user_id`, ...).
pub async fn register(api: &TestApi) -> Result<(AgentKey, Value)> {
    let key = AgentKey::new("ed25519")?;
    let name = agent_name();
    let made = api
        .call(
            axum::http::Method::POST,
            "/registrations",
            None,
            Some(key.registration(Some(&name), now())?),
        )
        .await
        .expect(200, None);
    api.forget_namespace_later(&format!("slipway-user-{name}"));
    Ok((key, made))
}

/// Has `api` mail codes through the SMTP server of `hack/smtp.sh`; returns the Maildir they arrive in.
pub fn attach_mailer(api: &mut TestApi) -> Result<PathBuf> {
    let url = std::env::var("SLIPWAY_TEST_SMTP_URL")
        .context("SLIPWAY_TEST_SMTP_URL is not set: start hack/smtp.sh (hack/test.sh does)")?;
    let maildir =
        std::env::var("SLIPWAY_TEST_MAILDIR").context("SLIPWAY_TEST_MAILDIR is not set")?;
    let mailer =
        slipway_core::registration::mailer::Mailer::new(&url, "slipway <noreply@slipway.test>")?;
    api.enable(|features| features.mailer = Some(mailer));
    Ok(maildir.into())
}
