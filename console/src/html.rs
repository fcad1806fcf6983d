//! The shared parts of the console's pages, written with maud's `html!`: every value put into a page is escaped
//! unless it is already markup (a [`Markup`] some `html!` made), and the page loads nothing but the
//! console's own stylesheet and script (no asset from outside the cluster, no inline script: the
//! Content-Security-Policy forbids both).

pub use maud::{Markup, html};

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
fn sections(path: &str) -> Markup {
    html! {
        @for (i, (href, name)) in SECTIONS.iter().enumerate() {
            @if i > 0 { " " }
            @let inside = path == *href
                || path.strip_prefix(href).is_some_and(|rest| rest.starts_with('/'));
            a href=(href) aria-current=[inside.then_some("page")] { (name) }
        }
    }
}

/// A whole page: `title`, the navigation (with sign-out when someone is signed in), then `body`.
pub fn page(title: &str, header: Option<&Header<'_>>, body: impl maud::Render) -> Markup {
    html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · slipway" }
                link rel="icon" href="/static/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body {
                header {
                    a.brand href="/" { "slipway" }
                    @if let Some(h) = header {
                        nav {
                            (sections(h.path)) " "
                            span.who { (h.username) } " "
                            form.inline method="post" action="/sign-out" {
                                (csrf_field(h.csrf))
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The hidden field every form that writes carries.
pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A banner: `kind` is `warning`, `error` or `ok`.
pub fn banner(kind: &str, text: &str) -> Markup {
    html! { p class={ "banner " (kind) } role="status" { (text) } }
}

/// A table with `headings` and rows of cells; `empty` when there are no rows. In a box of its own that scrolls
/// sideways: a wide table never widens the page on a narrow screen.
pub fn table(headings: &[&str], rows: &[Vec<Markup>], empty: &str) -> Markup {
    html! {
        @if rows.is_empty() {
            p.empty { (empty) }
        } @else {
            div.table-scroll {
                table {
                    thead { tr { @for h in headings { th { (h) } } } }
                    tbody { @for row in rows { tr { @for cell in row { td { (cell) } } } } }
                }
            }
        }
    }
}

/// A destructive action behind a second click: a disclosure whose summary names the action, and which, once
/// opened, says what the action does and holds the form that does it. The first click sends nothing, and it needs
/// no JavaScript.
pub struct Destructive<'a> {
    /// The form's action (a console path, already percent-escaped where it holds values).
    pub action: &'a str,
    /// The form's hidden fields (the CSRF field among them).
    pub hidden: &'a Markup,
    /// What the summary says: the action in a word ("Revoke").
    pub opener: &'a str,
    /// What happens, in a sentence, as text.
    pub consequence: &'a str,
    /// What the button that does it says ("Revoke the token").
    pub button: &'a str,
}

impl Destructive<'_> {
    /// The disclosure.
    pub fn html(&self) -> Markup {
        html! {
            details.confirm {
                summary { (self.opener) }
                form method="post" action=(self.action) {
                    (self.hidden)
                    p { (self.consequence) }
                    button.danger type="submit" { (self.button) }
                }
            }
        }
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

/// A count the API gives as a signed number (the platform database has no unsigned one); a negative one, which it
/// never sends, as 0.
pub fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
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
pub fn sha(sha: Option<&str>) -> Markup {
    html! {
        @match sha {
            Some(s) if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
                code title=(s) { (short_sha(s)) }
            }
            Some(s) if !s.is_empty() => code { (s) },
            _ => "—",
        }
    }
}

/// A timestamp (RFC 3339) as people read it, to the minute in UTC, in a `time` element the console's script
/// words relative to now ("5 min ago"), the exact time kept as its title; anything else as it is.
pub fn time(text: &str) -> Markup {
    match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(at) => self::at(at.with_timezone(&chrono::Utc)),
        Err(_) => html! { (text) },
    }
}

/// An instant, as [`time`] shows one.
pub fn at(at: chrono::DateTime<chrono::Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) {
            (at.format("%Y-%m-%d %H:%M UTC"))
        }
    }
}

/// A link to the app at `host` over HTTPS on `port` (named only when it is not 443), showing the hostname.
pub fn app_link(host: &str, port: u16) -> Markup {
    html! {
        @if host.is_empty() {
            "—"
        } @else if port == 443 {
            a href={ "https://" (host) "/" } { (host) }
        } @else {
            a href={ "https://" (host) ":" (port) "/" } { (host) }
        }
    }
}

/// A part of a page that keeps itself current: the console's script reads the page again every few seconds and
/// swaps this part (found by `id`) in when it changed.
pub fn live(id: &str, inner: impl maud::Render) -> Markup {
    html! { div id=(id) data-live { (inner) } }
}

/// A breadcrumb trail at the top of a page: each page above it a link (`trail`, outermost first), then the page
/// itself, `here`, marked as the current one.
pub fn breadcrumbs(trail: &[(&str, &str)], here: &str) -> Markup {
    html! {
        nav.crumbs aria-label="Breadcrumb" {
            ol {
                @for (label, href) in trail { li { a href=(href) { (label) } } }
                li aria-current="page" { (here) }
            }
        }
    }
}

/// A status word styled by its meaning.
pub fn status(word: &str) -> Markup {
    let class = word.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    html! { span class={ "status status-" (class) } { (word) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The parts as the text a browser gets.
    fn sha(id: Option<&str>) -> String {
        super::sha(id).into_string()
    }
    fn time(text: &str) -> String {
        super::time(text).into_string()
    }
    fn app_link(host: &str, port: u16) -> String {
        super::app_link(host, port).into_string()
    }
    fn status(word: &str) -> String {
        super::status(word).into_string()
    }

    #[test]
    fn breadcrumbs_link_the_pages_above_and_mark_this_one() {
        let crumbs = breadcrumbs(&[("Apps", "/apps"), ("<web>", "/apps/1")], "prod").into_string();
        assert_eq!(
            crumbs,
            r#"<nav class="crumbs" aria-label="Breadcrumb"><ol><li><a href="/apps">Apps</a></li><li><a href="/apps/1">&lt;web&gt;</a></li><li aria-current="page">prod</li></ol></nav>"#
        );
    }

    #[test]
    fn the_navigation_marks_the_section_of_the_page() {
        let sections = |path| sections(path).into_string();
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
        .html()
        .into_string();
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
        let text = r#"<script>alert("x")</script> & 'y'"#;
        assert_eq!(
            html! { (text) }.into_string(),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 'y'"
        );
        // Attribute values are always double-quoted, so a quote of either kind cannot end one.
        assert_eq!(
            html! { a title=(text) {} }.into_string(),
            r#"<a title="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 'y'"></a>"#
        );
        assert_eq!(seg("a/../b?c"), "a%2F..%2Fb%3Fc");
        let page = page("<b>", None, "").into_string();
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
