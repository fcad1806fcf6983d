//! Dynamic client registration (RFC 7591): any MCP client may register, so registration checks shape only, and
//! what a client may do is decided later, by the person on the consent page. Clients are public (no secret:
//! `token_endpoint_auth_method` is always `none`, and PKCE binds a code to whoever started the request). Redirect
//! URIs are https, or http on a loopback address (a native client's local listener, RFC 8252), without a fragment,
//! and each authorization request must name one of them exactly.

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::OAuthError;

/// Most redirect URIs one client registers.
pub const MAX_REDIRECT_URIS: usize = 10;
/// Longest redirect URI.
pub const MAX_REDIRECT_URI: usize = 2000;
/// Longest client name kept.
pub const MAX_NAME: usize = 100;

/// What a client sends (RFC 7591 section 2); other metadata is taken and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Registration {
    /// Where codes are sent.
    pub redirect_uris: Option<Vec<String>>,
    /// A name to show the person.
    pub client_name: Option<String>,
    /// How the client authenticates at the token endpoint; only `none` is served.
    pub token_endpoint_auth_method: Option<String>,
    /// Grants it will use; `authorization_code` is the one served.
    pub grant_types: Option<Vec<String>>,
    /// Response types it will use; `code` is the one served.
    pub response_types: Option<Vec<String>>,
}

/// A registered client, as the registration answer and the platform database hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Client {
    /// Its id.
    pub client_id: String,
    /// Its name, when it gave one.
    pub client_name: Option<String>,
    /// Its redirect URIs.
    pub redirect_uris: Vec<String>,
}

/// Whether `uri` may receive codes: https, or http on a loopback address; absolute, without a fragment or userinfo.
pub fn redirect_allowed(uri: &str) -> bool {
    if uri.len() > MAX_REDIRECT_URI {
        return false;
    }
    let Ok(url) = openidconnect::url::Url::parse(uri) else {
        return false;
    };
    if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return false;
    }
    match (url.scheme(), url.host()) {
        ("https", Some(_)) => true,
        ("http", Some(openidconnect::url::Host::Ipv4(ip))) => ip.is_loopback(),
        ("http", Some(openidconnect::url::Host::Ipv6(ip))) => ip.is_loopback(),
        ("http", Some(openidconnect::url::Host::Domain(name))) => {
            name.eq_ignore_ascii_case("localhost")
        }
        _ => false,
    }
}

/// The client `registration` describes, or the RFC's refusal.
pub fn validate(registration: Registration) -> Result<Client, OAuthError> {
    let uris = registration.redirect_uris.unwrap_or_default();
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(OAuthError::bad(
            "invalid_redirect_uri",
            format!("redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"),
        ));
    }
    if let Some(bad) = uris.iter().find(|u| !redirect_allowed(u)) {
        return Err(OAuthError::bad(
            "invalid_redirect_uri",
            format!(
                "{bad} is not a redirect URI this server sends codes to: https, or http on a loopback address, \
                 without a fragment"
            ),
        ));
    }
    if let Some(grants) = &registration.grant_types
        && !grants.iter().any(|g| g == "authorization_code")
    {
        return Err(OAuthError::bad(
            "invalid_client_metadata",
            "grant_types must include authorization_code, the one grant served",
        ));
    }
    if let Some(types) = &registration.response_types
        && !types.iter().any(|t| t == "code")
    {
        return Err(OAuthError::bad(
            "invalid_client_metadata",
            "response_types must include code",
        ));
    }
    let client_name = registration
        .client_name
        .map(|n| n.trim().chars().take(MAX_NAME).collect::<String>())
        .filter(|n| !n.is_empty());
    Ok(Client {
        client_id: format!("mcp-{}", uuid::Uuid::new_v4().simple()),
        client_name,
        redirect_uris: uris,
    })
}

/// How long a registered client that never bought a token is kept.
pub const UNUSED_CLIENT_LIFETIME_HOURS: i32 = 24;

/// Stores a validated client, and deletes those registered over a day ago that never bought a token (registration
/// is open to anyone, so without this the table would only grow).
pub async fn insert(db: &PgPool, client: &Client) -> sqlx::Result<()> {
    sqlx::query(
        "DELETE FROM oauth_clients WHERE used_at IS NULL AND created_at < now() - make_interval(hours => $1)",
    )
    .bind(UNUSED_CLIENT_LIFETIME_HOURS)
    .execute(db)
    .await?;
    sqlx::query(
        "INSERT INTO oauth_clients (client_id, client_name, redirect_uris) VALUES ($1, $2, $3)",
    )
    .bind(&client.client_id)
    .bind(&client.client_name)
    .bind(&client.redirect_uris)
    .execute(db)
    .await?;
    Ok(())
}

/// The client `client_id`.
pub async fn by_id(db: &PgPool, client_id: &str) -> sqlx::Result<Option<Client>> {
    sqlx::query_as(
        "SELECT client_id, client_name, redirect_uris FROM oauth_clients WHERE client_id = $1",
    )
    .bind(client_id)
    .fetch_optional(db)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_go_to_https_or_to_a_loopback_listener() {
        for ok in [
            "https://client.example/callback",
            "https://client.example/cb?tenant=1",
            "http://127.0.0.1:33418/callback",
            "http://[::1]:8080/",
            "http://localhost:3000/cb",
        ] {
            assert!(redirect_allowed(ok), "{ok}");
        }
        for bad in [
            "http://client.example/callback",
            "http://10.0.0.1/cb",
            "https://client.example/cb#frag",
            "https://user:pw@client.example/cb",
            "javascript:alert(1)",
            "custom.scheme:/cb",
            "/relative",
            "",
        ] {
            assert!(!redirect_allowed(bad), "{bad}");
        }
        assert!(!redirect_allowed(&format!(
            "https://client.example/{}",
            "a".repeat(MAX_REDIRECT_URI)
        )));
    }

    #[test]
    fn registration_refuses_with_the_rfcs_codes() {
        let refused = |r: Registration| validate(r).unwrap_err().error;
        assert_eq!(refused(Registration::default()), "invalid_redirect_uri");
        assert_eq!(
            refused(Registration {
                redirect_uris: Some(vec!["http://evil.example/cb".into()]),
                ..Default::default()
            }),
            "invalid_redirect_uri"
        );
        let good = || Some(vec!["http://127.0.0.1:9/cb".to_owned()]);
        assert_eq!(
            refused(Registration {
                redirect_uris: good(),
                grant_types: Some(vec!["client_credentials".into()]),
                ..Default::default()
            }),
            "invalid_client_metadata"
        );
        let client = validate(Registration {
            redirect_uris: good(),
            client_name: Some(format!("  {}", "n".repeat(300))),
            token_endpoint_auth_method: Some("client_secret_post".into()),
            ..Default::default()
        })
        .unwrap();
        assert!(client.client_id.starts_with("mcp-"));
        assert_eq!(client.client_name.unwrap().len(), MAX_NAME);
    }
}
