//! HTML for the console's pages, written by hand: every page is a string built on the server, every value from
//! outside (names, labels, log text, error messages) goes through [`esc`], and the page loads nothing but the
//! console's own stylesheet and script (no asset from outside the cluster, no inline script: the
//! Content-Security-Policy forbids both).

use std::fmt::Write as _;

pub use slipway_http::html::escape as esc;

/// A percent-escaped path segment (an id, a key, a domain, a username) for an `href` or a form's `action`.
pub fn seg(text: &str) -> String {
    slipway_rest::in_process::segment(text)
}

/// Who is signed in, for the page's header.
pub struct Header<'a> {
    /// Their username.
    pub username: &'a str,
    /// The session's CSRF token, for the sign-out form.
    pub csrf: &'a str,
    /// The path of the page, to mark its section in the navigation.
    pub path: &'a str,
}

/// The navigation's sections: where each leads, and its name.
const SECTIONS: [(&str, &str); 3] = [
    ("/apps", "Apps"),
    ("/tokens", "Tokens"),
    ("/account", "Account"),
];

/// The navigation's links, the one of the section `path` is in marked as the current page.
fn sections(path: &str) -> String {
    SECTIONS
        .iter()
        .map(|(href, name)| {
            let inside = path == *href
                || path
                    .strip_prefix(href)
                    .is_some_and(|rest| rest.starts_with('/'));
            let current = if inside {
                r#" aria-current="page""#
            } else {
                ""
            };
            format!(r#"<a href="{href}"{current}>{name}</a>"#)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A whole page: `title`, the navigation (with sign-out when someone is signed in), optional `notice` banners,
/// then `body` (already HTML).
pub fn page(title: &str, header: Option<&Header<'_>>, body: &str) -> String {
    let mut nav = String::new();
    if let Some(h) = header {
        let _ = write!(
            nav,
            r#"<nav>{sections}
<span class="who">{user}</span>
<form method="post" action="/sign-out" class="inline">{csrf}<button type="submit">Sign out</button></form></nav>"#,
            sections = sections(h.path),
            user = esc(h.username),
            csrf = csrf_field(h.csrf),
        );
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · slipway</title><link rel="icon" href="/static/favicon.svg" type="image/svg+xml"><link rel="stylesheet" href="/static/console.css"><script src="/static/console.js" defer></script></head>
<body><header><a class="brand" href="/">slipway</a>{nav}</header><main>
<h1>{title}</h1>
{body}
</main></body></html>"#,
        title = esc(title),
    )
}

/// The hidden field every form that writes carries.
pub fn csrf_field(csrf: &str) -> String {
    format!(r#"<input type="hidden" name="csrf" value="{}">"#, esc(csrf))
}

/// A banner: `kind` is `warning`, `error` or `ok`.
pub fn banner(kind: &str, text: &str) -> String {
    format!(
        r#"<p class="banner {kind}" role="status">{}</p>"#,
        esc(text)
    )
}

/// A table with `headings` and rows of cells (already HTML); `empty` when there are no rows.
pub fn table(headings: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!(r#"<p class="empty">{}</p>"#, esc(empty));
    }
    // In a box of its own that scrolls sideways: a wide table never widens the page on a narrow screen.
    let mut out = String::from(r#"<div class="table-scroll"><table><thead><tr>"#);
    for h in headings {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// A destructive action behind a second click: a disclosure whose summary names the action, and which, once
/// opened, says what the action does and holds the form that does it. The first click sends nothing, and it needs
/// no JavaScript.
pub struct Destructive<'a> {
    /// The form's action (a console path, already percent-escaped where it holds values).
    pub action: &'a str,
    /// The form's hidden fields (the CSRF field among them), already HTML.
    pub hidden: &'a str,
    /// What the summary says: the action in a word ("Revoke").
    pub opener: &'a str,
    /// What happens, in a sentence, as text.
    pub consequence: &'a str,
    /// What the button that does it says ("Revoke the token").
    pub button: &'a str,
}

impl Destructive<'_> {
    /// The disclosure's HTML.
    pub fn html(&self) -> String {
        format!(
            r#"<details class="confirm"><summary>{opener}</summary><form method="post" action="{action}">{hidden}<p>{consequence}</p><button class="danger" type="submit">{button}</button></form></details>"#,
            opener = esc(self.opener),
            action = self.action,
            hidden = self.hidden,
            consequence = esc(self.consequence),
            button = esc(self.button),
        )
    }
}

/// A message as a sentence: its first letter capitalised and a full stop at the end unless it ends in one (the
/// API's messages are written to follow a colon).
pub fn sentence(message: &str) -> String {
    let message = message.trim();
    let mut chars = message.chars();
    let mut out: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => return "That did not work.".to_owned(),
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// A byte count as people read it.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The first 12 characters of a commit id, as the console shows one.
pub fn short_sha(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// A commit id shortened to 12 characters, in a `code` element with the whole id as its title. Anything that is
/// not a 40-hex commit id (a branch name a deploy could not resolve) is shown whole: cut, it would pass for one.
pub fn sha(sha: Option<&str>) -> String {
    match sha {
        Some(s) if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
            format!(r#"<code title="{}">{}</code>"#, esc(s), esc(short_sha(s)))
        }
        Some(s) if !s.is_empty() => format!("<code>{}</code>", esc(s)),
        _ => "—".to_owned(),
    }
}

/// A timestamp (RFC 3339) as people read it, to the minute in UTC, in a `time` element the console's script
/// words relative to now ("5 min ago"), the exact time kept as its title; anything else as it is.
pub fn time(text: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(at) => {
            let at = at.with_timezone(&chrono::Utc);
            format!(
                r#"<time datetime="{}">{}</time>"#,
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                at.format("%Y-%m-%d %H:%M UTC")
            )
        }
        Err(_) => esc(text),
    }
}

/// A link to the app at `host` over HTTPS on `port` (named only when it is not 443), showing the hostname.
pub fn app_link(host: &str, port: u16) -> String {
    if host.is_empty() {
        return "—".to_owned();
    }
    let port = if port == 443 {
        String::new()
    } else {
        format!(":{port}")
    };
    format!(r#"<a href="https://{0}{port}/">{0}</a>"#, esc(host))
}

/// A part of a page that keeps itself current: the console's script reads the page again every few seconds and
/// swaps this part (found by `id`) in when it changed.
pub fn live(id: &str, inner: &str) -> String {
    format!(r#"<div id="{}" data-live>{inner}</div>"#, esc(id))
}

/// A breadcrumb trail at the top of a page: each page above it a link (`trail`, outermost first), then the page
/// itself, `here`, marked as the current one.
pub fn breadcrumbs(trail: &[(&str, &str)], here: &str) -> String {
    let mut items: String = trail
        .iter()
        .map(|(label, href)| format!(r#"<li><a href="{}">{}</a></li>"#, esc(href), esc(label)))
        .collect();
    items.push_str(&format!(r#"<li aria-current="page">{}</li>"#, esc(here)));
    format!(r#"<nav class="crumbs" aria-label="Breadcrumb"><ol>{items}</ol></nav>"#)
}

/// A status word styled by its meaning.
pub fn status(word: &str) -> String {
    format!(
        r#"<span class="status status-{}">{}</span>"#,
        esc(&word.replace(|c: char| !c.is_ascii_alphanumeric(), "-")),
        esc(word)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breadcrumbs_link_the_pages_above_and_mark_this_one() {
        let crumbs = breadcrumbs(&[("Apps", "/apps"), ("<web>", "/apps/1")], "prod");
        assert_eq!(
            crumbs,
            r#"<nav class="crumbs" aria-label="Breadcrumb"><ol><li><a href="/apps">Apps</a></li><li><a href="/apps/1">&lt;web&gt;</a></li><li aria-current="page">prod</li></ol></nav>"#
        );
    }

    #[test]
    fn the_navigation_marks_the_section_of_the_page() {
        let nav = sections("/apps/a1/channels/c1");
        assert!(
            nav.contains(r#"<a href="/apps" aria-current="page">Apps</a>"#),
            "{nav}"
        );
        assert!(nav.contains(r#"<a href="/tokens">Tokens</a>"#), "{nav}");
        assert_eq!(sections("/account").matches("aria-current").count(), 1);
        assert!(sections("/apps").contains(r#"href="/apps" aria-current"#));
        // A path that only begins with a section's name is not inside it.
        assert!(!sections("/appsx").contains("aria-current"));
    }

    #[test]
    fn a_destructive_action_sends_nothing_before_its_second_click() {
        let html = Destructive {
            action: "/tokens/t%2F1/revoke",
            hidden: &csrf_field("c"),
            opener: "Revoke",
            consequence: "Scripts using <ci> stop working.",
            button: "Revoke the token",
        }
        .html();
        // The only submit button is inside the closed disclosure, after the consequence.
        assert!(html.starts_with(r#"<details class="confirm"><summary>Revoke</summary><form method="post" action="/tokens/t%2F1/revoke">"#), "{html}");
        assert_eq!(html.matches("<button").count(), 1);
        assert!(html.contains("<p>Scripts using &lt;ci&gt; stop working.</p><button class=\"danger\" type=\"submit\">Revoke the token</button>"), "{html}");
        assert!(!html.contains(" open"), "closed until clicked");
    }

    #[test]
    fn only_a_commit_id_is_shortened() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            sha(Some(id)),
            format!(r#"<code title="{id}">0123456789ab</code>"#)
        );
        assert_eq!(sha(Some("no-such-branch")), "<code>no-such-branch</code>");
        assert_eq!(sha(Some("")), "—");
        assert_eq!(sha(None), "—");
    }

    #[test]
    fn messages_read_as_sentences() {
        assert_eq!(
            sentence("no account is named \"bob\""),
            "No account is named \"bob\"."
        );
        assert_eq!(sentence("app not found."), "App not found.");
        assert_eq!(sentence("écrit?"), "Écrit?");
        assert_eq!(sentence("  "), "That did not work.");
    }

    #[test]
    fn text_cannot_become_markup() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(seg("a/../b?c"), "a%2F..%2Fb%3Fc");
        let page = page("<b>", None, "");
        assert!(page.contains("<h1>&lt;b&gt;</h1>"));
        assert!(!page.contains("<script>"), "no inline script");
    }

    #[test]
    fn sizes_and_commits_read_well() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
        assert_eq!(
            sha(Some("0123456789abcdef0123456789abcdef01234567")),
            r#"<code title="0123456789abcdef0123456789abcdef01234567">0123456789ab</code>"#
        );
        assert_eq!(sha(None), "—");
        assert_eq!(
            time("2026-11-26T13:34:35.530592Z"),
            r#"<time datetime="2026-11-26T13:34:35Z">2026-11-26 13:34 UTC</time>"#
        );
        assert_eq!(
            time("2026-11-26T15:34:35+02:00"),
            r#"<time datetime="2026-11-26T13:34:35Z">2026-11-26 13:34 UTC</time>"#
        );
        assert_eq!(time("never"), "never");
        assert_eq!(short_sha("0123456789abcdef0123"), "0123456789ab");
        assert_eq!(short_sha("main"), "main");
        assert_eq!(
            app_link("blog-ann.apps.example.com", 443),
            r#"<a href="https://blog-ann.apps.example.com/">blog-ann.apps.example.com</a>"#
        );
        assert_eq!(
            app_link("blog-ann.apps.local", 30443),
            r#"<a href="https://blog-ann.apps.local:30443/">blog-ann.apps.local</a>"#
        );
        assert_eq!(app_link("", 443), "—");
        assert_eq!(
            status("success"),
            r#"<span class="status status-success">success</span>"#
        );
    }
}
