//! The consent page: after signing in upstream, the person sees which client asks, where its codes go, which
//! account and which scopes, and allows or refuses. Any client can register itself, so this is the step that
//! keeps a link from a stranger's client from quietly becoming a token for that stranger.

use maud::{DOCTYPE, html};

use super::clients::Client;

/// The page asking `username` whether `client` may act for them with `scopes`; its form posts `request` to
/// `action`. A maud template: every value, the client's self-chosen name first, is escaped.
pub fn page(
    client: &Client,
    redirect_uri: &str,
    username: &str,
    scopes: &[String],
    request: &str,
    action: &str,
) -> String {
    let name = client.client_name.as_deref().unwrap_or("An MCP client");
    let destination = openidconnect::url::Url::parse(redirect_uri)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let question = format!("Allow {name} to use your slipway account?");
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width";
                title { (question) }
            }
            body {
                h1 { (question) }
                p {
                    "You are signed in as " strong { (username) } ". " strong { (name) }
                    " (client " code { (client.client_id) } ") asks to use the platform's MCP server as you, for \
                     30 days, with these scopes:"
                }
                ul { @for scope in scopes { li { code { (scope) } } } }
                p {
                    "Its answer goes to " strong { (destination) } " (" code { (redirect_uri) } "). Allow it only \
                     if you started this from that client yourself."
                }
                form method="post" action=(action) {
                    input type="hidden" name="request" value=(request);
                    button type="submit" name="decision" value="allow" { "Allow" }
                    " "
                    button type="submit" name="decision" value="deny" { "Refuse" }
                }
            }
        }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_client_named_itself_cannot_become_markup() {
        let client = Client {
            client_id: "mcp-1".into(),
            client_name: Some("<script>alert(1)</script>".into()),
            redirect_uris: vec![],
        };
        let html = page(
            &client,
            "https://evil.example/cb?a=\"x\"",
            "ada",
            &["repo:*".into()],
            "r1",
            "/oauth/consent",
        );
        assert!(!html.contains("<script>"));
        assert!(html.contains("&lt;script&gt;"));
        assert!(html.contains("evil.example"));
        assert!(html.contains("&quot;x&quot;"));
        assert!(html.contains(r#"name="request" value="r1""#));
    }
}
