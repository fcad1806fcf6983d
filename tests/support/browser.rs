//! A browser for end-user sign-in's tests, driven by hand: redirects are followed one at a time and cookies are
//! kept per host the way a browser keeps host-only cookies, so a test sees every step and every cookie. Also the
//! upstream provider's own API (hack/oidc.sh).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

/// An answer.
pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub set_cookies: Vec<String>,
    pub headers: http::HeaderMap,
    pub text: String,
}

impl Page {
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.text).with_context(|| format!("not JSON: {}", self.text))
    }
}

/// A client keeping cookies per host as a browser does for host-only cookies.
#[derive(Clone)]
pub struct Browser {
    pub http: reqwest::Client,
    jar: Arc<std::sync::Mutex<HashMap<String, HashMap<String, String>>>>,
}

impl Browser {
    /// A browser with no cookies, trusting only the roots in `roots_pem`, reaching each of `hosts` at `addr`.
    pub fn new(roots_pem: &str, hosts: &[&str], addr: SocketAddr) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(roots_pem.as_bytes())?);
        for host in hosts {
            builder = builder.resolve(host, addr);
        }
        Ok(Self {
            http: builder.build()?,
            jar: Default::default(),
        })
    }

    /// A browser with no cookies for plain-HTTP addresses (the API on loopback).
    pub fn plain() -> Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            jar: Default::default(),
        })
    }

    fn cookie_header(&self, url: &reqwest::Url) -> Option<String> {
        let jar = self.jar.lock().unwrap();
        let cookies = jar.get(url.host_str()?)?;
        (!cookies.is_empty()).then(|| {
            cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    pub fn cookie(&self, host: &str, name: &str) -> Option<String> {
        self.jar.lock().unwrap().get(host)?.get(name).cloned()
    }

    pub fn set(&self, host: &str, name: &str, value: &str) {
        self.jar
            .lock()
            .unwrap()
            .entry(host.into())
            .or_default()
            .insert(name.into(), value.into());
    }

    pub async fn send(&self, req: reqwest::RequestBuilder, url: &reqwest::Url) -> Result<Page> {
        let req = match self.cookie_header(url) {
            Some(cookies) => req.header("cookie", cookies),
            None => req,
        };
        let res = req.send().await?;
        let headers = res.headers().clone();
        let set_cookies: Vec<String> = headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let host = url.host_str().unwrap_or_default().to_owned();
        for c in &set_cookies {
            let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let mut jar = self.jar.lock().unwrap();
            let cookies = jar.entry(host.clone()).or_default();
            if attrs.contains("Max-Age=0") {
                cookies.remove(name);
            } else {
                cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Ok(Page {
            status: res.status().as_u16(),
            location: headers
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(|l| url.join(l).map(|u| u.to_string()).unwrap_or(l.to_owned())),
            set_cookies,
            headers,
            text: res.text().await?,
        })
    }

    pub async fn get(&self, url: &str) -> Result<Page> {
        let url: reqwest::Url = url.parse()?;
        self.send(self.http.get(url.clone()), &url).await
    }

    pub async fn post_form(&self, url: &str, form: &[(&str, &str)]) -> Result<Page> {
        let url: reqwest::Url = url.parse()?;
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let req = self
            .http
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(req, &url).await
    }

    /// Follows redirects from `url` until a page that is not one (at most 10).
    pub async fn follow(&self, url: &str) -> Result<(Page, Vec<String>)> {
        let mut url = url.to_owned();
        let mut visited = vec![];
        for _ in 0..10 {
            let page = self.get(&url).await?;
            visited.push(url.clone());
            match (&page.status, &page.location) {
                (300..=399, Some(next)) => url = next.clone(),
                _ => return Ok((page, visited)),
            }
        }
        bail!("more than 10 redirects from {url}")
    }

    /// Signs in as the upstream's `sub` from the login of the channel at `origin` (`https://host:port`) with `return_to`: login, the auth host, the
    /// provider's authorization form (submitted as a person would), back through the auth host to `host`.
    /// Returns the last answer (the redirect to `return_to`) and every address passed.
    pub async fn sign_in(&self, origin: &str, sub: &str) -> Result<(Page, Vec<String>)> {
        let login = format!("{origin}/svc-auth/login?return_to=%2Fafter%3Fx%3D1");
        let (form, mut visited) = self.follow(&login).await?;
        ensure!(
            form.status == 200,
            "the provider's form: {} {}",
            form.status,
            form.text
        );
        let form_url = visited.last().cloned().context("no page")?;
        let submitted = self.post_form(&form_url, &[("sub", sub)]).await?;
        ensure!(
            submitted.status == 302,
            "the provider's answer to the form: {} {}",
            submitted.status,
            submitted.text
        );
        let mut url = submitted
            .location
            .clone()
            .context("no redirect from the provider")?;
        // Back at the auth host, then the channel host, which sets the cookie and sends the browser on.
        loop {
            let page = self.get(&url).await?;
            visited.push(url.clone());
            match &page.location {
                Some(next) if next.contains("/svc-auth/") => url = next.clone(),
                _ => return Ok((page, visited)),
            }
        }
    }
}

/// Sets the upstream provider's claims for `sub` before they sign in (its `PUT /users/<sub>`).
pub async fn upstream_user(issuer: &str, sub: &str, claims: Value) -> Result<()> {
    let res = reqwest::Client::new()
        .put(format!("{issuer}/users/{sub}"))
        .json(&claims)
        .send()
        .await?;
    ensure!(
        res.status().is_success(),
        "set the upstream user: {}",
        res.status()
    );
    Ok(())
}
