//! The external repository's address: an SSH URL (`ssh://[user@]host[:port]/path`) or git's scp-like form
//! (`[user@]host:path`), and nothing else. Parsed strictly, because every part ends up on a command line or in an
//! SSH request: no other scheme (`ext::`, `file:`, `https:`), no option-like part starting with `-`, no control
//! characters or spaces, no zone ids or percent escapes.

use std::fmt;
use std::net::IpAddr;

/// The user when the URL names none: what every forge's SSH endpoint expects.
pub const DEFAULT_USER: &str = "git";
/// Longest URL accepted.
pub const MAX_LEN: usize = 1024;

/// The host part of a remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lowercase, without a trailing dot.
    Name(String),
    /// An address literal.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A parsed remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// The SSH user.
    pub user: String,
    /// Where the server is.
    pub host: Host,
    /// Its port.
    pub port: u16,
    /// The repository's path on the server, as `git-upload-pack` takes it (relative to the user's home unless it
    /// starts with `/`).
    pub path: String,
}

impl Remote {
    /// The command that serves a fetch of the repository: `git-upload-pack '<path>'`, quoted for the remote shell
    /// the way git quotes it.
    pub fn upload_pack_command(&self) -> String {
        format!("git-upload-pack {}", shell_quote(&self.path))
    }
}

/// Parses an SSH URL of a repository; the error says what is wrong, for a 400.
pub fn parse(url: &str) -> Result<Remote, String> {
    let not_ssh = || {
        format!(
            "remote_url must be an SSH URL of a repository: ssh://[user@]host[:port]/path or [user@]host:path, not {url:?}"
        )
    };
    if url.is_empty() || url.len() > MAX_LEN {
        return Err(format!("remote_url must be 1 to {MAX_LEN} characters"));
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("remote_url must not contain spaces or control characters".into());
    }
    // git's `<transport>::<address>` form (`ext::`, `fd::`) names a helper program, never a server.
    if url
        .split_once("::")
        .is_some_and(|(t, _)| t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+'))
    {
        return Err(not_ssh());
    }
    let (authority, path, explicit_port) = if let Some(rest) = url.strip_prefix("ssh://") {
        let (authority, path) = rest.split_at(rest.find('/').ok_or_else(not_ssh)?);
        // ssh://host/~user/repo names a path relative to a home directory, as git reads it.
        let path = path
            .strip_prefix('/')
            .filter(|p| p.starts_with('~'))
            .unwrap_or(path);
        (authority, path, true)
    } else if url.contains("://") || url.starts_with('/') || url.starts_with('.') {
        return Err(not_ssh());
    } else {
        // scp-like: everything before the first colon outside brackets is [user@]host.
        let split = match url.find('[') {
            Some(open) if url[..open].chars().all(|c| c != ':') => {
                let close = url.find(']').ok_or_else(not_ssh)?;
                close + url[close..].find(':').ok_or_else(not_ssh)?
            }
            _ => url.find(':').ok_or_else(not_ssh)?,
        };
        if url[..split].contains('/') {
            return Err(not_ssh());
        }
        (&url[..split], &url[split + 1..], false)
    };
    let (user, host_port) = match authority.rsplit_once('@') {
        Some((user, host)) => (user, host),
        None => (DEFAULT_USER, authority),
    };
    if user.is_empty()
        || user.starts_with('-')
        || !user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!("remote_url: {user:?} is not a valid SSH user"));
    }
    let (host, port) = split_port(host_port, explicit_port).ok_or_else(not_ssh)?;
    let host =
        parse_host(host).ok_or_else(|| format!("remote_url: {host:?} is not a valid host"))?;
    if path.is_empty() || path == "/" || path.starts_with(['-', ':']) {
        return Err(format!("remote_url: {path:?} is not a repository path"));
    }
    Ok(Remote {
        user: user.to_owned(),
        host,
        port,
        path: path.to_owned(),
    })
}

/// `host[:port]` (ssh:// only: an scp-like URL has no port) into the host and the port, 22 by default.
fn split_port(host_port: &str, port_allowed: bool) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = host_port.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        match after {
            "" => (inside, None),
            _ => (inside, Some(after.strip_prefix(':')?)),
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let port = match port {
        None => 22,
        Some(_) if !port_allowed => return None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse().ok().filter(|&p| p > 0)?
        }
        Some(_) => return None,
    };
    Some((host, port))
}

/// An address literal, or a DNS name of letters, digits and hyphens in dot-separated labels.
fn parse_host(host: &str) -> Option<Host> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Some(Host::Ip(ip));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let all_digits = name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    (!name.is_empty() && name.len() <= 253 && !all_digits && name.split('.').all(label_ok))
        .then_some(Host::Name(name))
}

/// Single-quotes `s` for a POSIX shell, as git does for the remote command (`'` becomes `'\''`, `!` `'\!'`).
fn shell_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '!' => out.push_str("'\\!'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(user: &str, host: Host, port: u16, path: &str) -> Remote {
        Remote {
            user: user.into(),
            host,
            port,
            path: path.into(),
        }
    }

    fn name(n: &str) -> Host {
        Host::Name(n.into())
    }

    #[test]
    fn ssh_urls_parse() {
        assert_eq!(
            parse("ssh://git@github.com/acme/site.git").unwrap(),
            remote("git", name("github.com"), 22, "/acme/site.git")
        );
        assert_eq!(
            parse("ssh://deploy@Forge.Example.com:2222/srv/git/site.git").unwrap(),
            remote(
                "deploy",
                name("forge.example.com"),
                2222,
                "/srv/git/site.git"
            )
        );
        assert_eq!(
            parse("ssh://[::1]:2200/~/site.git").unwrap(),
            remote("git", Host::Ip("::1".parse().unwrap()), 2200, "~/site.git")
        );
        assert_eq!(
            parse("ssh://127.0.0.1/repo").unwrap(),
            remote("git", Host::Ip("127.0.0.1".parse().unwrap()), 22, "/repo")
        );
    }

    #[test]
    fn scp_like_urls_parse() {
        assert_eq!(
            parse("git@gitlab.com:acme/site.git").unwrap(),
            remote("git", name("gitlab.com"), 22, "acme/site.git")
        );
        assert_eq!(
            parse("forge.example:site.git").unwrap(),
            remote("git", name("forge.example"), 22, "site.git")
        );
        assert_eq!(
            parse("git@[2001:db8::1]:site.git").unwrap(),
            remote(
                "git",
                Host::Ip("2001:db8::1".parse().unwrap()),
                22,
                "site.git"
            )
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "https://github.com/acme/site.git",
            "http://github.com/acme/site.git",
            "git://github.com/acme/site.git",
            "file:///srv/site.git",
            "/srv/site.git",
            "./site.git",
            "ext::sh -c touch% /tmp/pwned",
            "ssh://-oProxyCommand=touch/x",
            "ssh://git@-oProxyCommand=x/repo",
            "-oProxyCommand=x:repo",
            "ssh://git@host",
            "ssh://git@host/",
            "ssh://git@host:0/x",
            "ssh://git@host:65536/x",
            "ssh://git@host:22x/x",
            "ssh://git@ho st/x",
            "ssh://git@host/a\nb",
            "git@host:-x",
            "git@host:",
            "ext::foo",
            "fd::3",
            "ssh://git@fe80::1%eth0/x",
            "ssh://git@[fe80::1%25eth0]/x",
            "ssh://us'er@host/x",
            "ssh://git@ho_st/x",
            "ssh://git@1.2.3/x",
            "host",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed as {:?}", parse(bad));
        }
        assert!(parse(&format!("ssh://git@host/{}", "a".repeat(MAX_LEN))).is_err());
    }

    #[test]
    fn the_upload_pack_command_quotes_the_path() {
        let r = parse("ssh://git@host/it's!.git").unwrap();
        assert_eq!(
            r.upload_pack_command(),
            r"git-upload-pack '/it'\''s'\!'.git'"
        );
        let r = parse("git@host:acme/site.git").unwrap();
        assert_eq!(r.upload_pack_command(), "git-upload-pack 'acme/site.git'");
    }
}
