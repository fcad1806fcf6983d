//! Where the API and its console are reached from outside (`--public-url`, `--console-url`), as origins. A link
//! the API hands out is formed from the API's own origin, never from a request's `Host` or `X-Forwarded-*`
//! headers, which whoever sends the request chooses: a forged `Host` would otherwise make the API hand out links to
//! another host, carrying a bearer token. The same origins are the browser origins the MCP endpoint answers (with
//! loopback, where MCP clients under development run).

use anyhow::Context as _;
use url::{Host, Origin, Url};

/// The API's and the console's public origins; either may be unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicUrls {
    api: Option<Origin>,
    console: Option<Origin>,
}

impl PublicUrls {
    /// The origins of `api` (`--public-url`) and `console` (`--console-url`), each an http(s) origin without path,
    /// query or fragment.
    pub fn new(api: Option<&str>, console: Option<&str>) -> anyhow::Result<Self> {
        let origin = |url: Option<&str>| url.map(|u| checked(u).map(|u| u.origin())).transpose();
        Ok(Self {
            api: origin(api)?,
            console: origin(console)?,
        })
    }

    /// The API's public origin as links start with it (`https://api.example.com`, no trailing slash); `None` when
    /// no public URL is configured.
    pub fn api_base(&self) -> Option<String> {
        self.api.as_ref().map(Origin::ascii_serialization)
    }

    /// Whether a browser page at `origin` (an `Origin` header's value) is one of the platform's own: the API's
    /// public origin, the console's, or loopback on any port. `null` and anything unparsable are not.
    pub fn owns(&self, origin: &str) -> bool {
        let Ok(url) = Url::parse(origin) else {
            return false;
        };
        let origin = url.origin();
        let loopback = matches!(url.scheme(), "http" | "https")
            && match url.host() {
                Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
                Some(Host::Ipv4(ip)) => ip.is_loopback(),
                Some(Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
        loopback || self.api.as_ref() == Some(&origin) || self.console.as_ref() == Some(&origin)
    }
}

/// `url` parsed, when it is an http(s) origin: a scheme and a host, no path, query or fragment.
pub fn checked(url: &str) -> anyhow::Result<Url> {
    let parsed = Url::parse(url).with_context(|| format!("the URL {url} is not a URL"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "https" | "http")
            && parsed.host_str().is_some()
            && parsed.path() == "/"
            && parsed.query().is_none()
            && parsed.fragment().is_none(),
        "the URL {url} must be an http(s) origin, without path, query or fragment"
    );
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_start_with_the_configured_origin_without_a_trailing_slash() {
        let urls = PublicUrls::new(Some("https://API.example.com:443/"), None).unwrap();
        assert_eq!(urls.api_base().as_deref(), Some("https://api.example.com"));
        let urls = PublicUrls::new(Some("http://10.0.0.5:30080"), None).unwrap();
        assert_eq!(urls.api_base().as_deref(), Some("http://10.0.0.5:30080"));
        assert_eq!(PublicUrls::default().api_base(), None);
    }

    #[test]
    fn a_url_with_a_path_or_another_scheme_is_not_an_origin() {
        for bad in [
            "https://api.example.com/v1",
            "ftp://api.example.com",
            "https://api.example.com/?a=1",
            "api.example.com",
        ] {
            assert!(PublicUrls::new(Some(bad), None).is_err(), "{bad}");
            assert!(PublicUrls::new(None, Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_platform_owns_its_origins_and_loopback_only() {
        let urls = PublicUrls::new(
            Some("https://api.example.com"),
            Some("https://console.example.com"),
        )
        .unwrap();
        for own in [
            "https://api.example.com",
            "https://api.example.com:443",
            "https://console.example.com",
            "http://localhost:6274",
            "http://127.0.0.1:8080",
            "https://[::1]:3000",
        ] {
            assert!(urls.owns(own), "{own}");
        }
        for other in [
            "https://evil.example",
            "http://api.example.com",
            "https://api.example.com:8443",
            "https://api.example.com.evil.example",
            "null",
            "file://",
            "",
        ] {
            assert!(!urls.owns(other), "{other}");
        }
        assert!(!PublicUrls::default().owns("https://api.example.com"));
        assert!(PublicUrls::default().owns("http://localhost:1"));
    }
}
