//! The consent page: after signing in upstream, the person sees which client asks, where its codes go, which
//! account and which scopes, and allows or refuses. Any client can register itself, so this is the step that
//! keeps a link from a stranger's client from quietly becoming a token for that stranger.

use super::clients::Client;
use slipway_http::html::escape;

/// The page asking `username` whether `client` may act for them with `scopes`; its form posts `request` to
/// `action`.
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
    let scopes: String = scopes
        .iter()
        .map(|s| format!("<li><code>{}</code></li>", escape(s)))
        .collect();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>Allow {name} to use your slipway account?</title></head>
<body>
<h1>Allow {name} to use your slipway account?</h1>
<p>You are signed in as <strong>{username}</strong>. <strong>{name}</strong> (client <code>{client_id}</code>) asks
to use the platform's MCP server as you, for 30 days, with these scopes:</p>
<ul>{scopes}</ul>
<p>Its answer goes to <strong>{destination}</strong> (<code>{redirect}</code>). Allow it only if you started this
from that client yourself.</p>
<form method="post" action="{action}">
<input type="hidden" name="request" value="{request}">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny">Refuse</button>
</form>
</body></html>
"#,
        name = escape(name),
        username = escape(username),
        client_id = escape(&client.client_id),
        destination = escape(&destination),
        redirect = escape(redirect_uri),
        action = escape(action),
        request = escape(request),
    )
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
