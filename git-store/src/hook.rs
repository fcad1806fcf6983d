//! `slipway git-hook`: git's hooks for repositories kept in object storage. Each passes the ref updates
//! (`<old> <new> <ref>` lines on its stdin) over the Unix socket named by `SLIPWAY_GIT_HOOK_SOCKET` to the API
//! process, which publishes them ([`crate::publish`]); a refusal makes it exit 1.
//!
//! - A push publishes in `pre-receive`, while its objects are still in quarantine: a refused push is then declined
//!   like any hook-declined push (`! [remote rejected] ... (pre-receive hook declined)`, with the reason as a
//!   `remote:` line), and none of its objects enter the cache.
//! - Everything else that moves refs (a changeset's `git update-ref`, a mirror's `git fetch`) publishes in the
//!   `prepared` state of `reference-transaction`, with the refs' locks held; a refusal aborts the update.
//!
//! The hook holds no credentials: the API process hands each git it starts a grant (`SLIPWAY_GIT_GRANT`) naming
//! the repository and the writer, sealed with a key that lives only in that process. A git run without a grant
//! (the cache's own syncs and housekeeping) publishes nothing.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use hmac::{KeyInit as _, Mac as _};
use subtle::ConstantTimeEq as _;
use uuid::Uuid;

/// The socket the hook talks to.
pub const SOCKET_ENV: &str = "SLIPWAY_GIT_HOOK_SOCKET";
/// The grant of the git process the hook runs for.
pub const GRANT_ENV: &str = "SLIPWAY_GIT_GRANT";

/// Which git writes, and so which hook publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writing {
    /// `receive-pack`: published in `pre-receive`.
    Push,
    /// `update-ref`: published in `reference-transaction`, each ref only from the value the writer saw.
    Update,
    /// A mirror's `fetch`: published in `reference-transaction`, the refs moved whatever they were.
    Mirror,
}

impl Writing {
    fn code(self) -> &'static str {
        match self {
            Writing::Push => "p",
            Writing::Update => "u",
            Writing::Mirror => "m",
        }
    }

    fn parse(code: &str) -> Option<Self> {
        match code {
            "p" => Some(Writing::Push),
            "u" => Some(Writing::Update),
            "m" => Some(Writing::Mirror),
            _ => None,
        }
    }

    /// Whether `hook` (with its first argument, `state`) is where this writer publishes.
    pub fn publishes_in(self, hook: &str, state: Option<&str>) -> bool {
        match self {
            Writing::Push => hook == "pre-receive",
            Writing::Update | Writing::Mirror => {
                hook == "reference-transaction" && state == Some("prepared")
            }
        }
    }
}

/// Who may publish to which repository, as sealed into a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The app whose repository it is.
    pub app: Uuid,
    /// Which git writes.
    pub writing: Writing,
    /// Who writes, for the ref log.
    pub actor: String,
    /// The [`crate::Writer`] the git process was started with, which keeps a push's hold on its cache's lock.
    pub writer: Uuid,
}

/// Seals and opens grants with a key of this process.
#[derive(Clone)]
pub struct GrantKey([u8; 32]);

impl std::fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantKey(..)")
    }
}

impl GrantKey {
    /// A new random key.
    pub fn random() -> Self {
        use rand::RngExt as _;
        Self(rand::rng().random())
    }

    fn mac(&self, body: &str) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(body.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The grant as the text a git process carries.
    pub fn seal(&self, grant: &Grant) -> String {
        let body = format!(
            "{}.{}.{}.{}",
            grant.app,
            grant.writing.code(),
            hex::encode(grant.actor.as_bytes()),
            grant.writer
        );
        let mac = self.mac(&body);
        format!("{body}.{mac}")
    }

    /// The grant `text` carries, when this key sealed it.
    pub fn open(&self, text: &str) -> Option<Grant> {
        let (body, mac) = text.trim().rsplit_once('.')?;
        let expected = self.mac(body);
        if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) {
            return None;
        }
        let mut parts = body.split('.');
        let app = parts.next()?.parse().ok()?;
        let writing = Writing::parse(parts.next()?)?;
        let actor = String::from_utf8(hex::decode(parts.next()?).ok()?).ok()?;
        let writer = parts.next()?.parse().ok()?;
        Some(Grant {
            app,
            writing,
            actor,
            writer,
        })
    }
}

/// Runs `hook` (`pre-receive`, or `reference-transaction` with its `state`); the exit code git sees.
pub fn run(hook: &str, state: Option<&str>) -> i32 {
    let mut updates = String::new();
    if std::io::stdin().read_to_string(&mut updates).is_err() {
        eprintln!("error: slipway could not read the ref updates");
        return 1;
    }
    let (Some(socket), Some(grant)) = (std::env::var_os(SOCKET_ENV), std::env::var(GRANT_ENV).ok())
    else {
        return 0;
    };
    // Which writer the grant is for is sealed in it; the API checks it again.
    let writing = grant
        .split('.')
        .nth(1)
        .and_then(Writing::parse)
        .unwrap_or(Writing::Update);
    if !writing.publishes_in(hook, state) {
        return 0;
    }
    let quarantine = std::env::var("GIT_QUARANTINE_PATH").unwrap_or_default();
    match ask(&socket, &grant, &quarantine, &updates) {
        Ok(answer) => match answer.strip_prefix("refused ") {
            None if answer.trim() == "ok" => 0,
            Some(reason) => {
                eprintln!("error: {}", reason.trim());
                1
            }
            None => {
                eprintln!("error: slipway answered {answer:?}");
                1
            }
        },
        Err(e) => {
            eprintln!("error: slipway could not publish the ref update: {e}");
            1
        }
    }
}

fn ask(
    socket: &std::ffi::OsStr,
    grant: &str,
    quarantine: &str,
    updates: &str,
) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    let message = format!("{}\n{}\n{updates}", grant.trim(), quarantine.trim());
    stream.write_all(message.as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_open_only_under_their_key_and_unchanged() {
        let key = GrantKey::random();
        let grant = Grant {
            app: Uuid::new_v4(),
            writing: Writing::Update,
            actor: "alice.smith".into(),
            writer: Uuid::new_v4(),
        };
        let sealed = key.seal(&grant);
        assert_eq!(key.open(&sealed), Some(grant.clone()));
        assert_eq!(GrantKey::random().open(&sealed), None);
        let forced = sealed.replacen(".u.", ".m.", 1);
        assert_eq!(key.open(&forced), None, "{forced}");
        assert_eq!(key.open("garbage"), None);
    }

    #[test]
    fn each_writer_publishes_in_one_hook() {
        assert!(Writing::Push.publishes_in("pre-receive", None));
        assert!(!Writing::Push.publishes_in("reference-transaction", Some("prepared")));
        for w in [Writing::Update, Writing::Mirror] {
            assert!(w.publishes_in("reference-transaction", Some("prepared")));
            assert!(!w.publishes_in("reference-transaction", Some("committed")));
            assert!(!w.publishes_in("pre-receive", None));
        }
    }
}
